"""PlanPO advantages: success-conditioned length normalisation at the trajectory and response level.

For a task x with N rollouts and G_x the set of successful ones:
  R_E(tau_i)   = 1[i in G_x] R(tau_i) / T_i          (T_i = number of turns of rollout i),
  R_S(a_{i,t}) = 1[i in G_x] R(tau_i) / L_{i,t}      (L_{i,t} = policy tokens of response t of i),
  A_E = group normalisation of R_E over the task's rollouts, A_S = group normalisation of R_S within
  the response groups, and the token advantage A(a_{i,t}) = A_E(tau_i) + alpha(k) A_S(a_{i,t})
  (alpha(k): `planpo/schedule.py`). Shorter successes score higher; every failure sits below every
  success in R_E, so length normalisation acts only inside the success set.

Array layout: per-turn rows, as in `common/gigpo.py` (group_ids, rollout_ids, turn_ids, mask; the
rollout's reward and success flag repeated on each of its rows; `lengths` per row). All functions are
pure, jit-compatible with the integers that fix shapes static, and run unchanged with the row axis
sharded over a mesh with Auto or Explicit axes.

Choices the paper leaves open, and the config keys that change them (defaults first):
  - whose statistics for A_E: the task's rollouts (the paper's equation) or every turn row (the
    reference framework, a long rollout counting T_i times): config key `planpo.stats_over`
    ('rollouts' | 'turns');
  - the A_S groups: one per turn index t holding every rollout still active at t, failures included
    with R_S = 0 (Eq. 4 and its figure), or one group of all responses of the task's successful
    rollouts, failures getting A_S = 0 (the prose): config key `planpo.step_grouping`
    ('turn' | 'success');
  - F_norm = std + eps or 1: config key `planpo.norm` ('std' | 'none'); eps (unstated; the reference
    framework's 1e-6): config key `planpo.eps`; the std's ddof (the reference framework's torch.std,
    sample std, ddof = 1): config key `planpo.ddof`;
  - T_i ("valid" turns, undefined in the paper): every real turn row of the rollout, as the reference
    framework counts active turns;
  - L_{i,t}: the policy's own tokens only (never prompt, observation or template tokens); a row with
    L <= 0 is left out of the A_S groups and gets A_S = 0.
  - the invalid-action penalty and any per-turn cost (not in the paper's equations; verl-agent subtracts its
    invalid_action_penalty_coef from the step reward). One rule for every method, so GRPO, GiGPO, PlanPO and
    the ablations are compared on the same returns (`return_penalties`, planpo.train.compute_advantages):
      episode level   the rollout's return is R_i - P_i, P_i = sum_t p_{i,t} (its turns' penalties); in
                      R_E the success indicator keeps its place: R_E = (1[i in G_x] R_i - P_i) / T_i;
      response level  an invalid response earns no share of the outcome and pays its own penalty:
                      R_S(a_{i,t}) = 1[i in G_x and a_{i,t} valid] R_i / L_{i,t} - p_{i,t}
                      (GiGPO's step reward is likewise env reward - p_{i,t}).
    So an empty invalid reply (L = 1, the largest R / L of a success) never gets the top A_S of its turn
    group. Config keys `rollout.window.invalid_action_penalty` (p per invalid turn, reward units; 0: off,
    the invalid flag still zeroes the outcome share) and `rl.turn_penalty` (a cost per turn added to every
    p_{i,t}: the unconditional length penalty of the 'grpo_turn_penalty' row; default 0). Without
    `penalties` / `invalid` (the defaults) every function is the paper's equation, as verified against
    verl-agent.
  - the published ablation "unconditional length shaping" (config key `planpo.conditional` = False;
    the paper gives no formula, so this is our definition): the outcome and the length terms are
    normalised separately and over every rollout, A_E = GRPO(R) + GRPO(1 / T_i), and R_S = 1 / L_{i,t}
    for every response (failures included; with step_grouping 'success' the group is then every
    response of the task). A short failure can then outrank a long success.

Source: PlanPO, "Group Planning-Aware Policy Optimization for Multi-Turn Agentic LLMs" (2026), as
summarised in SPEC.md "PlanPO" (R_E, R_S, A_E, A_S, Eq. 4).
"""
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from common import estimators
from common import gigpo
from common.rows import (as_valid, check_choice, check_int, check_range, check_rows, float_dtype, gather,
                         safe_div, segment_sum)

STEP_GROUPINGS = ("turn", "success")


class PlanPOAdvantages(NamedTuple):
  """PlanPO advantages per turn row (all f32[R], 0 at masked rows)."""
  advantages: jax.Array  # A = A_E + alpha * A_S, shared by the tokens of the row's response.
  episode: jax.Array  # A_E of the row's rollout.
  step: jax.Array  # A_S of the row's response.


