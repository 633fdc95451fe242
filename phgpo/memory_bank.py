"""PhGPO's task-dependent pheromone: the memory bank of (task, edge, score) entries and its evidence.

Each traversed edge (i, j) of a scored trajectory of task x is written into the bank as (unit e_x, edge,
q); the bank is one ring buffer of C entries shared by all edges (fields `bank_*` of
`phgpo.pheromone.PheromoneState`; config `pheromone.bank_capacity`), the oldest entry overwritten
first. For a new task, the entries most similar to it on an edge give that edge's task-dependent
pheromone and a confidence:

  E_b     = the max_evidence bank entries c of edges leaving i with the highest s_c = cos(e, e_c) > 0
            (ties: lower slot first);
  E_bj    = the top_k_similar most similar entries of E_b whose edge is (i, j);
  S       = sum_{c in E_bj} s_c;   qbar = sum_{c in E_bj} s_c q_c / S  (weighted mean score);
  c_ij(x) = S / (S + kappa)                          (confidence, 0 with no evidence);
  tau_dep = tau_min + qbar (tau_max - tau_min)   ('tau_range', default)
          | clip(qbar, tau_min, tau_max)         ('score').

Source: PhGPO, arXiv:2602.13691, "Pheromone" (SPEC.md "PhGPO", task-dependent pheromone). The confidence
form is unpublished; S / (S + kappa) is the SPEC's suggestion. The SPEC gives tau_dep in score units;
'tau_range' maps the mean score affinely onto [tau_min, tau_max] so both fused terms share units (the
authors' code maps it as tau0 + 0.8 qbar (tau_max - tau0)). Only positive similarities count as evidence.
The SPEC bounds each edge's bank; this implementation bounds the union with one ring buffer.
The fusion with the task-agnostic pheromone is `phgpo.pheromone.pheromone_rows`.

Config keys: `pheromone.bank_capacity`, `pheromone.kappa`, `pheromone.top_k_similar`,
`pheromone.max_evidence`, `pheromone.dep_units`, `pheromone.bank_min_score`.
Every function is pure and jittable; the bank is replicated, the batch axis B may be sharded.
"""
from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from phgpo import edges

DEP_UNITS = ("tau_range", "score")


def unit(x: jax.Array) -> jax.Array:
  """x / max(||x||, 1e-12) along the last axis (zero rows stay zero)."""
  norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
  return x / jnp.maximum(norm, 1e-12)


def bank_similarity(state: Any, task_emb: chex.Array) -> jax.Array:
  """Cosine similarity of each task to every bank entry: f32[B, C] = unit(task_emb) @ bank_emb^T.

  Constant over a rollout (the bank changes only in `phgpo.pheromone.update_pheromone`), so a caller that
  queries `phgpo.pheromone.pheromone_rows` at every step may compute it once and pass it as `bank_sim`.

  Args:
    state: `phgpo.pheromone.PheromoneState` (bank_emb holds unit vectors or zeros).
    task_emb: f32[B, D] task embeddings (any norm).
  Returns:
    f32[B, C] in [-1, 1]; 0 for empty slots and zero embeddings.
  """
  chex.assert_rank(task_emb, 2)
  chex.assert_axis_dimension(task_emb, 1, state.bank_emb.shape[1])
  return unit(jnp.asarray(task_emb, jnp.float32)) @ jnp.asarray(state.bank_emb).T


def write(state: Any, prev: jax.Array, tools: jax.Array, mask: jax.Array, scores: jax.Array,
          task_emb: jax.Array, *, num_tools: int, bank_min_score: float = 0.0) -> dict[str, jax.Array]:
  """The bank after writing one entry per (trajectory, distinct traversed edge), in ring-buffer order.

  Args:
    state: `phgpo.pheromone.PheromoneState` before the update.
    prev: i32[B, H], previous tool of each step (START = num_tools at step 0).
    tools: i32[B, H], tool of each step (-1 = no call: skipped).
    mask: bool[B, H], valid steps.
    scores: f32[B], match score q per trajectory.
    task_emb: f32[B, D], task embedding per trajectory (normalised here).
    num_tools: N (static), so edge ids are prev * N + next.
    bank_min_score: only trajectories with q >= bank_min_score write entries (config
      `pheromone.bank_min_score`; 0.0 writes every traversed edge, as the SPEC says).
  Returns:
    {'bank_emb', 'bank_edge', 'bank_score', 'bank_valid', 'bank_ptr'}: the new bank fields. When more
    than C entries are written at once, only the last C (in row-major b, h order) are kept.
  """
  n = num_tools
  h = tools.shape[1]
  cap = state.bank_edge.shape[0]
  flat, valid = edges.edge_ids((n + 1, n), prev, tools, mask)
  keep_write = edges.first_visits(flat, valid) & (scores[:, None] >= bank_min_score)
  keep_write = edges.replicated(keep_write.reshape(-1))
  flat = edges.replicated(flat.reshape(-1))
  entry_score = jnp.repeat(edges.replicated(scores), h)
  entry_emb = jnp.repeat(edges.replicated(unit(task_emb.astype(jnp.float32))), h, axis=0)
  rank = jnp.cumsum(keep_write.astype(jnp.int32)) - 1
  total = jnp.sum(keep_write.astype(jnp.int32))
  keep = keep_write & (rank >= total - cap)
  pos = jnp.where(keep, (state.bank_ptr + rank) % cap, cap)
  return dict(
      bank_emb=state.bank_emb.at[pos].set(entry_emb, mode="drop"),
      bank_edge=state.bank_edge.at[pos].set(flat, mode="drop"),
      bank_score=state.bank_score.at[pos].set(entry_score, mode="drop"),
      bank_valid=state.bank_valid.at[pos].set(True, mode="drop"),
      bank_ptr=((state.bank_ptr + total) % cap).astype(jnp.int32))


