"""The in-process runtime and the sandboxed kernel show the agent identical observations (ProgAgent PTC).

Every task's PTC oracle (progagent/tasks, level v0, seed 0) is stepped through progagent.ptc_env.ProgEnv in
mode 'ptc' twice, once with runtime='inprocess' (audits, oracle SFT data) and once with runtime='kernel'
(RL rollouts), and the two episodes must agree turn by turn: observation text, status, done and reward.
Per domain, a probe episode adds what the oracles rarely show: stderr between stdout lines, a caught and an
uncaught ToolError, a traceback through a function of an earlier program, a final expression's repr, an
output cut in the middle, a NameError.

Each episode uses one kernel (started at its first program). CI time: all 48 oracles plus the 12 probe
episodes took 77 s on the 2-core project machine at load average 4.4 (other suites running beside it),
well under the 3-minute budget for CI, so all of them run by default (no `slow` subset).
"""

import shutil
import tempfile

from absl.testing import absltest, parameterized

from progagent import ptc_env
from progagent import tasks as tasks_lib

HAVE_BWRAP = shutil.which("bwrap") is not None
ALL = tasks_lib.task_ids()

PROBES = (
    "import sys\nnames = sorted(tools)\nprint(names[:2])\nprint('to stderr', file=sys.stderr)\nprint('back')\n"
    "try:\n    tools[names[0]](no_such_argument=1)\nexcept ToolError as e:\n    print('caught:', e)\n"
    "print('x' * 60000)\ntools[names[0]](no_such_argument=2)\nprint('not reached')",
    "def call_first(n):\n    return tools[names[0]](bad=n)\n",
    "[len(names), call_first(3)]",
    "{'n': len(names), 'first': names[0], 'pair': (1, None)}",
    "undefined_variable + 1",
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
  """Every oracle, and the probes of every domain."""

  @parameterized.parameters(*ALL)
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


if __name__ == "__main__":
  absltest.main()
