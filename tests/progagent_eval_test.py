"""Tests of ProgAgent's evaluation and training options of the v2 library: program structure, pass@k per level
on held-out seeds, the scale mix, the teacher difficulty filter, paged list tools, flaky tools, and the audit's
memorisation rows and per-condition check."""

import dataclasses
import json
import math
import os
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from benchmarks import progagent_model_bench
from common import trajectory as traj_lib
from configs import progagent as progagent_config
from progagent import audit
from progagent import evaluation
from progagent import harness
from progagent import tasks as tasks_lib
from progagent import train
from progagent.task_env import ProgTaskEnv
from progagent.tasks import base


class ProgramFeaturesTest(absltest.TestCase):

  def test_loops_branches_try(self):
    self.assertEqual(evaluation.program_features("x = tools['a']()\nprint(x)"),
                     {"loop": False, "branch": False, "try": False})
    self.assertEqual(evaluation.program_features("n = sum(1 for o in xs if o > 3)"),
                     {"loop": True, "branch": False, "try": False})
    self.assertEqual(evaluation.program_features("y = 1 if z else 2"), {"loop": False, "branch": True, "try": False})
    code = "while True:\n  try:\n    r = f()\n    break\n  except ToolError:\n    if n > 3:\n      raise\n"
    self.assertEqual(evaluation.program_features(code), {"loop": True, "branch": True, "try": True})
    self.assertIsNone(evaluation.program_features("for x in"))

  def test_episode_programs_reads_program_calls_only(self):
    t = traj_lib.Trajectory(episode=0, task_id="retail/x@v2", group=0, sample=0, seed=1000, initial_observation="hi")
    t.turns.append(traj_lib.Turn(prompt_ids=[1], response_ids=[2], calls=[
        {"name": harness.PROGRAM_TOOL, "arguments": {"code": "print(1)"}}, {"name": "list_files", "arguments": {}}]))
    t.turns.append(traj_lib.Turn(prompt_ids=[1], response_ids=[2], call={"name": harness.PROGRAM_TOOL,
                                                                          "arguments": {"code": "for i in x: pass"}}))
    self.assertEqual(evaluation.episode_programs(t), ["print(1)", "for i in x: pass"])


def _traj(task, level, seed, sample, reward, code=None):
  t = traj_lib.Trajectory(episode=0, task_id=evaluation.instance_id(task, level), group=0, sample=sample, seed=seed,
                          initial_observation="go")
  calls = [{"name": harness.PROGRAM_TOOL, "arguments": {"code": code}}] if code else []
  t.turns.append(traj_lib.Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5], calls=calls, done=True,
                               info={"tool_calls": 2, "tool_errors": 0}))
  t.reward = reward
  t.termination = "done"
  return t


class SummarizeTest(absltest.TestCase):

  def test_pass_at_k_per_level_exact(self):
    trajs = []
    # level 0: task a seed 1000 passes 2 of 4, task b 0 of 4; level 1: a 4 of 4, b 1 of 4
    for lvl, (ca, cb) in ((0, (2, 0)), (1, (4, 1))):
      for s in range(4):
        trajs.append(_traj("d/a", lvl, 1000, s, float(s < ca), code="for i in x: pass"))
        trajs.append(_traj("d/b", lvl, 1000, s, float(s < cb), code="print(1)"))
    res = evaluation.summarize(trajs, ks=(1, 2, 4), resamples=200)
    self.assertEqual(sorted(res), [0, 1])
    self.assertAlmostEqual(res[0]["pass@1"], (0.5 + 0.0) / 2)
    self.assertAlmostEqual(res[1]["pass@1"], (1.0 + 0.25) / 2)
    # pass@2 with n=4: 1 - C(4-c, 2)/C(4, 2); c=2 -> 1 - 1/6, c=0 -> 0
    self.assertAlmostEqual(res[0]["pass@2"], (1 - 1 / 6) / 2)
    self.assertAlmostEqual(res[1]["pass@4"], 1.0)
    self.assertEqual(res[0]["units"], 2)
    self.assertEqual(res[0]["episodes"], 8)
    self.assertEqual(res[0]["programs"], 8)
    self.assertAlmostEqual(res[0]["loop_share"], 0.5)
    self.assertAlmostEqual(res[0]["try_share"], 0.0)
    self.assertLessEqual(res[1]["pass@1_low"], res[1]["pass@1"])
    self.assertGreaterEqual(res[1]["pass@1_high"], res[1]["pass@1"])
    table = evaluation.format_level_table({"ptc": res}, [0, 1], (1, 4))
    self.assertIn("ptc      v0", table)
    self.assertIn("pass@4", table)


