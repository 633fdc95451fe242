"""ProgAgent's few-shot evaluation (C1, configs/progagent.py:paradigms_fewshot): the one-shot demonstration in
each harness's format, the rows that must score 0, the overflow and cut columns, the config's checks, and the
error-recovery table's arms (configs/progagent.py:errors_fewshot: error normalisation off and on)."""

import io as io_lib
import json
import os
import shutil
import tempfile
from unittest import mock

import numpy as np
from absl.testing import absltest
import pytest

from common import io
from common import trajectory as traj_lib
from configs import progagent as progagent_config
from progagent import evaluation
from progagent import tasks as tasks_lib
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

  @pytest.mark.fast
  def test_eval_loss_rows(self):
    sizes = [500, 4000, 100, 8000, 2500, 300]
    self.assertEqual(train.eval_loss_rows(sizes, 0, seed=0), [2, 5, 0, 4, 1, 3])    # all, shortest first
    self.assertEqual(train.eval_loss_rows(sizes, 10, seed=0), [2, 5, 0, 4, 1, 3])
    some = train.eval_loss_rows(sizes, 3, seed=0)
    self.assertLen(set(some), 3)
    self.assertEqual(some, sorted(some, key=lambda r: sizes[r]))
    self.assertEqual(some, train.eval_loss_rows(sizes, 3, seed=0))   # drawn once, the same on a rerun
    with self.assertRaisesRegex(ValueError, "sft.eval_rows"):
      train.eval_loss_rows(sizes, -1, seed=0)
    c = progagent_config.get_config("paradigms_read")
    self.assertEqual(c.sft.eval_rows, 16)
    c.sft.eval_rows = -1
    with self.assertRaisesRegex(ValueError, "sft.eval_rows"):
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


