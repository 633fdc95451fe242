"""Group-relative advantages over per-turn rows of multi-turn rollouts: GRPO's episode advantage and
GiGPO (episode groups plus step groups of identical anchor observations).

Array layout (shared with `planpo/advantages.py`). A batch holds R turn rows, padded; row r is one
policy response of one rollout:
  group_ids   i32[R] the task (group) of the row's rollout, in [0, num_groups);
  rollout_ids i32[R] the rollout, in [0, num_rollouts), unique over the batch (not per task);
  turn_ids    i32[R] the turn index t of the response within its rollout, in [0, max_turns);
  mask        bool[R] real rows (nonzero) vs padding; None means every row is real.
At most one row per (rollout, turn). Per-rollout values (outcome reward, success) are repeated on
every row of the rollout. Rows need not be contiguous or ordered. A masked row gets advantage 0 and
counts nowhere; NaN or inf in its values change neither value nor gradient.

Every function except `anchor_step_groups` (host-side NumPy) is pure and jit-compatible, with the
integers that fix shapes (`num_groups`, `num_rollouts`, `max_turns`, `num_step_groups`) static; it
works unchanged with the row axis sharded over a mesh with Auto or Explicit axes (the small per-group,
per-rollout and per-(rollout, turn) tables are replicated; per-row outputs keep the rows' sharding).
Group statistics reuse `common/estimators.py` (exact zeros for constant groups and groups of one).

Sources: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (GiGPO),
arXiv:2505.10978, sec. 3 (Eqs. 3, 5-8); its reference implementation verl-agent (gigpo/core_gigpo.py
and examples/gigpo_trainer/run_alfworld.sh, read for the defaults); SPEC.md "PlanPO" (GiGPO baseline).
"""
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from common import estimators
from common.rows import (as_valid, check_choice, check_int, check_range, check_rows, float_dtype, gather,
                         segment_min, segment_sum)

NORMS = ("std", "none")
STATS_OVER = ("rollouts", "turns")


class GiGPOAdvantages(NamedTuple):
  """GiGPO advantages per turn row (all f32[R], 0 at masked rows)."""
  advantages: jax.Array  # A = A_episode + step_weight * A_step, shared by the row's response tokens.
  episode: jax.Array  # A_episode: the rollout's episode reward normalised within its task.
  step: jax.Array  # A_step: the discounted step return normalised within its anchor step group.
  returns: jax.Array  # the discounted step return R_t of the row.


# -------------------------------------------------------------------------------------------------
# Per-rollout tables.


def rollout_table(values, rollout_ids, *, num_rollouts, mask=None):
  """A per-rollout value read off its rows, and each rollout's number of real rows.

  value_j = min over the real rows r of rollout j of values[r] (the rows are expected to carry the
  same value, not checked; the minimum keeps it exact, where a mean could round), T_j = number of
  real rows of rollout j (its turns).

  Args:
    values: f32[R] per-row values; masked entries may hold NaN or inf.
    rollout_ids: i32[R] in [0, num_rollouts).
    num_rollouts: static int.
    mask: optional bool[R].

  Returns:
    (value f32[num_rollouts], turns f32[num_rollouts]); a rollout with no real row has value 0 and
    turns 0. Both replicated under a mesh.
  """
  dtype = float_dtype(values)
  valid = as_valid(mask, values)
  turns = segment_sum(valid.astype(dtype), rollout_ids, num_rollouts)
  v = jnp.where(valid, jnp.asarray(values, dtype), jnp.inf)
  value = segment_min(v, rollout_ids, num_rollouts)
  return jnp.where(turns > 0, value, 0.0), turns


