"""Teacher statistics: pass@k per task, the difficulty filter, and the summary of a teacher run.

Difficulty filter (ProgAgent 2026, "task synthesis"; SPEC.md, ProgAgent): keep tasks whose pass@8 of a strong
teacher under PTC lies in the open interval (0, 0.8). The source leaves the estimator's sample count open.
With n == k samples the unbiased pass@k is 1 as soon as one sample succeeds, so pass@8 from 8 samples is
0 or 1 and the interval keeps nothing. Two statistics are offered (`stat`, CLI --filter-stat):
  'pass_at_k'  the unbiased pass@filter_k from all n samples (the default, the literal reading); needs
               n > filter_k to be fractional: draw --k 16 or more;
  'mean'       the fraction of successes c / n (= the unbiased pass@1; the "average@n" reading).
pass@k = 1 - C(n-c, k)/C(n, k) (common.metrics.pass_at_k; Chen et al. 2021, arXiv:2107.03374, eq. 1).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from common import metrics as metrics_lib

FILTER_STATS = ("pass_at_k", "mean")


def pass_at_k_table(records: Iterable[Mapping[str, Any]], ks: Sequence[int] = (1, 8)) -> dict[str, dict]:
  """Per task: {'n', 'c', 'success_rate', 'pass@<k>' for each k <= n} from the records' successes.

  A success is reward >= 1 (the verifier is binary). pass@k = 1 - C(n-c, k)/C(n, k) (unbiased;
  common.metrics.pass_at_k); k values above a task's n are left out for that task.
  """
  counts: dict[str, list[int]] = {}
  for r in records:
    n_c = counts.setdefault(r["task_id"], [0, 0])
    n_c[0] += 1
    n_c[1] += int(float(r["reward"]) >= 1.0)
  out = {}
  for tid, (n, c) in counts.items():
    row: dict[str, Any] = {"n": n, "c": c, "success_rate": c / n}
    for k in ks:
      if k <= n:
        row[f"pass@{k}"] = float(metrics_lib.pass_at_k(n, c, k))
    out[tid] = row
  return out


def filter_statistic(n: int, c: int, *, stat: str = "pass_at_k", k: int = 8) -> float:
  """The difficulty filter's statistic of a task with c successes in n samples (see the module docstring).

  Raises:
    ValueError: unknown stat, or 'pass_at_k' with n < k.
  """
  if stat == "pass_at_k":
    if n < k:
      raise ValueError(f"the filter's pass@{k} needs at least {k} samples per task, a task has {n}; "
                       f"collect with --k {max(k, 16)} or lower --filter-k")
    return float(metrics_lib.pass_at_k(n, c, k))
  if stat == "mean":
    return c / n
  raise ValueError(f"filter statistic must be one of {FILTER_STATS}, got {stat!r}")


def difficulty_filter(table: Mapping[str, Mapping[str, Any]], *, stat: str = "pass_at_k", k: int = 8,
                      low: float = 0.0, high: float = 0.8) -> dict[str, float]:
  """Tasks to keep: {task_id: statistic} for those whose statistic lies in the open interval (low, high).

  Source: ProgAgent (2026): keep tasks whose pass@8 (strong teacher, PTC) lies in (0, 0.8).
  """
  kept = {}
  for tid, row in table.items():
    s = filter_statistic(int(row["n"]), int(row["c"]), stat=stat, k=k)
    if low < s < high:
      kept[tid] = s
  return kept


def summarize(records: Sequence[Mapping[str, Any]], *, ks: Sequence[int] = (1, 8), filter_stat: str = "pass_at_k",
              filter_k: int = 8, low: float = 0.0, high: float = 0.8) -> dict:
  """{'tasks': per-task table (+ 'filter_stat'), 'kept': [task ids], 'totals': means over episodes}."""
  table = pass_at_k_table(records, ks)
  for tid, row in table.items():
    row["filter_stat"] = filter_statistic(row["n"], row["c"], stat=filter_stat, k=filter_k)
  kept = difficulty_filter(table, stat=filter_stat, k=filter_k, low=low, high=high)
  fields = ("turns", "tool_calls", "tool_errors", "parse_errors", "program_errors", "errors", "context_tokens",
            "observation_tokens", "action_tokens")
  totals: dict[str, Any] = {"episodes": len(records), "tasks": len(table),
                            "success_rate": float(np.mean([float(r["reward"]) >= 1.0 for r in records]))
                            if records else 0.0}
  for f in fields:
    vals = [r["stats"][f] for r in records if f in r.get("stats", {})]
    totals[f"mean_{f}"] = float(np.mean(vals)) if vals else 0.0
  for f in ("prompt_tokens", "completion_tokens", "requests"):
    vals = [r["usage"][f] for r in records if r.get("usage")]
    totals[f"usage_{f}"] = int(sum(vals))
  for k in ks:
    vals = [row[f"pass@{k}"] for row in table.values() if f"pass@{k}" in row]
    if vals:
      totals[f"mean_pass@{k}"] = float(np.mean(vals))
  return {"tasks": table, "kept": sorted(kept), "totals": totals,
          "filter": {"stat": filter_stat, "k": filter_k, "low": low, "high": high}}


def format_summary(summary: Mapping[str, Any], ks: Sequence[int]) -> str:
  cols = [f"pass@{k}" for k in ks]
  lines = [f"{'task':40s} {'n':>3s} {'c':>3s} " + " ".join(f"{c:>8s}" for c in cols) + f" {'filter':>8s} kept"]
  kept = set(summary["kept"])
  for tid, row in summary["tasks"].items():
    vals = " ".join(f"{row[c]:8.3f}" if c in row else f"{'-':>8s}" for c in cols)
    lines.append(f"{tid:40s} {row['n']:3d} {row['c']:3d} {vals} {row['filter_stat']:8.3f} "
                 f"{'yes' if tid in kept else 'no'}")
  t = summary["totals"]
  lines.append(f"kept {len(kept)}/{t['tasks']} tasks; episodes {t['episodes']}, success rate "
               f"{t['success_rate']:.3f}, mean tool calls {t['mean_tool_calls']:.2f}, mean errors "
               f"{t['mean_errors']:.2f}, mean context tokens {t['mean_context_tokens']:.0f}")
  return "\n".join(lines)