class ConfigTest(absltest.TestCase):

  def test_eval_seeds_must_be_held_out(self):
    c = progagent_config.default_config()
    c.eval.seeds = (3, 1000)
    with self.assertRaisesRegex(ValueError, r"eval.seeds.*\[3\] are training seeds"):
      train.check_config(c)
    c = progagent_config.get_config("paradigms")
    c.eval.seeds = (1,)          # an oracle SFT seed
    with self.assertRaisesRegex(ValueError, "eval.seeds"):
      train.check_config(c)

  def test_bad_levels_weights_modes(self):
    for key, value, msg in (("env.scales", (0, 4), "env.scales"), ("env.scale_weights", (1.0,), "scale_weights"),
                            ("eval.levels", (), "eval.levels"), ("paradigms.modes", ("ptc", "react"), "paradigms"),
                            ("eval.k", (1, 99), "eval.k"), ("sft.steps", -1, "sft.steps"),
                            ("eval.seeds", ("a", "b"), "must be integers"),
                            ("eval.tasks", ("retail/nope",), "eval.tasks.*unknown task id")):
      c = progagent_config.default_config()
      node, leaf = key.split(".")
      c[node][leaf] = value
      with self.assertRaisesRegex(ValueError, msg):
        train.check_config(c)

  def test_shipped_configs_are_valid(self):
    c = progagent_config.get_config()   # the published setting: the user gives the checkpoint
    with self.assertRaisesRegex(ValueError, "config model.checkpoint is empty"):
      train.check_config(c)
    c.model.checkpoint = "tiny:qwen2"
    train.check_config(c)
    c = progagent_config.get_config("paradigms")
    train.check_config(c)
    self.assertEqual(tuple(c.paradigms.modes), ("dtc", "ptc", "hybrid"))
    for t in c.tasks:
      tasks_lib.get_task(t)
    with self.assertRaisesRegex(ValueError, "paradigms"):
      progagent_config.get_config("paradigm")
    for quick in (True, False):   # the model-in-the-loop benchmark's configs
      bc = progagent_model_bench.bench_config(quick)
      train.check_config(bc)
      self.assertEqual(tuple(bc.sft.oracle_modes), ("dtc", "ptc"))
    row = {"dtc": {"episodes": 4, "solved": 0, "wall_s": 40.0, "s_per_solved": None},
           "ptc": {"episodes": 4, "solved": 2, "wall_s": 10.0, "s_per_solved": 5.0}}
    r = progagent_model_bench.level_ratios(row)
    self.assertEqual((r["per_solved"], r["per_solved_bound"], r["per_episode"]), (None, 8.0, 4.0))
    row["dtc"].update(solved=4, s_per_solved=10.0)
    self.assertEqual(progagent_model_bench.level_ratios(row)["per_solved"], 2.0)

  def test_teacher_seeds_are_training_seeds(self):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "teacher.jsonl")
    with open(path, "w") as f:
      f.write(json.dumps({"task_id": "retail/pending_over_500", "mode": "ptc", "sample": 0, "seed": 1000,
                          "scale": 0, "reward": 1.0, "messages": []}) + "\n")
    c = progagent_config.default_config()
    c.sft.teacher_jsonl = path
    with self.assertRaisesRegex(ValueError, r"\[1000\] are training seeds"):
      train.check_config(c)

  def test_draw_levels_follow_weights(self):
    c = progagent_config.default_config()
    levels = train.draw_levels(c, np.random.default_rng(0), 4000)
    self.assertEqual(set(levels), {0, 1, 2, 3})
    self.assertAlmostEqual(levels.count(3) / 4000, 0.25, delta=0.03)
    c.env.scale_weights = (0.0, 0.0, 1.0, 0.0)
    self.assertEqual(set(train.draw_levels(c, np.random.default_rng(0), 100)), {2})

  def test_difficulty_filter_from_teacher_records(self):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "teacher.jsonl")
    with open(path, "w") as f:
      for tid, wins in (("d/all", 16), ("d/some", 1), ("d/none", 0)):   # pass@8 of 16: 1, 0.5, 0
        for i in range(16):
          f.write(json.dumps({"task_id": tid, "mode": "ptc", "sample": i, "seed": 0, "scale": 0,
                              "reward": float(i < wins), "messages": []}) + "\n")
    c = progagent_config.default_config()
    c.sft.teacher_jsonl = path
    self.assertEqual(train.task_pool(c, ["d/all", "d/some", "d/none", "d/unseen"]), ["d/some"])
    c.gspo.filter_from_teacher = False
    self.assertLen(train.task_pool(c, ["d/all", "d/some"]), 2)
    c.gspo.filter_from_teacher = True
    with self.assertRaisesRegex(ValueError, "keeps none"):
      train.task_pool(c, ["d/all", "d/none"])


class PagingAndFlakyTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.env = ProgTaskEnv("retail/pending_over_500", 0)
    self.env.reset(seed=0)
    self.ctx = self.env._ctx   # pylint: disable=protected-access

  def tearDown(self):
    self.env.close()
    super().tearDown()

  def test_page_bounds_and_errors(self):
    rows = list(range(7))
    self.assertEqual(base.page(rows, 3, 0), {"items": [0, 1, 2], "total": 7, "offset": 0, "next_offset": 3})
    self.assertEqual(base.page(rows, 3, 6), {"items": [6], "total": 7, "offset": 6, "next_offset": None})
    self.assertEqual(base.page(rows)["next_offset"], None)
    with self.assertRaisesRegex(base.ToolError, "limit must be between 1 and 200"):
      base.page(rows, 201)
    with self.assertRaisesRegex(base.ToolError, "offset must be >= 0"):
      base.page(rows, 2, -1)

  def test_list_tool_filters_and_pages(self):
    t = base.list_tool("list_orders", "List orders.", table="orders", columns="id, status, total",
                       filters=[base.Filter("status", "status = ?", base.p_str("s", ("pending", "shipped"))),
                                base.Filter("min_total", "total >= ?", base.p_num("m"))])
    self.assertEqual(set(t.mcp()["inputSchema"]["properties"]), {"status", "min_total", "limit", "offset"})
    want = self.ctx.q("SELECT id FROM orders WHERE status = 'pending' AND total >= 300 ORDER BY id")
    got = base.all_items(lambda **k: t.fn(self.ctx, **k), status="pending", min_total=300)
    self.assertEqual([r["id"] for r in got], [r["id"] for r in want])
    first = t.fn(self.ctx, status="pending", min_total=300, limit=5)
    self.assertEqual(first["total"], len(want))
    self.assertEqual(first["next_offset"], 5 if len(want) > 5 else None)
    with self.assertRaisesRegex(base.ToolError, "unknown status 'lost'"):
      t.fn(self.ctx, status="lost")

  def test_flaky_fails_first_then_succeeds_per_arguments(self):
    calls = []
    t = base.flaky(base.tool("echo", "Echo.", lambda ctx, x: calls.append(x) or {"x": x}, required=("x",),
                             x=base.p_int("x")), fail_first=2)
    for _ in range(2):
      with self.assertRaisesRegex(base.ToolError, "temporarily unavailable"):
        t.fn(self.ctx, x=1)
    self.assertEqual(t.fn(self.ctx, x=1), {"x": 1})
    with self.assertRaises(base.ToolError):   # another argument set has its own count
      t.fn(self.ctx, x=2)
    self.assertEqual(calls, [1])

  def test_unknown_tag_is_refused(self):
    with self.assertRaisesRegex(ValueError, "unknown tag"):
      base.Task(tasks_lib.DOMAINS["retail"], "x", "Count.", ("tools['submit_answer'](answer=1)",),
                lambda ctx: 1, answer="int", tags=("hard",))


class AuditRowsTest(absltest.TestCase):
  """The memorisation rows: a constant answer is caught by 'vary' and 'cross'."""

  def test_vary(self):
    self.assertFalse(audit.answers_vary("int", [6, 6, 6.0, "6"]))
    self.assertTrue(audit.answers_vary("int", [6, 6, 7]))
    self.assertFalse(audit.answers_vary("set", [["a", "b"], ["b", "a"]]))

  def test_cross_catches_a_constant_and_passes_a_seeded_answer(self):
    tid = "retail/pending_over_500"
    with tempfile.TemporaryDirectory() as cache:
      env = ProgTaskEnv(tid, 0, cache_dir=cache)
      try:
        ref = audit.check_instance(env, seed=0, max_dtc_tokens=16_000)
        self.assertTrue(ref["ptc"] and ref["hybrid"] and ref["dtc"] and ref["noop"] and ref["wrong"], ref["notes"])
        self.assertLessEqual(ref["dtc_tokens"], 16_000)
        self.assertFalse(audit.carries_over(env, ref, seed=1))
        self.assertTrue(audit.carries_over(env, ref, seed=0))   # the same instance: the answer passes
      finally:
        env.close()

  def test_full_audit_of_one_task_at_two_levels(self):
    with tempfile.TemporaryDirectory() as cache:
      res = audit.audit_task("library/morland_copies", [0, 1], [0, 1, 2], runtime="inprocess", cache=cache,
                             max_dtc_tokens=16_000)
    self.assertEqual(res["failures"], [])
    self.assertTrue(res["vary"] and res["cross"])
    self.assertTrue(all(r["ok"] for r in res["levels"].values()))
    self.assertTrue(all(math.isfinite(x) for r in res["levels"].values() for x in r["dtc_tokens"]))

  def test_library_size_and_hard_tasks(self):
    ids = tasks_lib.task_ids()
    self.assertGreaterEqual(len(tasks_lib.DOMAINS), 23)
    self.assertGreaterEqual(len(ids), 120)
    hard = [t for t in ids if set(tasks_lib.get_task(t).tags) & set(base.HARD_TAGS)]
    self.assertGreaterEqual(len(hard), 30)
    self.assertIn("24 domains" if len(tasks_lib.DOMAINS) == 24 else "domains", audit.library_summary(ids))


