"""PhGPO evaluation: held-out decoding, the nearest-training-query baseline, and the comparison tables.

Every evaluation returns one metrics dict (`evaluate`, `nearest_query`, `summarize_rollouts`):

  {'match_ratio', 'exact_match', 'lcs', 'success': means over the tasks (floats in [0, 1]),
   'num_tasks': int,
   'per_task': {'task_id', 'pred', 'gold_len', 'match_ratio', 'exact_match', 'lcs', 'success': equal-length
                lists in the order of the evaluated task rows (plus method-specific lists)},
   'by_gold_length': {'<=5', '6-10', '>10': mean match ratio of the tasks whose gold chain has that many calls
                      (counted up to the horizon H), None for an empty bucket},
   'by_gold_length_count': {same keys: number of tasks}}

All of it is JSON-serialisable (results.json). `format_table` and `paired_table_json` turn
{seed: {row: metrics dict}} into a terminal table and the same numbers as a dict: per row the mean over seeds
of each metric with a bootstrap interval over (seed, task) units, the match ratio by gold length, the steps to
the first training success, and the paired difference of match ratio against a reference row
(common.stats.paired_difference: scipy.stats.bootstrap, BCa; Efron & Tibshirani 1993).
Metric definitions: phgpo.metrics (PhGPO, arXiv:2602.13691, sec. "Metrics").
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from common import stats
from phgpo import classifier_rollout as rollout_lib
from phgpo import metrics as metrics_lib
from phgpo.problem import Problem

METRICS = ("match_ratio", "exact_match", "lcs", "success")
# (key, smallest gold length, largest gold length or None = unbounded)
GOLD_LENGTH_BUCKETS = (("<=5", 0, 5), ("6-10", 6, 10), (">10", 11, None))
_TIE_TOL = 1e-9  # cosine similarities within this of the best count as ties (nearest_query)

ROW_NAMES = {"nearest": "nearest training query (no training)",
             "vote3": "3-neighbour position vote (no training)", "vote5": "5-neighbour position vote (no training)",
             "warmup": "warm-up only",
             "grpo_vanilla": "GRPO, no curriculum", "grpo": "GRPO + curriculum (beta = 0)", "phgpo": "PhGPO",
             "no_curriculum": "PhGPO w/o mixed curriculum", "rho0": "PhGPO, rho = 0",
             "agnostic_only": "PhGPO, task-agnostic only", "frozen": "PhGPO, pheromone frozen mid-training",
             "authors": "PhGPO, the authors' schedule",
             "init_graph": "PhGPO, pheromone from a graph's counts",
             "phgpo_rollouts": "PhGPO, bank from rollouts", "phgpo_gold": "PhGPO, bank seeded from gold",
             "phgpo_encoder": "PhGPO, encoder-MLP policy (main table's)"}
# Sub-rows '<run>/<key>': a run's metrics dict may nest the same policy decoded another way. 'policy_only': a
# pheromone run decoded with beta = w = 0 (shown under runs named phgpo*); 'test_pheromone': a GRPO run
# (beta = 0 in training) decoded with the pheromone (prior at decode only, vs PhGPO's prior during RL).
SUB_ROWS = {"policy_only": "no pheromone at test", "test_pheromone": "pheromone at test only"}


def _sub_row_shown(run: str, sub: str) -> bool:
  return sub != "policy_only" or run.startswith("phgpo")


def row_name(row: str) -> str:
  """The table's name of a row or sub-row ('<run>/<key>' of SUB_ROWS, indented under its run)."""
  run, _, sub = row.partition("/")
  if sub:
    return f"  {ROW_NAMES.get(run, run)}, {SUB_ROWS.get(sub, sub)}"
  return ROW_NAMES.get(row, row)
_HEADERS = {"match_ratio": "match ratio", "exact_match": "exact match", "lcs": "LCS", "success": "success"}


# ---------------------------------------------------------------------------------------------
# Per-task metrics.


