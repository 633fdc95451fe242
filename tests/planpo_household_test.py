"""Tests of the household env's PlanPO contract (common/envs/household/env.py) and configs/planpo_household.py.

The contract planpo/rollouts.py and common/windowed.py read: queries task_ids(split, games, limit), task_type,
gold_actions, admissible_actions, episode_info; step info won / reward / step_reward / admissible_actions.
Needs alfworld, textworld[pddl] and jericho (setup.sh); the games are generated into a fresh temporary cache.
"""

import json
import os
import shutil
import tempfile
import time
from unittest import mock

import pytest
from absl.testing import absltest

from configs import planpo_household

try:
  import fast_downward  # noqa: F401
  import jericho  # noqa: F401
  import alfworld  # noqa: F401
  READY = True
except ImportError:
  READY = False

if READY:
  from common.envs.household import generate
  from common.envs.household.env import HouseholdToolEnv, make_household_env, split_reset_text

TYPES = ("pick_and_place_simple", "look_at_obj_in_light")


def _act(a):
  return {"name": "action", "arguments": {"action": a}}


class ConfigTest(absltest.TestCase):

  def test_variants(self):
    for arg in ("", "ablation", "smoke", "smoke,ablation"):
      c = planpo_household.get_config(arg)
      self.assertEqual(c.env.factory, "common.envs.household.env:make_household_env")
      self.assertEqual(dict(c.env.eval_splits), {"seen": "valid_seen", "unseen": "valid_unseen"})
      self.assertEqual(tuple(c.sft.harmless_actions), ("look", "inventory"))
      self.assertFalse(c.sft.move_detours)
      self.assertGreaterEqual(c.env.kwargs.max_steps, c.env.max_turns)
      self.assertIn("household", c.rollout.window.header.lower())
      self.assertEqual(c.planpo.alpha_decay_steps, 0)   # 0: rl.steps
    self.assertEqual(tuple(planpo_household.get_config("ablation").runs), planpo_household.planpo_base.ABLATION_RUNS)
    self.assertEqual(tuple(planpo_household.get_config("").runs), planpo_household.planpo_base.MAIN_RUNS)
    with self.assertRaisesRegex(ValueError, "valid:"):
      planpo_household.get_config("nope")

  @absltest.skipUnless(READY, "needs alfworld, textworld, fast-downward-textworld, jericho (setup.sh)")
  def test_config_games_are_task_types(self):
    for arg in ("", "smoke"):
      games = planpo_household.get_config(arg).env.games
      self.assertTrue(set(games) <= set(generate.TASK_TYPES), games)


