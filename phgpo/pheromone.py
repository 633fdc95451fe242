"""PhGPO pheromone: task-agnostic tables, a task-dependent memory bank, and their fusion.

State (`PheromoneState`, a pytree):
  tau, tau_step          f32/i32[N+1, N]  task-agnostic tool-transition pheromone; row N is START.
  tau_arg, tau_arg_step  f32/i32[N, Tm]   argument-template pheromone.
  num_updates, rho, arg_rho               update counter and the evaporation rates in use.
  bank_task, bank_score  i32/f32[N+1, N, M]  the task-dependent memory bank M_ij of every edge:
                         at most M (task row, score) entries per edge (phgpo/memory_bank.py).

Update after each batch of scored trajectories (ant-colony rule with MAX-MIN clipping):
  tau <- clip((1 - rho) tau + alpha sum_xi q(xi) 1[(i, j) in xi], tau_min, tau_max)
and the same for tau_arg over (tool, template) pairs with (arg_rho, arg_alpha).

Lazy evaporation (exact). Only the B*H traversed edges change in an update beyond the common
factor (1 - rho), so the tables are stored lazily: entry (i, j) keeps the value tau(i, j) it got
when last written and the update count tau_step(i, j) of that write. An edge left alone for
k updates evaporates as tau_{t+k} = max((1 - rho)^k tau_t, tau_min) (evaporation only lowers it,
and once at tau_min the clip holds it there), so its current value is
  effective(i, j) = max(tau(i, j) (1 - rho)^(num_updates - tau_step(i, j)), tau_min)
and an update rewrites only the deposited edges:
  tau(i, j) <- clip((1 - rho) effective(i, j) + deposit(i, j), tau_min, tau_max),
  tau_step(i, j) <- num_updates + 1,
then counts num_updates += 1: O(B*H) work per update instead of O(N^2). The raw fields `tau`
and `tau_arg` are therefore NOT the current pheromone: read it through `effective_tau`,
`effective_tau_arg`, `arg_rows` or `pheromone_rows`. The raw values always lie in
[tau_min, tau_max] too.

Choice: the evaporation rates are constant over the life of a state (they are config
constants: `pheromone.rho`, `pheromone.arg_rho`), because a stored age is only meaningful under
one rate. The first update records them in the state (`rho`, `arg_rho`; readers use these, so
they take no rate argument); a later update with other rates is an error: a ValueError when
called outside jit, and under jit (where it cannot raise) the state is poisoned (its rate
becomes NaN, every effective value read from it NaN, and the eager readers raise). To change a
rate on purpose, call `set_rates` first (one O(N^2) pass; exact). Handling a rate change inside
the update instead (a conditional materialisation) would make XLA copy the tables on every
call of any program that also reads them. tau_min and tau_max are not stored either: pass the
same values to every update and read (config `pheromone.tau_min`, `pheromone.tau_max`).

Source: PhGPO, arXiv:2602.13691, sec. "Pheromone" (SPEC.md "PhGPO": task-agnostic pheromone,
task-dependent pheromone, fusion). MAX-MIN clipping: Stutzle & Hoos 2000, "MAX-MIN Ant System".

Every function is pure and jittable; shapes (N, Tm, C, D) come from the arrays, `num_tools`
etc. only from Python ints in `init_pheromone`. Jit `update_pheromone` with the state donated
(`donate_argnums=0`): otherwise XLA copies the O(N^2) tables to apply the O(B*H) scatter.

Sharding: the tables and the bank are small and replicated; the batch axis B of the trajectory
inputs may be sharded (Auto or Explicit mesh axes). Before a scatter into a replicated table,
the few B*H edge ids and amounts are gathered to every device (`phgpo.edges.replicated`), so each device
applies the same update; `pheromone_rows` and `arg_rows` stay sharded along B.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from phgpo import edges
from phgpo import memory_bank
from phgpo import pheromone_rule as rule

DEP_UNITS = memory_bank.DEP_UNITS
evaporate, deposit, clip_pheromone = rule.evaporate, rule.deposit, rule.clip_pheromone  # eager forms


class PheromoneState(NamedTuple):
  """Pheromone tables (stored lazily, see the module docstring) and the task-dependent memory bank.

  Attributes:
    tau: f32[N+1, N], tau_agn(prev, next) as last written (row N = START); the current value
      is `effective_tau(state, tau_min=...)`.
    tau_arg: f32[N, Tm], tau_arg(tool, template) as last written; current value:
      `effective_tau_arg` / `arg_rows`.
    tau_step: i32[N+1, N], value of num_updates when each tau entry was last written (0 = init).
    tau_arg_step: i32[N, Tm], the same for tau_arg.
    num_updates: i32[], number of `update_pheromone` calls applied.
    rho: f32[], evaporation rate of tau, recorded by the first update (0 before it; NaN after
      an update with a different rate under jit: see the module docstring).
    arg_rho: f32[], the same for tau_arg.
    bank_task: i32[N+1, N, M], task row of each entry of edge (i, j) (-1 = empty slot); row N = START.
    bank_score: f32[N+1, N, M], the best match score q in [0, 1] that task earned on the edge; each
      edge's entries are sorted by score, best first (phgpo/memory_bank.py).
  """
  tau: jax.Array
  tau_arg: jax.Array
  bank_task: jax.Array
  bank_score: jax.Array
  tau_step: jax.Array
  tau_arg_step: jax.Array
  num_updates: jax.Array
  rho: jax.Array
  arg_rho: jax.Array


def tau_from_counts(counts: chex.Array, *, tau_min: float, tau_max: float) -> jax.Array:
  """Initial task-agnostic pheromone from a graph's transition counts: row-normalised log counts in [tau_min, tau_max].

    tau(i, j) = tau_min + (tau_max - tau_min) log(1 + c_ij) / log(1 + max_k c_ik)   for a row with max_k c_ik > 0,
    tau(i, j) = tau_min                                                              for a row without counts,
  so each tool's most frequent successor starts at tau_max (MAX-MIN Ant System starts its trails at tau_max,
  Stutzle & Hoos 2000), a successor never seen after it at tau_min, and the others in between by log count (the
  authors' TRAJECT-Bench counts run from 5 to over 100 on one row; the log keeps a rare successor above the
  unseen). Rows are normalised separately because the sampler reads one row at a time (`pheromone_rows`): only
  ratios within a row change a decision. Choices the paper leaves open (it starts from an empty pheromone);
  which graph's counts: config `pheromone.init_graph` (`phgpo.steps.init_pheromone`).

  Args:
    counts: int or float [N+1, N] transition counts >= 0, row N = START (`ToolGraph.edge_counts`, or a prior's
      counts `phgpo.catalogue.PriorGraph.counts`).
    tau_min, tau_max: the MAX-MIN bounds (config `pheromone.tau_min`, `pheromone.tau_max`).
  Returns:
    f32[N+1, N] in [tau_min, tau_max].
  Raises:
    AssertionError at trace time on a rank other than 2; ValueError on bad bounds.
  """
  chex.assert_rank(counts, 2)
  rule.check_bounds(tau_min, tau_max)
  c = jnp.maximum(jnp.asarray(counts, jnp.float32), 0.0)
  top = jnp.max(c, axis=1, keepdims=True)
  frac = jnp.where(top > 0, jnp.log1p(c) / jnp.log1p(jnp.maximum(top, 1e-30)), 0.0)
  return jnp.clip(tau_min + (tau_max - tau_min) * frac, tau_min, tau_max).astype(jnp.float32)


def init_pheromone(num_tools: int, num_templates: int, *, tau_init: float, tau_min: float,
                   tau_max: float, template_mask: chex.Array | None = None,
                   bank_per_edge: int,
                   edge_mask: chex.Array | None = None,
                   edge_counts: chex.Array | None = None) -> PheromoneState:
  """Initial pheromone state: every graph edge and template at tau_init, an empty bank.

  tau(i, j) = tau_init where edge_mask[i, j] (all pairs when edge_mask is None), tau_min
  elsewhere; tau_arg(i, t) = tau_init where template_mask[i, t], tau_min elsewhere. With edge_counts, every row
  that has a count starts instead at `tau_from_counts` (the task-agnostic pheromone from a precomputed graph,
  config `pheromone.init_graph`); rows without counts (e.g. START in the authors' graph) keep the rule above.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO"); MAX-MIN Ant System initialisation.

  Args:
    num_tools: N (static).
    num_templates: Tm (static), the template axis of the graph (`ToolGraph.num_templates`).
    tau_init: initial pheromone on graph edges (config `pheromone.tau_init`).
    tau_min, tau_max: MAX-MIN bounds, 0 < tau_min <= tau_init <= tau_max
      (config `pheromone.tau_min`, `pheromone.tau_max`).
    template_mask: optional bool[N, Tm], the graph's existing templates (`ToolGraph.template_mask`).
    bank_per_edge: M >= 1, entries of the task-dependent memory bank per edge (config
      `pheromone.bank_per_edge`).
    edge_mask: optional bool[N+1, N] (`ToolGraph.edge_mask`): pairs outside the graph start at
      tau_min, a prior against unobserved transitions. They still evaporate and receive deposit
      when a rollout traverses them.
    edge_counts: optional int/float[N+1, N] transition counts of a precomputed graph (None: today's start).
  Returns:
    A `PheromoneState` with f32 tables, zero write stamps and update count, rates 0 (set by
    the first update), and an empty bank (every bank_task -1).
  Raises:
    ValueError on bad sizes or bounds, or mask shapes that do not match.
  """
  if int(num_tools) < 1 or int(num_templates) < 1:
    raise ValueError(f"num_tools and num_templates must be >= 1, got {num_tools}, {num_templates}.")
  rule.check_bounds(tau_min, tau_max)
  if not tau_min <= tau_init <= tau_max:
    raise ValueError(
        f"pheromone.tau_init ({tau_init}) must lie in [tau_min, tau_max] = [{tau_min}, {tau_max}].")
  n, tm = int(num_tools), int(num_templates)
  tau = jnp.full((n + 1, n), tau_init, jnp.float32)
  if edge_mask is not None:
    edge_mask = jnp.asarray(edge_mask, bool)
    if edge_mask.shape != (n + 1, n):
      raise ValueError(f"edge_mask must have shape (N+1, N) = {(n + 1, n)}, got {edge_mask.shape}.")
    tau = jnp.where(edge_mask, tau, jnp.float32(tau_min))
  if edge_counts is not None:
    edge_counts = jnp.asarray(edge_counts)
    if edge_counts.shape != (n + 1, n):
      raise ValueError(f"edge_counts must have shape (N+1, N) = {(n + 1, n)}, got {edge_counts.shape}.")
    has = (edge_counts > 0).any(axis=1, keepdims=True)
    tau = jnp.where(has, tau_from_counts(edge_counts, tau_min=tau_min, tau_max=tau_max), tau)
  tau_arg = jnp.full((n, tm), tau_init, jnp.float32)
  if template_mask is not None:
    template_mask = jnp.asarray(template_mask, bool)
    if template_mask.shape != (n, tm):
      raise ValueError(f"template_mask must have shape (N, Tm) = {(n, tm)}, got "
                       f"{template_mask.shape}.")
    tau_arg = jnp.where(template_mask, tau_arg, jnp.float32(tau_min))
  bank_task, bank_score = memory_bank.empty_bank(n, bank_per_edge)
  return PheromoneState(
      tau=tau,
      tau_arg=tau_arg,
      bank_task=bank_task,
      bank_score=bank_score,
      tau_step=jnp.zeros((n + 1, n), jnp.int32),
      tau_arg_step=jnp.zeros((n, tm), jnp.int32),
      num_updates=jnp.zeros((), jnp.int32),
      rho=jnp.zeros((), jnp.float32),
      arg_rho=jnp.zeros((), jnp.float32))


def _decay(age: jax.Array, rate: jax.Array) -> jax.Array:
  """(1 - rate)^age for i32 ages >= 0, as exp(age log1p(-rate)); exactly 1 at age 0.

  exp/log1p keeps the relative error near age * 1e-8 (a product of age rounded f32 factors
  would drift by age * 6e-8); rate = 1 gives 0 for every age > 0.
  """
  log_keep = jnp.log1p(-jnp.asarray(rate, jnp.float32))
  return jnp.where(age <= 0, 1.0, jnp.exp(age.astype(jnp.float32) * log_keep))


def _effective(raw: jax.Array, stamp: jax.Array, now: jax.Array, rate: jax.Array,
               tau_min) -> jax.Array:
  """max(raw (1 - rate)^(now - stamp), tau_min): the current value of lazily stored entries."""
  return jnp.maximum(raw * _decay(now - stamp, rate), jnp.asarray(tau_min, raw.dtype))


def _check_state(state: PheromoneState) -> PheromoneState:
  """Shapes and dtypes of the lazy tables; ValueError (outside jit) on a poisoned state."""
  _check_not_poisoned(state)
  state = PheromoneState(*map(jnp.asarray, state))
  chex.assert_rank([state.tau, state.tau_step, state.tau_arg, state.tau_arg_step], 2)
  chex.assert_equal_shape([state.tau, state.tau_step])
  chex.assert_equal_shape([state.tau_arg, state.tau_arg_step])
  chex.assert_type([state.tau, state.tau_step, state.num_updates], [float, int, int])
  return state


def effective_tau(state: PheromoneState, *, tau_min) -> jax.Array:
  """The current task-agnostic pheromone, materialised: f32[N+1, N].

  tau_eff(i, j) = max(tau(i, j) (1 - rho)^(num_updates - tau_step(i, j)), tau_min), equal to
  the eager MAX-MIN rule applied num_updates times (module docstring).
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", task-agnostic pheromone).

  Args:
    state: `PheromoneState`.
    tau_min: the lower MAX-MIN bound used by the updates (config `pheromone.tau_min`).
  Returns:
    f32[N+1, N] in [tau_min, tau_max]; row N = START. (NaN where evaporated under a poisoned
    rate, see the module docstring; outside jit a poisoned state raises ValueError instead.)
  Notes:
    O(N^2): for tests, inspection and plots. Samplers read rows (`pheromone_rows`). The rate
    is the state's own (`state.rho`), so no rho argument.
  """
  state = _check_state(state)
  rule.check_bounds(tau_min, tau_min)
  return _effective(state.tau, state.tau_step, state.num_updates, state.rho, tau_min)


def effective_tau_arg(state: PheromoneState, *, tau_min) -> jax.Array:
  """The current argument pheromone, materialised: f32[N, Tm] (see `effective_tau`).

  Args:
    state: `PheromoneState`.
    tau_min: as in the updates (config `pheromone.tau_min`).
  Returns:
    f32[N, Tm], e.g. the `tau_arg` argument of `phgpo.sampling.sample_templates`.
  Notes:
    O(N Tm); `arg_rows` gives only the rows of the chosen tools, O(B Tm).
  """
  state = _check_state(state)
  rule.check_bounds(tau_min, tau_min)
  return _effective(state.tau_arg, state.tau_arg_step, state.num_updates, state.arg_rho, tau_min)


def arg_rows(state: PheromoneState, tools: chex.Array, *, tau_min) -> jax.Array:
  """Current argument pheromone of the given tools: f32[B, Tm] = effective tau_arg[tools].

  Args:
    state: `PheromoneState`.
    tools: i32[B], tool per rollout; indices outside [0, N) are clamped (like `take_rows`): mask
      such rows yourself (e.g. tools == -1).
    tau_min: as in the updates (config `pheromone.tau_min`).
  Returns:
    f32[B, Tm] in [tau_min, tau_max], sharded like tools.
  Notes:
    To sample templates from these rows with `phgpo.sampling.sample_templates` (which gathers row
    tools[b] itself), pass the rows as the table and each rollout's own row index:
      sample_templates(key, arg_rows(state, tools, tau_min=...), edges.take_rows(template_mask, tools),
                       jnp.where(tools >= 0, jnp.arange(B, dtype=jnp.int32), -1))
    draws exactly what sample_templates(key, effective_tau_arg(state, ...), template_mask,
    tools) draws (its noise is per rollout), in O(B Tm) instead of O(N Tm).
  """
  chex.assert_rank(tools, 1)
  chex.assert_type(tools, int)
  state = _check_state(state)
  rule.check_bounds(tau_min, tau_min)
  tools = jnp.asarray(tools)
  return _effective(edges.take_rows(state.tau_arg, tools), edges.take_rows(state.tau_arg_step, tools),
                    state.num_updates, state.arg_rho, tau_min)


def _concrete(x):
  """x as a NumPy value, or None when it is traced (inside jit)."""
  return None if isinstance(x, jax.core.Tracer) else np.asarray(x)


def _check_not_poisoned(state: PheromoneState):
  for name in ("rho", "arg_rho"):
    value = _concrete(getattr(state, name))
    if value is not None and np.isnan(value):
      raise ValueError(
          f"PheromoneState.{name} is NaN: an update under jit used a different pheromone.{name} "
          "than the earlier updates of this state. Keep pheromone.rho and pheromone.arg_rho "
          "constant, or call pheromone.set_rates(state, ...) before changing them.")


def _check_same_rates(state: PheromoneState, rho, arg_rho):
  """ValueError when the state and the rates are concrete and the rates differ from the state's."""
  _check_not_poisoned(state)
  now = _concrete(state.num_updates)
  if now is None or int(now) == 0:
    return
  for name, new in (("rho", rho), ("arg_rho", arg_rho)):
    old, new = _concrete(getattr(state, name)), _concrete(new)
    if old is not None and new is not None and np.float32(new) != old:
      raise ValueError(
          f"pheromone.{name} changed from {float(old):.6g} to {float(new):.6g} after {int(now)} "
          "updates of this state; the lazy evaporation needs one rate per state. Keep it "
          "constant, or call pheromone.set_rates(state, rho=..., arg_rho=..., tau_min=...) "
          "first.")


def set_rates(state: PheromoneState, *, rho, arg_rho, tau_min) -> PheromoneState:
  """Changes the evaporation rates of a state, exactly: materialises both tables, then sets them.

  tau <- effective_tau(state), tau_step <- num_updates (the same for tau_arg); rho, arg_rho <-
  the new rates. Later updates with these rates continue the eager MAX-MIN rule exactly.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO"); lazy storage: module docstring.

  Args:
    state: `PheromoneState` (not poisoned).
    rho, arg_rho: the new rates in [0, 1] (config `pheromone.rho`, `pheromone.arg_rho`).
    tau_min: the lower MAX-MIN bound used by the updates (config `pheromone.tau_min`).
  Returns:
    The `PheromoneState` with materialised tables, all stamps = num_updates, and the new rates.
  Raises:
    ValueError on rates outside [0, 1] or a poisoned state (outside jit).
  Notes:
    O(N^2); never needed while the rates stay constant (the training loop).
  """
  rule.check_rate("pheromone.rho", rho)
  rule.check_rate("pheromone.arg_rho", arg_rho)
  state = _check_state(state)
  now = state.num_updates
  return state._replace(
      tau=effective_tau(state, tau_min=tau_min),
      tau_arg=effective_tau_arg(state, tau_min=tau_min),
      tau_step=jnp.full_like(state.tau_step, now),
      tau_arg_step=jnp.full_like(state.tau_arg_step, now),
      rho=jnp.asarray(rho, jnp.float32),
      arg_rho=jnp.asarray(arg_rho, jnp.float32))


def _lazy_write(raw, stamp, now, rate, flat, amount, *, tau_min, tau_max):
  """Applies one update's evaporation + deposit + clip to the deposited entries only.

  new(e) = clip((1 - rate) effective(e) + sum of the amounts on e, tau_min, tau_max), stamp(e)
  = now + 1, for every distinct valid id e of `flat`; ids >= raw.size are skipped.

  Args:
    raw, stamp: f32/i32[R, K], the stored table and its write stamps (replicated).
    now: i32[], updates applied before this one.
    rate: f32[], evaporation rate.
    flat: i32[E], flattened entry ids (replicated), raw.size for "no deposit".
    amount: f32[E], deposit of each id occurrence (summed per distinct id).
  Returns:
    (raw, stamp) after the update. O(E log E) for the sort, O(E) scatter.
  """
  rows, cols = raw.shape
  size = rows * cols
  e = flat.shape[0]
  order = jnp.argsort(flat)
  ids = flat[order]
  amt = amount[order]
  head = jnp.concatenate([jnp.ones((1,), bool), ids[1:] != ids[:-1]])
  seg = jnp.cumsum(head.astype(jnp.int32)) - 1
  total = jax.ops.segment_sum(amt, seg, num_segments=e)[seg]
  raw_flat, stamp_flat = raw.reshape(-1), stamp.reshape(-1)
  safe = jnp.minimum(ids, size - 1)
  old_stamp = stamp_flat[safe]
  before = _effective(raw_flat[safe], old_stamp, now, rate, tau_min)
  keep = 1.0 - jnp.asarray(rate, jnp.float32)
  new = jnp.clip(keep * before + total, tau_min, tau_max).astype(raw.dtype)
  dest = jnp.where(head & (ids < size), ids, size)  # one write per distinct valid id
  raw_flat = raw_flat.at[dest].set(new, mode="drop")
  # max(old, now + 1) = now + 1 (stamps never exceed now), written so that the new stamps
  # depend on the gathered ones: XLA then orders the gather before the in-place scatter
  # instead of copying the whole stamp table to keep the gather's input alive.
  stamp_flat = stamp_flat.at[dest].set(jnp.maximum(old_stamp, now + 1), mode="drop")
  return raw_flat.reshape(rows, cols), stamp_flat.reshape(rows, cols)


def _amounts(table_shape, prev, nxt, mask, scores, alpha):
  """Flattened ids and deposit amounts alpha q_b (first visit per trajectory), replicated."""
  flat, valid = edges.edge_ids(table_shape, prev, nxt, mask)
  first = edges.first_visits(flat, valid)
  amount = jnp.where(first, alpha * scores[:, None], 0.0).astype(jnp.float32)
  flat = jnp.where(first, flat, table_shape[0] * table_shape[1])
  return edges.replicated(flat.reshape(-1)), edges.replicated(amount.reshape(-1))


def update_pheromone(state: PheromoneState, tools: chex.Array, templates: chex.Array,
                     mask: chex.Array, scores: chex.Array, task_ids: chex.Array, *, rho, alpha,
                     tau_min, tau_max, arg_rho, arg_alpha,
                     bank_min_score: float = 0.0) -> PheromoneState:
  """One pheromone update after a batch of scored trajectories, in O(B*H) (lazy evaporation).

  tau     <- clip((1 - rho) tau + alpha sum_b q_b 1[(i, j) in b], tau_min, tau_max)
  tau_arg <- clip((1 - arg_rho) tau_arg + arg_alpha sum_b q_b 1[(i, u) in b], tau_min, tau_max)
  over every entry, applied lazily: only the traversed entries are rewritten (from their
  effective values) and stamped, the rest evaporate implicitly (module docstring); the
  result read through `effective_tau` / `effective_tau_arg` equals the eager rule exactly
  (up to f32 rounding). Edges are (START, a_0), (a_0, a_1), ... and pairs (a_t, u_t); each edge
  of a trajectory is offered once to that edge's memory bank as (task row x_b, q_b)
  (`phgpo.memory_bank.write`: one entry per task, best score kept, lowest scores evicted).
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO": task-agnostic and task-dependent pheromone).

  Args:
    state: the current `PheromoneState`.
    tools: i32[B, H], tool index a_t per step (-1 = no call; such steps are skipped).
    templates: i32[B, H], template index u_t per step (-1 = unseen template: no arg deposit).
    mask: bool[B, H], valid steps (padding False). Steps after a masked step still use the
      previous tool of the row as their prev, so masks are expected to be prefixes.
    scores: f32[B], match score q in [0, 1] per trajectory (e.g. `phgpo.metrics.match_ratio_batch`).
    task_ids: i32[B], task row x_b of each trajectory (>= 0; the row of the caller's task table that
      `bank_similarity` is computed against).
    rho, alpha: tool-pheromone evaporation and deposit rates (config `pheromone.rho`,
      `pheromone.alpha`). The first update records rho (and arg_rho) in the state; later
      updates must pass the same rates (see the module docstring; `set_rates` changes them).
    tau_min, tau_max: MAX-MIN bounds for both tables; keep them the same for every update and
      read of one state.
    arg_rho, arg_alpha: the same for tau_arg (config `pheromone.arg_rho`, `pheromone.arg_alpha`).
    bank_min_score: only trajectories with q >= bank_min_score write bank entries (config
      `pheromone.bank_min_score`; default 0.0 writes every traversed edge, as the SPEC says).
  Returns:
    The new `PheromoneState`, num_updates + 1; raw and effective tables lie in
    [tau_min, tau_max].
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError on Python
    hyper-parameters out of range, or (outside jit) on rates that differ from the state's.
    Under jit a rate change cannot raise: it poisons the state (rho / arg_rho NaN).
  Notes:
    Cost O(B H (H + log(B H) + M^2)), independent of N, when jit-compiled with the state
    donated (`jax.jit(..., donate_argnums=0)`); without donation XLA copies the tables.
    Sharding: B may be sharded; the new state is replicated.
  """
  chex.assert_rank([tools, templates, mask, scores, task_ids], [2, 2, 2, 1, 1])
  chex.assert_type([tools, templates, mask, scores, task_ids], [int, int, bool, float, int])
  chex.assert_equal_shape([tools, templates, mask])
  chex.assert_equal_shape_prefix([tools, scores, task_ids], 1)
  rule.check_rate("pheromone.rho", rho)
  rule.check_rate("pheromone.arg_rho", arg_rho)
  rule.check_bounds(tau_min, tau_max)
  _check_same_rates(state, rho, arg_rho)
  state = _check_state(state)
  tools, templates, mask, scores, task_ids = map(
      jnp.asarray, (tools, templates, mask, scores, task_ids))
  n = state.tau.shape[1]
  tools = tools.astype(jnp.int32)
  prev = jnp.concatenate([jnp.full_like(tools[:, :1], n), tools[:, :-1]], axis=1)
  scores = scores.astype(jnp.float32)
  now = state.num_updates
  rho = jnp.asarray(rho, jnp.float32)
  arg_rho = jnp.asarray(arg_rho, jnp.float32)
  # The rates are recorded by the first update; a later change poisons the state (NaN rate).
  first = now == 0
  new_rho = jnp.where(first | (rho == state.rho), rho, jnp.nan)
  new_arg_rho = jnp.where(first | (arg_rho == state.arg_rho), arg_rho, jnp.nan)

  flat, amount = _amounts(state.tau.shape, prev, tools, mask, scores, alpha)
  tau, tau_step = _lazy_write(state.tau, state.tau_step, now, new_rho, flat, amount,
                              tau_min=tau_min, tau_max=tau_max)
  flat_arg, amount_arg = _amounts(state.tau_arg.shape, tools, templates.astype(jnp.int32), mask,
                                  scores, arg_alpha)
  tau_arg, tau_arg_step = _lazy_write(state.tau_arg, state.tau_arg_step, now, new_arg_rho,
                                      flat_arg, amount_arg, tau_min=tau_min, tau_max=tau_max)

  bank = memory_bank.write(state, prev, tools, mask, scores, task_ids.astype(jnp.int32),
                           bank_min_score=bank_min_score)
  return PheromoneState(
      tau=tau,
      tau_arg=tau_arg,
      **bank,
      tau_step=tau_step,
      tau_arg_step=tau_arg_step,
      num_updates=(now + 1).astype(jnp.int32),
      rho=new_rho,
      arg_rho=new_arg_rho)


def pheromone_rows(state: PheromoneState, prev_tools: chex.Array, task_sim: chex.Array | None, *, w,
                   kappa, top_k_similar: int, tau_min, tau_max, dep_units: str = "tau_range",
                   sim_threshold=0.0, hot_edges: int | None = None) -> jax.Array:
  """Fused pheromone tau(prev, . | x) over all next tools, one row per rollout.

    tau_ij(x) = clip((1 - w c_ij(x)) tau_agn(i, j) + w c_ij(x) tau_dep_ij(x), tau_min, tau_max)
  with i = prev_b, c_ij the confidence and tau_dep_ij the task-dependent pheromone of the memory bank
  (`phgpo.memory_bank.dependent_pheromone`, formulas in phgpo/memory_bank.py). A task with no similar history
  (c = 0: no bank entry at or above the similarity threshold) gets tau_agn exactly. tau_agn is the effective (lazily evaporated) value,
  `effective_tau(state)[i]`, gathered for the B rows only.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", task-dependent pheromone and fusion).

  Args:
    state: `PheromoneState`.
    prev_tools: i32[B], previous tool per rollout, START = N at step 0; values outside [0, N]
      are clamped (not checked under jit).
    task_sim: f32[B, T], `bank_similarity(task_keys, task_emb)`: the cosine similarity of each rollout's
      task to every task row the bank may name (computed once per episode). May be None when w is a
      Python 0.
    w: task weight in [0, 1] (ramped by the curriculum up to config `pheromone.w_max`).
      A Python 0 skips the bank lookup entirely.
    kappa: > 0, confidence half-saturation in summed similarity (config `pheromone.kappa`).
    top_k_similar: static, entries per edge used (config `pheromone.top_k_similar`).
    sim_threshold: entries less similar than this are no evidence (config `pheromone.sim_threshold`).
    tau_min, tau_max: MAX-MIN bounds (the result always lies within them).
    dep_units: 'tau_range' or 'score' (static; config `pheromone.dep_units`, see phgpo/memory_bank.py).
    hot_edges: static bound on the edges to rank per row when top_k_similar < M (None: every edge; see
      `phgpo.memory_bank.dependent_pheromone`).
  Returns:
    f32[B, N] fused pheromone in [tau_min, tau_max]; log of it is finite.
  Raises:
    AssertionError at trace time on wrong ranks or dtypes; ValueError on bad static options.
  Notes:
    Cost O(B N M) (M = entries per edge; plus an O(B N M log M) top-k when top_k_similar < M).
    No rho argument: the rate is the state's own (`state.rho`). The bank is replicated;
    the result is sharded like prev_tools.
  """
  chex.assert_rank(prev_tools, 1)
  chex.assert_type(prev_tools, int)
  rule.check_bounds(tau_min, tau_max)
  if dep_units not in DEP_UNITS:
    raise ValueError(f"pheromone.dep_units must be one of {DEP_UNITS}, got {dep_units!r}.")
  if int(top_k_similar) < 1:
    raise ValueError(f"pheromone.top_k_similar must be >= 1, got {top_k_similar}.")
  if rule.is_static(sim_threshold) and not 0.0 <= sim_threshold <= 1.0:
    raise ValueError(f"pheromone.sim_threshold must lie in [0, 1], got {sim_threshold}.")
  if rule.is_static(kappa) and kappa <= 0:
    raise ValueError(f"pheromone.kappa must be > 0, got {kappa}.")
  state = _check_state(state)
  prev_tools = jnp.asarray(prev_tools)
  n = state.tau.shape[1]
  tau_agn = _effective(edges.take_rows(state.tau, prev_tools), edges.take_rows(state.tau_step, prev_tools),
                       state.num_updates, state.rho, tau_min)
  if rule.is_static(w) and w == 0:
    return jnp.clip(tau_agn, tau_min, tau_max)

  prev = jnp.clip(prev_tools.astype(jnp.int32), 0, n)
  if task_sim is None:
    raise ValueError("pheromone_rows needs task_sim (memory_bank.bank_similarity) when w is not a Python 0.")
  task_sim = jnp.asarray(task_sim)
  chex.assert_rank(task_sim, 2)
  chex.assert_equal_shape_prefix([prev_tools, task_sim], 1)
  conf, tau_dep = memory_bank.dependent_pheromone(
      state, prev, task_sim, kappa=kappa, top_k_similar=top_k_similar, sim_threshold=sim_threshold,
      tau_min=tau_min, tau_max=tau_max, dep_units=dep_units, hot_edges=hot_edges)
  wc = w * conf
  fused = (1.0 - wc) * tau_agn + wc * tau_dep
  return jnp.clip(fused, tau_min, tau_max)