def evaluate(config, compiled, params, pher, problem: Problem, *, beta: float, w: float,
             envs=None, task_idx=None, seed: int = 0) -> dict:
  """Held-out evaluation: one rollout per task at `eval.temperature` (0 = argmax of the guided score).

  Args:
    compiled: `phgpo.steps.Compiled`.
    params, pher: the policy and pheromone to decode with.
    beta, w: the decision rule's pheromone weights (0, 0: the policy alone).
    envs: `phgpo.classifier_rollout.ReplayEpisodes` to reuse (default: a new group, closed afterwards).
    task_idx: i64[B] task rows to evaluate (default: the held-out split).
    seed: PRNG seed of the decode (matters only at `eval.temperature` > 0).
  Config `eval.block_tasks` > 0 cuts the tasks into sampling blocks of that many tasks, shared out over the
  processes of a multi-process run (`phgpo.classifier_rollout.rollout_blocks`; block b decodes with
  fold_in(key(seed), b)); 0 (default) = one block, run by process 0 and all-gathered. Every process returns the
  same metrics. Collective with several processes.
  Returns:
    The module's metrics dict (`summarize_rollouts`; success threshold: config `eval.success_threshold`), with
    per_task['end_reason'] (list[str], each rollout's end: 'horizon', 'done', 'no_candidate', 'env_error')
    and 'env_errors' (int, rollouts ended by an environment error).
  """
  task_idx = problem.eval_idx if task_idx is None else task_idx
  block_tasks = int(config.eval.get("block_tasks", 0))
  own = envs is None
  envs = envs or rollout_lib.make_envs(config, problem, rollout_lib.block_slots(len(task_idx), 1, block_tasks))
  try:
    rb = rollout_lib.rollout_blocks(
        compiled, params, pher, problem, envs, np.asarray(task_idx), jax.random.key(seed), group_size=1,
        block_tasks=block_tasks, tf_rng=np.random.default_rng(seed), tf_seed=(seed, 3), beta=beta, w=w,
        temperature=config.eval.temperature, p_tf=0.0, reward_kind="match_ratio",
        success_threshold=config.eval.success_threshold)
  finally:
    if own:
      envs.close()
  out = summarize_rollouts(rb, problem, success_threshold=config.eval.success_threshold)
  out["per_task"]["end_reason"] = [str(r) for r in rb.end_reason]
  out["env_errors"] = int(sum(r == "env_error" for r in rb.end_reason))
  return out