@absltest.skipUnless(READY, "needs alfworld, textworld, fast-downward-textworld, jericho (setup.sh)")
class ContractTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cache = tempfile.mkdtemp(prefix="household_contract_")
    cls.env = make_household_env(cache_dir=cls.cache, max_steps=50)

  @classmethod
  def tearDownClass(cls):
    cls.env.close()
    shutil.rmtree(cls.cache, ignore_errors=True)
    super().tearDownClass()

  def test_query_methods_listed(self):
    for q in ("task_ids", "gold_actions", "admissible_actions", "task_type", "episode_info"):
      self.assertIn(q, HouseholdToolEnv.QUERY_METHODS)
      self.assertTrue(callable(getattr(self.env, q)))

  def test_task_ids_games_and_limit(self):
    t0 = time.monotonic()
    ids = self.env.task_ids(split="train", games=list(TYPES), limit=3)
    self.assertLess(time.monotonic() - t0, 1.0)   # nothing is generated
    self.assertLen(ids, 6)
    self.assertEqual([self.env.task_type(t) for t in ids], [TYPES[0]] * 3 + [TYPES[1]] * 3)
    self.assertEqual(ids[:3], ["train/0", "train/6", "train/12"])
    self.assertEqual(self.env.task_ids("train", games=list(TYPES[::-1]), limit=1), ["train/1", "train/0"])
    self.assertEqual(self.env.task_ids("valid_unseen", games=[TYPES[1]], limit=2),
                     ["valid_unseen/1", "valid_unseen/7"])
    every = self.env.task_ids("valid_seen", games=None, limit=2)   # None: all six types
    self.assertLen(every, 12)
    self.assertEqual({self.env.task_type(t) for t in every}, set(generate.TASK_TYPES))
    self.assertLen(self.env.task_ids("valid_seen", games=list(TYPES)), len(range(0, 140, 6)) + len(range(1, 140, 6)))
    with self.assertRaisesRegex(ValueError, "unknown household task types"):
      self.env.task_ids("train", games=["pick_and_place"], limit=1)
    with self.assertRaisesRegex(ValueError, "split"):
      self.env.task_ids("test", games=list(TYPES), limit=1)

  def test_task_ids_n_keeps_its_meaning(self):
    self.assertEqual(self.env.task_ids("train", 3), ["train/0", "train/1", "train/2"])
    self.assertLen(self.env.task_ids("valid_unseen"), 134)
    self.assertEqual(self.env.task_ids("train", 2, games=list(TYPES), limit=5), ["train/0", "train/6"])

  def test_task_type(self):
    for i in range(12):
      self.assertEqual(self.env.task_type(f"valid_seen/{i}"), generate.TASK_TYPES[i % 6])
    with self.assertRaises(ValueError):
      self.env.task_type("valid_seen/140")
    with self.assertRaises(ValueError):
      self.env.task_type("seen/1")

  def test_episode_info_matches_reset_text(self):
    with self.assertRaises(RuntimeError):
      make_household_env(cache_dir=self.cache).episode_info()
    tid = self.env.task_ids("train", games=[TYPES[0]], limit=1)[0]
    obs = self.env.reset(tid, 0)
    info = self.env.episode_info()
    self.assertEqual(set(info), {"instruction", "observation", "admissible_actions"})
    self.assertTrue(info["instruction"].startswith("Your task is to: "), info)
    self.assertIn(info["instruction"], obs)
    self.assertIn(info["observation"], obs)
    self.assertTrue(info["observation"].startswith("You are in the middle of a room."), info)
    self.assertNotIn("Your task is to", info["observation"])
    self.assertNotIn("Welcome", info["observation"])
    self.assertEqual(info["admissible_actions"], self.env.admissible_actions())
    self.assertIn("look", info["admissible_actions"])
    r = self.env.step(_act("inventory"))
    info = self.env.episode_info()
    self.assertEqual(info["observation"], r.observation)
    self.assertEqual(info["admissible_actions"], r.info["admissible_actions"])
    self.assertEqual((r.info["won"], r.info["reward"], r.info["step_reward"]), (False, 0.0, 0.0))

  def test_split_reset_text(self):
    text = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. You see a desk 1.\n\n"
            "Your task is to: put a pen in desk.")
    self.assertEqual(split_reset_text(text), ("Your task is to: put a pen in desk.",
                                              "You are in the middle of a room. You see a desk 1."))
    self.assertEqual(split_reset_text("odd text"), ("odd text", "odd text"))

  def test_expert_plan_wins_with_reward_info(self):
    for t in TYPES:
      tid = self.env.task_ids("train", games=[t], limit=1)[0]
      gold = self.env.gold_actions(tid)
      self.assertNotEmpty(gold)
      self.env.reset(tid, 0)
      infos = []
      for a in gold:
        self.assertIn(a, self.env.admissible_actions(), tid)
        r = self.env.step(_act(a))
        infos.append(r.info)
      self.assertTrue(r.done, tid)
      last = infos[-1]
      self.assertEqual((last["won"], last["reward"], last["step_reward"]), (True, 1.0, 1.0))
      self.assertEqual(last["task_type"], t)
      for i in infos[:-1]:
        self.assertEqual((i["won"], i["reward"], i["step_reward"]), (False, 0.0, 0.0))
        self.assertIsInstance(i["admissible_actions"], list)
      bad = self.env.step({"name": "teleport", "arguments": {}})   # a malformed call after the win
      self.assertEqual((bad.status, bad.info["step_reward"]), ("invalid", 0.0))

  def test_cache_is_reused_and_read_only_cache_is_read(self):
    tid = self.env.task_ids("valid_seen", games=[TYPES[0]], limit=1)[0]
    path = self.env.game_file(tid)
    self.assertTrue(path.startswith(self.cache), path)
    other = make_household_env(cache_dir=self.cache)
    t0 = time.monotonic()
    self.assertEqual(other.game_file(tid), path)   # found, not generated again
    self.assertLess(time.monotonic() - t0, 1.0)
    self.assertEqual(other.gold_actions(tid), self.env.gold_actions(tid))
    leftovers = [n for _, dirs, _ in os.walk(self.cache) for n in dirs if ".tmp-" in n]
    self.assertEmpty(leftovers)
    ro = tempfile.mkdtemp(prefix="household_ro_")   # a read-only cache (root ignores modes: os.access says)
    try:
      shutil.copytree(os.path.join(self.cache, "valid_seen"), os.path.join(ro, "valid_seen"))
      access = os.access
      with mock.patch.object(os, "access", lambda p, m, **k: False if str(p).startswith(ro) else access(p, m, **k)):
        env = make_household_env(cache_dir=ro)
        self.assertTrue(env.game_file(tid).startswith(ro))
        fresh = env.game_file("valid_seen/6")   # not in the read-only cache: generated privately
        self.assertFalse(fresh.startswith(ro), fresh)
        self.assertTrue(env.gold_actions("valid_seen/6"))
        env.close()
      self.assertEqual(sorted(os.listdir(os.path.join(ro, "valid_seen"))),
                       sorted(os.listdir(os.path.join(self.cache, "valid_seen"))))
    finally:
      shutil.rmtree(ro, ignore_errors=True)

  def test_engine_caches_change_nothing(self):
    from common.envs.household import engine

    def play(env):
      out = []
      for tid in self.env.task_ids("train", games=list(TYPES), limit=1):
        gold = self.env.gold_actions(tid)
        out.append([env.reset(tid, 0), env.episode_info()])
        for a in ["look", "fly away"] + gold:
          r = env.step(_act(a))
          out.append([r.observation, r.status, r.done, r.info])
      env.close()
      return out

    t0 = time.monotonic()
    cached = play(make_household_env(cache_dir=self.cache))
    t1 = time.monotonic()
    engine.uninstall_caches()
    try:
      with mock.patch.object(engine, "install_caches", lambda: None):
        plain = play(make_household_env(cache_dir=self.cache))
    finally:
      engine.install_caches()
    t2 = time.monotonic()
    print(f"replays with caches {t1 - t0:.1f} s, without {t2 - t1:.1f} s")
    self.assertEqual(cached, plain)

  def test_envs_in_threads(self):
    # WorkerPool.local runs each env in its own thread; the engine's parsers are shared (engine.ENGINE_LOCK)
    import concurrent.futures
    ids = self.env.task_ids("train", games=list(TYPES), limit=2)
    golds = {t: self.env.gold_actions(t) for t in ids}   # generated here, once
    envs = [make_household_env(cache_dir=self.cache) for _ in ids]

    def play(env, tid):
      env.reset(tid, 0)
      for a in golds[tid]:
        r = env.step(_act(a))
      return r.info["won"]

    with concurrent.futures.ThreadPoolExecutor(len(ids)) as ex:
      won = list(ex.map(play, envs, ids))
    for e in envs:
      e.close()
    self.assertEqual(won, [True] * len(ids))

  def test_default_cache_dir(self):
    from common.envs.household import env as env_lib
    old = os.environ.get("AGENTIC_RL_CACHE")
    try:
      os.environ["AGENTIC_RL_CACHE"] = "/some/where"
      self.assertEqual(env_lib.default_cache_dir(), f"/some/where/household_games/{env_lib.CACHE_VERSION}")
      self.assertEqual(HouseholdToolEnv().cache_dir, env_lib.default_cache_dir())
    finally:
      if old is None:
        os.environ.pop("AGENTIC_RL_CACHE")
      else:
        os.environ["AGENTIC_RL_CACHE"] = old


