"""Tests for common/envs/household: offline ALFWorld games, their expert plans, splits, the sandboxed env.

Needs alfworld, textworld[pddl] and jericho (setup.sh); the sandbox test also needs bubblewrap.
"""

import os
import random
import shutil
import tempfile

import pytest
from absl.testing import absltest

try:
  import fast_downward  # noqa: F401
  import jericho  # noqa: F401
  import alfworld  # noqa: F401
  READY = True
except ImportError:
  READY = False

if READY:
  from common.envs.household import engine, generate
  from common.envs.household.env import HouseholdToolEnv

CACHE = tempfile.mkdtemp(prefix="household_test_")


def _act(a):
  return {"name": "action", "arguments": {"action": a}}


@absltest.skipUnless(READY, "needs alfworld, textworld, fast-downward-textworld, jericho (setup.sh)")
class HouseholdGamesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.env = HouseholdToolEnv(cache_dir=CACHE, max_steps=150)   # expert plans can pass 50 steps
    cls.ids = cls.env.task_ids("train", 6)   # one game of each task type

  @classmethod
  def tearDownClass(cls):
    cls.env.close()

  def _replay(self, ids):
    types = set()
    for tid in ids:
      gold = self.env.gold_actions(tid)
      self.assertNotEmpty(gold, msg=tid)
      obs = self.env.reset(tid, 0)
      self.assertTrue(obs.startswith("-= Welcome to TextWorld, ALFRED! =-"), msg=obs)
      self.assertIn("Your task is to: ", obs)
      r = None
      for a in gold:
        self.assertFalse(r is not None and r.done, msg=tid)
        self.assertIn(a, self.env.admissible_actions(), msg=tid)
        r = self.env.step(_act(a))
      self.assertTrue(r.done and r.info["won"], msg=tid)
      self.assertEqual(r.info["score"], 1.0)
      types.add(r.info["task_type"])
    return types

  def test_every_game_is_won_by_its_expert_plan(self):
    self.assertEqual(self._replay(self.ids), set(generate.TASK_TYPES))

  @pytest.mark.slow
  def test_thirty_games_are_won_by_their_expert_plans(self):
    ids = self.env.task_ids("train", 24) + self.env.task_ids("valid_unseen", 6)
    self.assertEqual(self._replay(ids), set(generate.TASK_TYPES))

  def test_random_admissible_policy_wins_few(self):
    wins = n = 0
    for tid in self.ids[::2]:   # 3 games (step cost grows with the room's object count)
      rng = random.Random(f"random/{tid}")
      self.env.reset(tid, 0)
      r = None
      for _ in range(50):
        r = self.env.step(_act(rng.choice(self.env.admissible_actions())))
        if r.done:
          break
      wins += int(r.info["won"])
      n += 1
    print(f"random admissible policy (50 steps): {wins}/{n} won")
    self.assertLessEqual(wins, n // 2)

  def test_nothing_happens_and_invalid_calls(self):
    tid = self.ids[0]
    self.env.reset(tid, 0)
    r = self.env.step(_act("fly to the moon"))
    self.assertEqual((r.observation, r.status, r.done), ("Nothing happens.", "invalid", False))
    self.assertFalse(r.info["admissible"])
    self.assertIn("look", r.info["admissible_actions"])
    r = self.env.step(_act("look"))
    self.assertEqual(r.status, "ok")
    r = self.env.step({"name": "teleport", "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown tool", r.observation)
    self.assertEqual([t["name"] for t in self.env.tools()], ["action"])

  def test_generation_is_deterministic(self):
    room, task_type, seed = generate.task_plan("train", 3, seed=5)
    self.assertEqual((room, task_type, seed), generate.task_plan("train", 3, seed=5))
    a = generate.sample_task(room, task_type, seed)
    b = generate.sample_task(room, task_type, seed)
    self.assertEqual(a, b)
    self.assertIn("(:goal", a["pddl_problem"])

  def test_seen_and_unseen_rooms_are_disjoint(self):
    for kw in ({}, {"unseen_per_type": 2, "split_seed": 3}):
      train = set(generate.split_rooms("train", **kw))
      seen = set(generate.split_rooms("valid_seen", **kw))
      unseen = set(generate.split_rooms("valid_unseen", **kw))
      self.assertEqual(train, seen)
      self.assertEmpty(train & unseen)
      self.assertLen(train | unseen, 120)
    self.assertEqual(sorted(generate.split_rooms("valid_unseen")), [10, 219, 308, 424])
    for i in range(12):
      room, task_type, _ = generate.task_plan("valid_unseen", i)
      self.assertIn(room, generate.ALFRED_UNSEEN_ROOMS)
      self.assertEqual(task_type, generate.TASK_TYPES[i % 6])
      self.assertNotIn(generate.task_plan("train", i)[0], generate.ALFRED_UNSEEN_ROOMS)

  def test_official_layout_is_loaded(self):
    root = tempfile.mkdtemp(prefix="alfworld_official_")
    try:
      for tid in self.ids[:2]:
        folder = os.path.dirname(self.env.task_info(tid)["game_file"])
        dst = os.path.join(root, "json_2.1.1", "valid_seen", *folder.split(os.sep)[-2:])
        shutil.copytree(folder, dst)
      env = HouseholdToolEnv(games_dir=root)
      self.assertEqual(env.task_ids("valid_seen"), ["valid_seen/0", "valid_seen/1"])
      gold = env.gold_actions("valid_seen/0")
      env.reset("valid_seen/0", 0)
      for a in gold:
        r = env.step(_act(a))
      self.assertTrue(r.info["won"])
      with self.assertRaisesRegex(FileNotFoundError, "no train/ folder.*games_dir.*alfworld-download"):
        env.task_ids("train")   # the copy has no train/ split: the error names the key and the layout
      env.close()
    finally:
      shutil.rmtree(root)

  def test_engine_reset_matches_game(self):
    path = self.env.task_info(self.ids[1])["game_file"]
    game = engine.Game(path)
    obs, infos = game.reset()
    self.assertEqual(obs, self.env.reset(self.ids[1], 0))
    self.assertEqual(infos["admissible_commands"], sorted(infos["admissible_commands"]))
    game.close()


@absltest.skipUnless(READY and shutil.which("bwrap"), "needs the household packages and bubblewrap")
class HouseholdSandboxTest(absltest.TestCase):

  def test_one_game_through_the_sandboxed_env_process(self):
    from common.env_client import EnvClient, EnvSpec
    spec = EnvSpec("common.envs.household.env:make_household_env", {"max_steps": 50}, start_timeout_s=120)
    env = EnvClient(spec, step_timeout_s=120)
    try:
      tid = "train/2"
      gold = env.query("gold_actions", task_id=tid)
      obs = env.reset(tid, 0)
      self.assertIn("Your task is to: ", obs)
      for a in gold:
        r = env.step(_act(a))
      self.assertTrue(r.done)
      self.assertTrue(r.info["won"])
      self.assertEqual(r.info["task_type"], generate.TASK_TYPES[2])
    finally:
      env.close()


if __name__ == "__main__":
  absltest.main()
