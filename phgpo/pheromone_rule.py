"""The ant-colony pheromone rule on dense tables (the eager form), and checks of its hyper-parameters.

  tau <- clip((1 - rho) tau + alpha sum_xi q(xi) 1[(i, j) in xi], tau_min, tau_max)
  = clip_pheromone(deposit(evaporate(tau, rho=rho), ..., alpha=alpha), tau_min=..., tau_max=...)

These O(R K) functions act on a dense table the caller holds. `phgpo.pheromone.update_pheromone` applies
the same rule lazily in O(B H) (phgpo/pheromone.py's docstring); tests and benchmarks check it against
these. Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", task-agnostic pheromone); MAX-MIN clipping:
Stutzle & Hoos 2000, "MAX-MIN Ant System".
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from phgpo import edges


def is_static(x) -> bool:
  """True for a Python number (checked eagerly); False for arrays and traced values."""
  return isinstance(x, (int, float))


def check_bounds(tau_min, tau_max):
  """ValueError unless 0 < tau_min <= tau_max (Python numbers only; traced values pass)."""
  if is_static(tau_min) and tau_min <= 0:
    raise ValueError(f"pheromone.tau_min must be > 0 so that log(tau) is finite, got {tau_min}.")
  if is_static(tau_min) and is_static(tau_max) and tau_max < tau_min:
    raise ValueError(f"pheromone.tau_max ({tau_max}) must be >= pheromone.tau_min ({tau_min}).")


def check_rate(name, rate):
  """ValueError unless the rate lies in [0, 1] (Python numbers only; traced values pass)."""
  if is_static(rate) and not 0.0 <= rate <= 1.0:
    raise ValueError(f"{name} must lie in [0, 1], got {rate}.")


def evaporate(tau: chex.Array, *, rho) -> jax.Array:
  """Evaporation of every entry of a dense table: tau <- (1 - rho) tau.

  The eager O(R*K) form, for dense tables held by the caller; `update_pheromone` evaporates
  the state lazily (module docstring) and does not call it.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", task-agnostic pheromone).

  Args:
    tau: f32[R, K], a pheromone table.
    rho: evaporation rate in [0, 1] (config `pheromone.rho`; `pheromone.arg_rho` for tau_arg).
  Returns:
    f32[R, K].
  Raises:
    ValueError for a Python rho outside [0, 1]; not checked for a traced rho.
  """
  chex.assert_rank(tau, 2)
  chex.assert_type(tau, float)
  check_rate("pheromone.rho", rho)
  return (1.0 - rho) * jnp.asarray(tau)


def deposit(tau: chex.Array, prev_tools: chex.Array, next_tools: chex.Array,
            mask: chex.Array, scores: chex.Array, *, alpha) -> jax.Array:
  """Batched deposit into a dense table: tau(i, j) += alpha sum_b q_b 1[(i, j) traversed by b].

  The eager form (see `evaporate`); `update_pheromone` uses the same amounts, written lazily.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO": deposit alpha sum_xi q(xi) 1[(i,j) in xi]).

  Choice: an edge traversed several times by one trajectory deposits ONCE (the SPEC's
  indicator 1[(i, j) in xi]), so a trajectory that loops on an edge does not inflate it.
  Different trajectories of the batch each deposit their own score.

  Args:
    tau: f32[R, K], a pheromone table (tau: R = N+1, K = N; tau_arg: R = N, K = Tm).
    prev_tools: i32[B, H], row index of each traversed edge (START = N for step 0).
    next_tools: i32[B, H], column index of each traversed edge.
    mask: bool[B, H], steps that count; entries with an index out of range (e.g. -1 for
      "no candidate" or an unseen template) are skipped as if masked.
    scores: f32[B], match score q(xi) in [0, 1] per trajectory.
    alpha: deposit rate (config `pheromone.alpha`; `pheromone.arg_alpha` for tau_arg).
  Returns:
    f32[R, K], tau plus deposit (not clipped: see `clip_pheromone`).
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  Notes:
    Sharding: B may be sharded; the B*H ids and amounts are gathered before the scatter-add.
  """
  chex.assert_rank([tau, prev_tools, next_tools, mask, scores], [2, 2, 2, 2, 1])
  chex.assert_type([tau, prev_tools, next_tools, mask, scores], [float, int, int, bool, float])
  chex.assert_equal_shape([prev_tools, next_tools, mask])
  chex.assert_equal_shape_prefix([prev_tools, scores], 1)
  tau, prev_tools, next_tools, mask, scores = map(
      jnp.asarray, (tau, prev_tools, next_tools, mask, scores))
  rows, cols = tau.shape
  flat, valid = edges.edge_ids((rows, cols), prev_tools, next_tools, mask)
  first = edges.first_visits(flat, valid)
  amount = jnp.where(first, alpha * scores[:, None], 0.0).astype(tau.dtype)
  flat = edges.replicated(flat.reshape(-1))
  amount = edges.replicated(amount.reshape(-1))
  out = tau.reshape(-1).at[flat].add(amount, mode="drop")
  return out.reshape(rows, cols)


def clip_pheromone(tau: chex.Array, *, tau_min, tau_max) -> jax.Array:
  """MAX-MIN clipping: tau <- clip(tau, tau_min, tau_max), so that log(tau) stays finite.

  Source: Stutzle & Hoos 2000, "MAX-MIN Ant System"; PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO").

  Args:
    tau: f32[...], any pheromone array.
    tau_min, tau_max: bounds, 0 < tau_min <= tau_max (config `pheromone.tau_min`/`tau_max`).
  Returns:
    f32[...] with every value in [tau_min, tau_max].
  Raises:
    ValueError for Python bounds with tau_min <= 0 or tau_max < tau_min.
  """
  chex.assert_type(tau, float)
  check_bounds(tau_min, tau_max)
  return jnp.clip(tau, tau_min, tau_max)
