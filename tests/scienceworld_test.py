"""Tests for common/envs/scienceworld_env.py, served from a sandboxed process (one JVM for all tests).

Needs a Java runtime (Debian: default-jre-headless) and bubblewrap.
"""

import json
import shutil

from absl.testing import absltest

from common.env_client import EnvSpec
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

SPEC = EnvSpec("common.envs.scienceworld_env:ScienceWorldToolEnv", {"env_step_limit": 60},
               start_timeout_s=180)
TASK = "find-animal"   # short gold paths (about 8 actions)
READY = shutil.which("bwrap") and shutil.which("java")


@absltest.skipUnless(READY, "needs bubblewrap and java: apt-get install -y bubblewrap default-jre-headless")
class ScienceWorldTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.pool = WorkerPool(SPEC, 1, step_timeout_s=120)
    cls.env = cls.pool.workers[0]
    cls.train = cls.env.query("variations", task=TASK, split="train")
    cls.dev = cls.env.query("variations", task=TASK, split="dev")
    cls.test = cls.env.query("variations", task=TASK, split="test")
    cls.task_id = f"{TASK}/{cls.train[0]}"

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()

  def test_tools_are_mcp_entries(self):
    tools = {t["name"]: t for t in self.env.tools()}
    self.assertEqual(set(tools), {"action", "valid_actions"})
    self.assertEqual(tools["action"]["inputSchema"]["required"], ["action"])

  def test_splits_are_disjoint_and_nonempty(self):
    for s in (self.train, self.dev, self.test):
      self.assertNotEmpty(s)
    self.assertEmpty(set(self.train) & set(self.dev))
    self.assertEmpty(set(self.train) & set(self.test))
    self.assertEmpty(set(self.dev) & set(self.test))
    names = self.env.query("task_names")
    self.assertLen(names, 30)
    ids = self.env.query("task_ids", split="dev", tasks=[TASK])
    self.assertEqual(ids, [f"{TASK}/{v}" for v in self.dev])

  def test_gold_replay_through_sandbox_scores_100(self):
    gold = self.env.query("gold_actions", task_id=self.task_id)
    self.assertGreater(len(gold), 2)
    obs = self.env.reset(self.task_id, 0)
    self.assertIn("Your task is to", obs)
    r = None
    for a in gold:
      self.assertFalse(r is not None and r.done)
      r = self.env.step({"name": "action", "arguments": {"action": a}})
    self.assertTrue(r.done)
    self.assertEqual(r.info["score"], 100)
    self.assertEqual(r.info["reward"], 1.0)
    self.assertTrue(r.info["completed"])

  def test_valid_actions_and_invalid_calls(self):
    self.env.reset(self.task_id, 0)
    acts = self.env.query("valid_actions")
    self.assertIn("look around", acts)
    r = self.env.step({"name": "valid_actions", "arguments": {}})
    self.assertEqual(r.observation.splitlines(), acts)
    self.assertEqual(r.info["moves"], 0)   # free action
    r = self.env.step({"name": "action", "arguments": {"action": "fly to the moon"}})
    self.assertEqual(r.status, "invalid")
    r = self.env.step({"name": "teleport", "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown tool", r.observation)

  def test_scripted_policy_through_driver(self):
    gold = self.env.query("gold_actions", task_id=self.task_id)

    def script(req):
      if req.turn < len(gold):
        return json.dumps({"name": "action", "arguments": {"action": gold[req.turn]}})
      return "done"

    tok = ByteTokenizer()
    driver = RolloutDriver(self.pool, ScriptedPolicy(script, tok), tok,
                           config=RolloutConfig(group_size=2, max_turns=40, step_timeout_s=120,
                                                max_context_tokens=200_000))
    trajs = driver.run([self.task_id])
    for t in trajs:
      self.assertEqual(t.termination, "done", msg=t.error)
      self.assertEqual(t.reward, 1.0)
      self.assertEqual(t.num_turns, len(gold))
      self.assertEqual(t.final_info["score"], 100)


if __name__ == "__main__":
  absltest.main()
