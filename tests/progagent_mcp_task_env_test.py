"""Tests for progagent/mcp_task_env.py: tasks over real MCP servers under the trainer's PTC, DTC and Hybrid harnesses.

One McpTaskEnv (two sandboxed instances of tests/mcp_fixture_server.py, whose tool names all clash) is shared by
the checks; each harness episode is one scripted policy through progagent.harness.run_episode, with programs in
the sandboxed kernel, and its reward is the task's evaluator run in a sandbox of its own.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest

from common.envs.base import StepResult
from progagent import harness
from progagent import mcp_task_env as mte
from progagent import ptc_env

HAVE_BWRAP = shutil.which("bwrap") is not None
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "mcp_fixture_server.py")
MARKER = "EVALUATOR-ONLY-MARKER"
CHECK = f"""import os, sys
ws, gt = sys.argv[1], sys.argv[2]
print({MARKER!r}, sorted(os.listdir(ws)))
for name in os.listdir(gt):
  p = os.path.join(ws, name)
  if not os.path.exists(p) or open(p).read() != open(os.path.join(gt, name)).read():
    sys.exit(1)
"""


def _calls_policy(steps):
  """A scripted policy: each reply is steps[i](last message content) -> list of calls; then 'Done.' (no call)."""
  state = {"i": 0}

  def policy(messages, tools):
    i = state["i"]
    state["i"] += 1
    if i >= len(steps):
      return harness.assistant_message("Done.")
    return harness.assistant_message("", steps[i](messages[-1].get("content")), call_id_prefix=f"s{i}")
  return policy


def _program(code):
  return lambda last: [{"name": harness.PROGRAM_TOOL, "arguments": {"code": code}}]


UPPER_PROGRAM = ("c = tools['a__read'](path='/workspace/a.txt')\n"
                 "tools['a__write'](path='/workspace/b.txt', text=tools['a__shout'](text=c))\n"
                 "print(tools['a__stats'](numbers=[1, 2]), tools['b__stats'](numbers=[1, 2]))")


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class McpTaskEnvTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp(prefix="pa-mte-")
    for d in ("upper/ws", "upper/gt", "code"):
      os.makedirs(os.path.join(cls.root, d))
    with open(os.path.join(cls.root, "upper/ws/a.txt"), "w") as f:
      f.write("hello")
    with open(os.path.join(cls.root, "upper/gt/b.txt"), "w") as f:
      f.write("HELLO!")
    cls.check = os.path.join(cls.root, "code", "check.py")
    with open(cls.check, "w") as f:
      f.write(CHECK)
    os.chmod(cls.root, 0o755)
    cls.tasks_file = os.path.join(cls.root, "tasks.jsonl")
    with open(cls.tasks_file, "w") as f:
      f.write(json.dumps({"task_id": "upper", "instruction": "Write a.txt shouted to b.txt.", "workspace": "upper/ws",
                          "groundtruth": "upper/gt"}) + "\n")
    cls.servers = (f"a=python {FIXTURE}", f"b=python {FIXTURE} --text-only")
    cls.evaluator = f"python {cls.check} {{workspace}} {{groundtruth}}"
    cls.env = mte.McpTaskEnv(cls.servers, cls.tasks_file, evaluator=cls.evaluator, reuse_servers=("a",),
                             max_steps=12)

  @classmethod
  def tearDownClass(cls):
    cls.env.close()
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _episode(self, mode, policy):
    prog = ptc_env.ProgEnv(self.env, mode=mode, runtime="kernel", timeout_s=60)
    try:
      ep = harness.run_episode(prog, policy, mode=mode, task_id="upper")
    finally:
      prog.close()
    texts = [str(m.get("content") or "") for m in ep.messages] + [json.dumps(ep.tools)]
    self.assertFalse([t for t in texts if MARKER in t])  # the evaluator's output is host-side only
    self.assertIn(MARKER, self.env.last_verdict["output"])
    return ep

  def test_ptc(self):
    ep = self._episode("ptc", _calls_policy([_program(UPPER_PROGRAM)]))
    self.assertEqual((ep.stats.reward, ep.stats.end), (1.0, "no_action"))
    self.assertEqual(ep.stats.tool_calls, 5)
    desc = ep.tools[0]["function"]["description"]
    self.assertIn("a__stats(numbers: array) -> {count: integer, mean: number}", desc)
    self.assertIn("The tools' servers see the same files at the same path", desc)
    self.assertIn("{'count': 2, 'mean': 1.5} 2 numbers, mean 1.5", ep.messages[3]["content"])
    self.assertIn("The task's files are in /workspace", ep.messages[1]["content"])

  def test_dtc(self):
    steps = [lambda last: [{"name": "a__read", "arguments": {"path": "/workspace/a.txt"}}],
             lambda last: [{"name": "a__shout", "arguments": {"text": last}}],
             lambda last: [{"name": "a__write", "arguments": {"path": "/workspace/b.txt", "text": last}}]]
    ep = self._episode("dtc", _calls_policy(steps))
    self.assertEqual((ep.stats.reward, ep.stats.tool_calls), (1.0, 3))
    self.assertEqual([m["content"] for m in ep.messages if m["role"] == "tool"],
                     ["hello", "HELLO!", "wrote 6 characters"])
    self.assertIn("a__stats", [t["function"]["name"] for t in ep.tools])

  def test_hybrid_and_doing_nothing(self):
    steps = [lambda last: [{"name": "a__read", "arguments": {"path": "/workspace/a.txt"}}],
             _program("tools['a__write'](path='/workspace/b.txt', text=tools['a__shout'](text='hello'))")]
    ep = self._episode("hybrid", _calls_policy(steps))
    self.assertEqual(ep.stats.reward, 1.0)
    ep = self._episode("hybrid", _calls_policy([]))
    self.assertEqual((ep.stats.reward, ep.stats.tool_calls), (0.0, 0))
    self.assertEqual(self.env.last_verdict["exit_code"], 1)

  def test_reset_restages_the_workspace_and_restarts_the_servers_not_reused(self):
    self.env.reset("upper")
    self.env.step({"name": "a__write", "arguments": {"path": "/workspace/stray.txt", "text": "x"}})
    self.assertIn("stray.txt", os.listdir(self.env.workspace_dir))
    pids = self.env.group.server_pids()
    self.env.reset("upper@v0")   # a level suffix is accepted
    self.assertEqual(sorted(os.listdir(self.env.workspace_dir)), ["a.txt"])
    now = self.env.group.server_pids()
    self.assertEqual(now["a"], pids["a"])      # reuse_servers=('a',)
    self.assertNotEqual(now["b"], pids["b"])

  def test_step_statuses_and_the_step_limit(self):
    self.env.reset("upper")
    r = self.env.step({"name": "nope", "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown tool 'nope'", r.observation)
    r = self.env.step({"name": "a__read", "arguments": {"path": "/workspace/missing"}})
    self.assertEqual(r.status, "failed")
    self.assertIn("FileNotFoundError", r.observation)
    r = self.env.step({"name": "a__stats", "arguments": {"numbers": [3]}})
    self.assertEqual((r.status, r.observation), ("ok", '{"count": 1, "mean": 3.0}'))
    r = self.env.step({"name": "b__stats", "arguments": {"numbers": [3]}})
    self.assertEqual((r.status, r.observation), ("ok", "1 numbers, mean 3.0"))
    self.assertEqual(r.info["tool_calls"], 3)
    self.assertEqual(r.info["tool_errors"], 1)
    for _ in range(self.env.max_steps):
      r = self.env.step({"name": "a__shout", "arguments": {"text": "x"}})
      if r.done:
        break
    self.assertIsInstance(r, StepResult)
    self.assertTrue(r.done)
    self.assertEqual(r.info["reward"], 0.0)
    self.assertEqual(self.env.step({"name": "a__shout", "arguments": {"text": "x"}}).status, "invalid")

  def test_bad_configuration_is_named(self):
    with self.assertRaisesRegex(ValueError, "reuse_servers.*'zz'"):
      mte.McpTaskEnv(self.servers, self.tasks_file, reuse_servers=("zz",))
    with self.assertRaisesRegex(Exception, r"config env.mcp.servers\[0\].*no '='"):
      mte.McpTaskEnv(("nonsense",), self.tasks_file)
    bad = os.path.join(self.root, "bad.jsonl")
    with open(bad, "w") as f:
      f.write(json.dumps({"task_id": "x", "instruction": "y", "oracle": "z"}) + "\n")
    with self.assertRaisesRegex(ValueError, "record 1: unknown fields \\['oracle'\\]"):
      mte.load_tasks(bad)

  def test_config_pool(self):
    """config `env.mcp.*` makes progagent.rollouts.make_pool build ProgEnv(McpTaskEnv) workers."""
    from configs import progagent as cfg_lib
    from progagent import rollouts
    c = cfg_lib.get_config("smoke")
    c.mode = "dtc"
    c.env.mcp.servers = (f"a=python {FIXTURE}",)
    c.env.mcp.tasks_file = self.tasks_file
    c.env.mcp.evaluator = self.evaluator
    pool = rollouts.make_pool(c, 1)
    try:
      w = pool.workers[0]
      self.assertIn("Write a.txt shouted", w.reset("upper", 0))
      self.assertEqual([t["name"] for t in w.tools()], ["stats", "shout", "read", "write", "pid"])
      w.step({"name": "write", "arguments": {"path": "/workspace/b.txt", "text": "HELLO!"}})
      self.assertEqual(w.query("verify"), 1)
    finally:
      pool.close()

  def test_trainer_rollouts_and_evaluation_summary(self):
    """The trainer's rollout path (progagent.rollouts.run_rollouts over make_pool, as GSPO and the evaluation
    stage run it) with a scripted policy: sample 0 writes the answer, sample 1 does nothing; the evaluator's
    verdicts give pass@1 = 0.5 in evaluation.summarize."""
    from common.rollout import ScriptedPolicy
    from common.trajectory import ByteTokenizer
    from configs import progagent as cfg_lib
    from progagent import evaluation
    from progagent import rollouts
    c = cfg_lib.get_config("smoke")
    c.mode = "dtc"
    c.gspo.rollouts_per_task = 2
    c.env.max_turns = 3
    c.env.max_context_tokens = 8000
    c.env.max_response_tokens = 400
    c.env.mcp.servers = (f"a=python {FIXTURE}",)
    c.env.mcp.tasks_file = self.tasks_file
    c.env.mcp.evaluator = self.evaluator
    self.assertEqual(mte.config_task_ids(c.env.mcp), ["upper"])

    def script(r):
      if r.sample == 0 and r.turn == 0:
        return json.dumps({"name": "write", "arguments": {"path": "/workspace/b.txt", "text": "HELLO!"}})
      return "Done."

    tok = ByteTokenizer()
    pool = rollouts.make_pool(c, 2)
    try:
      trajs = rollouts.run_rollouts(pool, ScriptedPolicy(script, tok), tok, ["upper@v0"], config=c, seed=5)
    finally:
      pool.close()
    self.assertEqual(sorted((t.sample, t.reward) for t in trajs), [(0, 1.0), (1, 0.0)])
    level = evaluation.summarize(trajs, ks=(1,), resamples=200)[0]
    self.assertEqual((level["pass@1"], level["units"], level["episodes"]), (0.5, 1, 2))


if __name__ == "__main__":
  absltest.main()
