"""PlanPO's tables: their rows (configs/planpo_base.py sets `runs` from them), the printed report with paired
differences, the JSON differences, the outputs' name (`table_tag`: a run of other rows never overwrites a full
table's outputs) and the learning curves.

`results` everywhere is {run: {seed: eval.json dict}} (planpo.train.evaluate).
"""

from __future__ import annotations

import os

import numpy as np

from common import metric_writer
from common import stats

METRICS = ("success", "score", "turns", "response_tokens", "turns_success")
# turns_success: turns among successful rollouts only (the quantity PlanPO claims to cut at no loss of success).

# The main table: the no-training baseline, the SFT policy and the three methods (issue 10, SPEC.md PlanPO).
MAIN_RUNS = ("random", "sft", "grpo", "gigpo", "planpo")
# The paper's ablation table: full PlanPO against its four ablations, with the SFT policy as the floor.
ABLATION_RUNS = ("sft", "planpo", "planpo_no_ae", "planpo_no_as", "planpo_unconditional", "planpo_constant_alpha")
# The explorer regime (issue 25): the no-training rows (uniform random, the depth-first explorer), SFT, the three
# methods, GRPO with an unconditional per-turn penalty, and PlanPO without A_E / without A_S.
EXPLORE_RUNS = ("random", "depth_first", "sft", "grpo", "gigpo", "grpo_turn_penalty", "planpo", "planpo_no_ae",
                "planpo_no_as")
TABLE_RUNS = {"main": MAIN_RUNS, "ablation": ABLATION_RUNS, "explore": EXPLORE_RUNS}
SCRIPTED_RUNS = ("random", "depth_first", "gold")   # no training: scripted policies (planpo.train.scripted_policy)


def _values(episodes, metric) -> list[float]:
  """The per-rollout values of `metric` (turns_success: the turns of the successful rollouts only)."""
  if metric == "turns_success":
    return [float(e["turns"]) for e in episodes if e["success"]]
  return [float(e[metric]) for e in episodes]


def turns_among_successes(episodes) -> float:
  """Mean turns of the successful rollouts among `episodes` (planpo.rollouts.episode_record dicts); NaN when none
  succeeded."""
  t = _values(episodes, "turns_success")
  return float(np.mean(t)) if t else float("nan")


def _seed_means(results, run, label, metric) -> list[float]:
  out = []
  for s in sorted(results[run]):
    v = _values(results[run][s][label]["episodes"], metric)
    out.append(float(np.mean(v)) if v else float("nan"))
  return out


def paired(config, results: dict, run: str, ref: str, label: str, metric: str) -> stats.PairedDifference:
  """run - ref on split `label`: the mean over held-out tasks of each task's mean difference (over seeds and
  rollouts), with common.stats.paired_difference's bootstrap interval over tasks (`stats.*`). A task is one
  resampling unit: its rollouts under every seed move together. The interval covers the choice of held-out
  tasks for these trained policies, not the variance of training under other seeds (3 seeds are too few to
  resample; the per-seed means are in the JSON).

  turns_success (turns among successes): each task's mean turns over its successful rollouts (every seed) of
  `run` minus that of `ref`, over the tasks where both have a success (`n` says how many).

  Raises:
    ValueError: the two runs did not evaluate the same (seed, task, rollout) units in the same order.
  """
  if metric == "turns_success":
    return _paired_successes(config, results, run, ref, label)
  per_task: dict[str, list[float]] = {}
  for s in sorted(results[ref]):
    a, b = results[run][s][label]["episodes"], results[ref][s][label]["episodes"]
    ka, kb = [(e["task_id"], e["sample"]) for e in a], [(e["task_id"], e["sample"]) for e in b]
    if ka != kb:
      raise ValueError(f"runs {run!r} and {ref!r} evaluated different rollouts on split {label!r}, seed {s} "
                       f"(eval.json of an older config?); delete the stale eval.json and rerun")
    for ea, eb in zip(a, b):
      per_task.setdefault(ea["task_id"], []).append(float(ea[metric]) - float(eb[metric]))
  d = np.asarray([np.mean(v) for v in per_task.values()])
  st = config.stats
  return stats.paired_difference(d, np.zeros_like(d), confidence=float(st.confidence), resamples=int(st.resamples),
                                 method=str(st.method))


