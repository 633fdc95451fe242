"""The in-process runtime and the sandboxed kernel show the agent identical observations (ProgAgent PTC).

Every task's PTC oracle (progagent/tasks, level v0, seed 0) is stepped through progagent.ptc_env.ProgEnv in
mode 'ptc' twice, once with runtime='inprocess' (audits, oracle SFT data) and once with runtime='kernel'
(RL rollouts), and the two episodes must agree turn by turn: observation text, status, done and reward.
Per domain, a probe episode adds what the oracles rarely show: stderr between stdout lines, a caught and an
uncaught ToolError, a traceback through a function of an earlier program, a final expression's repr, an
output cut in the middle, a NameError.

Each episode uses one kernel (started at its first program). CI runs the first oracle of each of the 24
domains and every domain's probes; the other 112 oracles run in the slow tier (`-m slow`): all 136 oracles
took 113 s of the suite's 20 minutes on the 2-core project machine, and they exercise the same two runtimes.
"""

import re
import shutil
import sys
import tempfile

from absl.testing import absltest, parameterized

from progagent import ptc_env
from progagent import tasks as tasks_lib

HAVE_BWRAP = shutil.which("bwrap") is not None
ALL = tasks_lib.task_ids()
# CI runs one oracle per domain (every domain's tools through both runtimes) beside the probes; the other
# oracles repeat the same runtimes on more programs and run in the slow tier (RemainingOraclesTest).
FIRST_OF_DOMAIN = tuple({t.split("/")[0]: t for t in reversed(ALL)}.values())[::-1]
REMAINING = tuple(t for t in ALL if t not in FIRST_OF_DOMAIN)

PROBES = (
    "import sys\nnames = sorted(tools)\nprint(names[:2])\nprint('to stderr', file=sys.stderr)\nprint('back')\n"
    "try:\n    tools[names[0]](no_such_argument=1)\nexcept ToolError as e:\n    print('caught:', e)\n"
    "print('x' * 60000)\ntools[names[0]](no_such_argument=2)\nprint('not reached')",
    "def call_first(n):\n    return tools[names[0]](bad=n)\n",
    "[len(names), call_first(3)]",
    "{'n': len(names), 'first': names[0], 'pair': (1, None)}",
    "undefined_variable + 1",
)

# The program's streams and output edges (one episode, first domain). The generator's repr carries its
# address, which differs between any two processes: compared with addresses masked.
STREAM_PROBES = (
    "import sys\nsys.stdout.buffer.write(b'..')",
    "import os\nos.write(1, b'rawfd\\n')\nprint('after')\nos.write(2, b'errfd\\n')\nprint('end')",
    "import sys\nsys.stdout.write(b'bytes')",
    "import sys, os\nprint(sys.stdout.fileno(), sys.stderr.fileno(), sys.stdout.isatty(), sys.stdout.encoding,"
    " sys.stdout.name, sys.stdout.writable(), hasattr(sys.stderr, 'buffer'))\n"
    "n = os.write(sys.stdout.fileno(), 'caf\u00e9 \\xff'.encode('latin-1'))\nprint(n, sys.stdout.write('w\\n'))",
    "import sys\nfor i in range(3):\n    print('out', i)\n    print('err', i, file=sys.stderr)\n"
    "sys.stderr.write('no newline')\nprint(' then out', flush=True)",
    "None",
    "print('before')\nNone",
    "(x * 2 for x in range(3))",
    "raise ValueError('line one\\nline two\\n  indented three')",
    "print('y' * 120000)",
    "s = 'h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c \U0001f642'\nprint(s)\ns",
    "import sys\nsys.stdout.fileno = None\nsys.stdout.close()\nprint('after close')",
    "import sys\nprint('stream reset', sys.stdout.fileno(), sys.stdout.closed)",
)

_CACHE = None


def setUpModule():
  global _CACHE
  _CACHE = tempfile.mkdtemp(prefix="obs-identity-")


def tearDownModule():
  shutil.rmtree(_CACHE, ignore_errors=True)


def _episode(kind: str, task_id: str, programs) -> list[tuple]:
  """(observation, status, done, reward) per program, one ProgEnv episode in runtime `kind`."""
  with ptc_env.ProgEnv(mode="ptc", runtime=kind, cache_dir=_CACHE, timeout_s=120) as env:
    env.reset(task_id, 0)
    out = []
    for code in programs:
      r = env.step({"name": ptc_env.PROGRAM_TOOL, "arguments": {"code": code}})
      out.append((r.observation, r.status, r.done, r.info.get("reward")))
    return out


