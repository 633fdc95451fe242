"""The retrieval table end to end on a slice of the real TRAJECT-Bench (configs/phgpo_traject.py:retrieval_smoke):
training-free vote rows, the retrieval policy's warm-up and RL with the gold-seeded bank, the sub-rows, the
primary cell, the task-resampled intervals, accuracy by position, and a typed-query plan."""

import json
import os
import tempfile

from absl.testing import absltest

from configs import phgpo_traject
from phgpo import analysis
from phgpo import train


class RetrievalRunTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    c = phgpo_traject.get_config("retrieval_smoke")
    c.encoder.cache_dir = os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache")
    c.env.sandboxed = False
    c.logging.tensorboard = False
    c.runs = ("nearest", "vote3", "warmup", "grpo", "phgpo_gold")
    cls.config = c
    cls.workdir = tempfile.mkdtemp(prefix="phgpo-retrieval-")
    cls.lines = []
    cls.results = train.run(c, cls.workdir, progress=False, log=cls.lines.append)

  def test_regime_gate_is_printed_before_the_rl_runs(self):
    gates = [i for i, l in enumerate(self.lines) if l.startswith("seed 0: regime gate: warmup MR")]
    self.assertLen(gates, 1)
    self.assertIn(" vs vote3 MR ", self.lines[gates[0]])
    self.assertRegex(self.lines[gates[0]], r": (PASS|FAIL): ")
    table = next(i for i, l in enumerate(self.lines) if "retrieval table" in l)
    self.assertLess(gates[0], table)

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

  def test_bad_gate_is_named(self):
    c = self._config(baseline="vote4")
    with self.assertRaisesRegex(ValueError, "gate.policy and gate.baseline must be run names"):
      train.check_config(c)


if __name__ == "__main__":
  absltest.main()
