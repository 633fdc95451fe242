"""ProgAgent's few-shot evaluation (C1, configs/progagent.py:paradigms_fewshot): the one-shot demonstration in
each harness's format, the rows that must score 0, the overflow column, and the config's checks."""

import json
import os
import tempfile

from absl.testing import absltest
import pytest

from configs import progagent as progagent_config
from progagent import evaluation
from progagent import train


class FewshotConfigTest(absltest.TestCase):

  @pytest.mark.fast
  def test_shipped_config_and_bad_keys(self):
    c = progagent_config.get_config("paradigms_fewshot")
    train.check_config(c)
    self.assertEqual(c.model.checkpoint, "gguf:smollm2")
    self.assertNotIn(c.fewshot.task, c.tasks)
    self.assertIn(c.fewshot.seed, train.training_seeds(c))   # the demonstration's instance is never evaluated
    for key, value, msg in (("task", "retail/nosuch", "fewshot.task"), ("task", c.tasks[0], "one of the evaluated"),
                            ("level", 7, "fewshot.level")):
      bad = progagent_config.get_config("paradigms_fewshot")
      bad.fewshot[key] = value
      with self.assertRaisesRegex(ValueError, msg):
        train.check_config(bad)
    bad = progagent_config.get_config("paradigms_fewshot")
    bad.eval.seeds = (0, 1000)
    with self.assertRaisesRegex(ValueError, "training seeds"):
      train.check_config(bad)

  @pytest.mark.fast
  def test_token_budget_gives_the_same_tokens_to_long_and_short_episodes(self):
    self.assertEqual(train.sft_steps_for_budget(100_000, [2500] * 40, 4), 10)   # DTC-like rows
    self.assertEqual(train.sft_steps_for_budget(100_000, [1000] * 40, 4), 25)   # PTC-like rows
    self.assertEqual(train.sft_steps_for_budget(10, [1000] * 3, 4), 1)
    with self.assertRaisesRegex(ValueError, "token_budget"):
      train.sft_steps_for_budget(0, [10], 1)
    c = progagent_config.get_config("paradigms")
    c.sft.token_budget = -5
    with self.assertRaisesRegex(ValueError, "sft.token_budget"):
      train.check_config(c)

  def test_demonstration_is_the_oracle_episode_in_each_harness(self):
    c = progagent_config.get_config("paradigms_fewshot")
    with tempfile.TemporaryDirectory() as cache:
      dtc = evaluation.demonstration(c, "dtc", cache_dir=cache)
      ptc = evaluation.demonstration(c, "ptc", cache_dir=cache)
    for demo in (dtc, ptc):
      self.assertEqual(demo[0]["role"], "user")
      self.assertIn("Morland", demo[0]["content"])
      self.assertNotIn("system", [m["role"] for m in demo])
    dtc_calls = [c["function"]["name"] for m in dtc if m["role"] == "assistant" for c in m["tool_calls"]]
    ptc_calls = [c["function"]["name"] for m in ptc if m["role"] == "assistant" for c in m["tool_calls"]]
    self.assertEqual(dtc_calls[-1], "submit_answer")
    self.assertGreaterEqual(len(dtc_calls), 2)
    self.assertEqual(set(ptc_calls), {"programmatic_tool_call"})
    c.fewshot.task = ""
    self.assertEqual(evaluation.demonstration(c, "dtc"), [])

  def test_zero_rows_score_zero(self):
    with tempfile.TemporaryDirectory() as cache:
      rows = evaluation.zero_rows(["insurance/auto_premiums_july", "devops/oldest_open_bug"], [0, 1], [1000, 1001],
                                  cache_dir=cache)
    self.assertEqual(set(rows), {"no call", "seed-0 answer"})
    for res in rows.values():
      self.assertEqual({lvl: r["pass@1"] for lvl, r in res.items()}, {0: 0.0, 1: 0.0})
      self.assertEqual({r["units"] for r in res.values()}, {4})
    self.assertIn("seed-0 answer", evaluation.format_zero_rows(rows, [0, 1]))


