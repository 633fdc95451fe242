"""Tests for phgpo/evaluation.py (per-task metrics, nearest-query baseline, tables) and
common/provenance.data_fingerprint, on hand-made problems (no data, no policy)."""

import json
import os
import types

import numpy as np
from absl.testing import absltest

from common import provenance
from phgpo import evaluation
from phgpo.problem import Problem

H = 12
TOOLS = ["a", "b", "c", "d", "e"]


def make_problem(chains, emb, train_idx, eval_idx) -> Problem:
  """A Problem with the given gold chains (lists of tool ids) and query embeddings f32[T, D]."""
  n = len(chains)
  gold = np.full((n, H), -1, np.int32)
  for i, c in enumerate(chains):
    gold[i, :len(c)] = c[:H]
  gold_len = np.array([min(len(c), H) for c in chains], np.int32)
  tasks = [types.SimpleNamespace(task_id=f"D/{i}", query=f"q{i}", calls=()) for i in range(n)]
  return Problem(tasks=tasks, train_idx=np.asarray(train_idx, np.int64), eval_idx=np.asarray(eval_idx, np.int64),
                 tool_specs=[], graph=types.SimpleNamespace(tool_names=TOOLS),
                 query_emb=np.asarray(emb, np.float32), tool_emb=np.zeros((len(TOOLS), 2), np.float32),
                 gold_tools=gold, gold_templates=np.zeros_like(gold), gold_status=np.zeros_like(gold),
                 gold_len=gold_len)


def rollouts(task, preds):
  tools = np.full((len(preds), H), -1, np.int32)
  for i, p in enumerate(preds):
    tools[i, :len(p)] = p
  return types.SimpleNamespace(task=np.asarray(task, np.int64), tools=tools,
                               length=np.array([len(p) for p in preds], np.int32))


def fake_metrics(task_ids, mr, *, gold_len=None, first_success=None):
  """A metrics dict in evaluation's format from per-task match ratios (the other metrics derived)."""
  mr = [float(x) for x in mr]
  gold_len = gold_len or [3] * len(mr)
  per = {"task_id": list(task_ids), "pred": [[] for _ in mr], "gold_len": gold_len, "match_ratio": mr,
         "exact_match": [float(x == 1.0) for x in mr], "lcs": mr, "success": [float(x >= 0.7) for x in mr]}
  out = {k: float(np.mean(per[k])) for k in evaluation.METRICS}
  out["num_tasks"] = len(mr)
  out["per_task"] = per
  out["by_gold_length"], out["by_gold_length_count"] = evaluation.by_gold_length(gold_len, mr)
  if first_success is not None:
    out["first_success"] = first_success
  return out


class SummarizeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    chains = [[0, 1, 2], [0, 1, 2, 3, 4, 0, 1], [1] * 11, [2, 3], [4] * 10]
    self.problem = make_problem(chains, np.eye(5, 3), train_idx=[0, 1], eval_idx=[2, 3, 4])

  def test_per_task_lists_align_and_means_match(self):
    rb = rollouts([3, 2, 4, 0], [[2, 3], [1] * 5, [4] * 7, [0, 2, 2, 9]])
    out = evaluation.summarize_rollouts(rb, self.problem, success_threshold=0.7)
    per = out["per_task"]
    keys = ("task_id", "pred", "gold_len", "match_ratio", "exact_match", "lcs", "success")
    self.assertContainsSubset(keys, per)
    self.assertTrue(all(len(per[k]) == 4 for k in per))
    self.assertEqual(per["task_id"], ["D/3", "D/2", "D/4", "D/0"])
    self.assertEqual(per["pred"], [["c", "d"], ["b"] * 5, ["e"] * 7, ["a", "c", "c", "<invalid tool id 9>"]])
    self.assertEqual(per["gold_len"], [2, 11, 10, 3])
    np.testing.assert_allclose(per["match_ratio"], [1.0, 5 / 11, 0.7, 2 / 3], rtol=1e-6)
    self.assertEqual(per["exact_match"], [1.0, 0.0, 0.0, 0.0])
    self.assertEqual(per["success"], [1.0, 0.0, 1.0, 0.0])  # 7 of 10 reaches the 0.7 threshold
    np.testing.assert_allclose(per["lcs"], [1.0, 5 / 11, 0.7, 2 / 4], rtol=1e-6)
    for k in evaluation.METRICS:
      self.assertAlmostEqual(out[k], float(np.mean(per[k])), places=12)
    self.assertEqual(out["num_tasks"], 4)
    json.dumps(out, allow_nan=False)

  def test_by_gold_length_buckets(self):
    rb = rollouts([3, 2, 4, 0], [[2, 3], [1] * 5, [4] * 7, [0, 2, 2]])
    out = evaluation.summarize_rollouts(rb, self.problem)
    self.assertEqual(out["by_gold_length_count"], {"<=5": 2, "6-10": 1, ">10": 1})
    self.assertAlmostEqual(out["by_gold_length"]["<=5"], (1.0 + 2 / 3) / 2, places=6)
    self.assertAlmostEqual(out["by_gold_length"]["6-10"], 0.7, places=6)
    self.assertAlmostEqual(out["by_gold_length"][">10"], 5 / 11, places=6)
    means, counts = evaluation.by_gold_length([1, 5, 6], [0.2, 0.4, 1.0])
    self.assertAlmostEqual(means["<=5"], 0.3)
    self.assertEqual((means["6-10"], means[">10"]), (1.0, None))
    self.assertEqual(counts, {"<=5": 2, "6-10": 1, ">10": 0})

  def test_empty_batch_is_an_error(self):
    with self.assertRaises(ValueError):
      evaluation.summarize_rollouts(rollouts([], []), self.problem)