def _checks(rewards, success, lengths, group_ids, rollout_ids, turn_ids, mask, num_groups,
            num_rollouts, max_turns):
  check_int("num_groups", num_groups)
  check_int("num_rollouts", num_rollouts)
  check_int("max_turns", max_turns)
  check_rows([rewards], [group_ids, rollout_ids, turn_ids], mask)
  chex.assert_rank([success, lengths], 1)
  chex.assert_equal_shape([rewards, success, lengths])
  check_range("group_ids", group_ids, num_groups)
  check_range("rollout_ids", rollout_ids, num_rollouts)
  check_range("turn_ids", turn_ids, max_turns)


def _penalty_rows(penalties, like, valid):
  """p_{i,t} per row (f32[R], 0 at masked rows; None: zeros)."""
  dtype = float_dtype(like)
  if penalties is None:
    return jnp.zeros(jnp.shape(like), dtype)
  chex.assert_equal_shape([like, penalties])
  return jnp.where(valid, jnp.asarray(penalties, dtype), 0.0)


def rollout_penalties(penalties, rollout_ids, *, num_rollouts, mask=None):
  """P_i = sum_t p_{i,t}, the rollout's total penalty, on each of its rows (module docstring, the rule).

  Args:
    penalties: f32[R] p_{i,t} per turn row (reward units; masked entries may hold NaN).
    rollout_ids: i32[R] in [0, num_rollouts).
    num_rollouts: static int.
    mask: optional bool[R].

  Returns:
    f32[R] P_i of the row's rollout (reward units), 0 at masked rows.
  """
  valid = as_valid(mask, penalties)
  p = _penalty_rows(penalties, penalties, valid)
  return jnp.where(valid, gather(segment_sum(p, rollout_ids, num_rollouts), rollout_ids), 0.0)


def return_penalties(rewards, penalties, rollout_ids, *, num_rollouts, mask=None):
  """The episode return every method trains on: R_i - P_i per row (module docstring, the rule).

  Source: our rule (the paper's equations have no penalty; verl-agent subtracts the invalid-action penalty
  from the step reward). Config keys `rollout.window.invalid_action_penalty`, `rl.turn_penalty`.

  Args:
    rewards: f32[R] the rollout's outcome reward R_i on each of its rows.
    penalties: f32[R] p_{i,t} per row (None: zeros, returns rewards).
    rollout_ids: i32[R] in [0, num_rollouts).
    num_rollouts: static int.
    mask: optional bool[R]. Masked entries may hold NaN or inf.

  Returns:
    f32[R] R_i - P_i (reward units), 0 at masked rows.
  """
  dtype = float_dtype(rewards)
  valid = as_valid(mask, rewards)
  r = jnp.where(valid, jnp.asarray(rewards, dtype), 0.0)
  if penalties is None:
    return r
  return r - rollout_penalties(penalties, rollout_ids, num_rollouts=num_rollouts, mask=valid)


def _flag(x):
  x = jnp.asarray(x)
  return x if x.dtype == jnp.bool_ else x != 0


def episode_rewards(rewards, success, rollout_ids, *, num_rollouts, mask=None, conditional=True,
                    penalties=None):
  """R_E of every row's rollout: (1[success] R - P_i) / T_i, T_i = the rollout's number of real turn rows,
  P_i = the rollout's total penalty (0 without `penalties`: the paper's 1[success] R / T_i).

  Source: SPEC.md "PlanPO" (trajectory level). Config key `planpo.conditional` (False: 1 / T_i for
  every rollout, the length term of the unconditional ablation).

  Args:
    rewards: f32[R] the rollout's outcome reward R (e.g. 10 on success) on each of its rows.
    success: bool[R] (or nonzero) whether the rollout succeeded, on each of its rows.
    rollout_ids: i32[R] in [0, num_rollouts).
    num_rollouts: static int.
    mask: optional bool[R]. Masked entries of rewards may hold NaN or inf.
    conditional: static bool.
    penalties: optional f32[R] p_{i,t} per row (module docstring, the rule).

  Returns:
    f32[R] R_E per row (reward units per turn), 0 at masked rows.
  """
  dtype = float_dtype(rewards)
  valid = as_valid(mask, rewards)
  _, turns = gigpo.rollout_table(jnp.zeros(jnp.shape(rewards), dtype), rollout_ids,
                                 num_rollouts=num_rollouts, mask=valid)
  t_i = gather(turns, rollout_ids)
  if conditional:
    num = jnp.where(valid & _flag(success), jnp.asarray(rewards, dtype), 0.0)
  else:
    num = jnp.where(valid, 1.0, 0.0).astype(dtype)
  if conditional and penalties is not None:
    num = num - rollout_penalties(penalties, rollout_ids, num_rollouts=num_rollouts, mask=valid)
  return jnp.where(valid, safe_div(num, t_i), 0.0)