class ErrorRecoveryTest(absltest.TestCase):

  @pytest.mark.fast
  def test_errors_config_runs_each_harness_with_normalisation_off_and_on(self):
    c = progagent_config.get_config("errors_fewshot")
    train.check_config(c)
    ids = tasks_lib.select_tasks(tuple(c.tasks))
    self.assertLen(ids, 27)
    self.assertTrue(all("errors" in tasks_lib.get_task(t).tags for t in ids))
    self.assertEqual(train.paradigm_arms(c), {"dtc": ("dtc", False, "dtc"), "dtc+norm": ("dtc", True, "dtc_norm"),
                                              "ptc": ("ptc", False, "ptc"), "ptc+norm": ("ptc", True, "ptc_norm")})
    plain = progagent_config.get_config("paradigms_fewshot")
    plain.env.normalize_errors = True
    self.assertEqual(train.paradigm_arms(plain), {"dtc": ("dtc", True, "dtc"), "ptc": ("ptc", True, "ptc")})
    for bad in ((True, True), (0, 1), ("on",)):
      c.paradigms.normalize_errors = bad
      with self.assertRaisesRegex(ValueError, "paradigms.normalize_errors"):
        train.check_config(c)
    c = progagent_config.get_config("errors_fewshot")
    c.paradigms.modes = ()
    with self.assertRaisesRegex(ValueError, "paradigms.modes"):
      train.check_config(c)
    with self.assertRaisesRegex(KeyError, "unknown tag 'error'"):
      tasks_lib.select_tasks("tag:error")

  @pytest.mark.fast
  def test_on_minus_off_is_paired_by_instance(self):
    c = progagent_config.get_config("errors_fewshot")
    c.stats.resamples = 200
    arms = train.paradigm_arms(c)
    # dtc: on wins task a on both seeds where off wins it on one; task b lost by both. ptc: only the off arm ran.
    wins = {"dtc": {("a", 1000): 1, ("a", 1001): 0, ("b", 1000): 0, ("b", 1001): 0},
            "dtc_norm": {("a", 1000): 1, ("a", 1001): 1, ("b", 1000): 0, ("b", 1001): 0},
            "ptc": {("a", 1000): 1}}
    with tempfile.TemporaryDirectory() as d:
      for sub, rows in wins.items():
        os.makedirs(os.path.join(d, sub, "eval"))
        io.write_jsonl(os.path.join(d, sub, "eval", "episodes.jsonl"),
                       [{"task_id": t, "level": 0, "seed": s, "sample": k, "reward": float(w)}
                        for (t, s), w in rows.items() for k in range(2)])
      diff = train.normalisation_differences(c, d, arms)
    self.assertEqual(set(diff), {"dtc"})
    r = diff["dtc"][0]
    self.assertAlmostEqual(r["off"], 0.25)
    self.assertAlmostEqual(r["on"], 0.5)
    self.assertAlmostEqual(r["mean"], 0.25)   # task a +0.5, task b 0: the mean over tasks
    self.assertEqual(r["tasks"], 2)
    text = train.format_normalisation_differences(diff, 0.95)
    self.assertIn("+25.0", text)
    c.paradigms.normalize_errors = ()
    self.assertEqual(train.normalisation_differences(c, "/nonexistent", train.paradigm_arms(c)), {})

  @pytest.mark.fast
  def test_primary_cell_is_the_change_of_the_paired_gap(self):
    c = progagent_config.get_config("paradigms_fewshot")
    c.stats.resamples = 200
    arms = train.paradigm_arms(c)
    # (task, seed) -> (DTC v0, DTC v3, PTC v0, PTC v3) success; task c has no v3 rollouts for PTC: left out
    wins = {("a", 1000): (1, 0, 1, 1), ("a", 1001): (1, 1, 1, 1), ("b", 1000): (0, 0, 1, 0),
            ("b", 1001): (1, 0, 1, 1), ("c", 1000): (1, 1, 1, None), ("d", 1000): (0, 0, 0, 1)}
    with tempfile.TemporaryDirectory() as d:
      for mode, cols in (("dtc", (0, 1)), ("ptc", (2, 3))):
        os.makedirs(os.path.join(d, mode, "eval"))
        io.write_jsonl(os.path.join(d, mode, "eval", "episodes.jsonl"),
                       [{"task_id": t, "level": lvl, "seed": s, "sample": 0, "reward": float(w[col])}
                        for (t, s), w in wins.items() for lvl, col in zip((0, 3), cols) if w[col] is not None])
      cell = train.primary_cell(c, d, arms)
      # per instance (PTC - DTC at v3) - (PTC - DTC at v0): a/1000 +1, a/1001 0, b/1000 -1, b/1001 +1, d/1000 +1;
      # task means a +0.5, b 0, d +1: the mean over tasks is +0.5 (over instances it would be +0.4)
      self.assertAlmostEqual(cell["mean"], 0.5)
      self.assertEqual((cell["instances"], cell["tasks"]), (5, 3))
      self.assertIn("primary cell: +50.0 points", train.format_primary(cell))
      self.assertIsNone(train.primary_cell(c, os.path.join(d, "missing"), arms))   # e.g. the gate stopped the run
    for bad, msg in ((dict(arm="hybrid"), "two of the table's rows"), (dict(level=4), "eval.levels"),
                     (dict(from_level=3), "from_level")):
      b = progagent_config.get_config("paradigms_fewshot")
      b.paradigms.primary.update(bad)
      with self.assertRaisesRegex(ValueError, msg):
        train.check_config(b)

  @pytest.mark.fast
  def test_cut_reply_is_not_counted_as_overflow(self):
    def traj(i, termination, last_status):
      t = traj_lib.Trajectory(episode=i, task_id="retail/lost_parcels@v0", group=0, sample=i, seed=1000,
                              termination=termination)
      t.turns = [traj_lib.Turn(prompt_ids=[1, 2], response_ids=[3], status=last_status,
                               truncated=last_status == "truncated")]
      return t
    trajs = [traj(0, "length_limit", "truncated"), traj(1, "length_limit", "length_limit"), traj(2, "done", "ok"),
             traj(3, "length_limit", "ok")]   # the last: the next prompt would not fit the window
    row = evaluation.summarize(trajs, ks=(1,), resamples=100)[0]
    self.assertAlmostEqual(row["cut_share"], 0.25)
    self.assertAlmostEqual(row["overflow_share"], 0.5)
    text = evaluation.format_level_table({"dtc+norm": {0: row}}, [0], (1,))
    self.assertIn("cut%", text)
    self.assertIn("dtc+norm", text)


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
    c.paradigms.primary.level, c.paradigms.primary.from_level = 0, -1   # one level: PTC - DTC at v0
    with tempfile.TemporaryDirectory() as d:
      with mock.patch("sys.stdout", new_callable=io_lib.StringIO) as out:
        res = train.run(c, d)
      printed = out.getvalue()
      self.assertLess(printed.index("primary cell (named before the run"), printed.index("paradigm table"))
      text = open(os.path.join(d, "results_paradigms.txt")).read()
      self.assertIn("primary cell: ", text)
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
      self.assertEqual(saved["primary"]["instances"], 1)
      self.assertAlmostEqual(saved["primary"]["mean"], saved["results"]["ptc"]["0"]["pass@1"]
                             - saved["results"]["dtc"]["0"]["pass@1"])

  def test_error_recovery_arms_end_to_end(self):
    # configs/progagent.py:errors_fewshot's path with a tiny random policy, DTC only: the harness with error
    # normalisation off and on, each in its folder with its setting, the paired block under the table.
    c = _tiny(progagent_config.get_config("errors_fewshot_smoke"))
    c.paradigms.modes = ("dtc",)
    c.paradigms.zero_rows = False
    with self.assertRaisesRegex(ValueError, "paradigms.primary"):   # its primary cell names the PTC rows
      train.check_config(c)
    c.paradigms.primary.arm, c.paradigms.primary.baseline = "dtc+norm", "dtc"
    with tempfile.TemporaryDirectory() as d:
      res = train.run(c, d)
      self.assertEqual(set(res["paradigms"]), {"dtc", "dtc+norm"})
      for sub, normalize in (("dtc", False), ("dtc_norm", True)):
        rows = [json.loads(l) for l in open(os.path.join(d, sub, "eval", "episodes.jsonl"))]
        self.assertLen(rows, 2)   # 1 task x 1 level x 1 seed x 2 samples
        self.assertIs(json.load(open(os.path.join(d, sub, "eval", "results.json")))["normalize_errors"], normalize)
      text = open(os.path.join(d, "results_paradigms.txt")).read()
      self.assertIn("dtc+norm", text)
      self.assertIn("error normalisation on - off", text)
      saved = json.load(open(os.path.join(d, "results_paradigms.json")))
      self.assertEqual(saved["normalisation_differences"]["dtc"]["0"]["tasks"], 1)
      self.assertAlmostEqual(saved["primary"]["mean"], saved["normalisation_differences"]["dtc"]["0"]["mean"])

  def test_reading_gate_stops_a_dtc_arm_that_cannot_read(self):
    # C2's gate with a tiny random policy (the real run: configs/progagent.py:paradigms_read on SmolLM2): after SFT
    # the DTC arm passes nothing at v0, so the run stops before GSPO and before PTC is trained.
    from common.lm import stages   # pylint: disable=import-outside-toplevel
    c = _tiny(progagent_config.get_config("paradigms_read_smoke"))
    c.sft.max_tokens = 4096
    c.sft.token_budget = 3000
    train.check_config(c)
    rmtree = shutil.rmtree
    def keep_gate_units(path, *args, **kwargs):   # keep the gate's finished units to resume from below
      if not str(path).endswith("read_gate_units"):
        rmtree(path, *args, **kwargs)
    with tempfile.TemporaryDirectory() as d:
      with mock.patch.object(train.shutil, "rmtree", keep_gate_units):
        with self.assertRaisesRegex(stages.RegimeGateFailed, "DTC did not learn to read"):
          train.run(c, d)
      gate = json.load(open(os.path.join(d, "dtc", "read_gate.json")))
      self.assertFalse(gate["passed"])
      self.assertEqual(gate["units"], 1)
      # one sample per instance: the exact binomial interval (0 of 1 at 95%: [0, 0.975]), not the bootstrap's [0, 0]
      self.assertEqual(gate["interval"], "exact binomial")
      self.assertAlmostEqual(gate["pass@1_high"], 0.975, places=6)
      # every failed episode is counted once: with no tool result read, or after reading one
      self.assertEqual(gate["episodes"], 1)
      self.assertEqual(gate["no_result_read"] + gate["read_and_failed"], 1)
      self.assertIn("failed without reading a tool result", gate["line"])
      # a run killed during the gate resumes from the units it finished: with every unit on disk the gate
      # needs no parameters (None would fail a rollout), and it gives the same result; the units go once
      # read_gate.json is written
      os.remove(os.path.join(d, "dtc", "read_gate.json"))
      c.mode = "dtc"
      policy = train.load_policy(c, list(c.tasks))
      with self.assertRaisesRegex(stages.RegimeGateFailed, "DTC did not learn to read"):
        train.read_gate(c, policy, None, list(c.tasks), os.path.join(d, "dtc"))
      resumed = json.load(open(os.path.join(d, "dtc", "read_gate.json")))
      self.assertEqual(resumed["line"], gate["line"])
      self.assertFalse(os.path.exists(os.path.join(d, "dtc", "read_gate_units")))
      self.assertTrue(os.path.exists(os.path.join(d, "dtc", "sft", "metrics.jsonl")))   # SFT ran, on its budget
      sft = io.read_jsonl(os.path.join(d, "dtc", "sft", "metrics.jsonl"))
      self.assertEqual(sft[0]["sft/eval_rows"], sft[0]["sft/examples"])   # fewer rows than sft.eval_rows: all
      self.assertTrue(all(np.isfinite(r["sft/eval_loss"]) for r in (sft[0], sft[-1])))
      self.assertFalse(os.path.exists(os.path.join(d, "dtc", "gspo", "metrics.jsonl")))
      self.assertFalse(os.path.exists(os.path.join(d, "ptc")))
      # a rerun reads the saved gate (same settings) instead of evaluating again; a passing one lets the run go on
      gate["pass@1"] = 1.0
      with open(os.path.join(d, "dtc", "read_gate.json"), "w") as f:
        json.dump(gate, f)
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
