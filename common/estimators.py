"""Grouped advantage estimators over flat rollout batches: GRPO, Dr.GRPO and RLOO.

A batch holds N rollouts; rollout i belongs to the group (task) `group_ids[i]`, an integer in
[0, num_groups). Groups need not be contiguous or equally sized, and an optional boolean `mask`
drops rollouts (padding, failed environment calls): a masked rollout gets advantage 0 and does not
count in its group's statistics. Every function here is pure, takes `num_groups` as a static Python
int, and works unchanged with the batch axis sharded over a device mesh with Auto or Explicit axes
(see `common/lm/sharding.py`; the per-row primitives are `common/rows.py`).

Numerics. Group statistics are computed on rewards shifted by their group's minimum (a shift that
cancels exactly in every estimator, held out of the gradient with `stop_gradient`). Consequently a
group whose valid rewards are all equal has deviations that are exactly 0.0 in float32, and every
estimator returns exactly 0 for it, whatever the reward values (e.g. [0.1, 0.1, 0.1], where a plain
`sum / n` mean leaves round-off residues that `/ (std + eps)` turns into advantages ~1e-3). A group
of one always gets 0, never NaN, with population or sample std.

Source: SPEC.md, "Common core".
"""
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from common import rows

ESTIMATORS = ("grpo", "drgrpo", "rloo")


class _Moments(NamedTuple):
  """Per-group moments, with per-rollout deviations (internal)."""
  count: jax.Array  # f32[G] number of valid rollouts per group.
  mean: jax.Array  # f32[G] group mean (0 for an empty group).
  std: jax.Array  # f32[G] group std with the requested ddof (0 when count <= ddof).
  dev: jax.Array  # f32[N] r_i - mean_g for valid rollouts, exactly 0 for masked ones.
  valid: jax.Array  # bool[N] the mask as booleans.


# -------------------------------------------------------------------------------------------------
# Validation.


def _check_static(num_groups, ddof, eps=None):
  if (isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer))
      or num_groups < 1):
    raise ValueError(
        f"num_groups must be a positive Python int (static under jit: pass it with "
        f"static_argnames=('num_groups',)), got {num_groups!r}.")
  if isinstance(ddof, bool) or not isinstance(ddof, (int, np.integer)) or ddof < 0:
    raise ValueError(f"ddof must be a non-negative Python int (0: population std, 1: sample std), "
                     f"got {ddof!r}.")
  if eps is not None and not isinstance(eps, jax.core.Tracer) and float(eps) < 0:
    raise ValueError(f"eps must be >= 0, got {eps!r}.")


def _check_inputs(values, group_ids, mask, num_groups):
  """Checks rank, shape and dtype; checks the group-id range when the ids are concrete."""
  chex.assert_rank(values, 1)
  chex.assert_type(values, float)
  chex.assert_rank(group_ids, 1)
  chex.assert_type(group_ids, int)
  chex.assert_equal_shape([values, group_ids])
  if mask is not None:
    chex.assert_equal_shape([values, mask])
  if not isinstance(group_ids, jax.core.Tracer):
    ids = np.asarray(group_ids)
    if ids.size and (ids.min() < 0 or ids.max() >= num_groups):
      raise ValueError(
          f"group_ids must lie in [0, num_groups) = [0, {num_groups}), got values in "
          f"[{ids.min()}, {ids.max()}]: renumber the groups (e.g. with "
          f"np.unique(..., return_inverse=True)) or raise num_groups. (Not checked under jit, "
          f"where out-of-range ids are silently dropped.)")


