"""PhGPO's task-dependent pheromone: a bounded memory bank per edge, and the evidence it gives a new task.

Each edge (i, j) (i = START or a tool, j a tool) keeps at most M entries (task, q): a training task that
traversed the edge and the best match score q a trajectory of that task earned while traversing it
(fields `bank_task`, `bank_score` of `phgpo.pheromone.PheromoneState`, i32/f32[N+1, N, M]; config
`pheromone.bank_per_edge`). Writing a batch of scored trajectories:
  - one candidate per (trajectory, distinct traversed edge) with q >= `pheromone.bank_min_score`;
  - one entry per (task, edge): a task already on the edge keeps the better of its two scores;
  - when an edge holds more than M entries, the lowest-scored leave first; among equal scores the oldest
    leaves first (a newer entry displaces an older one of the same score, so an edge full of perfect scores
    keeps refreshing instead of freezing on the first tasks seen); each edge's entries are kept sorted by
    score, best first, and among equal scores newest first (within one batch: the earlier row first).
Entries hold task rows, not embeddings: the similarity of a new task x to an entry is the cosine of their
query embeddings, s = cos(e_x, e_task), computed once per rollout as `bank_similarity` over the fixed table
of every task's embedding (the caller's, e.g. `phgpo.problem.Problem.query_emb`). For x and an edge (i, j):
  E_ij(x) = the entries of (i, j) with s >= sim_threshold and s > 0 (config `pheromone.sim_threshold`),
            the top_k_similar most similar of them (config `pheromone.top_k_similar`; ties: better score);
  S       = sum_{E_ij} s;   qbar = sum_{E_ij} s q / S   (similarity-weighted mean score);
  c_ij(x) = S / (S + kappa)                               (confidence; exactly 0 with no evidence);
  tau_dep = tau_min + qbar (tau_max - tau_min)   ('tau_range', default; config `pheromone.dep_units`)
          | clip(qbar, tau_min, tau_max)         ('score').
A task with no entry at or above the threshold gets c = 0, so the fusion (`phgpo.pheromone.pheromone_rows`)
gives it tau_agn exactly; one entry with s = 1 and q = 1 gives tau_dep = tau_max and c = 1 / (1 + kappa),
the largest value one entry can give.

Source: PhGPO, arXiv:2602.13691, "Pheromone" (SPEC.md "PhGPO", task-dependent pheromone: a bounded memory
M_ij of (task, score) per edge, similarity-weighted evidence, a confidence). Choices the SPEC leaves open:
the eviction order (lowest score first, one entry per task), the threshold (config `pheromone.sim_threshold`),
the confidence form S / (S + kappa) (the SPEC's suggestion) and the units of tau_dep ('tau_range' maps the
mean score onto [tau_min, tau_max] so both fused terms share units).

Every function is pure and jittable. The bank is replicated; the batch axis B may be sharded.
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


def bank_similarity(task_keys: chex.Array, task_emb: chex.Array) -> jax.Array:
  """Cosine similarity of each rollout's task to every task a bank entry can name: f32[B, T].

  Constant over a rollout, so a caller computes it once per episode and passes it to
  `phgpo.pheromone.pheromone_rows` (and `phgpo.objective.decide`) as `task_sim`.

  Args:
    task_keys: f32[T, D], the embedding of every task row the bank may hold (any norm), e.g. the problem's
      query embeddings.
    task_emb: f32[B, D], the rollouts' task embeddings (any norm).
  Returns:
    f32[B, T] in [-1, 1]; 0 for zero embeddings.
  """
  chex.assert_rank([task_keys, task_emb], 2)
  chex.assert_axis_dimension(task_emb, 1, task_keys.shape[1])
  return unit(jnp.asarray(task_emb, jnp.float32)) @ unit(jnp.asarray(task_keys, jnp.float32)).T


def masked_bank_similarity(task_keys: chex.Array, task_emb: chex.Array, key_groups: chex.Array,
                           query_groups: chex.Array) -> jax.Array:
  """`bank_similarity` with the entries of the reader's own leakage group made invisible: f32[B, T].

    s[b, j] = 0 where key_groups[j] == query_groups[b] (no evidence: the bank reads only s > 0), else
              cos(task_emb[b], task_keys[j]).
  So a training task reads neither its own entries nor, with chain groups, those of its own gold chain, as a
  held-out task cannot (config `pheromone.bank_leakage`; groups from `phgpo.retrieval.leakage_groups`).

  Args:
    task_keys: f32[T, D]; task_emb: f32[B, D] (as `bank_similarity`).
    key_groups: i32[T] leakage group of every task row; query_groups: i32[B] the readers' groups.
  Raises:
    AssertionError at trace time on wrong ranks or shapes.
  """
  chex.assert_rank([key_groups, query_groups], 1)
  chex.assert_equal_shape_prefix([task_keys, key_groups], 1)
  chex.assert_equal_shape_prefix([task_emb, query_groups], 1)
  sim = bank_similarity(task_keys, task_emb)
  return jnp.where(query_groups[:, None] == key_groups[None, :], 0.0, sim)


def empty_bank(num_tools: int, per_edge: int) -> tuple[jax.Array, jax.Array]:
  """(bank_task i32[N+1, N, M] all -1, bank_score f32[N+1, N, M] all 0): a bank with no entry.

  Args:
    num_tools: N, the tools of the graph (row N of the bank is START).
    per_edge: M >= 1, entries per edge (config `pheromone.bank_per_edge`).
  Raises:
    ValueError: per_edge < 1 (the message says how to disable the task-dependent pheromone instead).
  """
  if int(per_edge) < 1:
    raise ValueError(f"pheromone.bank_per_edge must be >= 1, got {per_edge}; to disable the "
                     "task-dependent pheromone set pheromone.w_max to 0 instead.")
  shape = (int(num_tools) + 1, int(num_tools), int(per_edge))
  return jnp.full(shape, -1, jnp.int32), jnp.zeros(shape, jnp.float32)


def _runs(keys: list[jax.Array]) -> jax.Array:
  """bool[K]: True where a sorted sequence of key tuples starts a new run."""
  change = jnp.zeros(keys[0].shape[0] - 1, bool)
  for k in keys:
    change = change | (k[1:] != k[:-1])
  return jnp.concatenate([jnp.ones((1,), bool), change])


def write(state: Any, prev: jax.Array, tools: jax.Array, mask: jax.Array, scores: jax.Array,
          task_ids: jax.Array, *, bank_min_score: float = 0.0) -> dict[str, jax.Array]:
  """The bank after writing one batch of scored trajectories (rules in the module docstring).

  Args:
    state: `phgpo.pheromone.PheromoneState` before the update (its `bank_task`, `bank_score`).
    prev: i32[B, H], previous tool of each step (START = N at step 0).
    tools: i32[B, H], tool of each step (-1 = no call: skipped).
    mask: bool[B, H], valid steps.
    scores: f32[B], match score q in [0, 1] per trajectory.
    task_ids: i32[B], the task row of each trajectory (>= 0; rows index the caller's task table).
    bank_min_score: only trajectories with q >= bank_min_score write (config `pheromone.bank_min_score`;
      0.0 writes every traversed edge, as the SPEC says).
  Returns:
    {'bank_task', 'bank_score'}: the new bank, each edge's entries sorted by score (best first), empty
    slots (task -1, score 0) last.
  Raises:
    AssertionError at trace time on wrong ranks.
  Notes:
    O(K log K + K M^2) for K = B H candidates, independent of N; only the touched edges are rewritten.
  """
  chex.assert_rank([prev, tools, mask, scores, task_ids], [2, 2, 2, 1, 1])
  bank_task, bank_score = state.bank_task, state.bank_score
  rows, n, m = bank_task.shape
  size = rows * n
  b, h = tools.shape
  k = b * h
  flat, valid = edges.edge_ids((rows, n), prev, tools, mask)
  keep = edges.first_visits(flat, valid) & (scores[:, None] >= bank_min_score) & (task_ids[:, None] >= 0)
  flat = edges.replicated(jnp.where(keep, flat, size).reshape(-1))
  cand_task = edges.replicated(jnp.broadcast_to(task_ids.astype(jnp.int32)[:, None], (b, h)).reshape(-1))
  cand_score = edges.replicated(jnp.broadcast_to(scores.astype(jnp.float32)[:, None], (b, h)).reshape(-1))
  order_in = jnp.arange(k, dtype=jnp.int32)
  # 1. One candidate per (edge, task): the best score (ties: the earlier row).
  o = jnp.lexsort((order_in, -cand_score, cand_task, flat))
  e1, t1, s1, r1 = flat[o], cand_task[o], cand_score[o], order_in[o]
  first = _runs([e1, t1]) & (e1 < size)
  # 2. Rank the survivors within their edge by score (ties: earlier row); more than M cannot enter.
  e2 = jnp.where(first, e1, size)
  o2 = jnp.lexsort((r1, -s1, e2))
  e2, t2, s2 = e2[o2], t1[o2], s1[o2]
  head = _runs([e2])
  group = jnp.cumsum(head.astype(jnp.int32)) - 1                      # touched-edge index, i32[K]
  pos = jnp.arange(k, dtype=jnp.int32)
  start = jax.lax.cummax(jnp.where(head, pos, 0))
  rank = pos - start
  live = (e2 < size) & (rank < m)
  g_row = jnp.where(live, group, k)
  new_task = jnp.full((k, m), -1, jnp.int32).at[g_row, rank].set(t2, mode="drop")
  new_score = jnp.full((k, m), -jnp.inf, jnp.float32).at[g_row, rank].set(s2, mode="drop")
  edge_of = jnp.full((k,), size, jnp.int32).at[jnp.where(head & (e2 < size), group, k)].set(e2, mode="drop")
  # 3. Merge each touched edge's new entries (first: they win ties, so the oldest leave first) with its old
  #    ones; keep the best M.
  flat_task, flat_score = bank_task.reshape(size, m), bank_score.reshape(size, m)
  safe = jnp.minimum(edge_of, size - 1)
  old_task = flat_task[safe]
  old_score = jnp.where(old_task >= 0, flat_score[safe], -jnp.inf)
  all_task = jnp.concatenate([new_task, old_task], axis=1)            # [K, 2M]
  all_score = jnp.concatenate([new_score, old_score], axis=1)
  two = 2 * m
  same = (all_task[:, :, None] == all_task[:, None, :]) & (all_task[:, :, None] >= 0)
  idx = jnp.arange(two)
  beaten = (all_score[:, None, :] > all_score[:, :, None]) | (
      (all_score[:, None, :] == all_score[:, :, None]) & (idx[None, None, :] < idx[None, :, None]))
  dup = jnp.any(same & beaten & (idx[None, None, :] != idx[None, :, None]), axis=-1)
  all_score = jnp.where(dup | (all_task < 0), -jnp.inf, all_score)
  top_score, top_i = jax.lax.top_k(all_score, m)                      # stable: lower index first on ties
  top_task = jnp.take_along_axis(all_task, top_i, axis=1)
  filled = top_score > -jnp.inf
  top_task = jnp.where(filled, top_task, -1)
  top_score = jnp.where(filled, top_score, 0.0)
  dest = jnp.where(edge_of < size, edge_of, size)
  return dict(
      bank_task=flat_task.at[dest].set(top_task, mode="drop").reshape(rows, n, m),
      bank_score=flat_score.at[dest].set(top_score, mode="drop").reshape(rows, n, m))


def _select_top(evid: jax.Array, s: jax.Array, k: int) -> jax.Array:
  """bool[..., M]: the k most similar entries of `evid` along the last axis (ties: the earlier slot, i.e. the
  better score, since an edge's entries are sorted by score): those above the k-th largest similarity, then
  the earliest slots equal to it until k are taken. O(M log M) per edge; no scatter."""
  sm = jnp.where(evid, s, -jnp.inf)
  kth = jax.lax.top_k(sm, k)[0][..., -1:]
  above = sm > kth
  tied = sm == kth
  room = k - jnp.sum(above, axis=-1, keepdims=True)
  return evid & (above | (tied & (jnp.cumsum(tied, axis=-1) <= room)))


def _select_top_hot(evid: jax.Array, s: jax.Array, k: int, d: int) -> tuple[jax.Array, jax.Array]:
  """(`_select_top` of bool[B, N, M] `evid` when no row has more than d edges over k entries of evidence,
  bool[B]: rows that have more).

  Only an edge with more than k entries of evidence changes, so each row's d edges with the most evidence are
  ranked on their own ([B, d, M]) and gathered back; the others keep `evid`. No scatter: it shards over B."""
  n = evid.shape[1]
  count = jnp.sum(evid, axis=-1, dtype=jnp.int32)                     # [B, N]
  # Counts ranked as float32 (exact below 2^24): XLA's CPU top-k is many times slower on int32.
  hot = jax.lax.top_k(count.astype(jnp.float32), d)[1].astype(jnp.int32)   # [B, d]
  sel = _select_top(jnp.take_along_axis(evid, hot[..., None], axis=1),
                    jnp.take_along_axis(s, hot[..., None], axis=1), k)    # [B, d, M]
  onehot = hot[:, :, None] == jnp.arange(n, dtype=jnp.int32)           # [B, d, N]
  back = jnp.take_along_axis(sel, jnp.argmax(onehot, axis=1)[..., None], axis=1)   # [B, N, M]
  return (jnp.where(jnp.any(onehot, axis=1)[..., None], back, evid),
          jnp.sum(count > k, axis=-1) > d)


def hot_edge_counts(bank_task: chex.Array, top_k_similar: int) -> jax.Array:
  """i32[N + 1]: for each source row i of the bank (START = N), the number of edges (i, j) holding more than
  `top_k_similar` entries, i.e. the most edges a reader at i may need ranked (`dependent_pheromone`'s
  `hot_edges`). Args: bank_task i32[N + 1, N, M] (`PheromoneState.bank_task`), top_k_similar >= 1."""
  return jnp.sum(jnp.sum(bank_task >= 0, axis=-1) > top_k_similar, axis=-1, dtype=jnp.int32)


def hot_edge_bucket(count: int, num_tools: int) -> int | None:
  """The `hot_edges` bound to compile for: the smallest of 4, 8, 16, ... at or above `count` (so few shapes
  are compiled), or None (rank every edge) when that reaches `num_tools`."""
  d = 4
  while d < count:
    d *= 2
  return None if d >= num_tools else d


def dependent_pheromone(state: Any, prev: jax.Array, task_sim: jax.Array, *, kappa, top_k_similar: int,
                        sim_threshold, tau_min, tau_max, dep_units: str,
                        hot_edges: int | None = None) -> tuple[jax.Array, jax.Array]:
  """Confidence c_ij(x) and task-dependent pheromone tau_dep_ij(x) of every edge leaving prev_b.

  The formulas are in the module docstring.

  Args:
    state: `phgpo.pheromone.PheromoneState` (its `bank_task`, `bank_score`).
    prev: i32[B], previous tool per rollout in [0, N] (START = N).
    task_sim: f32[B, T], `bank_similarity(task_keys, task_emb)`.
    kappa: > 0, confidence half-saturation in summed similarity (config `pheromone.kappa`).
    top_k_similar: static >= 1, entries per edge used (config `pheromone.top_k_similar`); values >= M use
      every entry above the threshold.
    sim_threshold: in [0, 1]; entries less similar than this are no evidence (config
      `pheromone.sim_threshold`; may be traced).
    tau_min, tau_max: MAX-MIN bounds (`pheromone.tau_min`, `pheromone.tau_max`).
    dep_units: 'tau_range' or 'score' (static; config `pheromone.dep_units`).
    hot_edges: static; None ranks every edge's entries when top_k_similar < M. An int d ranks only each
      row's d edges with the most evidence, the same selection when no edge leaving prev_b outside them
      holds more than top_k_similar entries: a caller passes hot_edge_bucket(max(hot_edge_counts(bank)[prev]))
      (the rollout driver does, `phgpo.classifier_rollout.rollout`). A row with more such edges than d gets
      NaN confidences (a wrong bound is loud, never a silent other selection).
  Returns:
    (conf f32[B, N] in [0, 1), tau_dep f32[B, N] in [tau_min, tau_max]).
  Notes:
    O(B N M) gathers and arithmetic per call, plus, when top_k_similar < M, a top-k over the M entries of
    every edge (O(B N M log M); about 100 ms at B = 80, N = 381, M = 64 on a CPU core) or, with hot_edges
    = d, of d edges per row (the retrieval table's gold bank: at most 3 edges over 16 entries leave any tool,
    25 leave START; 12x faster at d = 4 in benchmarks/pheromone_bench.py).
  """
  chex.assert_rank([prev, task_sim], [1, 2])
  chex.assert_equal_shape_prefix([prev, task_sim], 1)
  m = state.bank_task.shape[-1]
  ids = edges.take_rows(state.bank_task, prev)                         # [B, N, M]
  score = edges.take_rows(state.bank_score, prev)
  bsz, n = ids.shape[0], ids.shape[1]
  s = jnp.take_along_axis(task_sim, jnp.clip(ids, 0, task_sim.shape[1] - 1).reshape(bsz, n * m), axis=1)
  s = s.reshape(bsz, n, m)
  evid = (ids >= 0) & (s > 0) & (s >= sim_threshold)
  overflow = None
  if int(top_k_similar) < m:
    if hot_edges is None or int(hot_edges) >= n:
      evid = _select_top(evid, s, int(top_k_similar))
    else:
      evid, overflow = _select_top_hot(evid, s, int(top_k_similar), int(hot_edges))
  ws = jnp.where(evid, s, 0.0)
  s_sum = jnp.sum(ws, axis=-1)
  qbar = jnp.where(s_sum > 0, jnp.sum(ws * score, axis=-1) / jnp.where(s_sum > 0, s_sum, 1.0), 0.0)
  conf = s_sum / (s_sum + kappa)
  if overflow is not None:
    conf = jnp.where(overflow[:, None], jnp.nan, conf)
  if dep_units == "tau_range":
    tau_dep = tau_min + jnp.clip(qbar, 0.0, 1.0) * (tau_max - tau_min)
  else:
    tau_dep = jnp.clip(qbar, tau_min, tau_max)
  return conf, tau_dep