def trajectory_advantages(rewards, success, group_ids, rollout_ids, *, num_groups, num_rollouts,
                          mask=None, stats_over="rollouts", norm="std", eps=1e-6, ddof=1,
                          conditional=True, penalties=None):
  """A_E: R_E = (1[i in G_x] R(tau_i) - P_i) / T_i normalised over the task's rollouts (P_i = 0 without
  `penalties`: the paper's R_E).

  A_E(tau_i) = (R_E(tau_i) - mean_x R_E) / F_norm, F_norm = std_x + eps (norm 'std') or 1 ('none');
  statistics over the task's rollouts ('rollouts') or its turn rows ('turns'). A task whose rollouts
  all fail gets exactly 0; with exactly one success A_E equals GRPO's advantage of R (up to eps, the
  scale of R_E cancelling); every success gets a larger A_E than every failure of its task (with `penalties`: while a
  success's total penalty P_i stays below R).
  Config keys `planpo.stats_over`, `planpo.norm`, `planpo.eps`, `planpo.ddof`, `planpo.conditional`
  (see the module docstring; conditional = False gives GRPO(R) + GRPO(1 / T_i)).

  Args:
    rewards: f32[R]; success: bool[R]; group_ids, rollout_ids: i32[R] (module docstring).
    num_groups, num_rollouts: static ints.
    mask: optional bool[R].
    stats_over, norm, eps, ddof, conditional: as above (static except eps).
    penalties: optional f32[R] p_{i,t} per row (module docstring, the rule; unconditional: the outcome
      term is GRPO(R - P)).

  Returns:
    f32[R] A_E per row (dimensionless for norm 'std'), 0 at masked rows.

  Raises:
    ValueError: bad static ints or switches; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  kw = dict(num_groups=num_groups, num_rollouts=num_rollouts, mask=mask, stats_over=stats_over,
            norm=norm, eps=eps, ddof=ddof)
  check_choice("stats_over", stats_over, gigpo.STATS_OVER, "planpo.stats_over")
  check_choice("norm", norm, gigpo.NORMS, "planpo.norm")
  r_e = episode_rewards(rewards, success, rollout_ids, num_rollouts=num_rollouts, mask=mask,
                        conditional=conditional, penalties=penalties)
  a_e = gigpo.episode_advantages(r_e, group_ids, rollout_ids, **kw)
  if not conditional:
    ret = return_penalties(rewards, penalties, rollout_ids, num_rollouts=num_rollouts, mask=mask)
    a_e = a_e + gigpo.episode_advantages(ret, group_ids, rollout_ids, **kw)
  return a_e


def response_advantages(rewards, success, lengths, group_ids, turn_ids, *, num_groups, max_turns,
                        mask=None, step_grouping="turn", norm="std", eps=1e-6, ddof=1,
                        conditional=True, invalid=None, penalties=None):
  """A_S: R_S = 1[i in G_x, a_{i,t} valid] R(tau_i) / L_{i,t} - p_{i,t} normalised within the response groups
  (every response valid and p = 0 without `invalid` / `penalties`: the paper's R_S).

  step_grouping 'turn' (Eq. 4): one group per (task, turn index t) holding every rollout still active
    at t; failures are members with R_S = 0, so they sit below every success at that turn. A turn
    group with no successful rollout is constant and gets exactly 0.
  step_grouping 'success' (the prose): one group per task holding every response of its successful
    rollouts; responses of failed rollouts get 0. Fewer than two successful responses, or all of
    equal length, give exactly 0.
  A_S = (R_S - mean) / F_norm within the group, F_norm = std + eps or 1. Rows with L <= 0 are in no
  group and get 0. Config keys `planpo.step_grouping`, `planpo.norm`, `planpo.eps`, `planpo.ddof`,
  `planpo.conditional` (False: R_S = 1 / L for every response, failures included).

  Args:
    rewards: f32[R]; success: bool[R]; group_ids, turn_ids: i32[R] (module docstring).
    lengths: i32[R] or f32[R] L_{i,t}, the number of the policy's own tokens in the response.
    num_groups, max_turns: static ints.
    mask: optional bool[R].
    step_grouping, norm, eps, ddof, conditional: as above (static except eps).
    invalid: optional bool[R] the response was invalid (unreadable or not admissible): no outcome share.
    penalties: optional f32[R] p_{i,t} per row (module docstring, the rule).

  Returns:
    f32[R] A_S per row, 0 at masked rows.

  Raises:
    ValueError: bad static ints or switches; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  check_choice("step_grouping", step_grouping, STEP_GROUPINGS, "planpo.step_grouping")
  check_choice("norm", norm, gigpo.NORMS, "planpo.norm")
  check_int("num_groups", num_groups)
  check_int("max_turns", max_turns)
  check_rows([rewards], [group_ids, turn_ids], mask)
  chex.assert_equal_shape([rewards, success, lengths])
  check_range("turn_ids", turn_ids, max_turns)
  dtype = float_dtype(rewards)
  valid = as_valid(mask, rewards)
  length = jnp.where(valid, jnp.asarray(lengths, dtype), 0.0)
  ok = _flag(success) if conditional else jnp.ones(jnp.shape(valid), bool)
  member = valid & (length > 0)
  if step_grouping == "turn":
    gid = group_ids * max_turns + turn_ids
    num = num_groups * max_turns
  else:
    member = member & ok
    gid, num = group_ids, num_groups
  numer = jnp.asarray(rewards, dtype) if conditional else jnp.ones(jnp.shape(length), dtype)
  earns = member & ok
  if invalid is not None:
    chex.assert_equal_shape([rewards, invalid])
    earns = earns & ~_flag(invalid)
  r_s = jnp.where(earns, safe_div(jnp.where(earns, numer, 0.0), length), 0.0)
  r_s = r_s - _penalty_rows(penalties, rewards, member)
  if norm == "std":
    return estimators.grpo_advantages(r_s, gid, num_groups=num, mask=member, eps=eps, ddof=ddof)
  return estimators.drgrpo_advantages(r_s, gid, num_groups=num, mask=member)


def planpo_advantages(rewards, success, lengths, group_ids, rollout_ids, turn_ids, *, num_groups,
                      num_rollouts, max_turns, alpha, mask=None, step_grouping="turn",
                      stats_over="rollouts", norm="std", eps=1e-6, ddof=1, conditional=True,
                      invalid=None, penalties=None):
  """PlanPO token advantage of every turn row: A = A_E + alpha(k) A_S.

  A_E: `trajectory_advantages`; A_S: `response_advantages`; alpha = alpha(k) from
  `planpo.schedule.alpha_schedule` (the published 0.1 -> 0.05). The row's advantage is shared by
  every token of its response. Defaults: step_grouping 'turn' (Eq. 4), stats_over 'rollouts' (the
  paper's equation), norm 'std', eps 1e-6, ddof 1, conditional True. Config keys
  `planpo.step_grouping`, `planpo.stats_over`, `planpo.norm`, `planpo.eps`, `planpo.ddof`,
  `planpo.conditional`. The ablations: without A_S is alpha = 0; without A_E is the `step` field
  times alpha; constant alpha is alpha_init = alpha_final.
  Source: SPEC.md "PlanPO" (token advantage).

  Args:
    rewards: f32[R] the rollout's outcome reward on each of its rows (masked: NaN/inf allowed).
    success: bool[R] (or nonzero) the rollout's success on each of its rows.
    lengths: i32[R] or f32[R] policy tokens of the row's response.
    group_ids, rollout_ids, turn_ids: i32[R] (module docstring of `common/gigpo.py`).
    num_groups, num_rollouts, max_turns: static ints.
    alpha: f32[] or float, the weight of A_S (may be traced).
    mask: optional bool[R] real rows.
    step_grouping, stats_over, norm, eps, ddof, conditional: see the module docstring.
    invalid: optional bool[R] invalid responses; penalties: optional f32[R] p_{i,t} per row (reward units).
      Both enter by the module docstring's rule; None: the paper's equations.

  Returns:
    PlanPOAdvantages(advantages, episode, step), each f32[R], 0 at masked rows.

  Raises:
    ValueError: bad static ints or switches; ids out of range (only when concrete).
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _checks(rewards, success, lengths, group_ids, rollout_ids, turn_ids, mask, num_groups,
          num_rollouts, max_turns)
  a_e = trajectory_advantages(rewards, success, group_ids, rollout_ids, num_groups=num_groups,
                              num_rollouts=num_rollouts, mask=mask, stats_over=stats_over,
                              norm=norm, eps=eps, ddof=ddof, conditional=conditional, penalties=penalties)
  a_s = response_advantages(rewards, success, lengths, group_ids, turn_ids, num_groups=num_groups,
                            max_turns=max_turns, mask=mask, step_grouping=step_grouping, norm=norm,
                            eps=eps, ddof=ddof, conditional=conditional, invalid=invalid,
                            penalties=penalties)
  alpha = jnp.asarray(alpha, a_e.dtype)
  return PlanPOAdvantages(advantages=a_e + alpha * a_s, episode=a_e, step=a_s)
