"""Tests for common/envs/mcp_server_env.py: the reference mcp-server-git driven as an environment."""

import json
import shutil

from absl.testing import absltest

from common.env_client import EnvSpec
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

SPEC = EnvSpec("common.envs.mcp_server_env:GitTaskEnv", {"max_steps": 6}, start_timeout_s=120)


@absltest.skipUnless(shutil.which("bwrap") and shutil.which("git"),
                     "needs bubblewrap and git: apt-get install -y bubblewrap git")
class GitServerEnvTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.pool = WorkerPool(SPEC, 1, step_timeout_s=60)
    cls.env = cls.pool.workers[0]

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()

  def test_tools_come_from_the_reference_server(self):
    names = {t["name"] for t in self.env.tools()}
    self.assertContainsSubset({"git_status", "git_add", "git_commit", "git_checkout",
                               "git_create_branch", "git_reset", "git_log"}, names)
    add = next(t for t in self.env.tools() if t["name"] == "git_add")
    self.assertEqual(sorted(add["inputSchema"]["required"]), ["files", "repo_path"])

  def test_server_errors_are_not_silent(self):
    self.env.reset("feature-branch", 0)
    r = self.env.step({"name": "git_add", "arguments": {"repo_path": "/etc", "files": ["passwd"]}})
    self.assertEqual(r.status, "error")
    self.assertIn("outside the allowed repository", r.observation)
    self.assertEqual(r.info["reward"], 0.0)

  def test_solutions_reach_the_goal_through_the_driver(self):
    tasks = self.env.query("task_ids")
    sols = {t: self.env.query("solution", task_id=t) for t in tasks}

    def script(req):
      calls = sols[req.task_id]
      if req.turn == 0:
        repo = calls[0]["arguments"]["repo_path"]
        return json.dumps({"name": "git_status", "arguments": {"repo_path": repo}})
      return json.dumps(calls[min(req.turn - 1, len(calls) - 1)])

    tok = ByteTokenizer()
    d = RolloutDriver(self.pool, ScriptedPolicy(script, tok), tok,
                      config=RolloutConfig(group_size=1, max_turns=6, max_context_tokens=100_000))
    for t in d.run(tasks):
      self.assertEqual(t.termination, "done", msg=(t.task_id, t.error))
      self.assertEqual(t.reward, 1.0, msg=t.task_id)
      self.assertEqual(t.turns[0].info["reward"], 0.0)   # git_status alone does not solve it
      self.assertIn("On branch", t.turns[0].observation)


if __name__ == "__main__":
  absltest.main()
