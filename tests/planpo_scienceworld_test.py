"""Tests of ScienceWorld's PlanPO contract (common/envs/scienceworld_env.py) and configs/planpo_scienceworld.py.

The contract planpo/rollouts.py, planpo/data.py and common/windowed.py read: queries task_ids(split, games,
limit), task_type, gold_actions, admissible_actions, episode_info; step info won / reward / step_reward
(/ admissible_actions with include_valid_actions). The contract tests run one in-process ScienceWorld JVM
(~20 s on the loaded 2-core machine); the end-to-end smoke run of planpo.train is `slow` (~100 s).
Needs a Java runtime (Debian: default-jre-headless); tests/scienceworld_test.py covers the sandboxed worker.
"""

import json
import os
import shutil
import tempfile
import time

import pytest
from absl.testing import absltest

from configs import planpo_base
from configs import planpo_scienceworld

try:
  import scienceworld  # noqa: F401
  READY = shutil.which("java") is not None
except ImportError:
  READY = False

CONTRACT_QUERIES = ("task_ids", "gold_actions", "admissible_actions", "task_type", "episode_info")


def _act(a):
  return {"name": "action", "arguments": {"action": a}}


class ConfigTest(absltest.TestCase):

  def test_variants(self):
    for arg in ("", "ablation", "smoke", "smoke,ablation", "ablation,smoke"):
      c = planpo_scienceworld.get_config(arg)
      self.assertEqual(c.env.factory, "common.envs.scienceworld_env:ScienceWorldToolEnv")
      self.assertEqual(dict(c.env.eval_splits), {"dev": "dev", "test": "test"})
      self.assertEqual(c.env.train_split, "train")
      self.assertEqual(tuple(c.sft.harmless_actions), ("look around", "inventory"))
      self.assertFalse(c.sft.move_detours)
      self.assertIn("ScienceWorld", c.rollout.window.header)
      self.assertEqual(c.rollout.window.max_admissible_actions, 0)
      self.assertFalse(c.env.kwargs.include_valid_actions)
      self.assertGreaterEqual(c.env.kwargs.env_step_limit, c.env.max_turns)
      self.assertTrue(set(c.env.games) <= set(planpo_scienceworld.GAMES))
      self.assertEqual(c.planpo.alpha_decay_steps, 0)   # 0: rl.steps
      # published ScienceWorld settings
      self.assertEqual((c.planpo.alpha_init, c.planpo.alpha_final, c.planpo.kl_coef), (0.05, 0.025, 1e-3))
    self.assertEqual(planpo_scienceworld.get_config("").env.max_turns, 20)
    self.assertTrue(planpo_scienceworld.get_config("").env.sandboxed)
    self.assertEqual(tuple(planpo_scienceworld.get_config("").runs), planpo_base.MAIN_RUNS)
    self.assertEqual(tuple(planpo_scienceworld.get_config("ablation").runs), planpo_base.ABLATION_RUNS)
    self.assertEqual(tuple(planpo_scienceworld.get_config("smoke").seeds), (0,))
    with self.assertRaisesRegex(ValueError, "valid:"):
      planpo_scienceworld.get_config("nope")

  def test_trainer_accepts_config(self):
    from planpo import train
    for arg in ("", "ablation", "smoke"):
      train.check_config(planpo_scienceworld.get_config(arg))