def episode_advantages(values, group_ids, rollout_ids, *, num_groups, num_rollouts, mask=None,
                       stats_over="rollouts", norm="std", eps=1e-6, ddof=1):
  """GRPO's episode advantage of a per-rollout value, broadcast to the rollout's turn rows.

  stats_over = 'rollouts':  A_i = (v_i - mean_{j in g} v_j) / F_g over the task's rollouts j;
  stats_over = 'turns':     the same with every real turn row counted (a rollout of T_i turns weighs
                            T_i in the mean and the std), as verl-agent does by default
                            (`compute_mean_std_cross_steps=True`);
  F_g = std_g + eps (norm = 'std', verl-agent "mean_std_norm") or 1 (norm = 'none', "mean_norm").
  Constant groups and groups of one give exactly 0 (verl-agent gives a group of one row its raw
  value; a task always has N > 1 rollouts, so this never arises in its runs).

  Source: GRPO (Shao et al. 2024, arXiv:2402.03300, sec. 4.1.2); GiGPO's episode relative advantage
  (Feng et al. 2025, arXiv:2505.10978, Eq. 3). GiGPO config keys `gigpo.stats_over`, `gigpo.norm`,
  `gigpo.eps`, `gigpo.ddof`.

  Args:
    values: f32[R] the rollout's value (e.g. its outcome reward) on each of its rows.
    group_ids, rollout_ids: i32[R], see the module docstring.
    num_groups, num_rollouts: static ints.
    mask: optional bool[R].
    stats_over: 'rollouts' or 'turns' (static).
    norm: 'std' or 'none' (static).
    eps: float >= 0 added to the std (norm = 'std').
    ddof: static int; 1 = sample std (default: verl-agent's torch.std), 0 = population std.

  Returns:
    f32[R] advantages, 0 at masked rows.

  Raises:
    ValueError: bad static ints or switches; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  check_int("num_groups", num_groups)
  check_int("num_rollouts", num_rollouts)
  check_choice("stats_over", stats_over, STATS_OVER, "gigpo.stats_over")
  check_choice("norm", norm, NORMS, "gigpo.norm")
  check_rows([values], [group_ids, rollout_ids], mask)
  check_range("rollout_ids", rollout_ids, num_rollouts)
  valid = as_valid(mask, values)

  def normalise(v, g, m):
    if norm == "std":
      return estimators.grpo_advantages(v, g, num_groups=num_groups, mask=m, eps=eps, ddof=ddof)
    return estimators.drgrpo_advantages(v, g, num_groups=num_groups, mask=m)

  if stats_over == "turns":
    return normalise(values, group_ids, valid)
  value, turns = rollout_table(values, rollout_ids, num_rollouts=num_rollouts, mask=valid)
  has_rows = turns > 0
  gid = segment_min(jnp.where(valid, group_ids, num_groups), rollout_ids, num_rollouts)
  gid = jnp.where(has_rows, gid, 0).astype(jnp.asarray(group_ids).dtype)
  adv = normalise(value, gid, has_rows)
  return jnp.where(valid, gather(adv, rollout_ids), 0.0)


# -------------------------------------------------------------------------------------------------
# GiGPO's step level.


def discounted_returns(step_rewards, rollout_ids, turn_ids, *, num_rollouts, max_turns, gamma=0.95,
                       mask=None):
  """Discounted step return of every turn row: R_t = r_t + gamma R_{t+1} within its rollout.

  R_t = sum_{s >= t} gamma^(s - t) r_s over the rollout's real rows s (a missing turn contributes 0).
  Computed on a replicated (num_rollouts, max_turns) table by a reverse `lax.scan`.

  Source: GiGPO (Feng et al. 2025, arXiv:2505.10978, Eq. 5); gamma = 0.95 is verl-agent's published
  setting (`algorithm.gamma` in run_alfworld.sh). GiGPO config key `gigpo.gamma`.

  Args:
    step_rewards: f32[R] per-turn environment reward r_t (e.g. 10 on the winning step, minus an
      invalid-action penalty); masked entries may hold NaN or inf.
    rollout_ids: i32[R] in [0, num_rollouts); turn_ids: i32[R] in [0, max_turns).
    num_rollouts, max_turns: static ints.
    gamma: discount in [0, 1].
    mask: optional bool[R].

  Returns:
    f32[R] returns, 0 at masked rows.

  Raises:
    ValueError: bad static ints; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  check_int("num_rollouts", num_rollouts)
  check_int("max_turns", max_turns)
  check_rows([step_rewards], [rollout_ids, turn_ids], mask)
  check_range("rollout_ids", rollout_ids, num_rollouts)
  check_range("turn_ids", turn_ids, max_turns)
  dtype = float_dtype(step_rewards)
  valid = as_valid(mask, step_rewards)
  r = jnp.where(valid, jnp.asarray(step_rewards, dtype), 0.0)
  cell = rollout_ids * max_turns + turn_ids
  table = segment_sum(r, cell, num_rollouts * max_turns).reshape(num_rollouts, max_turns)
  gamma = jnp.asarray(gamma, dtype)

  def back(carry, r_t):
    carry = r_t + gamma * carry
    return carry, carry

  _, ret = jax.lax.scan(back, jnp.zeros((num_rollouts,), dtype), table.T, reverse=True)
  return jnp.where(valid, gather(ret.T.reshape(-1), cell), 0.0)