def _moments(values, group_ids, num_groups, mask, ddof) -> _Moments:
  """Shifted two-pass group moments; see the module docstring."""
  dtype = rows.float_dtype(values)
  valid = rows.as_valid(mask, values)
  # Double-where: NaN/inf in masked positions never reaches an arithmetic op (value or gradient).
  v = jnp.where(valid, jnp.asarray(values, dtype), 0.0)
  count = rows.segment_sum(valid.astype(dtype), group_ids, num_groups)
  big = jnp.asarray(jnp.inf, dtype)
  gmin = rows.segment_min(jnp.where(valid, v, big), group_ids, num_groups)
  shift = jax.lax.stop_gradient(jnp.where(count > 0, gmin, 0.0))
  centered = jnp.where(valid, v - rows.gather(shift, group_ids), 0.0)
  cmean = rows.safe_div(rows.segment_sum(centered, group_ids, num_groups), count)
  dev = jnp.where(valid, centered - rows.gather(cmean, group_ids), 0.0)
  sum_sq = rows.segment_sum(dev * dev, group_ids, num_groups)
  var = rows.safe_div(sum_sq, count - ddof)
  return _Moments(count=count, mean=shift + cmean, std=rows.safe_sqrt(var), dev=dev, valid=valid)


# -------------------------------------------------------------------------------------------------
# Public API.


def group_stats(values, group_ids, *, num_groups, mask=None, ddof=0):
  """Per-group mean, standard deviation and count of the valid entries of `values`.

  mean_g = (1/n_g) sum_{i in g} v_i,  std_g = sqrt( sum_{i in g} (v_i - mean_g)^2 / (n_g - ddof) ),
  n_g = number of valid (unmasked) rollouts with group_ids[i] = g.

  Source: SPEC.md "Common core" (group statistics of GRPO).

  Args:
    values: f32[N] per-rollout values (e.g. rewards). Masked entries may hold NaN or inf.
    group_ids: i32[N] group of each rollout, in [0, num_groups); groups need not be contiguous.
    num_groups: static Python int G >= 1.
    mask: optional bool[N] (nonzero = valid); None means all valid. Masked rollouts are excluded.
    ddof: static int, delta degrees of freedom: 0 = population std (default), 1 = sample std.
      Config key `advantage.ddof`.

  Returns:
    (mean f32[G], std f32[G], count f32[G]). An empty group has mean 0, std 0, count 0; a group with
    n_g <= ddof (e.g. a group of one with ddof=1) has std 0, never NaN.

  Raises:
    ValueError: num_groups or ddof not valid Python ints; group_ids out of [0, num_groups) (checked
      only when group_ids is concrete, i.e. outside jit).
    AssertionError: wrong rank, shape or dtype (at trace time).

  Notes: under jit, out-of-range group ids are silently dropped by the scatter.
  """
  _check_static(num_groups, ddof)
  _check_inputs(values, group_ids, mask, num_groups)
  m = _moments(values, group_ids, num_groups, mask, ddof)
  return m.mean, m.std, m.count


def grpo_advantages(rewards, group_ids, *, num_groups, mask=None, eps=1e-6, ddof=0):
  """Group-relative advantage: each reward standardised within its task's group.

  A_i = (R_i - mean_g) / (std_g + eps), g = group_ids[i].
  A group whose valid rewards are all equal gets exactly 0 (never NaN); a group of one gets exactly
  0 (also with ddof=1); masked rollouts get 0 and do not count in their group's mean or std.

  Source: Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
  Language Models", arXiv:2402.03300, sec. 4.1.2 (outcome supervision); SPEC.md "Common core".
  The paper does not fix the std: we default to the population std (ddof=0), config key
  `advantage.ddof` (1 = sample std). With rewards [0, 1], ddof=0 gives [-1, +1] and ddof=1 gives
  [-0.7071, +0.7071] (eps=0). eps: config key `advantage.eps`.

  Args:
    rewards: f32[N] outcome reward per rollout. Masked entries may hold NaN or inf.
    group_ids: i32[N] in [0, num_groups); groups need not be contiguous.
    num_groups: static Python int G >= 1.
    mask: optional bool[N] (nonzero = valid rollout); None means all valid.
    eps: float >= 0 added to the std in the denominator.
    ddof: static int, 0 = population std (default), 1 = sample std.

  Returns:
    f32[N] advantages (dimensionless), 0 at masked rollouts.

  Raises:
    ValueError: bad num_groups, ddof or eps; group_ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _check_static(num_groups, ddof, eps)
  _check_inputs(rewards, group_ids, mask, num_groups)
  m = _moments(rewards, group_ids, num_groups, mask, ddof)
  adv = rows.safe_div(m.dev, rows.gather(m.std, group_ids) + eps)
  return jnp.where(m.valid, adv, 0.0)


def drgrpo_advantages(rewards, group_ids, *, num_groups, mask=None):
  """Dr.GRPO advantage: the group-mean baseline without the std division.

  A_i = R_i - mean_g, g = group_ids[i]; exactly 0 for a constant group, a group of one and a masked
  rollout (masked rollouts do not count in the mean).

  Source: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
  arXiv:2503.20783 (Dr. GRPO removes the std normalisation, which up-weights questions that are too
  easy or too hard).

  Args:
    rewards: f32[N] outcome reward per rollout. Masked entries may hold NaN or inf.
    group_ids: i32[N] in [0, num_groups).
    num_groups: static Python int G >= 1.
    mask: optional bool[N] (nonzero = valid); None means all valid.

  Returns:
    f32[N] advantages in reward units, 0 at masked rollouts.

  Raises:
    ValueError: bad num_groups; group_ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _check_static(num_groups, 0)
  _check_inputs(rewards, group_ids, mask, num_groups)
  m = _moments(rewards, group_ids, num_groups, mask, 0)
  return m.dev


