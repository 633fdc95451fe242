"""Benchmark: PlanPO and GiGPO advantages on turn rows, jit-compiled JAX vs per-group NumPy loops.

Run:  python -m benchmarks.planpo_advantages_bench [--quick] [--json FILE]

The batch (the per-turn-row layout of `common/gigpo.py`): 512 tasks x 8 rollouts (64 tasks with
--quick), each rollout of 1..max_turns = 20 turns (uniform), success drawn per rollout with a
per-task success rate (so some tasks fail everywhere), outcome reward 10 on success and 0 otherwise,
10..200 policy tokens per response; rows shuffled (non-contiguous groups) and padded to a multiple
of 4,096 with mask False. GiGPO's step rewards are 10 on the last turn of a success minus an
invalid-action penalty 0.1 on 10% of the turns; its anchor step groups share the first observation
of a task and otherwise draw one of 3 states per (task, turn index).

Measured in the same run, on the same data:
  * jax:        `planpo.advantages.planpo_advantages` (defaults: step groups per turn index,
                statistics over rollouts, std with ddof 1 + eps 1e-6; alpha 0.1) and
                `common.gigpo.gigpo_advantages` (defaults: verl-agent's setting, gamma 0.95,
                episode statistics over turn rows), each under jax.jit, compile and warm-up
                excluded, `block_until_ready` on every call;
  * numpy_loop: a straightforward per-group NumPy/Python loop of the same quantities (groups found
                once with argsort, then one loop iteration per task, per (task, turn) group, per
                rollout or per step group).
The loop results are checked against the jitted ones before timing (max |diff| <= 1e-4 on the
advantage and both of its terms, or an AssertionError). Each time is the median of several repeats;
the ratio is numpy_loop / jax (> 1 when JAX is faster). Ratios are the point; absolute times depend
on the machine.
"""
import functools
import statistics
import time

import jax
import numpy as np

from benchmarks import _cli
from common import gigpo
from planpo import advantages

EPS, DDOF = 1e-6, 1
ALPHA = 0.1  # alpha(k) at the start of the published schedule (planpo/schedule.py).
GAMMA, STEP_WEIGHT = 0.95, 1.0  # GiGPO's published ALFWorld setting.
SUCCESS_REWARD, INVALID_PENALTY, INVALID_RATE = 10.0, 0.1, 0.1
NUM_ANCHOR_STATES = 3
PAD_MULTIPLE = 4096
TOL = 1e-4


