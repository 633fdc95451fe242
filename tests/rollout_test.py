"""Tests for common/rollout.py and common/trajectory.py: the multi-turn driver over a worker pool.

One sandboxed run (W = 2, G = 2) holds every case: normal episodes, an unreadable call, a worker
killed mid-episode, a worker that stops answering (SIGSTOP), the turn limit and the length limit.
"""

import json
import os
import shutil
import signal

import numpy as np
import psutil
from absl.testing import absltest

from common import trajectory as traj_lib
from common.env_client import EnvSpec
from common.rollout import (ChatFormat, PolicyOutput, RolloutConfig, RolloutDriver, ScriptedPolicy,
                            WorkerPool)
from common.trajectory import ByteTokenizer

PROBE = EnvSpec("common.envs.probe_env:ProbeEnv", {"max_steps": 50}, start_timeout_s=60)
HAVE_BWRAP = shutil.which("bwrap") is not None
MAX_TURNS = 4
MAX_CONTEXT = 4000


def _call(name, **arguments):
  return json.dumps({"name": name, "arguments": arguments})


def _descendants():
  return [p for p in psutil.Process().children(recursive=True)
          if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


class Recorder:
  """Scripted policy that also records every request, and can hurt its own worker."""

  def __init__(self, tok):
    self.tok = tok
    self.driver = None
    self.requests = []
    self.killed = []

  def script(self, r):
    self.requests.append(r)
    if r.task_id in ("kill", "stop") and r.turn == 1:
      pid = self.driver.worker_for(r.episode).server_pid()
      self.killed.append(pid)
      os.kill(pid, signal.SIGKILL if r.task_id == "kill" else signal.SIGSTOP)
      return _call("echo", text="after the blow")
    if r.task_id == "loop":
      return _call("echo", text=f"turn {r.turn}")
    if r.task_id == "long":
      return "x" * 1500 + _call("echo", text="long")
    if r.task_id == "badcall" and r.turn == 0:
      return 'Let me think {"name": "echo", "arguments": {"text": '
    if r.turn == 0:
      return f'Calling now. {_call("echo", text=r.task_id)} and some trailing prose {{x}}'
    return _call("finish", answer=r.task_id)


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class RolloutDriverTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.tok = ByteTokenizer()
    cls.rec = Recorder(cls.tok)
    cls.pool = WorkerPool(PROBE, 2, step_timeout_s=3)
    cls.driver = RolloutDriver(
        cls.pool, ScriptedPolicy(cls.rec.script, cls.tok), cls.tok,
        config=RolloutConfig(group_size=2, max_turns=MAX_TURNS, step_timeout_s=3,
                             max_context_tokens=MAX_CONTEXT, max_response_tokens=2000))
    cls.rec.driver = cls.driver
    cls.tasks = ["a", "kill", "badcall", "stop", "loop", "long", "b"]
    cls.trajs = cls.driver.run(cls.tasks)
    cls.by_task = {}
    for t in cls.trajs:
      cls.by_task.setdefault(t.task_id, []).append(t)
    cls.whole = cls.pool.wait_until_whole(120)
    cls.live_pids = [w.pid for w in cls.pool.workers]
    cls.cgroup_dirs = [d for w in cls.pool.workers for d in (w.sandbox.cgroup.dirs
                                                              if w.sandbox.cgroup else ())]
    cls.pool.close()
    cls.left = _descendants()

  def test_order_groups_and_samples(self):
    self.assertLen(self.trajs, 2 * len(self.tasks))
    self.assertEqual([t.task_id for t in self.trajs], [x for x in self.tasks for _ in range(2)])
    self.assertEqual([t.group for t in self.trajs], [g for g in range(len(self.tasks)) for _ in range(2)])
    self.assertEqual([t.sample for t in self.trajs], [0, 1] * len(self.tasks))
    self.assertEqual([t.seed for t in self.trajs], list(range(len(self.trajs))))
    for t in self.trajs:
      self.assertIn(t.termination, traj_lib.TERMINATIONS)

  def test_normal_episodes(self):
    for task in ("a", "b"):
      for t in self.by_task[task]:
        self.assertEqual(t.termination, "done")
        self.assertIsNone(t.error)
        self.assertEqual(t.reward, 1.0)
        self.assertEqual([x.status for x in t.turns], ["ok", "ok"])
        self.assertEqual(t.turns[0].call, {"name": "echo", "arguments": {"text": task}})
        self.assertEqual(t.turns[0].observation, task)

  def test_unreadable_call_becomes_error_observation(self):
    for t in self.by_task["badcall"]:
      self.assertEqual(t.turns[0].status, "parse_error")
      self.assertIn("never closed", t.turns[0].observation)
      self.assertEqual(t.termination, "done")   # the agent read the error and finished
      self.assertEqual(t.reward, 1.0)

  def test_killed_worker_ends_one_episode(self):
    for t in self.by_task["kill"]:
      self.assertEqual(t.termination, "env_error")
      self.assertTrue(t.error.startswith("crash:"), msg=t.error)
      self.assertEqual(t.reward, 0.0)
      self.assertEqual(t.turns[-1].status, "env_error")

  def test_stopped_worker_times_out(self):
    for t in self.by_task["stop"]:
      self.assertEqual(t.termination, "env_error")
      self.assertTrue(t.error.startswith("timeout:"), msg=t.error)

  def test_pool_is_whole_again_and_counts_restarts(self):
    self.assertTrue(self.whole)
    self.assertEqual(self.driver.stats["restarts"], 4)  # 2 kills + 2 stops
    self.assertEqual(self.driver.stats["terminations"]["env_error"], 4)
    for pid in self.rec.killed:
      self.assertFalse(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)

  def test_turn_limit(self):
    for t in self.by_task["loop"]:
      self.assertEqual(t.termination, "turn_limit")
      self.assertEqual(t.num_turns, MAX_TURNS)

  def test_length_limit(self):
    for t in self.by_task["long"]:
      self.assertEqual(t.termination, "length_limit")
      self.assertLessEqual(len(t.token_ids()), MAX_CONTEXT)

  def test_no_process_left_after_close(self):
    self.assertEqual(self.left, [])
    for pid in self.live_pids:
      self.assertFalse(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    for d in self.cgroup_dirs:
      self.assertFalse(os.path.exists(d), msg=d)

  def test_contexts_are_append_only(self):
    """What the policy saw at every turn is a prefix of the final token sequence."""
    by_ep = {t.episode: t for t in self.trajs}
    for r in self.rec.requests:
      t = by_ep[r.episode]
      final = t.token_ids()
      np.testing.assert_array_equal(final[: len(r.token_ids)], np.asarray(r.token_ids, np.int32))
      # The request ends exactly where this turn's response starts: the policy saw its prompt.
      self.assertEqual(len(r.token_ids), t.turn_spans()[r.turn][0])

  def test_masks_and_boundaries(self):
    t = self.by_task["a"][0]
    ids, mask, turn_ids = t.token_ids(), t.policy_mask(), t.turn_ids()
    self.assertEqual(ids.shape, mask.shape)
    self.assertEqual(int(mask.sum()), sum(len(x.response_ids) for x in t.turns))
    spans = t.turn_spans()
    self.assertLen(spans, t.num_turns)
    for k, ((s, e), turn) in enumerate(zip(spans, t.turns)):
      np.testing.assert_array_equal(ids[s:e], turn.response_ids)
      self.assertTrue(mask[s:e].all())
      np.testing.assert_array_equal(turn_ids[s:e], k)
      self.assertEqual(turn.response_ids[-1], self.tok.eos_id)
    self.assertFalse(mask[: spans[0][0]].any())
    self.assertFalse(mask[spans[0][1]: spans[1][0]].any())
    # The prompt of turn 1 is the rendered observation of turn 0, nothing else.
    self.assertEqual(self.tok.decode(t.turns[1].prompt_ids), ChatFormat().observation("a"))
    # The first prompt lists the environment's tools.
    self.assertIn('"name": "fork_bomb"', self.tok.decode(t.turns[0].prompt_ids))

  def test_collate(self):
    b = traj_lib.collate(self.trajs, pad_id=0)
    n = len(self.trajs)
    L = max(len(t.token_ids()) for t in self.trajs)
    self.assertEqual(b["tokens"].shape, (n, L))
    self.assertEqual(b["policy_mask"].dtype, bool)
    for i, t in enumerate(self.trajs):
      n_i = len(t.token_ids())
      self.assertEqual(b["lengths"][i], n_i)
      self.assertFalse(b["policy_mask"][i, n_i:].any())
      self.assertEqual(b["env_error"][i], t.termination == "env_error")
    np.testing.assert_array_equal(b["group_ids"], [t.group for t in self.trajs])
    np.testing.assert_array_equal(b["rewards"], np.asarray([t.reward for t in self.trajs], np.float32))
    cut = traj_lib.collate(self.trajs, max_len=10)
    self.assertTrue(cut["truncated"].all())


class InProcessAndCutResponseTest(absltest.TestCase):
  """The same driver over in-process workers (no sandbox); a response cut before its end token."""

  def test_cut_response_gets_eos_as_prompt_token(self):
    tok = ByteTokenizer()

    def policy(reqs):
      out = []
      for r in reqs:
        text = _call("echo", text="hi") if r.turn == 0 else _call("finish", answer=r.task_id)
        out.append(PolicyOutput(tok.encode(text), [-0.5] * len(tok.encode(text))))  # no eos
      return out

    with WorkerPool(PROBE, 1, in_process=True) as pool:
      trajs = RolloutDriver(pool, policy, tok, config=RolloutConfig(group_size=1)).run(["t"])
    t = trajs[0]
    self.assertEqual(t.termination, "done")
    self.assertEqual(t.reward, 1.0)
    self.assertEqual(t.turns[1].prompt_ids[0], tok.eos_id)   # inserted, as a prompt token
    lp = t.logprobs()
    np.testing.assert_array_equal(lp[t.policy_mask()], -0.5)
    np.testing.assert_array_equal(lp[~t.policy_mask()], 0.0)

  def test_policy_must_answer_every_request(self):
    with WorkerPool(PROBE, 1, in_process=True) as pool:
      d = RolloutDriver(pool, lambda reqs: [], ByteTokenizer(), config=RolloutConfig(group_size=1))
      with self.assertRaisesRegex(ValueError, "0 outputs for 1 requests"):
        d.run(["t"])


if __name__ == "__main__":
  absltest.main()
