"""Retrieval over the frozen query embeddings: k nearest training queries and their position votes.

The training-free baselines of issue 24 and the features of the retrieval-augmented policy
(`policy.kind = 'retrieval_mlp'`, planned) share these functions. For a task x with embedding e_x and the
training tasks j (keys) with embeddings e_j, gold chains g_j and lengths L_j:

  s_j(x)      = cos(e_x, e_j)
  N_k(x)      = the k keys of largest s_j(x) among those with group(j) != group(x)   (ties: lower key index)
  w_j(x)      = max(s_j(x), 0) for j in N_k(x)                                       (similarity weight)
  V_t(x, n)   = sum_{j in N_k(x), t < L_j} w_j(x) 1[g_j[t] = n]                     (position vote)
  A_t(x, n|p) = sum_{j in N_k(x), t < L_j, agree_j} w_j(x) 1[g_j[t] = n],
                agree_j = (t = 0) or (t - 1 < L_j and g_j[t - 1] = p)               (votes that agree with the
                                                                                      previous tool p)
  decode      : a_t = argmax_n V_t(x, n) for t < horizon (ties: lower tool id); -1 where no neighbour has a
                tool at position t.

Leakage masking (`group`): a key is never its query's neighbour when both carry the same group id.
`leakage_groups` gives one group per task (leave-one-out, for the random query split, where a held-out query's
own chain does occur in training) or one per (domain, gold chain) (leave-chain-out, for the chain split,
where it never does), so that a training query's neighbours look like a held-out query's. A held-out task
is in no training group, so its neighbours are unmasked either way.

Choices the issue leaves open, stated here: weights are the cosine similarity clipped at 0 (a negatively
similar neighbour does not vote against); positions are aligned from the chain's start; a decode runs to the
given horizon (the policy's rollout horizon: the gold length, config `env.horizon = 'gold'`) and leaves -1
(a miss) at positions no neighbour reaches; vote ties go to the lowest tool id (`jnp.argmax`). With these
choices on the seed-0 held-out sets, k = 1 reproduces the nearest-copy match ratio (87.57 random / 46.40
chain), k = 3 gives 88.45 / 74.85 exact on the random split and k = 5 gives 86.14 (random) / 47.80, exact
19.70 (chain): the numbers of issue 24.

Source: the baselines of issue 24 (k-nearest-neighbour retrieval on all-MiniLM-L6-v2 embeddings, Reimers &
Gurevych 2019, "Sentence-BERT", arXiv:1908.10084); PhGPO's task-dependent pheromone uses the same cosine
similarity (`phgpo.memory_bank.bank_similarity`).

All functions except `leakage_groups` are pure and jittable; `k` and `num_tools` are static. The key table is
replicated; the batch axis B may be sharded.
"""
from __future__ import annotations

from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

LEAKAGE_MODES = ("task", "chain")


def leakage_groups(tasks: Sequence, *, mode: str) -> np.ndarray:
  """Host-side group id of every task for the leakage mask of `nearest_neighbours`.

  Args:
    tasks: the problem's tasks (`phgpo.data.Task`: reads `domain` and the names of `calls`).
    mode: 'task' (leave-one-out: each task its own group; the random split) or 'chain' (leave-chain-out: one
      group per (domain, sequence of gold tool names), the unit `phgpo.data.split_tasks_by_chain` holds out).
  Returns:
    i32[len(tasks)] group ids in [0, number of groups), numbered in order of first appearance.
  Raises:
    ValueError: an unknown mode.
  """
  if mode not in LEAKAGE_MODES:
    raise ValueError(f"unknown leakage mode {mode!r}; valid: {list(LEAKAGE_MODES)}")
  if mode == "task":
    return np.arange(len(tasks), dtype=np.int32)
  ids: dict = {}
  return np.array([ids.setdefault((t.domain, tuple(c.name for c in t.calls)), len(ids)) for t in tasks],
                  np.int32)