def _make_batch(num_tasks, rollouts_per_task, max_turns, seed=0):
  """Per-turn rows of num_tasks x rollouts_per_task rollouts, shuffled and padded (module doc)."""
  rng = np.random.default_rng(seed)
  num_rollouts = num_tasks * rollouts_per_task
  rollout_group = np.repeat(np.arange(num_tasks), rollouts_per_task)
  turns = rng.integers(1, max_turns + 1, num_rollouts)
  task_rate = rng.random(num_tasks)
  succ = rng.random(num_rollouts) < task_rate[rollout_group]
  rid = np.repeat(np.arange(num_rollouts), turns)
  tid = np.concatenate([np.arange(t) for t in turns])
  n = rid.size
  gid = rollout_group[rid]
  success = succ[rid]
  rewards = np.where(success, SUCCESS_REWARD, 0.0)
  lengths = rng.integers(10, 201, n)
  last = tid == turns[rid] - 1
  step_rewards = (np.where(success & last, SUCCESS_REWARD, 0.0)
                  - np.where(rng.random(n) < INVALID_RATE, INVALID_PENALTY, 0.0))
  state = np.where(tid == 0, 0, rng.integers(0, NUM_ANCHOR_STATES, n))
  anchor = (gid * max_turns + tid) * NUM_ANCHOR_STATES + state
  _, step_gid = np.unique(anchor, return_inverse=True)
  padded = -(-n // PAD_MULTIPLE) * PAD_MULTIPLE
  perm = rng.permutation(padded)  # real rows scattered among the padding

  def place(values, dtype):
    out = np.zeros(padded, dtype)
    out[perm[:n]] = values
    return out

  mask = place(np.ones(n, bool), bool)
  batch = dict(
      rewards=place(rewards, np.float32), success=place(success, bool),
      lengths=place(lengths, np.int32), step_rewards=place(step_rewards, np.float32),
      group_ids=place(gid, np.int32), rollout_ids=place(rid, np.int32),
      turn_ids=place(tid, np.int32), step_group_ids=place(step_gid.ravel(), np.int32), mask=mask)
  sizes = dict(num_groups=num_tasks, num_rollouts=num_rollouts, max_turns=max_turns,
               num_step_groups=padded, n_rows=n, n_rows_padded=padded)
  return batch, sizes


# ------------------------------------------------------------------------------------------------
# Per-group NumPy/Python loops (the baseline).


def _group_slices(ids, valid, num):
  """Row indices of each id in [0, num) among the valid rows (one argsort, as a loop would)."""
  rows = np.flatnonzero(valid)
  order = rows[np.argsort(ids[rows], kind="stable")]
  bounds = np.searchsorted(ids[order], np.arange(num + 1))
  return order, bounds


def _normalise(v, eps=EPS, ddof=DDOF):
  """(v - mean) / (std + eps); exactly 0 for a constant group or one of <= ddof members."""
  if v.size <= ddof or np.all(v == v[0]):
    return np.zeros_like(v)
  return (v - v.mean()) / (v.std(ddof=ddof) + eps)


def planpo_numpy_loop(rewards, success, lengths, group_ids, rollout_ids, turn_ids, mask, *,
                      num_groups, alpha=ALPHA):
  """PlanPO per task: R_E = 1[success] R / T_i normalised over the task's rollouts (A_E), R_S =
  1[success] R / L normalised within each turn-index group (A_S).

  Returns (A_E + alpha A_S, A_E, A_S), f64 per row, 0 at masked rows.
  """
  a_e = np.zeros(rewards.shape, np.float64)
  a_s = np.zeros(rewards.shape, np.float64)
  order, bounds = _group_slices(group_ids, mask, num_groups)
  for g in range(num_groups):
    rows = order[bounds[g]:bounds[g + 1]]
    if rows.size == 0:
      continue
    # Trajectory level: one value per rollout of the task.
    _, first, inv, t_i = np.unique(rollout_ids[rows], return_index=True, return_inverse=True,
                                   return_counts=True)
    head = rows[first]
    r_e = np.where(success[head], rewards[head].astype(np.float64), 0.0) / t_i
    a_e[rows] = _normalise(r_e)[inv.ravel()]
    # Response level: one group per turn index, rollouts still active at that turn.
    length = lengths[rows].astype(np.float64)
    r_s = np.where(success[rows], rewards[rows].astype(np.float64), 0.0) / np.maximum(length, 1)
    turns = turn_ids[rows]
    for t in np.unique(turns):
      sel = (turns == t) & (length > 0)
      a_s[rows[sel]] = _normalise(r_s[sel])
  return a_e + alpha * a_s, a_e, a_s


def gigpo_numpy_loop(episode_rewards, step_rewards, group_ids, rollout_ids, turn_ids,
                     step_group_ids, mask, *, num_groups, num_rollouts, num_step_groups,
                     gamma=GAMMA, step_weight=STEP_WEIGHT):
  """GiGPO: episode reward normalised over the task's turn rows, discounted returns per rollout,
  returns normalised within each anchor step group; returns (A, A_episode, A_step)."""
  episode = np.zeros(episode_rewards.shape, np.float64)
  returns = np.zeros(episode_rewards.shape, np.float64)
  step = np.zeros(episode_rewards.shape, np.float64)
  order, bounds = _group_slices(group_ids, mask, num_groups)
  for g in range(num_groups):
    rows = order[bounds[g]:bounds[g + 1]]
    if rows.size:
      episode[rows] = _normalise(episode_rewards[rows].astype(np.float64))
  order, bounds = _group_slices(rollout_ids, mask, num_rollouts)
  for j in range(num_rollouts):
    rows = order[bounds[j]:bounds[j + 1]]
    rows = rows[np.argsort(turn_ids[rows])]
    ret, next_t = 0.0, None
    for r in rows[::-1]:  # R_t = r_t + gamma R_{t+1}, a missing turn contributing 0
      t = int(turn_ids[r])
      ret = float(step_rewards[r]) + (0.0 if next_t is None else gamma ** (next_t - t) * ret)
      returns[r], next_t = ret, t
  order, bounds = _group_slices(step_group_ids, mask, num_step_groups)
  for s in np.flatnonzero(np.diff(bounds)):
    rows = order[bounds[s]:bounds[s + 1]]
    step[rows] = _normalise(returns[rows])
  return episode + step_weight * step, episode, step


# ------------------------------------------------------------------------------------------------


def _median_seconds(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _max_diff(jitted, loop, name):
  """Largest |jit - loop| over the advantage and its two terms; AssertionError above TOL."""
  diff = float(max(np.abs(np.asarray(a, np.float64) - b).max() for a, b in zip(jitted, loop)))
  if not diff <= TOL:
    raise AssertionError(f"{name}: jit and NumPy loop disagree, max |diff| = {diff:.3e} > {TOL}")
  return diff


def run(quick: bool = False) -> dict:
  """Runs the benchmark, prints a table and returns its numbers.

  Args:
    quick: 64 tasks instead of 512 and fewer repeats, for smoke tests.

  Returns:
    dict with n_tasks, rollouts_per_task, max_turns, n_rows, n_rows_padded, backend, repeats, and
    for each of 'planpo' and 'gigpo': {jax_ms, numpy_loop_ms, speedup_vs_loop (numpy_loop / jax),
    max_abs_diff (largest |jit - loop| over the advantage, episode and step terms)}.

  Raises:
    AssertionError: a loop result differs from the jitted one by more than 1e-4.
  """
  num_tasks, rollouts_per_task, max_turns = (64, 8, 20) if quick else (512, 8, 20)
  repeats = 3 if quick else 7
  b, sz = _make_batch(num_tasks, rollouts_per_task, max_turns)
  d = {k: jax.device_put(v) for k, v in b.items()}
  cases = {}

  planpo_fn = jax.jit(functools.partial(
      advantages.planpo_advantages, num_groups=sz["num_groups"], num_rollouts=sz["num_rollouts"],
      max_turns=max_turns, alpha=ALPHA, eps=EPS, ddof=DDOF))
  planpo_args = [d[k] for k in ("rewards", "success", "lengths", "group_ids", "rollout_ids",
                                "turn_ids")]
  planpo_jax = lambda: jax.block_until_ready(planpo_fn(*planpo_args, mask=d["mask"]))
  planpo_loop = functools.partial(
      planpo_numpy_loop, *[b[k] for k in ("rewards", "success", "lengths", "group_ids",
                                          "rollout_ids", "turn_ids", "mask")],
      num_groups=sz["num_groups"])
  cases["planpo"] = (planpo_jax, planpo_loop)

  gigpo_fn = jax.jit(functools.partial(
      gigpo.gigpo_advantages, num_groups=sz["num_groups"], num_rollouts=sz["num_rollouts"],
      max_turns=max_turns, num_step_groups=sz["num_step_groups"], gamma=GAMMA,
      step_weight=STEP_WEIGHT, eps=EPS, ddof=DDOF))
  gigpo_args = [d[k] for k in ("rewards", "step_rewards", "group_ids", "rollout_ids", "turn_ids",
                               "step_group_ids")]
  gigpo_jax = lambda: jax.block_until_ready(gigpo_fn(*gigpo_args, mask=d["mask"])[:3])
  gigpo_loop = functools.partial(
      gigpo_numpy_loop, *[b[k] for k in ("rewards", "step_rewards", "group_ids", "rollout_ids",
                                         "turn_ids", "step_group_ids", "mask")],
      num_groups=sz["num_groups"], num_rollouts=sz["num_rollouts"],
      num_step_groups=sz["num_step_groups"])
  cases["gigpo"] = (gigpo_jax, gigpo_loop)

  result = dict(n_tasks=num_tasks, rollouts_per_task=rollouts_per_task, max_turns=max_turns,
                n_rows=sz["n_rows"], n_rows_padded=sz["n_rows_padded"],
                backend=jax.default_backend(), repeats=repeats)
  for name, (jax_call, loop_call) in cases.items():
    out_jax = jax_call()  # compile + warm-up
    jax_call()
    diff = _max_diff(out_jax, loop_call(), name)  # checked before timing
    jax_s = _median_seconds(jax_call, repeats)
    loop_s = _median_seconds(loop_call, max(1, repeats // 2))
    result[name] = dict(jax_ms=jax_s * 1e3, numpy_loop_ms=loop_s * 1e3,
                        speedup_vs_loop=loop_s / jax_s, max_abs_diff=diff)

  print(f"PlanPO / GiGPO advantages, {num_tasks} tasks x {rollouts_per_task} rollouts, "
        f"{result['n_rows']:,} turn rows padded to {result['n_rows_padded']:,} "
        f"(max_turns {max_turns}; backend {result['backend']}, median of {repeats}):")
  for name, label in (("planpo", "PlanPO"), ("gigpo", "GiGPO")):
    r = result[name]
    print(f"  {label:<7}jax.jit            {r['jax_ms']:9.3f} ms")
    print(f"  {label:<7}numpy per-group    {r['numpy_loop_ms']:9.3f} ms   "
          f"ratio {r['speedup_vs_loop']:7.1f}x")
  print(f"  max |difference| jit vs loop: PlanPO {result['planpo']['max_abs_diff']:.2e}, "
        f"GiGPO {result['gigpo']['max_abs_diff']:.2e}")
  return result


def main():
  _cli.main(run, __doc__)


if __name__ == "__main__":
  main()