@absltest.skipUnless(READY, "needs java and the scienceworld wheel: apt-get install -y default-jre-headless")
class ContractTest(absltest.TestCase):
  """The queries and step info the PlanPO trainer reads, on one in-process ScienceWorld env."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from common.envs.scienceworld_env import ScienceWorldToolEnv
    cls.cls = ScienceWorldToolEnv
    cls.env = ScienceWorldToolEnv(env_step_limit=40, jvm_heap_mb=512)

  @classmethod
  def tearDownClass(cls):
    cls.env.close()
    super().tearDownClass()

  def test_query_methods_listed(self):
    for q in CONTRACT_QUERIES:
      self.assertIn(q, self.cls.QUERY_METHODS)
      self.assertTrue(callable(getattr(self.env, q)))

  def test_task_ids_games_and_limit(self):
    games = ["find-animal", "find-non-living-thing"]
    ids = self.env.task_ids(split="train", games=games, limit=3)
    self.assertLen(ids, 6)
    for g, chunk in zip(games, (ids[:3], ids[3:])):   # the first `limit` per game, game by game
      self.assertEqual(chunk, [f"{g}/{v}" for v in self.env.variations(g, "train")[:3]])
    dev = self.env.task_ids(split="dev", games=games, limit=2)
    test = self.env.task_ids(split="test", games=games, limit=2)
    self.assertLen(dev, 4)
    self.assertEmpty(set(ids) & set(dev) | set(ids) & set(test) | set(dev) & set(test))
    self.assertEqual(self.env.task_ids(split="dev", games=["find-animal"]),
                     [f"find-animal/{v}" for v in self.env.variations("find-animal", "dev")])
    self.assertEqual(self.env.task_ids(split="dev", tasks=["find-animal"], limit=2), dev[:2])   # older name
    self.assertEqual(self.env.task_ids(split="train", games=["4-1"], limit=1),   # a task number is accepted
                     self.env.task_ids(split="train", games=[self.env._name("4-1")], limit=1))
    self.assertEqual(self.env.task_ids(split="train", games=games, limit=0), [])
    everything = self.env.task_ids(split="test", games=None, limit=1)   # None: all 30 tasks
    self.assertLen(everything, 30)
    with self.assertRaisesRegex(ValueError, "not both"):
      self.env.task_ids(split="train", games=games, tasks=games)
    with self.assertRaisesRegex(ValueError, "unknown ScienceWorld task"):
      self.env.task_ids(split="train", games=["find-unicorn"])
    with self.assertRaisesRegex(ValueError, "split"):
      self.env.task_ids(split="valid", games=games)

  def test_task_type(self):
    self.assertEqual(self.env.task_type(task_id="find-animal/3"), "find-animal")
    self.assertEqual(self.env.task_type(task_id="find-plant/151"), "find-plant")
    with self.assertRaises(ValueError):
      self.env.task_type(task_id="find-plant")
    with self.assertRaises(ValueError):
      self.env.task_type(task_id="find-plant/100000")

  def test_gold_actions_win_with_won_and_reward(self):
    for task in ("find-non-living-thing", "find-animal"):
      tid = self.env.task_ids(split="train", games=[task], limit=1)[0]
      gold = self.env.gold_actions(task_id=tid)
      self.assertGreater(len(gold), 2)
      obs = self.env.reset(tid, 0)
      self.assertTrue(obs.startswith("Your task is to"), obs[:80])
      info = self.env.episode_info()
      self.assertEqual(set(info), {"instruction", "observation", "admissible_actions"})
      self.assertTrue(info["instruction"].startswith("Your task is to"))
      self.assertNotIn("Task Description", info["instruction"])
      self.assertIn("This ", info["observation"])
      self.assertIsNone(info["admissible_actions"])   # include_valid_actions False
      total, r = 0.0, None
      for i, a in enumerate(gold):
        r = self.env.step(_act(a))
        self.assertEqual(r.status, "ok", (a, r.observation))
        total += r.info["step_reward"]
        self.assertEqual(r.done, i == len(gold) - 1)
        self.assertEqual(r.info["won"], r.done)
        self.assertTrue(0.0 <= r.info["reward"] <= 1.0)
        self.assertNotIn("admissible_actions", r.info)
      self.assertTrue(r.info["won"])
      self.assertFalse(r.info["lost"])
      self.assertEqual(r.info["reward"], 1.0)
      self.assertAlmostEqual(total, 1.0)   # the step rewards add up to the outcome

  def test_admissible_actions_hold_the_harmless_detours(self):
    c = planpo_scienceworld.get_config("")
    tid = self.env.task_ids(split="train", games=list(c.env.games[:1]), limit=1)[0]
    self.env.reset(tid, 0)
    acts = self.env.admissible_actions()
    self.assertGreater(len(acts), 50)   # hundreds to thousands: why the window lists none
    for a in c.sft.harmless_actions:
      self.assertIn(a, acts)
      r = self.env.step(_act(a))   # valid, and it does not score
      self.assertEqual(r.status, "ok")
      self.assertEqual(r.info["step_reward"], 0.0)
    r = self.env.step(_act("fly to the moon"))
    self.assertEqual(r.status, "invalid")
    self.assertFalse(r.done)

  def test_include_valid_actions_lists_them_in_step_info(self):
    tid = self.env.task_ids(split="train", games=["find-plant"], limit=1)[0]
    self.env.include_valid_actions = True
    try:
      self.env.reset(tid, 0)
      info = self.env.episode_info()
      self.assertIn("look around", info["admissible_actions"])
      r = self.env.step(_act("look around"))
      self.assertEqual(r.info["admissible_actions"], self.env.admissible_actions())
    finally:
      self.env.include_valid_actions = False

  def test_config_gold_sequences_fit_the_turn_limit(self):
    """The first train variations of each config task: gold + the SFT detours fit in env.max_turns."""
    for arg in ("", "smoke"):
      c = planpo_scienceworld.get_config(arg)
      for tid in self.env.task_ids(split="train", games=list(c.env.games), limit=2):
        n = len(self.env.gold_actions(task_id=tid))
        self.assertLessEqual(n + c.sft.max_detours, c.env.max_turns, (arg, tid, n))


@pytest.mark.slow   # ~100 s on the loaded 2-core machine (JIT compiles of 5 runs dominate)
@absltest.skipUnless(READY, "needs java and the scienceworld wheel")
class SmokeTest(absltest.TestCase):
  """planpo.train.run on the ScienceWorld smoke config: every run and held-out split lands in results.json."""

  def test_end_to_end(self):
    from planpo import train
    root = tempfile.mkdtemp(prefix="planpo_sw_smoke_")
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    config = planpo_scienceworld.get_config("smoke")
    config.model.cache_dir = os.path.join(root, "ckpt")
    t0 = time.monotonic()
    results = train.run(config, os.path.join(root, "run"))
    print(f"scienceworld smoke run: {time.monotonic() - t0:.1f} s")
    self.assertIsNotNone(results)
    tag = str(config.get("table", "main"))   # planpo.train writes results_<table>.json
    with open(os.path.join(root, "run", f"results_{tag}.json")) as f:
      saved = json.load(f)
    self.assertEqual(set(saved["runs"]), set(config.runs))
    for run in config.runs:
      for seed in config.seeds:
        evals = saved["runs"][run][str(seed)]
        self.assertEqual(set(evals), set(config.env.eval_splits), run)
        for label, e in evals.items():
          self.assertLen(e["episodes"], config.env.eval_tasks * len(config.env.games) * config.rl.eval_samples,
                         (run, label))
          for ep in e["episodes"]:
            self.assertTrue(0.0 <= ep["score"] <= 1.0, ep)   # info['reward'], not the 0-100 score
            self.assertLessEqual(ep["turns"], config.env.max_turns)
          self.assertIn("success", e["metrics"])
    self.assertEqual(set(saved["task_types"].values()), set(config.env.games))
    self.assertGreater(saved["sft_data"][str(config.seeds[0])]["sft/episodes"], 0)   # the gold replays fit


if __name__ == "__main__":
  absltest.main()