@pytest.mark.slow   # ~90 s on the loaded 2-core machine (game generation included)
@absltest.skipUnless(READY, "needs alfworld, textworld, fast-downward-textworld, jericho (setup.sh)")
class SmokeTest(absltest.TestCase):
  """planpo.train.run on the household smoke config: every run and held-out split lands in the results JSON
  (workdir/results_<config.table>.json)."""

  def test_end_to_end(self):
    from planpo import train
    root = tempfile.mkdtemp(prefix="planpo_household_smoke_")
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    config = planpo_household.get_config("smoke")
    config.env.kwargs.cache_dir = os.path.join(root, "games")
    config.model.cache_dir = os.path.join(root, "ckpt")
    t0 = time.monotonic()
    results = train.run(config, os.path.join(root, "run"))
    print(f"household smoke run: {time.monotonic() - t0:.1f} s")
    self.assertIsNotNone(results)
    table = config.get("table", "")
    path = os.path.join(root, "run", f"results_{table}.json" if table else "results.json")
    with open(path) as f:
      saved = json.load(f)
    self.assertEqual(set(saved["runs"]), set(config.runs))
    for run in config.runs:
      for seed in config.seeds:
        evals = saved["runs"][run][str(seed)]
        self.assertEqual(set(evals), set(config.env.eval_splits), run)
        for label, e in evals.items():
          self.assertLen(e["episodes"], config.env.eval_tasks * len(config.env.games) * config.rl.eval_samples,
                        (run, label))
          self.assertIn("success", e["metrics"])
    self.assertEqual(set(saved["task_types"].values()), set(config.env.games))
    self.assertGreater(saved["sft_data"][str(config.seeds[0])]["sft/episodes"], 0)   # some gold replays fit
    # the regime gate (gate.on_fail 'report'): it ran before RL against the expert's path, failed at this size,
    # and the table's header says so and names the GPU run
    gate = saved["gate"][str(config.seeds[0])]
    self.assertFalse(gate["passed"])
    self.assertIn("--config.model.checkpoint=DIR --config.env.max_turns=50", gate["why"])
    with open(path.replace(".json", ".txt")) as f:
      head = f.read().split("\n")[:3]
    self.assertTrue(head[1].startswith("regime gate (SFT seed 0, 2 'valid_seen' games x 1)"), head)
    self.assertIn("The RL rows would be read in the wrong regime", head[2])