class ConditionsTest(absltest.TestCase):
  """The instructions' conditions (base.Task.conditions): dropping any one of them fails (audit check 'conditions')."""

  @pytest.mark.fast
  def test_condition_program_replaces_in_the_oracle(self):
    task = tasks_lib.get_task("energy/top_site_june")
    self.assertEqual(task.condition_names, ("june", "electricity"))
    prog = task.condition_program("june")
    self.assertNotIn('week_from="2024-06-03"', prog)
    self.assertIn('all_pages("list_readings", kind="electricity")', prog)
    self.assertEqual(prog.count('kind="electricity"'), 2)
    self.assertNotIn('kind="electricity"', task.condition_program("electricity"))
    with self.assertRaisesRegex(KeyError, "june"):
      task.condition_program("july")

  @pytest.mark.fast
  def test_bad_declarations_are_refused(self):
    task = tasks_lib.get_task("energy/top_site_june")
    for conds, msg in (((("x", ("not in the oracle", "")),), "not in the oracle"),
                       ((("x", ("kind=", "kind=")),), "old != new"),
                       ((("x", ("kind=", "")), ("x", ("week_from=", ""))), "not unique"),
                       ((("x",),), "name, \\(old, new\\)"),
                       (("x",), "name, \\(old, new\\)")):
      with self.assertRaisesRegex(ValueError, msg):
        dataclasses.replace(task, conditions=conds)

  def test_top_site_june_without_june_fails_on_every_seed(self):
    with tempfile.TemporaryDirectory() as cache:
      env = ProgTaskEnv("energy/top_site_june", 0, cache_dir=cache)
      try:
        for seed in range(5):
          env.reset(seed=seed)
          self.assertEqual(harness.run_oracle(env, "ptc", seed=seed).stats.reward, 1.0, seed)
          for name in ("june", "electricity"):
            self.assertEqual(audit.run_condition(env, name, seed=seed), (0, None), (name, seed))
      finally:
        env.close()

  def test_audit_checks_the_conditions_of_a_few_tasks(self):
    tids = ["energy/top_site_june", "airline/overbooked_week", "retail/top_gold_customer", "hr/earliest_hire_sales"]
    with tempfile.TemporaryDirectory() as cache:
      for tid in tids:
        res = audit.audit_task(tid, [0], [0, 1], runtime="inprocess", cache=cache, max_dtc_tokens=16_000)
        self.assertEqual(res["failures"], [], tid)
        self.assertEqual(res["conditions"], dict.fromkeys(tasks_lib.get_task(tid).condition_names, True), tid)

  def test_audit_reports_a_condition_that_does_not_matter_or_crashes(self):
    tid = "energy/top_site_june"
    task = tasks_lib.get_task(tid)
    fake = dataclasses.replace(task, conditions=(("print only", ("print(name, use[best])", "print(name)")),
                                                 ("crash", ("best = min(", "best = 1 / 0 or min("))))
    with mock.patch.dict(tasks_lib.TASKS, {tid: fake}), tempfile.TemporaryDirectory() as cache:
      res = audit.audit_task(tid, [0], [0, 1], runtime="inprocess", cache=cache, max_dtc_tokens=16_000)
    self.assertEqual(res["conditions"], {"print only": False, "crash": False})
    self.assertLen([f for f in res["failures"] if "'print only'" in f and "passes the verifier" in f], 2)
    self.assertLen([f for f in res["failures"] if "'crash'" in f and "raises ZeroDivisionError" in f], 2)
    self.assertFalse(res["levels"][0]["ok"])
    self.assertEqual(audit.main(["--tasks", "hr/earliest_hire_sales", "--levels", "0", "--seeds", "0,1"]), 0)


if __name__ == "__main__":
  absltest.main()