def anchor_step_groups(group_ids, anchors: Sequence[Hashable], mask=None) -> np.ndarray:
  """Host-side step-group ids: rows of one task with identical anchor observations share an id.

  Two rows fall in the same step group iff they belong to the same task (group id) and their
  anchors are equal, whatever their rollouts and turn indices (GiGPO's anchor state grouping: an
  exact match of the raw environment observation at that turn, without history or action list).
  Ids are dense, in order of first appearance, so they lie in [0, R): `gigpo_advantages` with its
  default `num_step_groups = R` accepts them without retracing.

  Source: GiGPO (Feng et al. 2025, arXiv:2505.10978, Eq. 6); verl-agent `build_step_group` (exact
  match; its optional similarity clustering is not offered).

  Args:
    group_ids: int[R] task of each row (NumPy or concrete array).
    anchors: R hashable anchors, e.g. the observation text, a tuple of its token ids, or an integer
      hash of either (NumPy arrays and lists are turned into tuples).
    mask: optional bool[R]; masked rows get id 0 (they count nowhere).

  Returns:
    np.int32[R] step-group ids in [0, R).

  Raises:
    ValueError: anchors and group_ids differ in length.
  """
  group_ids = np.asarray(group_ids)
  if len(anchors) != len(group_ids):
    raise ValueError(f"anchors has {len(anchors)} entries but group_ids has {len(group_ids)}.")
  valid = np.ones(len(group_ids), bool) if mask is None else np.asarray(mask) != 0
  table: dict = {}
  out = np.zeros(len(group_ids), np.int32)
  for r, (g, a) in enumerate(zip(group_ids.tolist(), anchors)):
    if not valid[r]:
      continue
    if isinstance(a, (np.ndarray, list)):
      a = tuple(np.asarray(a).ravel().tolist())
    out[r] = table.setdefault((g, a), len(table))
  return out


def gigpo_advantages(episode_rewards, step_rewards, group_ids, rollout_ids, turn_ids, step_group_ids,
                     *, num_groups, num_rollouts, max_turns, num_step_groups=None, mask=None,
                     gamma=0.95, step_weight=1.0, norm="std", stats_over="turns", eps=1e-6, ddof=1):
  """GiGPO advantage of every turn row: an episode-level plus a step-level group-relative advantage.

  A^E_i   = episode_advantages(episode reward) over the task's rollouts (GRPO);
  R_{i,t} = discounted_returns(step rewards), gamma;
  A^S_r   = (R_r - mean_{s in S(r)} R_s) / F, S(r) = the rows of the same task with the same anchor
            observation (`anchor_step_groups`), across rollouts and turn indices; a singleton step
            group gets 0;
  A_r     = A^E_{i(r)} + step_weight * A^S_r, shared by all tokens of the row's response.
  F = std + eps (norm = 'std') or 1 ('none'), for both levels.

  Defaults are verl-agent's published ALFWorld setting (run_alfworld.sh and core_gigpo.py): gamma
  0.95, step_weight (omega) 1.0, norm 'std' ("mean_std_norm"; the function's own default there is
  "mean_norm"), eps 1e-6, sample std (torch.std, ddof = 1), episode statistics over turn rows
  (`compute_mean_std_cross_steps=True`; the paper's Eq. 3 is over rollouts: stats_over='rollouts').
  GiGPO config keys `gigpo.gamma`, `gigpo.step_weight`, `gigpo.norm`, `gigpo.stats_over`,
  `gigpo.eps` and `gigpo.ddof`.
  Source: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
  arXiv:2505.10978, sec. 3, Eqs. 3 and 5-8; SPEC.md "PlanPO" (GiGPO baseline).

  Args:
    episode_rewards: f32[R] the rollout's outcome reward on each of its rows.
    step_rewards: f32[R] per-turn environment reward r_t.
    group_ids, rollout_ids, turn_ids: i32[R], see the module docstring.
    step_group_ids: i32[R] in [0, num_step_groups), equal for rows of the same task with identical
      anchor observations (build with `anchor_step_groups`; step groups must not span tasks).
    num_groups, num_rollouts, max_turns: static ints.
    num_step_groups: static int; None means R (enough for `anchor_step_groups` ids).
    mask: optional bool[R].
    gamma, step_weight, norm, stats_over, eps, ddof: see above.

  Returns:
    GiGPOAdvantages (advantages, episode, step, returns), each f32[R], 0 at masked rows.

  Raises:
    ValueError: bad static ints or switches; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  if num_step_groups is None:
    num_step_groups = int(jnp.shape(step_group_ids)[0])
  check_int("num_step_groups", num_step_groups)
  check_choice("norm", norm, NORMS, "gigpo.norm")
  check_rows([episode_rewards, step_rewards],
             [group_ids, rollout_ids, turn_ids, step_group_ids], mask)
  valid = as_valid(mask, episode_rewards)
  episode = episode_advantages(episode_rewards, group_ids, rollout_ids, num_groups=num_groups,
                               num_rollouts=num_rollouts, mask=valid, stats_over=stats_over,
                               norm=norm, eps=eps, ddof=ddof)
  returns = discounted_returns(step_rewards, rollout_ids, turn_ids, num_rollouts=num_rollouts,
                               max_turns=max_turns, gamma=gamma, mask=valid)
  if norm == "std":
    step = estimators.grpo_advantages(returns, step_group_ids, num_groups=num_step_groups,
                                      mask=valid, eps=eps, ddof=ddof)
  else:
    step = estimators.drgrpo_advantages(returns, step_group_ids, num_groups=num_step_groups,
                                        mask=valid)
  return GiGPOAdvantages(advantages=episode + step_weight * step, episode=episode, step=step,
                         returns=returns)
