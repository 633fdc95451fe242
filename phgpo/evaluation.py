"""PhGPO evaluation: held-out decoding with and without the pheromone, and the comparison table."""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from phgpo import classifier_rollout as rollout_lib
from phgpo import metrics as metrics_lib
from phgpo.problem import Problem


def evaluate(config, compiled, params, pher, problem: Problem, *, beta: float, w: float,
             envs=None, task_idx=None, seed: int = 0) -> dict:
  """Held-out evaluation: one rollout per task at `eval.temperature` (0 = argmax of the guided score).

  Args:
    compiled: `phgpo.steps.Compiled`.
    params, pher: the policy and pheromone to decode with.
    beta, w: the decision rule's pheromone weights (0, 0: the policy alone).
    envs: `phgpo.classifier_rollout.ReplayEpisodes` to reuse (default: a new group, closed afterwards).
    task_idx: tasks to evaluate (default: the held-out split).
    seed: PRNG seed of the decode (matters only at `eval.temperature` > 0).
  Returns:
    dict with mean 'match_ratio', 'exact_match', 'lcs', 'success' over the tasks, and 'num_tasks'.
  """
  task_idx = problem.eval_idx if task_idx is None else task_idx
  own = envs is None
  envs = envs or rollout_lib.make_envs(config, problem, len(task_idx))
  try:
    rb = rollout_lib.rollout(
        compiled, params, pher, problem, envs, task_idx, jax.random.key(seed), beta=beta, w=w,
        temperature=config.eval.temperature, p_tf=0.0, tf_rng=np.random.default_rng(seed),
        reward_kind="match_ratio", success_threshold=config.eval.success_threshold)
  finally:
    if own:
      envs.close()
  out = summarize_rollouts(rb, problem, success_threshold=config.eval.success_threshold)
  out["env_errors"] = int(sum(r == "env_error" for r in rb.end_reason))
  return out


def summarize_rollouts(rb: rollout_lib.RolloutBatch, problem: Problem, *,
                       success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> dict:
  """Mean 'match_ratio', 'exact_match', 'lcs' and 'success' (match ratio >= success_threshold, config
  `eval.success_threshold`) of the rollouts against the gold calls, and 'num_tasks'."""
  gold, gold_len = problem.gold_tools[rb.task], problem.gold_len[rb.task]
  h = gold.shape[1]
  mr = np.asarray(metrics_lib.match_ratio_batch(rb.tools, rb.length, gold, gold_len, horizon=h))
  return {
      "match_ratio": float(mr.mean()),
      "exact_match": float(np.mean(metrics_lib.exact_match_batch(rb.tools, rb.length, gold, gold_len))),
      "lcs": float(np.mean(metrics_lib.lcs_score_batch(rb.tools, rb.length, gold, gold_len))),
      "success": float(np.mean(mr >= success_threshold)),
      "num_tasks": int(len(rb.task)),
  }


ROW_NAMES = {"warmup": "warm-up only", "grpo": "GRPO (beta = 0)", "phgpo": "PhGPO",
             "phgpo/policy_only": "  PhGPO, no pheromone at test"}


def format_table(results: dict[int, dict[str, dict]], runs: Sequence[str]) -> str:
  """Held-out table: mean +- std (population) over seeds of match ratio, exact match and success (%).

  PhGPO is decoded as trained (argmax of log pi + beta_max log tau); the indented row below it decodes the
  same PhGPO-trained policy with beta = 0, separating what the pheromone adds at test time.
  """
  seeds = sorted(results)
  lines = [f"Held-out TRAJECT-Bench, {len(seeds)} seed(s) {seeds}: mean +- std, percent",
           f"{'policy':<30} {'match ratio':>16} {'exact match':>16} {'success':>16}"]
  rows = []
  for kind in runs:
    rows.append(kind)
    if kind == "phgpo":
      rows.append("phgpo/policy_only")
  for row in rows:
    kind, _, sub = row.partition("/")
    per_seed = [results[s][kind] for s in seeds if kind in results[s]]
    if sub:
      per_seed = [r[sub] for r in per_seed if sub in r]
    cells = []
    for metric in ("match_ratio", "exact_match", "success"):
      vals = np.array([r[metric] for r in per_seed]) * 100
      cells.append(f"{vals.mean():7.2f} +- {vals.std():5.2f}" if len(vals) else "n/a")
    if sub and not per_seed:
      continue
    lines.append(f"{ROW_NAMES.get(row, row):<30} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
  return "\n".join(lines)