def _tiny(c):
  """A smoke config with a tiny random policy in place of SmolLM2, one task, short replies."""
  c.model.checkpoint = "tiny:qwen2"
  c.model.tiny_sizes = progagent_config.tiny_sizes(32, 1)
  c.model.tiny_vocab = 1024
  c.env.max_context_tokens = 4096
  c.lengths.buckets = (2048, 4096)
  c.env.max_response_tokens = 16
  c.env.max_turns = 2
  c.tasks = c.tasks[:1]
  return c


class FewshotRunTest(absltest.TestCase):

  def test_tiny_policy_end_to_end(self):
    # The C1 pipeline with a tiny random policy in place of SmolLM2 (the real run: `python -m experiments.train
    # --config=configs/progagent.py:paradigms_fewshot --workdir=...`): both harnesses, the demonstration in every
    # first prompt, the zero rows and the overflow column in the table.
    c = _tiny(progagent_config.get_config("paradigms_fewshot_smoke"))
    c.eval.levels = (0,)
    with tempfile.TemporaryDirectory() as d:
      res = train.run(c, d)
      text = open(os.path.join(d, "results_paradigms.txt")).read()
      self.assertIn("few-shot, no training", text)
      self.assertIn("overflow%", text)
      self.assertIn("seed-0 answer", text)
      self.assertEqual(set(res["paradigms"]), {"dtc", "ptc"})
      for mode in ("dtc", "ptc"):
        self.assertFalse(os.path.exists(os.path.join(d, mode, "sft", "metrics.jsonl")))   # no training
        rows = [json.loads(l) for l in open(os.path.join(d, mode, "eval", "episodes.jsonl"))]
        self.assertLen(rows, 2)   # 1 task x 1 level x 1 seed x 2 samples
      saved = json.load(open(os.path.join(d, "results_paradigms.json")))
      self.assertEqual(saved["zero_rows"]["no call"]["0"]["pass@1"], 0.0)

  def test_reading_gate_stops_a_dtc_arm_that_cannot_read(self):
    # C2's gate with a tiny random policy (the real run: configs/progagent.py:paradigms_read on SmolLM2): after SFT
    # the DTC arm passes nothing at v0, so the run stops before GSPO and before PTC is trained.
    from common.lm import stages   # pylint: disable=import-outside-toplevel
    c = _tiny(progagent_config.get_config("paradigms_read_smoke"))
    c.sft.max_tokens = 4096
    c.sft.token_budget = 3000
    train.check_config(c)
    with tempfile.TemporaryDirectory() as d:
      with self.assertRaisesRegex(stages.RegimeGateFailed, "DTC did not learn to read"):
        train.run(c, d)
      gate = json.load(open(os.path.join(d, "dtc", "read_gate.json")))
      self.assertFalse(gate["passed"])
      self.assertEqual(gate["units"], 1)
      self.assertTrue(os.path.exists(os.path.join(d, "dtc", "sft", "metrics.jsonl")))   # SFT ran, on its budget
      self.assertFalse(os.path.exists(os.path.join(d, "dtc", "gspo", "metrics.jsonl")))
      self.assertFalse(os.path.exists(os.path.join(d, "ptc")))
      # a rerun reads the saved gate (same settings) instead of evaluating again; a passing one lets the run go on
      gate["pass@1"] = 1.0
      with open(os.path.join(d, "dtc", "read_gate.json"), "w") as f:
        json.dump(gate, f)
      c.mode = "dtc"
      res = train.read_gate(c, None, None, list(c.tasks), os.path.join(d, "dtc"))
      self.assertTrue(res["passed"])
      self.assertIn("PASS", res["line"])

  @pytest.mark.fast
  def test_reading_gate_seeds_are_held_out(self):
    c = progagent_config.get_config("paradigms_read")
    for seeds in ((5,), (1000,), (100,)):   # an SFT seed, an eval seed, a GSPO seed
      c.paradigms.read_gate.seeds = seeds
      with self.assertRaisesRegex(ValueError, "read_gate.seeds"):
        train.check_config(c)


if __name__ == "__main__":
  absltest.main()