def _unit(x: jax.Array) -> jax.Array:
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def nearest_neighbours(query_emb: chex.Array, key_emb: chex.Array, query_group: chex.Array,
                       key_group: chex.Array, *, k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The k keys most similar to each query, excluding keys of the query's own group.

    s[b, j] = cos(query_emb[b], key_emb[j]), -inf where key_group[j] == query_group[b];
    idx[b]  = the k largest s[b, .] in decreasing order (ties: lower key index first, `jax.lax.top_k`).

  Args:
    query_emb: f32[B, D] query embeddings (any norm; a zero row has similarity 0 to everything).
    key_emb: f32[T, D] key (training task) embeddings, T >= k.
    query_group: i32[B] leakage group of each query (`leakage_groups`; -1 = mask nothing).
    key_group: i32[T] leakage group of each key.
    k: static, neighbours per query, 1 <= k <= T.
  Returns:
    (idx i32[B, k] key indices, sim f32[B, k] cosine similarities (-inf where invalid), valid bool[B, k]:
    False where fewer than k keys lie outside the query's group; such slots hold an arbitrary index).
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError if k is not in [1, T].
  Notes:
    The similarity is float32, so two keys within float32 rounding of each other may order differently than
    in float64 (`phgpo.evaluation.nearest_query` ranks in float64 with a 1e-9 tie tolerance); on the TRAJECT-Bench
    held-out sets both give the same neighbours' chains (checked once, on all 669 held-out tasks of the two
    splits, when this module was written).
  """
  chex.assert_rank([query_emb, key_emb, query_group, key_group], [2, 2, 1, 1])
  chex.assert_type([query_group, key_group], [int, int])
  chex.assert_equal_shape_prefix([query_emb, query_group], 1)
  chex.assert_equal_shape_prefix([key_emb, key_group], 1)
  chex.assert_axis_dimension(query_emb, 1, key_emb.shape[1])
  if not 1 <= int(k) <= key_emb.shape[0]:
    raise ValueError(f"k must lie in [1, number of keys = {key_emb.shape[0]}], got {k}")
  sim = _unit(jnp.asarray(query_emb, jnp.float32)) @ _unit(jnp.asarray(key_emb, jnp.float32)).T
  same = query_group[:, None] == key_group[None, :]
  sim = jnp.where(same, -jnp.inf, sim)
  top, idx = jax.lax.top_k(sim, int(k))
  valid = top > -jnp.inf
  return idx.astype(jnp.int32), top, valid


def vote_weights(sim: chex.Array, valid: chex.Array) -> jax.Array:
  """Similarity weights w = max(sim, 0) of the valid neighbours, 0 elsewhere: f32[B, k].

  Args:
    sim: f32[B, k] neighbour similarities (`nearest_neighbours`).
    valid: bool[B, k] real neighbours.
  """
  chex.assert_equal_shape([sim, valid])
  return jnp.where(valid, jnp.maximum(sim, 0.0), 0.0).astype(jnp.float32)


def position_votes(nb_tools: chex.Array, nb_len: chex.Array, weights: chex.Array, step: chex.Array, *,
                   num_tools: int, prev_tool: chex.Array | None = None) -> jax.Array:
  """Similarity-weighted votes of the neighbours' gold tools at each query's position: f32[B, N].

    V[b, n] = sum_j weights[b, j] 1[step_b < nb_len[b, j]] 1[nb_tools[b, j, step_b] = n]
  With `prev_tool`, only neighbours that agree with it vote (the A_t of the module docstring): at step 0
  every neighbour agrees; at step t > 0 neighbour j agrees when its tool at t - 1 equals prev_tool[b].

  Args:
    nb_tools: i32[B, k, H] the neighbours' gold tools (-1 padded).
    nb_len: i32[B, k] the neighbours' gold lengths (<= H).
    weights: f32[B, k] vote weights (`vote_weights`; 0 for invalid neighbours).
    step: i32[B] position of the decision (calls made before it); positions >= H get no votes.
    num_tools: static N.
    prev_tool: optional i32[B], the tool called at step - 1 (ignored where step = 0).
  Returns:
    f32[B, N] votes, >= 0; a row sums to the weight of the (agreeing) neighbours that reach the position.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  """
  chex.assert_rank([nb_tools, nb_len, weights, step], [3, 2, 2, 1])
  chex.assert_type([nb_tools, nb_len, step], [int, int, int])
  chex.assert_equal_shape([nb_len, weights])
  chex.assert_equal_shape_prefix([nb_tools, nb_len, step], 1)
  h = nb_tools.shape[2]
  t = jnp.clip(step, 0, h - 1)[:, None, None]
  tool_t = jnp.take_along_axis(nb_tools, jnp.broadcast_to(t, nb_tools.shape[:2] + (1,)), axis=2)[..., 0]
  reach = (step[:, None] < nb_len) & (step[:, None] < h) & (tool_t >= 0)
  if prev_tool is not None:
    chex.assert_shape(prev_tool, step.shape)
    tp = jnp.clip(step - 1, 0, h - 1)[:, None, None]
    tool_p = jnp.take_along_axis(nb_tools, jnp.broadcast_to(tp, nb_tools.shape[:2] + (1,)), axis=2)[..., 0]
    agree = (step[:, None] == 0) | (tool_p == prev_tool[:, None])
    reach = reach & agree
  w = jnp.where(reach, weights, 0.0)
  return jnp.einsum("bk,bkn->bn", w, jax.nn.one_hot(tool_t, int(num_tools), dtype=jnp.float32))


def vote_decode(nb_tools: chex.Array, nb_len: chex.Array, weights: chex.Array, horizon: chex.Array, *,
                num_tools: int) -> tuple[jax.Array, jax.Array]:
  """Training-free position-vote chains: a_t = argmax_n V_t(n) for t < horizon, -1 where no vote.

  Args:
    nb_tools: i32[B, k, H], nb_len: i32[B, k], weights: f32[B, k]: as in `position_votes`.
    horizon: i32[B] calls to predict (the rollout horizon: the gold length under `env.horizon = 'gold'`),
      clipped to [0, H].
    num_tools: static N.
  Returns:
    (pred i32[B, H] tool ids, -1 at positions without a vote and at t >= horizon; pred_len i32[B] =
    clip(horizon, 0, H)). With k = 1 this is the nearest copy cut or padded to the horizon.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  """
  chex.assert_rank(horizon, 1)
  b, _, h = nb_tools.shape
  steps = jnp.arange(h, dtype=jnp.int32)

  def at(t):
    return position_votes(nb_tools, nb_len, weights, jnp.full((b,), t, jnp.int32), num_tools=num_tools)

  votes = jax.vmap(at, out_axes=1)(steps)                           # f32[B, H, N]
  pred = jnp.where(votes.max(axis=-1) > 0, jnp.argmax(votes, axis=-1), -1).astype(jnp.int32)
  pred_len = jnp.clip(horizon, 0, h).astype(jnp.int32)
  pred = jnp.where(steps[None, :] < pred_len[:, None], pred, -1)
  return pred, pred_len