class _Base(parameterized.TestCase):

  def check(self, task_id, programs, *, oracle):
    inproc = _episode("inprocess", task_id, programs)
    kernel = _episode("kernel", task_id, programs)
    for turn, (a, b) in enumerate(zip(inproc, kernel)):
      self.assertEqual(a, b, f"{task_id}: turn {turn} differs")
    self.assertLen(kernel, len(programs))
    if oracle:
      self.assertEqual(kernel[-1][2:], (True, 1.0), f"{task_id}: the oracle did not pass")
    return kernel


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class IdentityTest(_Base):
  """The first oracle of every domain, and the probes of every domain."""

  @parameterized.parameters(*FIRST_OF_DOMAIN)
  def test_oracle(self, task_id):
    self.check(task_id, tasks_lib.get_task(task_id).ptc, oracle=True)

  @parameterized.parameters(*sorted(tasks_lib.DOMAINS))
  def test_probes(self, domain):
    obs = self.check(tasks_lib.task_ids(domain)[0], PROBES, oracle=False)
    first, _, third, fourth, fifth = [o[0] for o in obs]
    self.assertIn("\nto stderr\nback\n", first)
    self.assertIn("caught: tool ", first)
    self.assertIn("characters cut", first)
    self.assertTrue(first.endswith("\n  line 11: tools[names[0]](no_such_argument=2)\n"
                                   f"ToolError: tool '{sorted(t['name'] for t in self._tools(domain))[0]}' "
                                   "failed: Error: unknown parameter(s) ['no_such_argument'] for tool "
                                   f"'{sorted(t['name'] for t in self._tools(domain))[0]}'; its parameters "
                                   f"are {self._params(domain)}.\n"), first[-400:])
    self.assertIn("  line 2 of program 2: return tools[names[0]](bad=n)\n", third)
    self.assertTrue(fourth.startswith("{'n': "), fourth)
    self.assertEqual(fifth.splitlines()[-1], "NameError: name 'undefined_variable' is not defined")
    self.assertEqual([o[1] for o in obs], ["failed", "ok", "failed", "ok", "failed"])

  def test_stream_probes(self):
    task_id = tasks_lib.task_ids(sorted(tasks_lib.DOMAINS)[0])[0]
    inproc = _episode("inprocess", task_id, STREAM_PROBES)
    kernel = _episode("kernel", task_id, STREAM_PROBES)
    mask = lambda o: (re.sub(r"0x[0-9a-f]+", "0x?", o[0]),) + o[1:]
    for turn, (a, b) in enumerate(zip(inproc, kernel)):
      self.assertEqual(mask(a), mask(b), f"stream probe {turn} differs")
    self.assertLen(kernel, len(STREAM_PROBES))
    obs = [o[0] for o in kernel]
    status = [o[1] for o in kernel]
    self.assertTrue(obs[0].endswith("AttributeError: 'OutStream' object has no attribute 'buffer'\n"), obs[0])
    self.assertEqual(status[0], "failed")
    self.assertEqual(obs[1], "rawfd\nafter\nerrfd\nend\n")
    self.assertTrue(obs[2].endswith("TypeError: write() argument must be str, not <class 'bytes'>\n"), obs[2])
    self.assertTrue(obs[3].startswith("1 2 False UTF-8 stdout True False\ncaf"), obs[3])
    self.assertEqual(obs[4], "out 0\nerr 0\nout 1\nerr 1\nout 2\nerr 2\nno newline then out\n")
    self.assertEqual(status[5:7], ["ok", "ok"])
    self.assertEqual(obs[6], "before\n")
    self.assertRegex(obs[7], r"^<generator object <genexpr> at 0x[0-9a-f]+>\n$")
    self.assertTrue(obs[8].endswith("ValueError: line one\nline two\n  indented three\n"), obs[8])
    self.assertIn("characters cut", obs[9])
    self.assertEqual(obs[10], "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c \U0001f642\n"
                     "'h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c \U0001f642'\n")
    self.assertTrue(obs[11].endswith("ValueError: I/O operation on closed file\n"), obs[11])
    self.assertEqual(obs[12], "stream reset 1 False\n")  # a program's changes to its streams end with it
    self.assertEqual(obs[3], "1 2 False UTF-8 stdout True False\ncaf\ufffd \ufffdw\n6 2\n")
    self.assertTrue(callable(sys.stdout.fileno))

  @staticmethod
  def _tools(domain):
    task = tasks_lib.get_task(tasks_lib.task_ids(domain)[0])
    return [t.mcp() for t in task.domain.tools] + [{"name": "submit_answer"}]

  @classmethod
  def _params(cls, domain):
    task = tasks_lib.get_task(tasks_lib.task_ids(domain)[0])
    first = sorted(t.name for t in task.domain.tools + (tasks_lib.base.SUBMIT_ANSWER,))[0]
    tdef = {t.name: t for t in task.domain.tools + (tasks_lib.base.SUBMIT_ANSWER,)}[first]
    return sorted(tdef.params) or "none"


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class RemainingOraclesTest(_Base):
  """The oracles IdentityTest leaves out (slow tier: tests/conftest.py)."""

  @parameterized.parameters(*REMAINING)
  def test_oracle(self, task_id):
    self.check(task_id, tasks_lib.get_task(task_id).ptc, oracle=True)


if __name__ == "__main__":
  absltest.main()