def summarize_rollouts(rb: rollout_lib.RolloutBatch, problem: Problem, *,
                       success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> dict:
  """Metrics of the rollouts against the gold calls, overall, per task and by gold length.

  Args:
    rb: the rollouts; reads rb.task (i64[B] task rows), rb.tools (i32[B, H] executed tool ids) and
      rb.length (i32[B] calls made).
    problem: gives gold_tools, gold_len, the task ids and graph.tool_names.
    success_threshold: success = match ratio >= this (config `eval.success_threshold`; published 0.7).
  Returns:
    The module's metrics dict; per_task rows in the order of rb.task.
  Raises:
    ValueError: no rollouts, or arrays of inconsistent shapes.
  """
  return _summarize(problem, rb.task, rb.tools, rb.length, success_threshold=success_threshold)


def nearest_query(problem: Problem, task_idx=None, *,
                  success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> dict:
  """No-training baseline: predict the gold tool chain of the most similar training query.

  For each evaluated task q, n(q) = argmax over training rows t != q of cos(e_q, e_t), e = query_emb rows
  (MiniLM sentence embeddings, normalised here; a zero row has similarity 0 to everything); the prediction
  is gold_tools[n(q), :gold_len[n(q)]]. Similarities within 1e-9 of the best are ties, resolved to the
  lowest task row. A task that is itself in the training split is never its own neighbour. One matrix
  product in float64 with numpy; no policy, no environment.

  Args:
    problem: reads query_emb f32[num_tasks, D], train_idx, gold_tools, gold_len, tasks, graph.tool_names.
    task_idx: i64[B] task rows to evaluate (default: problem.eval_idx).
    success_threshold: success = match ratio >= this (published 0.7).
  Returns:
    The module's metrics dict; per_task also holds 'neighbour_task_id' (list[str]) and
    'neighbour_similarity' (list[float], the cosine similarity in [-1, 1]).
  Raises:
    ValueError: no tasks to evaluate, or no training task other than the evaluated one.
  """
  task_idx = np.asarray(problem.eval_idx if task_idx is None else task_idx, np.int64).reshape(-1)
  train = np.sort(np.asarray(problem.train_idx, np.int64).reshape(-1))
  if task_idx.size == 0 or train.size == 0:
    raise ValueError(f"nearest_query needs tasks to evaluate and training tasks; got {task_idx.size} and "
                     f"{train.size}")
  emb = np.asarray(problem.query_emb, np.float64)

  def unit(rows):
    e = emb[rows]
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

  sim = unit(task_idx) @ unit(train).T  # f64[B, T]
  sim[task_idx[:, None] == train[None, :]] = -np.inf
  best_sim = sim.max(axis=1)
  if not np.all(np.isfinite(best_sim)):
    bad = int(task_idx[np.argmin(np.isfinite(best_sim))])
    raise ValueError(f"nearest_query: task row {bad} has no training task other than itself")
  best = np.argmax(sim >= best_sim[:, None] - _TIE_TOL, axis=1)  # the first (lowest row) of the ties
  nb = train[best]
  out = _summarize(problem, task_idx, np.asarray(problem.gold_tools)[nb], np.asarray(problem.gold_len)[nb],
                   success_threshold=success_threshold)
  out["per_task"]["neighbour_task_id"] = [str(problem.tasks[i].task_id) for i in nb]
  out["per_task"]["neighbour_similarity"] = [float(s) for s in sim[np.arange(task_idx.size), best]]
  return out


def empty_prediction(problem: Problem, task_idx=None, *,
                     success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> dict:
  """The metrics of predicting no call for each task (what a copy baseline gives without training queries).

  Args:
    problem: reads gold_tools, gold_len, tasks, graph.tool_names.
    task_idx: i64[B] task rows (default: problem.eval_idx).
  Returns:
    The module's metrics dict (every match ratio 0).
  Raises:
    ValueError: no tasks.
  """
  task_idx = np.asarray(problem.eval_idx if task_idx is None else task_idx, np.int64).reshape(-1)
  return _summarize(problem, task_idx, np.full((task_idx.size, 1), -1, np.int32),
                    np.zeros((task_idx.size,), np.int32), success_threshold=success_threshold)


def vote_query(problem: Problem, k: int, task_idx=None, *,
               success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> dict:
  """No-training baseline: the similarity-weighted position vote of the k nearest training queries.

  a_t = argmax_n sum_{j in N_k(q), t < L_j} max(cos(e_q, e_j), 0) 1[g_j[t] = n] for t < gold_len(q) (the
  rollout horizon, config `env.horizon = 'gold'`), -1 (a miss) where no neighbour reaches t; neighbours by
  float32 cosine, ties to the lower training row, a training task never its own neighbour
  (`phgpo.retrieval.nearest_neighbours`, `phgpo.retrieval.vote_decode`). k = 1 is the nearest copy cut or
  padded to the gold length: the same match ratio as `nearest_query`, a different exact match.

  Args:
    problem: reads query_emb, train_idx, gold_tools, gold_len, tasks.
    k: neighbours (1 <= k <= number of training tasks).
    task_idx: i64[B] task rows to evaluate (default: problem.eval_idx).
    success_threshold: success = match ratio >= this.
  Returns:
    The module's metrics dict; per_task also holds 'neighbour_task_ids' (the k neighbours of each task).
  Raises:
    ValueError: no tasks, or k outside [1, number of training tasks].
  """
  from phgpo import retrieval  # pylint: disable=g-import-not-at-top
  task_idx = np.asarray(problem.eval_idx if task_idx is None else task_idx, np.int64).reshape(-1)
  train = np.sort(np.asarray(problem.train_idx, np.int64).reshape(-1))
  if task_idx.size == 0:
    raise ValueError("vote_query needs tasks to evaluate")
  if not 1 <= int(k) <= train.size - int(np.isin(task_idx, train).any()):
    raise ValueError(f"vote_query: k={k} must lie in [1, {train.size}] (the training tasks)")
  emb = np.asarray(problem.query_emb, np.float32)
  idx, sim, valid = retrieval.nearest_neighbours(emb[task_idx], emb[train], task_idx.astype(np.int32),
                                                 train.astype(np.int32), k=int(k))
  rows = train[np.asarray(idx)]
  w = retrieval.vote_weights(sim, valid)
  gold = np.asarray(problem.gold_tools, np.int32)
  gold_len = np.asarray(problem.gold_len, np.int32)
  pred, pred_len = retrieval.vote_decode(gold[rows], gold_len[rows], w, gold_len[task_idx],
                                         num_tools=len(problem.graph.tool_names))
  out = _summarize(problem, task_idx, np.asarray(pred), np.asarray(pred_len), success_threshold=success_threshold)
  out["per_task"]["neighbour_task_ids"] = [[str(problem.tasks[j].task_id) for j in r] for r in rows]
  return out


def _summarize(problem: Problem, task_rows, pred, pred_len, *, success_threshold: float) -> dict:
  """The module's metrics dict for predictions i32[B, H'] / i32[B] of the task rows i64[B]."""
  task_rows = np.asarray(task_rows, np.int64).reshape(-1)
  pred, pred_len = np.asarray(pred, np.int32), np.asarray(pred_len, np.int32).reshape(-1)
  if task_rows.size == 0:
    raise ValueError("no tasks to summarise")
  if pred.ndim != 2 or pred.shape[0] != task_rows.size or pred_len.shape[0] != task_rows.size:
    raise ValueError(f"predictions {pred.shape} / lengths {pred_len.shape} do not match {task_rows.size} tasks")
  gold = np.asarray(problem.gold_tools, np.int32)[task_rows]
  gold_len = np.asarray(problem.gold_len, np.int32)[task_rows]
  mr32 = np.asarray(metrics_lib.match_ratio_batch(pred, pred_len, gold, gold_len, horizon=gold.shape[1]))
  per = {
      "match_ratio": mr32.astype(np.float64),
      "exact_match": np.asarray(metrics_lib.exact_match_batch(pred, pred_len, gold, gold_len), np.float64),
      "lcs": np.asarray(metrics_lib.lcs_score_batch(pred, pred_len, gold, gold_len), np.float64),
      # compared in float32, as in training: 7/10 counts as reaching 0.7
      "success": (mr32 >= np.float32(success_threshold)).astype(np.float64),
  }
  names = list(problem.graph.tool_names)
  preds = [[names[t] if 0 <= t < len(names) else f"<invalid tool id {int(t)}>" for t in row[:max(int(n), 0)]]
           for row, n in zip(pred, pred_len)]
  per_task = {"task_id": [str(problem.tasks[i].task_id) for i in task_rows], "pred": preds,
              "gold_len": [int(n) for n in gold_len]}
  per_task.update({k: [float(x) for x in v] for k, v in per.items()})
  out: dict[str, Any] = {k: float(np.mean(v)) for k, v in per.items()}
  out["num_tasks"] = int(task_rows.size)
  out["per_task"] = per_task
  out["by_gold_length"], out["by_gold_length_count"] = by_gold_length(gold_len, per["match_ratio"])
  out["by_position"], out["by_position_count"] = by_position(pred, pred_len, gold, gold_len)
  return out


def by_position(pred, pred_len, gold, gold_len) -> tuple[list, list]:
  """Accuracy at each position of the chain: ([acc_0, ..., acc_{H-1}], [count_0, ...]).

    acc_t = mean over tasks with gold_len > t of 1[t < pred_len and pred[t] = gold[t]]   (None: no such task)
  Position-aligned (the match ratio's own alignment, phgpo.metrics), so it shows where along the chain a
  policy's errors start and whether they compound (issue 24: "match ratio by position in the chain").
  """
  pred, gold = np.asarray(pred), np.asarray(gold)
  pred_len, gold_len = np.asarray(pred_len).reshape(-1), np.asarray(gold_len).reshape(-1)
  h = gold.shape[1]
  p = np.full(gold.shape, -2, np.int64)
  w = min(h, pred.shape[1])
  p[:, :w] = pred[:, :w]
  t = np.arange(h)[None, :]
  live = t < gold_len[:, None]
  hit = live & (t < pred_len[:, None]) & (p == gold)
  count = live.sum(axis=0)
  acc = [float(hit[:, i].sum() / count[i]) if count[i] else None for i in range(h)]
  return acc, [int(c) for c in count]


def by_gold_length(gold_len, values) -> tuple[dict[str, float | None], dict[str, int]]:
  """Mean of values per gold-length bucket ('<=5', '6-10', '>10').

  Args:
    gold_len: i32[B] gold chain lengths.
    values: f64[B] a per-task metric (e.g. match ratio).
  Returns:
    ({bucket: mean or None when empty}, {bucket: count}).
  """
  gold_len, values = np.asarray(gold_len).reshape(-1), np.asarray(values, np.float64).reshape(-1)
  means, counts = {}, {}
  for key, lo, hi in GOLD_LENGTH_BUCKETS:
    sel = (gold_len >= lo) & ((gold_len <= hi) if hi is not None else True)
    counts[key] = int(np.sum(sel))
    means[key] = float(np.mean(values[sel])) if counts[key] else None
  return means, counts


# ---------------------------------------------------------------------------------------------
# Tables over seeds.


def _intlike(s) -> bool:
  try:
    int(s)
  except (TypeError, ValueError):
    return False
  return True


def _sorted_seeds(results) -> list:
  return sorted(results, key=lambda s: (0, int(s), "") if _intlike(s) else (1, 0, str(s)))


def _seed_out(s):
  """A seed as written to JSON: an int where it reads as one ('0' from results.json -> 0)."""
  return int(s) if _intlike(s) else str(s)


def _entries(results: dict, seeds: list, row: str) -> list[tuple[Any, dict]]:
  """[(seed, metrics dict)] of the seeds where the row exists (a sub-row '<run>/<key>': the run's nested dict)."""
  run, _, sub = row.partition("/")
  if sub:
    return [(s, results[s][run][sub]) for s in seeds
            if isinstance(results[s].get(run), dict) and isinstance(results[s][run].get(sub), dict)]
  return [(s, results[s][row]) for s in seeds if isinstance(results[s].get(row), dict)]


def _task_keys(per_task: dict) -> list[tuple[str, int]]:
  """(task_id, occurrence) per row, so that a task evaluated twice pairs with its own occurrence."""
  seen: dict[str, int] = {}
  keys = []
  for t in per_task["task_id"]:
    keys.append((t, seen.get(t, 0)))
    seen[t] = seen.get(t, 0) + 1
  return keys


def _has_units(m: dict, metric: str) -> bool:
  return isinstance(m.get("per_task"), dict) and metric in m["per_task"] and "task_id" in m["per_task"]


def _paired(entries: list, ref_entries: list, metric: str, boot: dict) -> dict | None:
  """metric(row) - metric(reference) over the (seed, task) units both hold, seeds in order."""
  ref = {s: m for s, m in ref_entries if _has_units(m, metric)}
  x, y, seeds, tasks = [], [], [], []
  for s, m in entries:
    if s not in ref or not _has_units(m, metric):
      continue
    r = dict(zip(_task_keys(ref[s]["per_task"]), ref[s]["per_task"][metric]))
    n0 = len(x)
    for key, v in zip(_task_keys(m["per_task"]), m["per_task"][metric]):
      if key in r:
        x.append(v)
        y.append(r[key])
        tasks.append(key)
    if len(x) > n0:
      seeds.append(_seed_out(s))
  if not x:
    return None
  d = stats.paired_difference(x, y, **boot)
  t = stats.clustered_difference(x, y, tasks, **boot)
  fin = stats.finite_or_none
  return {"mean": float(d.mean), "low": fin(d.low), "high": fin(d.high), "n": int(d.n), "seeds": seeds,
          "task_mean": float(t.mean), "task_low": fin(t.low), "task_high": fin(t.high),
          "n_tasks": int(t.n)}


def _row_json(row: str, entries: list, ref_entries: list | None, reference: str | None,
              metrics: Sequence[str], boot: dict) -> dict:
  out: dict[str, Any] = {"row": row, "name": row_name(row),
                         "seeds": [_seed_out(s) for s, _ in entries], "metrics": {}}
  for metric in metrics:
    vals = [float(m[metric]) for _, m in entries if m.get(metric) is not None]
    cell: dict[str, Any] = {"mean": float(np.mean(vals)) if vals else None, "low": None, "high": None, "n": 0,
                            "task_low": None, "task_high": None, "n_tasks": 0}
    if entries and all(_has_units(m, metric) for _, m in entries):
      units = [float(v) for _, m in entries for v in m["per_task"][metric]]
      tasks = [k for _, m in entries for k in _task_keys(m["per_task"])]
      if units:
        d = stats.paired_difference(units, np.zeros(len(units)), **boot)
        t = stats.clustered_difference(units, np.zeros(len(units)), tasks, **boot)
        fin = stats.finite_or_none
        cell.update(low=fin(d.low), high=fin(d.high), n=int(d.n), task_low=fin(t.low), task_high=fin(t.high),
                    n_tasks=int(t.n))
    out["metrics"][metric] = cell
  out["by_gold_length"], out["by_gold_length_count"] = {}, {}
  for key, _, _ in GOLD_LENGTH_BUCKETS:
    vals = [float(m["by_gold_length"][key]) for _, m in entries
            if isinstance(m.get("by_gold_length"), dict) and m["by_gold_length"].get(key) is not None]
    out["by_gold_length"][key] = float(np.mean(vals)) if vals else None
    out["by_gold_length_count"][key] = int(sum(int(m.get("by_gold_length_count", {}).get(key, 0))
                                               for _, m in entries))
  pos = [m["by_position"] for _, m in entries if isinstance(m.get("by_position"), list)]
  out["by_position"] = ([None if not (v := [p[t] for p in pos if t < len(p) and p[t] is not None])
                         else float(np.mean(v)) for t in range(max(len(p) for p in pos))] if pos else None)
  fs = [m["first_success"] for _, m in entries if isinstance(m.get("first_success"), dict)]
  if fs:
    med = [float(f["median_steps"]) for f in fs if f.get("median_steps") is not None]
    out["first_success"] = {"median_steps": float(np.mean(med)) if med else None,
                            "fraction": float(np.mean([float(f.get("fraction", 0.0)) for f in fs])),
                            "num_seeds": len(fs)}
  else:
    out["first_success"] = None
  out["is_reference"] = row == reference
  out["diff_vs_reference"] = _paired(entries, ref_entries, "match_ratio", boot) if ref_entries else None
  return out


def paired_table_json(results: dict, rows: Sequence[str], *, reference: str | None = None,
                      metrics: Sequence[str] = METRICS, confidence: float = 0.95, resamples: int = 10_000,
                      method: str = "BCa", bootstrap_seed: int = 0) -> dict:
  """The numbers of `format_table` as a JSON-serialisable dict (fractions, not percent).

  Per row: 'metrics' {metric: {'mean': mean over seeds of the row's metric, 'low', 'high': the bootstrap
  interval of the mean over the (seed, task) units (common.stats.paired_difference of the per-task values
  against zeros; None without per-task lists or with a single unit), 'n': units, 'task_low', 'task_high',
  'n_tasks': the task-clustered interval (common.stats.clustered_difference: each task's seeds averaged, tasks
  resampled; the design's own sampling unit)}}; 'by_gold_length' (mean over
  seeds of each seed's bucket mean, None when empty in every seed) and 'by_gold_length_count' (units summed
  over seeds); 'first_success' ({'median_steps': mean over seeds of the seeds' medians (None if none),
  'fraction': mean over seeds, 'num_seeds'} or None); 'diff_vs_reference' (match ratio, row - reference, paired
  by seed and task id over the seeds where both rows exist: {'mean', 'low', 'high', 'n', 'seeds', and the
  task-clustered 'task_mean', 'task_low', 'task_high', 'n_tasks'}; None when
  nothing pairs; the reference row holds its zero difference with itself) and 'is_reference'. With equal task
  counts per seed the mean over seeds equals the mean over units, the centre of the interval.

  Args:
    results: {seed: {row name: metrics dict (this module's format)}}; seeds are ints or int strings (as read
      back from results.json).
    rows: row names in display order; rows present in no seed are skipped; a row whose metrics nest a dict
      of SUB_ROWS is followed by that sub-row '<run>/<key>' (policy_only under phgpo* runs only).
    reference: the row the paired differences are taken against (None: no differences).
    metrics: the metric keys reported.
    confidence, resamples, method, bootstrap_seed: the bootstrap (common.stats.paired_difference); the fixed
      seed makes the output deterministic.
  Returns:
    {'reference', 'seeds', 'metrics', 'interval', 'confidence', 'resamples', 'method', 'bootstrap_seed',
     'rows': [row dicts as above, each with 'row' and 'name']}.
  """
  boot = dict(confidence=confidence, resamples=resamples, method=method, seed=bootstrap_seed)
  seeds = _sorted_seeds(results)
  ref_entries = _entries(results, seeds, reference) if reference is not None else None
  names = []
  for row in rows:
    if _entries(results, seeds, row):
      names.append(row)
      names += [f"{row}/{sub}" for sub in SUB_ROWS
                if _sub_row_shown(row, sub) and _entries(results, seeds, f"{row}/{sub}")]
  return {
      "reference": reference, "seeds": [_seed_out(s) for s in seeds],
      "metrics": list(metrics),
      "interval": f"{method} bootstrap over (seed, task) units", "confidence": confidence,
      "resamples": resamples, "method": method, "bootstrap_seed": bootstrap_seed,
      "rows": [_row_json(r, _entries(results, seeds, r), ref_entries, reference, metrics, boot) for r in names],
  }


def format_table(results: dict, rows: Sequence[str], *, reference: str | None = None,
                 title: str = "Held-out TRAJECT-Bench", metrics: Sequence[str] = METRICS, primary: str = "",
                 confidence: float = 0.95, resamples: int = 10_000, method: str = "BCa",
                 bootstrap_seed: int = 0) -> str:
  """One split's comparison table (percent), aligned for a terminal; deterministic.

  Columns: each metric as 'mean [low, high]' (mean over seeds; 95% BCa bootstrap interval over the (seed,
  task) units, 'n/a' without per-task lists); match ratio by gold length ('<=5', '6-10', '>10', mean over
  seeds); 'steps to 1st success' ('23 (81%)': median steps and fraction of tasks, mean over seeds; '-' for
  rows without a 'first_success' entry); the paired difference of match ratio against `reference`
  ('+1.23 [-0.40, +2.90]' percentage points, 'reference' on the reference row itself; the column is left
  out when reference is None). PhGPO is decoded as trained; the indented row below it decodes the same
  policy with beta = w = 0, separating what the pheromone adds at test time. The numbers are those of
  `paired_table_json` (its docstring defines each).

  Args:
    results: {seed: {row name: metrics dict}} for one split.
    rows: row names in display order (e.g. the main table's or the ablation table's runs).
    reference: the row of the paired differences (e.g. 'grpo').
    title: the first line.
    primary: the table's primary cell, printed under the title (config `primary`; '' = none named).
    metrics, confidence, resamples, method, bootstrap_seed: as in `paired_table_json`.
  Returns:
    The table, lines joined by newlines, no trailing newline.
  """
  js = paired_table_json(results, rows, reference=reference, metrics=metrics, confidence=confidence,
                         resamples=resamples, method=method, bootstrap_seed=bootstrap_seed)
  pct = lambda x: "n/a" if x is None else f"{100 * x:.2f}"
  spct = lambda x: "n/a" if x is None else f"{100 * x:+.2f}"
  ref_name = ROW_NAMES.get(reference, reference)
  header = (["policy"] + [_HEADERS.get(m, m) for m in metrics] + ["MR, tasks resampled"]
            + [f"MR {k}" for k, _, _ in GOLD_LENGTH_BUCKETS])
  header.append("steps to 1st success")
  if reference is not None:
    header += [f"d MR vs {reference}", "d MR, tasks resampled"]
  body = []
  for r in js["rows"]:
    cells = [r["name"]]
    for m in metrics:
      c = r["metrics"][m]
      interval = f"[{pct(c['low'])}, {pct(c['high'])}]" if c["low"] is not None else "[n/a]"
      cells.append(f"{pct(c['mean'])} {interval}" if c["mean"] is not None else "n/a")
    c = r["metrics"].get("match_ratio", {})
    cells.append(f"[{pct(c['task_low'])}, {pct(c['task_high'])}]" if c.get("task_low") is not None else "[n/a]")
    cells += [pct(r["by_gold_length"][k]) for k, _, _ in GOLD_LENGTH_BUCKETS]
    fs = r["first_success"]
    if fs is None:
      cells.append("-")
    else:
      med = "n/a" if fs["median_steps"] is None else f"{fs['median_steps']:.0f}"
      cells.append(f"{med} ({100 * fs['fraction']:.0f}%)")
    if reference is not None:
      d = r["diff_vs_reference"]
      if r["is_reference"]:
        cells += ["reference", "reference"]
      elif d is None:
        cells += ["n/a", "n/a"]
      else:
        interval = f"[{spct(d['low'])}, {spct(d['high'])}]" if d["low"] is not None else "[n/a]"
        cells.append(f"{spct(d['mean'])} {interval}")
        interval = f"[{spct(d['task_low'])}, {spct(d['task_high'])}]" if d["task_low"] is not None else "[n/a]"
        cells.append(f"{spct(d['task_mean'])} {interval}")
    body.append(cells)
  widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
  fmt = lambda line: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(line, widths))).rstrip()
  seeds = js["seeds"]
  conf = f"{100 * confidence:g}%"
  lines = [f"{title}: {len(seeds)} seed(s) {seeds}, percent",
           f"metrics: mean over seeds [{conf} {method} bootstrap interval over (seed, task) units]; "
           "MR, tasks resampled: the match ratio's interval with each task's seeds averaged and the tasks "
           "resampled (the design's sampling unit); "
           "MR <=5 / 6-10 / >10: match ratio by number of gold calls, mean over seeds"]
  if reference is not None:
    lines.append(f"d MR: paired difference of match ratio vs {ref_name!r} by (seed, task), seeds where both "
                 f"rows exist: mean [{conf} {method} bootstrap interval], percentage points; tasks resampled: "
                 "the same with each task's seeds averaged first")
  if primary:
    lines.append(f"primary cell (named in the config before the run): {primary}")
  lines += [fmt(header), "-" * len(fmt(header))]
  lines += [fmt(line) for line in body]
  pos_rows = [r for r in js["rows"] if r.get("by_position")]
  if pos_rows:
    last = max(t for r in pos_rows for t, v in enumerate(r["by_position"]) if v is not None) + 1
    pheader = ["accuracy by position (t = 1..)"] + [str(t + 1) for t in range(last)]
    pbody = [[r["name"]] + [pct(r["by_position"][t]) if t < len(r["by_position"]) else "n/a"
                            for t in range(last)] for r in pos_rows]
    pw = [max(len(line[i]) for line in [pheader] + pbody) for i in range(len(pheader))]
    pfmt = lambda line: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(line, pw))).rstrip()
    lines += ["", pfmt(pheader)] + [pfmt(line) for line in pbody]
  return "\n".join(lines)
