"""Tests for common/env_server.py + common/env_client.py: start errors, env exceptions, the replay env.

The TRAJECT-Bench replay environment (phgpo.replay_env.ReplayEnv) served from its own sandboxed process must
answer exactly as the same environment called in-process.
"""

import json
import os
import shutil

import psutil
from absl.testing import absltest

from common.env_client import EnvClient, EnvSpec, InProcessEnv
from common.env_server import load_factory
from common.env_pool import WorkerPool
from common.mcp_process import EnvError
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

HAVE_BWRAP = shutil.which("bwrap") is not None
PROBE = EnvSpec("common.envs.probe_env:ProbeEnv")


def _replay_spec():
  try:
    from phgpo.replay_env import replay_env_spec
    return replay_env_spec(domains=["Finance"], max_steps=10)
  except FileNotFoundError:
    return None


class LoadFactoryTest(absltest.TestCase):

  def test_bad_paths(self):
    with self.assertRaisesRegex(ValueError, "package.module:ClassOrFunction"):
      load_factory("common.envs.probe_env.ProbeEnv")
    with self.assertRaises(AttributeError):
      load_factory("common.envs.probe_env:Nope")
    self.assertEqual(load_factory("common.envs.probe_env:ProbeEnv").__name__, "ProbeEnv")


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class EnvClientTest(absltest.TestCase):

  def test_start_failure_reports_the_cause(self):
    with self.assertRaises(EnvError) as cm:
      EnvClient(EnvSpec("common.envs.no_such_module:Env", start_timeout_s=60))
    self.assertEqual(cm.exception.reason, "start")
    self.assertIn("No module named 'common.envs.no_such_module'", str(cm.exception))
    self.assertEqual(psutil.Process().children(recursive=True), [])

  def test_env_exception_keeps_the_process(self):
    with EnvClient(PROBE) as c:
      with self.assertRaises(EnvError) as cm:
        c.step({"name": "echo", "arguments": {}})   # before reset: the env raises
      self.assertEqual(cm.exception.reason, "env_exception")
      self.assertIn("step() before reset()", str(cm.exception))
      self.assertTrue(c.alive)
      with self.assertRaisesRegex(EnvError, "offers \\['pid'\\]"):
        c.query("secrets")
      self.assertEqual(c.query("pid"), 2)     # its own PID namespace: bwrap is 1
      c.reset("t", 0)
      self.assertEqual(c.step({"name": "echo", "arguments": {"text": "ok"}}).observation, "ok")
      with self.assertRaisesRegex(EnvError, "has no clone"):
        c.slot(1).reset("t")
    self.assertEqual(psutil.Process().children(recursive=True), [])


class UnsandboxedControlTest(absltest.TestCase):
  """Control for the sandbox checks: without the sandbox the same probe does read host files."""

  def test_without_sandbox_host_files_are_readable(self):
    from common.sandbox import SandboxConfig
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.sh")
    with EnvClient(PROBE, sandbox=SandboxConfig(enabled=False)) as c:
      self.assertEqual(c.limits, "no sandbox")
      c.reset("t")
      self.assertEqual(c.step({"name": "read_file", "arguments": {"path": setup}}).status, "ok")
      self.assertGreater(c.query("pid"), 2)   # no PID namespace
    self.assertEqual(psutil.Process().children(recursive=True), [])


@absltest.skipUnless(HAVE_BWRAP and _replay_spec() is not None,
                     "needs bubblewrap and the TRAJECT-Bench data (../shared/data/traject_bench)")
class ReplayEnvServedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.spec = _replay_spec()
    cls.pool = WorkerPool(cls.spec, 2, step_timeout_s=60)
    cls.local = InProcessEnv(cls.spec)

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    cls.local.close()

  def test_same_answers_as_in_process(self):
    remote = self.pool.workers[0]
    self.assertEqual(remote.tools(), self.local.tools())
    ids = remote.query("task_list")
    self.assertEqual(ids, self.local.query("task_list"))
    for tid in ids[:3]:
      self.assertEqual(remote.reset(tid, 3), self.local.reset(tid, 3))
      calls = remote.query("gold_calls", task_id=tid) + [{"name": "nope", "arguments": {}}]
      for call in calls[: 10]:
        a, b = remote.step(call), self.local.step(call)
        self.assertEqual(tuple(a), tuple(b))
        if a.done:
          break

  def test_slots_serve_concurrent_trajectories_from_one_process(self):
    from phgpo.replay_env import make_replay_env
    remote = self.pool.workers[1]
    ids = remote.query("task_list")[:3]
    slots = [remote.slot(k) for k in range(3)]
    local = [make_replay_env(**self.spec.kwargs) for _ in range(3)]
    for s, l, tid in zip(slots, local, ids):
      self.assertEqual(s.reset(tid, 0), l.reset(tid, 0))
    gold = {tid: remote.query("gold_calls", task_id=tid) for tid in ids}
    for t in range(2):   # interleaved: slot 0 step t, slot 1 step t, ...
      for s, l, tid in zip(slots, local, ids):
        if t < len(gold[tid]):
          self.assertEqual(tuple(s.step(gold[tid][t])), tuple(l.step(gold[tid][t])))

  def test_gold_policy_through_driver(self):
    ids = self.pool.workers[0].query("task_list")[:4]
    gold = {t: self.pool.workers[0].query("gold_calls", task_id=t) for t in ids}

    def script(req):
      calls = gold[req.task_id]
      return json.dumps(calls[req.turn]) if req.turn < len(calls) else "final answer"

    tok = ByteTokenizer()
    from phgpo.replay_env import match_reward
    d = RolloutDriver(self.pool, ScriptedPolicy(script, tok), tok, reward_fn=match_reward,
                      config=RolloutConfig(group_size=2, max_turns=12, max_context_tokens=1_000_000,
                                           max_observation_chars=100_000))
    trajs = d.run(ids)
    self.assertLen(trajs, 8)
    for t in trajs:
      self.assertEqual(t.termination, "done", msg=t.error)
      self.assertEqual([x.call["name"] for x in t.turns], [c["name"] for c in gold[t.task_id]])
      self.assertTrue(all(x.info["arguments_match"] for x in t.turns))
      self.assertIn(t.turns[0].status, ("ok", "failed"))
      self.assertEqual(t.reward, 1.0)


if __name__ == "__main__":
  absltest.main()