def dependent_pheromone(state: Any, prev: jax.Array, sim: jax.Array, *, num_tools: int, kappa,
                        top_k_similar: int, max_evidence: int, tau_min, tau_max,
                        dep_units: str) -> tuple[jax.Array, jax.Array]:
  """Confidence c_ij(x) and task-dependent pheromone tau_dep_ij(x) of every edge leaving prev_b.

  The formulas are in the module docstring. `max_evidence` bounds the per-row work (a top-k over the bank
  instead of a full sort); with max_evidence >= C it is exact "top top_k_similar per edge" over the
  whole bank.

  Args:
    state: `phgpo.pheromone.PheromoneState` (its bank fields).
    prev: i32[B], previous tool per rollout in [0, N] (START = N).
    sim: f32[B, C], `bank_similarity(state, task_emb)`.
    num_tools: N (static).
    kappa: > 0, confidence half-saturation in summed similarity (config `pheromone.kappa`).
    top_k_similar: static, entries per edge used (config `pheromone.top_k_similar`).
    max_evidence: static, entries considered per row (config `pheromone.max_evidence`).
    tau_min, tau_max: MAX-MIN bounds (`pheromone.tau_min`, `pheromone.tau_max`).
    dep_units: 'tau_range' or 'score' (static; config `pheromone.dep_units`).
  Returns:
    (conf f32[B, N] in [0, 1), tau_dep f32[B, N] in [tau_min, tau_max]).
  Notes:
    Cost O(B C) for the match plus O(B max_evidence^2) for the per-edge ranks.
  """
  n = num_tools
  cap = state.bank_edge.shape[0]
  chex.assert_shape(sim, (prev.shape[0], cap))
  entry_prev = state.bank_edge // n
  entry_next = state.bank_edge % n
  match = state.bank_valid[None, :] & (entry_prev[None, :] == prev[:, None]) & (sim > 0)
  k_ev = min(int(max_evidence), cap)
  if k_ev == cap and int(top_k_similar) >= cap:
    # Every matched entry counts: no selection needed.
    wsim = jnp.where(match, sim, 0.0)
    nxt = jnp.zeros_like(prev)[:, None] + entry_next[None, :]
    score = jnp.zeros_like(sim) + state.bank_score[None, :]
  else:
    vals, slot = jax.lax.top_k(jnp.where(match, sim, -jnp.inf), k_ev)  # sorted, most similar first
    found = vals > -jnp.inf
    nxt = edges.take_rows(entry_next, slot)
    score = edges.take_rows(state.bank_score, slot)
    # Rank of each entry among the more similar (earlier) entries of the same edge.
    same = (nxt[:, :, None] == nxt[:, None, :]) & found[:, None, :]
    earlier = jnp.tril(jnp.ones((k_ev, k_ev), bool), k=-1)
    rank = jnp.sum(same & earlier, axis=-1)
    wsim = jnp.where(found & (rank < int(top_k_similar)), vals, 0.0)

  def per_row(ws, ws_q, ids):
    seg = jax.ops.segment_sum(jnp.stack([ws, ws_q], axis=-1), ids, num_segments=n)
    return seg[:, 0], seg[:, 1]

  s_sum, sq_sum = jax.vmap(per_row)(wsim, wsim * score, nxt)
  qbar = jnp.where(s_sum > 0, sq_sum / jnp.where(s_sum > 0, s_sum, 1.0), 0.0)
  conf = s_sum / (s_sum + kappa)
  if dep_units == "tau_range":
    tau_dep = tau_min + jnp.clip(qbar, 0.0, 1.0) * (tau_max - tau_min)
  else:
    tau_dep = jnp.clip(qbar, tau_min, tau_max)
  return conf, tau_dep
