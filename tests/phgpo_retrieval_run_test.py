"""The retrieval table end to end on a slice of the real TRAJECT-Bench (configs/phgpo_traject.py:retrieval_smoke):
training-free vote rows, the retrieval policy's warm-up and RL with the gold-seeded bank, the sub-rows, the
primary cell, the task-resampled intervals, accuracy by position, and a typed-query plan."""

import json
import os
import tempfile

import numpy as np

from absl.testing import absltest

from configs import phgpo_traject
from phgpo import analysis
from phgpo import train
from phgpo import warmup


class RetrievalRunTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    c = phgpo_traject.get_config("retrieval_smoke")
    c.encoder.cache_dir = os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache")
    c.env.sandboxed = False
    c.logging.tensorboard = False
    c.runs = ("nearest", "vote3", "warmup", "grpo", "phgpo_gold")
    # One split in CI (the run is the suite's longest setup); the chain split's leave-chain-out masks are
    # checked in phgpo_retrieval_policy_test and the warm-up's group-wise validation slice in RegimeGateTest.
    c.splits = ("random",)
    cls.config = c
    cls.workdir = tempfile.mkdtemp(prefix="phgpo-retrieval-")
    cls.lines = []
    cls.results = train.run(c, cls.workdir, progress=False, log=cls.lines.append)

  def test_regime_gate_is_printed_before_the_rl_runs(self):
    gates = [i for i, l in enumerate(self.lines) if l.startswith("seed 0: regime gate: warmup MR")]
    self.assertLen(gates, len(self.config.splits))       # one per split, after the split's data line
    for split, i in zip(self.config.splits, gates):
      self.assertStartsWith(self.lines[i - 1], f"TRAJECT-Bench, {split} split:")
      self.assertIn(" vs vote3 MR ", self.lines[i])
      self.assertRegex(self.lines[i], r": (PASS|FAIL): ")
    table = next(i for i, l in enumerate(self.lines) if "retrieval table" in l)
    self.assertLess(gates[-1], table)

  def test_table_rows_sub_rows_and_primary(self):
    by_run = self.results["random"][0]
    self.assertEqual(set(by_run), set(self.config.runs))
    self.assertIn("test_pheromone", by_run["grpo"])          # GRPO decoded with the pheromone at test only
    self.assertIn("policy_only", by_run["phgpo_gold"])
    name = "results_retrieval_" + "-".join(self.config.runs)
    text = open(os.path.join(self.workdir, name + ".txt")).read()
    for row in ("3-neighbour position vote (no training)", "GRPO + curriculum (beta = 0), pheromone at test only",
                "PhGPO, bank seeded from gold", "PhGPO, bank seeded from gold, no pheromone at test",
                "primary cell (named in the config before the run): d match ratio",
                "MR, tasks resampled", "accuracy by position"):
      self.assertIn(row, text)
    saved = json.load(open(os.path.join(self.workdir, name + ".json")))
    rows = {r["row"]: r for r in saved["tables"]["random"]["rows"]}
    vote = rows["vote3"]["metrics"]["match_ratio"]
    # one seed: the task-resampled interval is the (seed, task) one
    self.assertAlmostEqual(vote["task_low"], vote["low"], places=9)
    self.assertEqual(vote["n_tasks"], vote["n"])
    d = rows["phgpo_gold"]["diff_vs_reference"]
    self.assertEqual(d["n_tasks"], d["n"])
    self.assertLen(rows["warmup"]["by_position"], self.config.env.max_steps)

  def test_warmup_hands_rl_the_best_validation_state(self):
    wdir = os.path.join(self.workdir, "random", "seed_0", "warmup")
    val = json.load(open(os.path.join(wdir, "validation.json")))
    scores = {int(s): v for s, v in val["match_ratio"].items()}
    self.assertEqual(sorted(scores), [0, 3, 6])          # step 0, every warmup.eval_every = 3, the last
    best = max(sorted(scores), key=scores.get)           # ties: the earliest step
    self.assertEqual(val["best_step"], best)
    self.assertEqual(os.listdir(os.path.join(wdir, "best")), [str(best)])
    self.assertGreater(val["tasks"], 0)
    rows = [json.loads(l) for l in open(os.path.join(wdir, "metrics.jsonl"))]
    logged = {r["step"]: r["warmup/validation_match_ratio"] for r in rows if "warmup/validation_match_ratio" in r}
    self.assertEqual(logged, {s: v for s, v in scores.items() if s > 0})

  def test_plan_for_a_typed_query_with_and_without_the_pheromone(self):
    view = analysis.load_run(self.workdir, run="phgpo_gold", seed=0, split="random")
    query = "Find hotels near the city centre for three nights, then show the reviews of the best-rated one."
    names = set(view.tool_names)
    for kw in ({}, dict(beta=0.0, w=0.0)):
      plan = analysis.plan(view, query, max_steps=3, **kw)
      self.assertLen(plan, 3)
      self.assertTrue(set(plan) <= names)


class RegimeGateTest(absltest.TestCase):

  def _config(self, **gate):
    c = phgpo_traject.get_config("retrieval")
    c.gate.update(gate)
    return c

  def test_pass_fail_and_tolerance(self):
    res = {"warmup": {"match_ratio": 0.8808, "exact_match": 0.7575},
           "vote3": {"match_ratio": 0.8845, "exact_match": 0.7485}}
    line = train.regime_gate(self._config(), res)
    self.assertIn("warmup MR 88.08 (exact 75.75) vs vote3 MR 88.45 (exact 74.85): -0.37 points", line)
    self.assertIn("FAIL: the policy is below retrieval", line)
    self.assertIn("PASS", train.regime_gate(self._config(tolerance=0.5), res))
    self.assertIsNone(train.regime_gate(self._config(policy=""), res))
    self.assertIsNone(train.regime_gate(self._config(), {"vote3": res["vote3"]}))

  def test_validation_split_is_disjoint_seeded_and_checked(self):
    train_idx = np.arange(100, 160)
    fit, val = warmup.validation_split(train_idx, 0.1, seed=0)
    self.assertLen(val, 6)
    self.assertEqual(sorted(np.concatenate([fit, val]).tolist()), train_idx.tolist())
    np.testing.assert_array_equal(val, np.sort(val))
    np.testing.assert_array_equal(val, warmup.validation_split(train_idx, 0.1, seed=0)[1])
    self.assertFalse(np.array_equal(val, warmup.validation_split(train_idx, 0.1, seed=1)[1]))
    groups = np.repeat(np.arange(80), 3)[:200]          # chains of three tasks (the chain split's groups)
    fit, val = warmup.validation_split(train_idx, 0.1, seed=0, groups=groups)
    self.assertGreaterEqual(len(val), 6)
    self.assertFalse(set(groups[fit]) & set(groups[val]))   # whole chains: none is on both sides
    with self.assertRaisesRegex(ValueError, "validation_fraction in \\(0, 1\\)"):
      warmup.validation_split(train_idx, 1.0, seed=0)
    for key, value in (("select", "best"), ("validation_fraction", 0.0), ("eval_every", 0)):
      c = self._config()
      c.warmup[key] = value
      with self.assertRaisesRegex(ValueError, f"warmup.{key}"):
        train.check_config(c)

  def test_bad_gate_is_named(self):
    c = self._config(baseline="vote4")
    with self.assertRaisesRegex(ValueError, "gate.policy and gate.baseline must be run names"):
      train.check_config(c)


if __name__ == "__main__":
  absltest.main()