if __name__ == "__main__":
  absltest.main()


@absltest.skipUnless(READY and shutil.which("bwrap"), "needs the household packages (setup.sh) and bubblewrap")
class SandboxedTest(absltest.TestCase):
  """The default config serves household workers from sandboxes reading a cache prepared by the trainer."""

  def test_prepared_games_are_read_from_a_read_only_cache(self):
    from common import env_pool
    from common.envs.household.env import prepare_host
    from planpo import rollouts
    cache = tempfile.mkdtemp(prefix="household_sandbox_")
    self.addCleanup(shutil.rmtree, cache, True)
    c = planpo_household.get_config("")
    self.assertTrue(c.env.sandboxed)
    self.assertEqual(c.env.prepare, "common.envs.household.env:prepare_host")
    c.env.kwargs.cache_dir, c.env.kwargs.max_steps = cache, 200
    c.env.games, c.env.train_tasks, c.env.eval_tasks, c.gate.tasks = ("pick_and_place_simple",), 1, 1, 1
    self.assertEqual(rollouts.task_requests(c), [("train", ["pick_and_place_simple"], 1),
                                                 ("valid_seen", ["pick_and_place_simple"], 1),
                                                 ("valid_unseen", ["pick_and_place_simple"], 1),
                                                 ("valid_seen", ["pick_and_place_simple"], 1)])   # the gate's
    kwargs, ro = prepare_host(rollouts.env_kwargs(c), rollouts.task_requests(c))
    self.assertEqual(ro, (os.path.abspath(cache),))
    self.assertEqual(kwargs["cache_dir"], os.path.abspath(cache))

    def listing():
      return sorted(os.path.relpath(os.path.join(d, f), cache) for d, _, fs in os.walk(cache) for f in fs)

    before = listing()
    self.assertLen([f for f in before if f.endswith("game.tw-pddl")], 3)
    pool = rollouts.make_pool(c, num_workers=1)   # prepare_host again: every game is already cached
    try:
      self.assertIsInstance(pool, env_pool.WorkerPool)
      w = pool.workers[0]
      for split in ("train", "valid_seen", "valid_unseen"):
        tid = w.query("task_ids", split=split, games=["pick_and_place_simple"], limit=1)[0]
        t0 = time.monotonic()
        gold = w.query("gold_actions", task_id=tid)
        self.assertLess(time.monotonic() - t0, 60)
        w.reset(tid, 0)
        for a in gold:
          r = w.step(_act(a))
        self.assertTrue(r.info["won"], tid)
      # a game that was not prepared is generated inside the sandbox, into its private tmpfs, never the cache
      w.query("gold_actions", task_id="train/6")
    finally:
      pool.close()
    self.assertEqual(listing(), before)
    with self.assertRaisesRegex(ValueError, "env.factory"):
      bad = planpo_household.get_config("")
      bad.env.factory = "nomodule"
      rollouts.make_pool(bad)


@absltest.skipUnless(READY, "needs alfworld, textworld, fast-downward-textworld, jericho (setup.sh)")
class LibraryPoolTest(absltest.TestCase):

  def test_games_reuse_one_fast_downward_library(self):
    # PddlEnv loads its own 34 MB copy of libdownward.so and never unloads it; in a sandbox (tmpfs /tmp)
    # the fifth game failed with ENOSPC. A closed game's library is reused by the next one.
    cache = tempfile.mkdtemp(prefix="household_libs_")
    self.addCleanup(shutil.rmtree, cache, True)
    env = make_household_env(cache_dir=cache, max_steps=50)
    self.addCleanup(env.close)

    def copies():
      with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if "libdownward" in line}

    before = copies()
    for tid in env.task_ids("train", games=list(TYPES), limit=3):
      env.reset(tid, 0)
      env.gold_actions(tid)   # generating a game runs the expert: a second game open at once
    extra = copies() - before
    self.assertLessEqual(len(extra), 2, extra)   # 6 games, 12 Game objects: at most 2 new copies