def _paired_successes(config, results, run, ref, label) -> stats.PairedDifference:
  turns: dict[str, tuple[list, list]] = {}
  for s in sorted(results[ref]):
    for which, r in ((0, run), (1, ref)):
      for e in results[r][s][label]["episodes"]:
        t = turns.setdefault(e["task_id"], ([], []))
        if e["success"]:
          t[which].append(float(e["turns"]))
  d = np.asarray([np.mean(a) - np.mean(b) for a, b in turns.values() if a and b])
  st = config.stats
  if d.size == 0:
    nan = float("nan")
    return stats.PairedDifference(nan, nan, nan, 0)   # no task with a success in both runs
  return stats.paired_difference(d, np.zeros_like(d), confidence=float(st.confidence), resamples=int(st.resamples),
                                 method=str(st.method))


def primary(config, results: dict, label: str) -> str | None:
  """The primary cell named before the run (config `primary`: run, reference, success_margin): d turns among
  successes (run - reference) with its interval, d success with its interval, and the verdict: the run cut
  turns at no loss of success when the turns interval lies below 0 and the success interval's low end is above
  -success_margin (non-inferiority)."""
  p = config.get("primary", None)
  if not p or p.get("run", "") not in results or p.get("reference", "") not in results:
    return None
  dt = paired(config, results, p.run, p.reference, label, "turns_success")
  ds = paired(config, results, p.run, p.reference, label, "success")
  dr = paired(config, results, p.run, p.reference, label, "response_tokens")
  margin = float(p.success_margin)
  if dt.n == 0:
    return (f"PRIMARY (named before the run): {p.run} - {p.reference} on '{label}': no task has a success in both "
            f"runs, so turns among successes cannot be compared: no verdict.")
  shorter, kept = dt.high < 0, ds.low >= -margin
  verdict = ("cut turns among successes at no loss of success" if shorter and kept else
             "cut turns among successes, but success may have dropped by more than the margin" if shorter else
             "did not cut turns among successes (interval reaches 0 or above)")
  return (f"PRIMARY (named before the run): {p.run} - {p.reference} on '{label}': d turns among successes "
          f"{dt.mean:+.3f} [{dt.low:+.3f}, {dt.high:+.3f}] over {dt.n} tasks with successes in both; d success "
          f"{ds.mean:+.3f} [{ds.low:+.3f}, {ds.high:+.3f}] (margin -{margin:.2f}: "
          f"{'non-inferior' if kept else 'NOT shown non-inferior'}); d reply tokens {dr.mean:+.3f} "
          f"[{dr.low:+.3f}, {dr.high:+.3f}]. {p.run} {verdict}.")