class NearestQueryTest(absltest.TestCase):

  def test_copies_the_most_similar_training_chain(self):
    chains = [[0, 1], [2, 3, 4], [1, 1, 1, 1], [0, 1], [2, 3], [4]]
    emb = [[1, 0, 0], [0, 5, 0], [0, 0, 2],  # train rows 0-2 (norms differ: cosine, not dot product)
           [3, 0.1, 0], [0.1, 1, 0.2], [0, 0.3, 0.3]]  # eval rows 3-5; row 5 ties rows 1 and 2
    p = make_problem(chains, emb, train_idx=[2, 0, 1], eval_idx=[3, 4, 5])
    out = evaluation.nearest_query(p)
    per = out["per_task"]
    self.assertEqual(per["task_id"], ["D/3", "D/4", "D/5"])
    self.assertEqual(per["neighbour_task_id"], ["D/0", "D/1", "D/1"])  # tie -> lowest training row
    self.assertEqual(per["pred"], [["a", "b"], ["c", "d", "e"], ["c", "d", "e"]])
    np.testing.assert_allclose(per["neighbour_similarity"][2], np.sqrt(0.5), rtol=1e-6)
    np.testing.assert_allclose(per["match_ratio"], [1.0, 1.0, 0.0])
    self.assertEqual(per["exact_match"], [1.0, 0.0, 0.0])
    self.assertAlmostEqual(out["match_ratio"], 2 / 3, places=6)
    self.assertEqual(out["num_tasks"], 3)
    self.assertEqual(out["by_gold_length_count"], {"<=5": 3, "6-10": 0, ">10": 0})
    self.assertIsNone(out["by_gold_length"]["6-10"])
    json.dumps(out, allow_nan=False)

  def test_a_training_task_is_not_its_own_neighbour(self):
    p = make_problem([[0], [1], [2]], [[1, 0], [1, 0.1], [0, 1]], train_idx=[0, 1, 2], eval_idx=[])
    out = evaluation.nearest_query(p, np.array([0, 2]))
    self.assertEqual(out["per_task"]["neighbour_task_id"], ["D/1", "D/1"])


class TableTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    ids = [f"D/{i}" for i in range(12)]
    glen = [3, 4, 7, 12, 2, 8, 5, 5, 11, 3, 6, 1]
    self.results = {}
    for s in range(3):
      base = rng.uniform(0, 1, size=12)
      self.results[s] = {
          "grpo": fake_metrics(ids, base, gold_len=glen),
          "phgpo": fake_metrics(ids, np.clip(base + 0.1, 0, 1), gold_len=glen,
                                first_success={"median_steps": 20.0 + s, "fraction": 0.8}),
          "nearest": fake_metrics(ids, base * 0.5, gold_len=glen),
      }
      self.results[s]["phgpo"]["policy_only"] = fake_metrics(ids, base, gold_len=glen)
    self.results[1]["rho0"] = fake_metrics(ids[::-1], np.linspace(0, 1, 12), gold_len=glen[::-1])
    self.rows = ("nearest", "warmup", "grpo", "phgpo", "rho0")

  def test_table_has_every_row_and_is_deterministic(self):
    kw = dict(reference="grpo", title="Held-out test", resamples=500)
    t1 = evaluation.format_table(self.results, self.rows, **kw)
    t2 = evaluation.format_table(self.results, self.rows, **kw)
    self.assertEqual(t1, t2)
    for name in ("nearest training query (no training)", "GRPO + curriculum (beta = 0)", "PhGPO",
                 "PhGPO, no pheromone at test", "PhGPO, rho = 0", "reference", "Held-out test", "21 (80%)"):
      self.assertIn(name, t1)
    self.assertNotIn("warm-up only", t1)  # present in no seed
    lines = t1.splitlines()
    body = [l for l in lines if l.startswith(("nearest", "GRPO", "PhGPO", "  PhGPO"))]
    self.assertLen(body, 5)
    self.assertIn(" - ", body[0] + " ")   # no first_success: '-'
    self.assertIn("reference", [l for l in body if l.startswith("GRPO")][0])
    # Aligned: the header and every row end at the same column (the last column is right-aligned).
    self.assertLen({len(l) for l in [lines[3]] + body}, 1)
    self.assertNotIn("nan", t1.lower())

  def test_paired_differences(self):
    js = evaluation.paired_table_json(self.results, self.rows, reference="grpo", resamples=500)
    json.dumps(js, allow_nan=False)
    rows = {r["row"]: r for r in js["rows"]}
    self.assertEqual(list(rows), ["nearest", "grpo", "phgpo", "phgpo/policy_only", "rho0"])
    # The reference against itself, and policy_only (equal per-task values): exactly 0 with interval (0, 0).
    for name in ("grpo", "phgpo/policy_only"):
      d = rows[name]["diff_vs_reference"]
      self.assertEqual((d["mean"], d["low"], d["high"], d["n"]), (0.0, 0.0, 0.0, 36))
    self.assertTrue(rows["grpo"]["is_reference"])
    d = rows["phgpo"]["diff_vs_reference"]
    self.assertBetween(d["mean"], 0.0, 0.1 + 1e-9)
    self.assertLessEqual(d["low"], d["mean"])
    self.assertGreaterEqual(d["high"], d["mean"])
    # rho0 exists in seed 1 only, with its tasks in another order: paired by task id within that seed.
    d = rows["rho0"]["diff_vs_reference"]
    self.assertEqual((d["n"], d["seeds"]), (12, [1]))
    ref = dict(zip(self.results[1]["grpo"]["per_task"]["task_id"], self.results[1]["grpo"]["per_task"]["match_ratio"]))
    r = self.results[1]["rho0"]["per_task"]
    want = np.mean([v - ref[t] for t, v in zip(r["task_id"], r["match_ratio"])])
    self.assertAlmostEqual(d["mean"], want, places=12)
    self.assertEqual(rows["rho0"]["seeds"], [1])
    # Per-row means: over seeds; the interval over the 36 (seed, task) units brackets it.
    m = rows["phgpo"]["metrics"]["match_ratio"]
    self.assertAlmostEqual(m["mean"], np.mean([self.results[s]["phgpo"]["match_ratio"] for s in range(3)]))
    self.assertEqual(m["n"], 36)
    self.assertLess(m["low"], m["mean"])
    self.assertGreater(m["high"], m["mean"])
    self.assertEqual(rows["phgpo"]["first_success"]["median_steps"], 21.0)
    self.assertIsNone(rows["grpo"]["first_success"])

  def test_seed_keys_from_json_and_missing_reference(self):
    back = json.loads(json.dumps({str(s): r for s, r in self.results.items()}))
    js = evaluation.paired_table_json(back, self.rows, reference="grpo", resamples=500)
    self.assertEqual(js, evaluation.paired_table_json(self.results, self.rows, reference="grpo", resamples=500))
    t = evaluation.format_table(self.results, ["phgpo"], reference="frozen", title="x", resamples=200)
    self.assertIn("n/a", t)
    t = evaluation.format_table(self.results, ["grpo", "phgpo"])  # the old call: no reference column
    self.assertNotIn("reference", t)


class DataFingerprintTest(absltest.TestCase):

  def test_changes_only_when_the_data_changes(self):
    d = self.create_tempdir().full_path
    os.makedirs(os.path.join(d, "data", "sub"))
    for rel, text in (("data/a.json", "1"), ("data/sub/b.json", "2"), ("extra.txt", "3")):
      with open(os.path.join(d, rel), "w") as f:
        f.write(text)
    paths = [os.path.join(d, "data"), os.path.join(d, "extra.txt")]
    fp = provenance.data_fingerprint(paths)
    self.assertRegex(fp, r"^[0-9a-f]{64}$")
    self.assertEqual(fp, provenance.data_fingerprint(paths))
    self.assertEqual(fp, provenance.data_fingerprint(paths[::-1]))
    with open(os.path.join(d, "data", "sub", "b.json"), "w") as f:
      f.write("2!")
    self.assertNotEqual(fp, provenance.data_fingerprint(paths))
    with open(os.path.join(d, "data", "sub", "b.json"), "w") as f:
      f.write("2")
    self.assertEqual(fp, provenance.data_fingerprint(paths))
    os.rename(os.path.join(d, "data", "sub", "b.json"), os.path.join(d, "data", "sub", "c.json"))
    self.assertNotEqual(fp, provenance.data_fingerprint(paths))
    with self.assertRaises(FileNotFoundError):
      provenance.data_fingerprint([os.path.join(d, "missing")])


if __name__ == "__main__":
  absltest.main()
