"""Tests for common/envs/twx_env.py: TextWorldExpress in this process and from a sandboxed process.

Needs a Java runtime (Debian: default-jre-headless), the `textworld-express` wheel and, for the
sandboxed half, bubblewrap. Step latencies are printed (median and 95th percentile, in ms).
"""

import shutil
import statistics
import time

import psutil
from absl.testing import absltest

import procs
from common.env_client import EnvSpec
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common import windowed as win_lib
from common.envs import twx_env
from common.trajectory import ByteTokenizer

try:
  import textworld_express  # noqa: F401
  HAVE_TWX = shutil.which("java") is not None
except ImportError:
  HAVE_TWX = False
HAVE_BWRAP = shutil.which("bwrap") is not None
PARAMS = {"coin": "numLocations=3,includeDoors=0,numDistractorItems=0"}
GAMES = ("coin", "mapreader", "cookingworld", "sorting")


def _act(a):
  return {"name": "action", "arguments": {"action": a}}


def _latency(env, n_steps=300):
  """Per-step seconds over coin collector episodes, stepping admissible actions in a fixed rotation."""
  times, k, done = [], 0, True
  seed = 0
  while len(times) < n_steps:
    if done:
      env.reset(f"coin/{seed}", 0)
      seed += 1
      adm = env.query("admissible_actions") if hasattr(env, "query") else env.admissible_actions()
    a = sorted(x for x in adm if x != "take coin")[k % max(1, len(adm) - 1)]
    k += 1
    t = time.perf_counter()
    r = env.step(_act(a))
    times.append(time.perf_counter() - t)
    adm, done = r.info["admissible_actions"], r.done
  times.sort()
  return statistics.median(times), times[int(0.95 * len(times))]


@absltest.skipUnless(HAVE_TWX, "needs java and textworld-express: apt-get install -y default-jre-headless; "
                     "pip install textworld-express==1.1.0")
class TwxInProcessTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    from common.envs.twx_env import TwxToolEnv
    cls.env = TwxToolEnv(game_params=PARAMS)

  @classmethod
  def tearDownClass(cls):
    cls.env.close()

  def test_one_action_tool(self):
    tools = self.env.tools()
    self.assertEqual([t["name"] for t in tools], ["action"])
    self.assertEqual(tools[0]["inputSchema"]["required"], ["action"])

  def test_splits_are_the_simulators_and_disjoint(self):
    for g in GAMES:
      tr, dv, te = (set(self.env.seeds(g, s)) for s in ("train", "dev", "test"))
      self.assertLen(tr, 1000)
      self.assertEmpty(tr & dv)
      self.assertEmpty(tr & te)
      self.assertEmpty(dv & te)
    self.assertEqual(self.env.task_ids("dev", ["coin_collector"], limit=2), ["coin/10000", "coin/10001"])
    self.assertEqual(self.env._parse("sorting/20003"), ("sorting", 20003, "test"))
    with self.assertRaisesRegex(ValueError, "in no split"):
      self.env.reset("coin/5000", 0)
    with self.assertRaisesRegex(ValueError, "unknown TextWorldExpress game"):
      self.env.reset("chess/1", 0)
    with self.assertRaisesRegex(ValueError, "<game>/<seed>"):
      self.env.reset("coin", 0)

  def test_gold_replays_win_every_game(self):
    for g in GAMES:
      for tid in (f"{g}/3", f"{g}/10004", f"{g}/20005"):
        gold = self.env.gold_actions(tid)
        obs = self.env.reset(tid, 0)
        info = self.env.episode_info()
        self.assertTrue(obs.startswith(info["instruction"]), tid)
        self.assertIn(info["observation"], obs)
        self.assertEqual(info["admissible_actions"], sorted(info["admissible_actions"]))
        r = None
        for a in gold:
          self.assertFalse(r is not None and r.done, tid)
          r = self.env.step(_act(a))   # (TWX gold paths may hold a redundant inadmissible step)
        self.assertTrue(r.done, tid)
        self.assertTrue(r.info["won"], tid)
        self.assertEqual(r.info["reward"], 1.0)
        self.assertEqual(r.info["moves"], len(gold))
        self.assertEqual(r.info["task_id"], tid)

  def test_gold_actions_are_deterministic_and_short(self):
    # TWX draws a coin collector's gold walk at random; the env cancels its back-and-forth moves.
    for tid in ("coin/3", "coin/8", "coin/18", "coin/20005"):
      plans = {tuple(self.env.gold_actions(tid)) for _ in range(4)}
      self.assertLen(plans, 1, tid)
      plan = list(plans.pop())
      self.assertEqual(twx_env.cancel_backtracks(plan), plan, tid)
      self.assertEqual(plan[-1], "take coin", tid)

  def test_cancel_backtracks(self):
    self.assertEqual(twx_env.cancel_backtracks(
        ["look around", "move west", "move north", "move south", "move east", "move east", "take coin"]),
        ["look around", "move east", "take coin"])
    self.assertEqual(twx_env.cancel_backtracks(["move north", "take key", "move south"]),
                     ["move north", "take key", "move south"])
    self.assertEqual(twx_env.cancel_backtracks([]), [])

  def test_invalid_actions_and_calls(self):
    self.env.reset("coin/3", 0)
    r = self.env.step(_act("dance a jig"))
    self.assertEqual(r.status, "invalid")
    self.assertFalse(r.info["valid"])
    self.assertFalse(r.done)
    self.assertIn("Unknown action", r.observation)
    r = self.env.step({"name": "jump", "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown tool", r.observation)
    r = self.env.step(_act("   "))
    self.assertEqual(r.status, "invalid")
    r = self.env.step(_act("look   around"))   # whitespace runs collapse
    self.assertEqual(r.status, "ok")
    self.assertEqual(r.info["moves"], 2)

  def test_step_limit_ends_the_episode(self):
    from common.envs.twx_env import TwxToolEnv
    env = TwxToolEnv(game_params=PARAMS, env_step_limit=3)
    try:
      env.reset("coin/3", 0)
      dones = [env.step(_act("look around")).done for _ in range(3)]
      self.assertEqual(dones, [False, False, True])
      with self.assertRaisesRegex(RuntimeError, "is over"):
        env.step(_act("look around"))
    finally:
      env.close()

  def test_step_latency_in_process(self):
    med, p95 = _latency(self.env)
    print(f"\nTWX coin collector, in-process step: median {med * 1e3:.3f} ms, p95 {p95 * 1e3:.3f} ms")


@absltest.skipUnless(HAVE_TWX and HAVE_BWRAP, "needs java, textworld-express and bubblewrap")
class TwxSandboxedTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.spec = EnvSpec("common.envs.twx_env:TwxToolEnv", {"game_params": PARAMS}, start_timeout_s=120)
    cls.pool = WorkerPool(cls.spec, 1, step_timeout_s=60)
    cls.env = cls.pool.workers[0]

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    left = [p for p in psutil.Process().children(recursive=True)
            if procs.alive(p)]
    assert not left, f"processes left behind: {left}"

  def test_gold_replay_through_sandbox(self):
    gold = self.env.query("gold_actions", task_id="cookingworld/10002")
    self.env.reset("cookingworld/10002", 0)
    for a in gold:
      r = self.env.step(_act(a))
    self.assertTrue(r.done)
    self.assertTrue(r.info["won"])
    self.assertEqual(r.info["fold"], "dev")

  def test_step_latency_through_sandbox(self):
    med, p95 = _latency(self.env, 150)
    print(f"\nTWX coin collector, sandboxed process step: median {med * 1e3:.3f} ms, p95 {p95 * 1e3:.3f} ms")

  def test_windowed_driver_over_the_sandboxed_pool(self):
    gold = {t: self.env.query("gold_actions", task_id=t) for t in ("coin/3", "coin/7")}
    tok = ByteTokenizer()
    policy = ScriptedPolicy(lambda r: f"<think>step {r.turn}</think><action>{gold[r.task_id][r.turn]}</action>", tok)
    driver = RolloutDriver(self.pool, policy, tok,
                           config=RolloutConfig(mode="window", group_size=2, max_turns=10, max_context_tokens=20000,
                                                max_response_tokens=200))
    trajs = driver.run(["coin/3", "coin/7"])
    for t in trajs:
      self.assertIsInstance(t, win_lib.WindowTrajectory)
      self.assertEqual(t.termination, "done")
      self.assertTrue(t.success)
      self.assertEqual(t.reward, 1.0)
      self.assertEqual([x.action for x in t.turns], gold[t.task_id])
      self.assertFalse(any(x.invalid for x in t.turns))
    self.assertEqual(driver.stats["invalid_actions"], 0)


if __name__ == "__main__":
  absltest.main()