def report(config, results: dict, types: dict[str, str]) -> str:
  """The printed tables: per split, the runs' metrics (mean +- std over seeds), the paired differences
  against `reference` (`paired`: tasks are the resampling units, `stats.*`), and success / turns per task type.

  results: {run: {seed: eval.json dict}}.
  """
  runs = list(results)
  seeds = sorted(next(iter(results.values())))
  ref = config.reference if config.reference in results else None
  out = []
  for label in next(iter(next(iter(results.values())).values())):
    eps0 = results[runs[0]][seeds[0]][label]["episodes"]
    n_tasks = len({e["task_id"] for e in eps0})
    out.append(f"\n== held-out split '{label}' ({dict(config.env.eval_splits)[label]}): {n_tasks} tasks x "
               f"{len(eps0) // max(n_tasks, 1)} rollout(s), seeds {seeds}; mean +- std over seeds ==")
    head = f"{'run':<22}" + "".join(f"{m:>20}" for m in METRICS)
    out += [head, "-" * len(head)]
    for run in runs:
      cells = []
      for m in METRICS:
        x = np.asarray(_seed_means(results, run, label, m))
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
        cells.append(f"{np.mean(x):.3f} +- {sd:.3f}")
      out.append(f"{run:<22}" + "".join(f"{c:>20}" for c in cells))
    if ref is not None:
      st = config.stats
      out.append(f"\npaired difference, run - {ref} (mean [{int(st.confidence * 100)}% {st.method} bootstrap "
                 f"interval over held-out tasks, each task's rollouts under every seed paired and kept together; "
                 f"training-seed variance is not in it: per-seed means in the JSON)")
      head = f"{'run':<22}" + "".join(f"{'d ' + m:>28}" for m in METRICS)
      out += [head, "-" * len(head)]
      for run in runs:
        if run == ref:
          continue
        cells = []
        for m in METRICS:
          if run in SCRIPTED_RUNS and m == "response_tokens":   # a fixed scripted reply: not comparable
            cells.append("n/a")
            continue
          d = paired(config, results, run, ref, label, m)
          cells.append(f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
        out.append(f"{run:<22}" + "".join(f"{c:>28}" for c in cells))
    kinds = sorted({types.get(e["task_id"], "?") for e in eps0})
    if kinds:
      out.append("\nper task type: success / turns (mean over seeds and tasks)")
      head = f"{'run':<22}" + "".join(f"{k[:24]:>26}" for k in kinds)
      out += [head, "-" * len(head)]
      for run in runs:
        cells = []
        for k in kinds:
          es = [e for s in seeds for e in results[run][s][label]["episodes"] if types.get(e["task_id"], "?") == k]
          cells.append(f"{np.mean([e['success'] for e in es]):.3f} / {np.mean([e['turns'] for e in es]):5.2f}")
        out.append(f"{run:<22}" + "".join(f"{c:>26}" for c in cells))
    line = primary(config, results, label)
    if line:
      out += ["", line]
  return "\n".join(out).lstrip("\n")


def differences(config, results: dict) -> dict:
  """{split: {run: {metric: {'mean', 'low', 'high', 'n', 'per_seed'}}}} against `reference` (report())."""
  ref = config.reference or None
  if ref not in results:
    return {}
  seeds = sorted(results[ref])
  out: dict = {}
  for label in results[ref][seeds[0]]:
    for run in results:
      if run == ref:
        continue
      for m in METRICS:
        d = paired(config, results, run, ref, label, m)
        per_seed = [a - b for a, b in zip(_seed_means(results, run, label, m), _seed_means(results, ref, label, m))]
        out.setdefault(label, {}).setdefault(run, {})[m] = dict(d._asdict(), per_seed=per_seed)
  return out


def table_tag(config) -> str:
  """The outputs' name: `table` ('main' / 'ablation'), followed by the run names when `runs` is not that
  table's default rows (planpo.TABLE_RUNS), so a subset run (--config.runs=grpo,planpo) never
  overwrites the full table's results_<table>.{txt,json} and curves_<table>.png: it writes
  results_<table>_grpo-planpo.* instead."""
  tag = str(config.get("table", "main"))
  default = TABLE_RUNS.get(tag)
  if default is not None and tuple(config.runs) != tuple(default):
    tag += "_" + "-".join(config.runs)
  return tag


def plot(workdir: str, config, tag: str = "main") -> str | None:
  """curves_<tag>.png: training success, turns and response tokens per RL run and seed (common.metric_writer)."""
  series = {}
  for seed in config.seeds:
    for run in config.runs:
      p = os.path.join(workdir, f"seed_{seed}", run, "metrics.jsonl")
      if run not in SCRIPTED_RUNS + ("sft",) and os.path.exists(p):
        series[f"{run} s{seed}"] = p
  if not series:
    return None
  return metric_writer.plot_curves(series, ["rollout/success", "rollout/turns", "rollout/response_tokens"],
                                   os.path.join(workdir, f"curves_{tag}.png"),
                                   title=f"{tag}: training rollouts per run and seed")