def rloo_advantages(rewards, group_ids, *, num_groups, mask=None):
  """REINFORCE leave-one-out advantage: each reward minus the mean of the others in its group.

  A_i = R_i - (1/(n_g - 1)) sum_{j in g, j != i} R_j = n_g/(n_g - 1) * (R_i - mean_g).
  A group of one (no other sample to form a baseline) gets 0; so does a constant group (exactly) and
  a masked rollout (which is also left out of the others' baselines).

  Source: Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!" (ICLR workshop
  DeepRLStructPred); Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
  Optimization for Learning from Human Feedback in LLMs", arXiv:2402.14740 (the RLOO estimator).

  Args:
    rewards: f32[N] outcome reward per rollout. Masked entries may hold NaN or inf.
    group_ids: i32[N] in [0, num_groups).
    num_groups: static Python int G >= 1.
    mask: optional bool[N] (nonzero = valid); None means all valid.

  Returns:
    f32[N] advantages in reward units, 0 at masked rollouts and in groups of one.

  Raises:
    ValueError: bad num_groups; group_ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _check_static(num_groups, 0)
  _check_inputs(rewards, group_ids, mask, num_groups)
  m = _moments(rewards, group_ids, num_groups, mask, 0)
  n = rows.gather(m.count, group_ids)
  return rows.safe_div(n * m.dev, n - 1.0)


def compute_advantages(estimator: str, rewards, group_ids, *, num_groups, mask=None, eps=1e-6,
                       ddof=0):
  """Dispatches to one grouped advantage estimator by name (config key `advantage.estimator`).

  Args:
    estimator: 'grpo' (standardised, `grpo_advantages`), 'drgrpo' (mean baseline only,
      `drgrpo_advantages`) or 'rloo' (leave-one-out baseline, `rloo_advantages`). Static.
    rewards: f32[N] outcome reward per rollout.
    group_ids: i32[N] in [0, num_groups).
    num_groups: static Python int G >= 1.
    mask: optional bool[N] (nonzero = valid); None means all valid.
    eps: std offset, used by 'grpo' only (config key `advantage.eps`).
    ddof: 0 = population std (default), 1 = sample std; used by 'grpo' only (`advantage.ddof`).

  Returns:
    f32[N] advantages, 0 at masked rollouts.

  Raises:
    ValueError: unknown estimator name (the message lists the valid names), or any error of the
      chosen estimator.
  """
  if estimator == "grpo":
    return grpo_advantages(rewards, group_ids, num_groups=num_groups, mask=mask, eps=eps, ddof=ddof)
  if estimator == "drgrpo":
    _check_static(num_groups, ddof, eps)
    return drgrpo_advantages(rewards, group_ids, num_groups=num_groups, mask=mask)
  if estimator == "rloo":
    _check_static(num_groups, ddof, eps)
    return rloo_advantages(rewards, group_ids, num_groups=num_groups, mask=mask)
  raise ValueError(f"Unknown advantage estimator {estimator!r}; valid names are "
                   f"{', '.join(repr(e) for e in ESTIMATORS)} (config key `advantage.estimator`).")
