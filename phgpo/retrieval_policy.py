"""The retrieval-augmented tool policy (`policy.kind = 'retrieval_mlp'`): the MLP scorer plus neighbour votes.

The encoder-MLP policy (`phgpo.policy`) scores each tool from the query and the calls so far. On TRAJECT-Bench
a training-free copy of the nearest training query's chain beats it by 20 match-ratio points, so here the
scorer is given, at every decision, what the nearest training queries did at that position
(`phgpo.retrieval`), and learns how far to trust it:

  V^k_t(n)   similarity-weighted votes of the k nearest training queries' gold tools at position t,
             k in `policy.vote_ks` (default 1, 3, 5)
  A^k_t(n)   the same votes from the neighbours whose tool at t - 1 equals the policy's own previous tool
  g_c        = a_c + b_c s_1 + p_c[t]     (one gate per channel c of the 2 |vote_ks| channels; s_1 the nearest
                                           neighbour's similarity, t the step)
  logits[n]  = alpha * mlp_logits[n] + sum_c g_c vote_c[n]      (mlp_logits: `phgpo.policy._ToolScorer`)

Initialisation: alpha = 0, a = `policy.vote_scale` on the 3-neighbour vote V^3 (the first k of `vote_ks`
when 3 is not among them) and 0 elsewhere, b = p = 0; so the untrained policy's logits are
vote_scale x V^3_t, its greedy decode is the training-free 3-neighbour position vote wherever a neighbour
reaches position t (ties: lowest tool id, as `phgpo.retrieval.vote_decode`), and its temperature-1 samples
prefer the vote by a margin set by `policy.vote_scale`. alpha starts at 0 as a learned scalar (its gradient
is the MLP's logits), so the MLP joins as soon as it helps.

No leakage: the neighbours of a training query exclude its own leakage group (`phgpo.retrieval.
leakage_groups`): itself on the random query split ('task', leave-one-out), every query of its own gold chain
on the chain split ('chain', leave-chain-out), so its votes in training are as reliable as a held-out query's.
Config `policy.leakage` = 'auto' (the split's: 'task' for 'random', 'chain' for 'chain'), 'task' or 'chain'.
The mask is the main threat to validity of every row built on it: with leave-one-out on the chain split the
training votes are right about 91 % of the time and the held-out ones 46 % (issue 24).

Source: issue 24 ("a retrieval-augmented policy"); the votes are `phgpo.retrieval`'s; the scorer is
`phgpo.policy`'s. Shapes: B decisions, K = max(vote_ks) neighbours, H = `env.max_steps`, N tools.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from phgpo import policy as policy_lib
from phgpo import retrieval

LEAKAGE_CHOICES = ("auto",) + retrieval.LEAKAGE_MODES


class RetrievalBatch(NamedTuple):
  """A batch of decision states with the task's neighbours.

  Attributes:
    base: the encoder-MLP policy's `phgpo.policy.PolicyBatch` (query embedding, history, step).
    nb_tools: i32[B, K, H] the K nearest (masked) training queries' gold tools, -1 padded.
    nb_len: i32[B, K] their gold lengths.
    nb_weight: f32[B, K] vote weights max(cos, 0) (0 for a missing neighbour), in decreasing similarity.
  """
  base: policy_lib.PolicyBatch
  nb_tools: jax.Array
  nb_len: jax.Array
  nb_weight: jax.Array


def leakage_mode(choice: str, split: str) -> str:
  """The leakage mask of config `policy.leakage` on `split`: 'auto' -> 'task' (random split) or 'chain'.

  Raises:
    ValueError: an unknown choice (the message lists the valid ones).
  """
  if choice not in LEAKAGE_CHOICES:
    raise ValueError(f"config policy.leakage={choice!r} is not one of {list(LEAKAGE_CHOICES)}")
  if choice != "auto":
    return choice
  return "chain" if split == "chain" else "task"


def neighbour_table(query_emb: np.ndarray, query_groups: np.ndarray, key_rows: np.ndarray, key_emb: np.ndarray,
                    key_groups: np.ndarray, *, k: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
  """Each query's k nearest keys outside its leakage group (`phgpo.retrieval.nearest_neighbours`).

  Args:
    query_emb: f32[Q, D] query embeddings; query_groups: i32[Q] their leakage groups (-1 = none).
    key_rows: i64[T] the keys' task rows (the training tasks, sorted: ties go to the lower row).
    key_emb: f32[T, D] their embeddings; key_groups: i32[T] their groups (`phgpo.retrieval.leakage_groups`).
    k: neighbours per query (1 <= k <= T).
    chunk: queries per jitted call (bounds the [chunk, T] similarity matrix).
  Returns:
    (rows i64[Q, k] the neighbours' task rows (-1 where missing), weight f32[Q, k] max(cos, 0), 0 where
    missing), in decreasing similarity.
  """
  key_rows = np.asarray(key_rows, np.int64)
  keys = jnp.asarray(key_emb, jnp.float32)
  kg = jnp.asarray(key_groups, jnp.int32)
  find = jax.jit(lambda q, g: retrieval.nearest_neighbours(q, keys, g, kg, k=k))
  rows, weights = [], []
  for i in range(0, len(query_emb), chunk):
    idx, sim, valid = find(jnp.asarray(query_emb[i:i + chunk], jnp.float32),
                           jnp.asarray(query_groups[i:i + chunk], jnp.int32))
    valid = np.asarray(valid)
    rows.append(np.where(valid, key_rows[np.asarray(idx)], -1))
    weights.append(np.asarray(retrieval.vote_weights(sim, jnp.asarray(valid))))
  return np.concatenate(rows).astype(np.int64), np.concatenate(weights).astype(np.float32)


class _RetrievalScorer(nn.Module):
  num_tools: int
  hidden: int
  max_steps: int
  vote_ks: tuple
  vote_scale: float

  @nn.compact
  def __call__(self, batch: RetrievalBatch, tool_emb: jax.Array) -> jax.Array:
    base = batch.base
    mlp = policy_lib._ToolScorer(num_tools=self.num_tools, hidden=self.hidden, max_steps=self.max_steps,  # pylint: disable=protected-access
                                 name="scorer")(base, tool_emb)
    h = base.history_tools.shape[1]
    prev = jnp.take_along_axis(base.history_tools, jnp.clip(base.step - 1, 0, h - 1)[:, None], axis=1)[:, 0]
    channels = []
    for agree in (False, True):
      for k in self.vote_ks:
        channels.append(retrieval.position_votes(
            batch.nb_tools[:, :k], batch.nb_len[:, :k], batch.nb_weight[:, :k], base.step,
            num_tools=self.num_tools, prev_tool=prev if agree else None))
    votes = jnp.stack(channels, axis=1)                                  # f32[B, C, N]
    c = votes.shape[1]
    first = list(self.vote_ks).index(3) if 3 in self.vote_ks else 0
    a0 = np.zeros((c,), np.float32)
    a0[first] = self.vote_scale
    a = self.param("gate_bias", lambda *_: jnp.asarray(a0), (c,))
    b = self.param("gate_sim", nn.initializers.zeros, (c,))
    p = self.param("gate_step", nn.initializers.zeros, (self.max_steps + 1, c))
    s1 = batch.nb_weight[:, 0]
    gate = a[None, :] + s1[:, None] * b[None, :] + p[jnp.clip(base.step, 0, self.max_steps)]   # f32[B, C]
    alpha = self.param("mlp_scale", nn.initializers.zeros, ())
    return alpha * mlp + jnp.einsum("bc,bcn->bn", gate, votes)


class RetrievalMLPPolicy:
  """The encoder-MLP scorer plus gated neighbour votes (module docstring).

  Args:
    tool_emb: f32[N, D] frozen tool embeddings; query_emb: f32[num_tasks, D] frozen query embeddings.
    gold_tools: i32[num_tasks, H] gold tools (-1 padded); gold_len: i32[num_tasks].
    train_idx: i64 training task rows (the only neighbours).
    groups: i32[num_tasks] leakage groups (`phgpo.retrieval.leakage_groups` of `leakage_mode`).
    hidden: scorer width (`policy.hidden`); max_steps: H (`env.max_steps`).
    vote_ks: neighbour counts of the vote channels (`policy.vote_ks`).
    vote_scale: the initial gate of the 3-neighbour vote (`policy.vote_scale`).
  Raises:
    ValueError: an empty or non-positive vote_ks, more neighbours than training tasks.
  """
  uses_observations = False

  def __init__(self, tool_emb: Any, query_emb: Any, gold_tools: np.ndarray, gold_len: np.ndarray,
               train_idx: np.ndarray, groups: np.ndarray, *, hidden: int = 256, max_steps: int = 20,
               vote_ks: Sequence[int] = (1, 3, 5), vote_scale: float = 4.0):
    ks = tuple(int(k) for k in vote_ks)
    if not ks or min(ks) < 1:
      raise ValueError(f"config policy.vote_ks must be positive neighbour counts, got {tuple(vote_ks)}")
    if max(ks) > len(train_idx):
      raise ValueError(f"config policy.vote_ks asks for {max(ks)} neighbours; there are {len(train_idx)} "
                       "training tasks")
    self.query_emb = np.asarray(query_emb, np.float32)
    self.tool_emb = jnp.asarray(tool_emb, jnp.float32)
    chex.assert_rank(self.tool_emb, 2)
    self.num_tools = int(self.tool_emb.shape[0])
    self.embed_dim = int(self.tool_emb.shape[1])
    self.max_steps = int(max_steps)
    self.gold_tools = np.asarray(gold_tools, np.int32)[:, :self.max_steps]
    self.gold_len = np.minimum(np.asarray(gold_len, np.int32), self.max_steps)
    self.train_idx = np.sort(np.asarray(train_idx, np.int64))
    self.groups = np.asarray(groups, np.int32)
    self.nb_rows, self.nb_weight = neighbour_table(self.query_emb, self.groups, self.train_idx,
                                                   self.query_emb[self.train_idx], self.groups[self.train_idx],
                                                   k=max(ks))
    self._module = _RetrievalScorer(num_tools=self.num_tools, hidden=hidden, max_steps=self.max_steps,
                                    vote_ks=ks, vote_scale=float(vote_scale))

  def with_query(self, query_emb: np.ndarray) -> tuple["RetrievalMLPPolicy", int]:
    """A shallow copy that also knows a typed query (f32[D]) as one more task row, with its k nearest training
    queries (no leakage group: it is no task); returns (copy, its row). Parameters and `apply` are shared."""
    pol = copy.copy(self)
    q = np.asarray(query_emb, np.float32)[None]
    r, w = neighbour_table(q, np.full((1,), -1, np.int32), self.train_idx, self.query_emb[self.train_idx],
                           self.groups[self.train_idx], k=self.nb_rows.shape[1])
    pol.query_emb = np.concatenate([self.query_emb, q], axis=0)
    pol.groups = np.concatenate([self.groups, np.full((1,), -1, np.int32)])
    pol.nb_rows = np.concatenate([self.nb_rows, r], axis=0)
    pol.nb_weight = np.concatenate([self.nb_weight, w], axis=0)
    return pol, len(pol.query_emb) - 1

  def neighbours(self, task_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nb_tools i32[B, K, H], nb_len i32[B, K], nb_weight f32[B, K]) of the task rows i64[B]."""
    rows = self.nb_rows[np.asarray(task_idx)]
    safe = np.maximum(rows, 0)
    tools = np.where((rows >= 0)[..., None], self.gold_tools[safe], -1).astype(np.int32)
    length = np.where(rows >= 0, self.gold_len[safe], 0).astype(np.int32)
    return tools, length, self.nb_weight[np.asarray(task_idx)]

  def featurize(self, task_idx, history_tools, history_status, step, observations=None) -> RetrievalBatch:
    """Host-side decision states -> `RetrievalBatch` (observation texts are not read)."""
    del observations
    tools, length, weight = self.neighbours(task_idx)
    base = policy_lib.PolicyBatch(query_emb=jnp.asarray(self.query_emb[np.asarray(task_idx)]),
                                  history_tools=jnp.asarray(history_tools, jnp.int32),
                                  history_status=jnp.asarray(history_status, jnp.int32),
                                  step=jnp.asarray(step, jnp.int32))
    return RetrievalBatch(base, jnp.asarray(tools), jnp.asarray(length), jnp.asarray(weight))

  def init(self, key: jax.Array) -> Any:
    k = self.nb_rows.shape[1]
    dummy = RetrievalBatch(
        policy_lib.PolicyBatch(query_emb=jnp.zeros((1, self.embed_dim), jnp.float32),
                               history_tools=jnp.full((1, self.max_steps), -1, jnp.int32),
                               history_status=jnp.zeros((1, self.max_steps), jnp.int32),
                               step=jnp.zeros((1,), jnp.int32)),
        jnp.full((1, k, self.max_steps), -1, jnp.int32), jnp.zeros((1, k), jnp.int32), jnp.zeros((1, k)))
    return self._module.init(key, dummy, self.tool_emb)["params"]

  def apply(self, params: Any, batch: RetrievalBatch) -> jax.Array:
    """Logits f32[B, N] at temperature 1 over all tools.

    Raises:
      AssertionError at trace time on wrong ranks or dtypes.
    """
    chex.assert_rank([batch.nb_tools, batch.nb_len, batch.nb_weight, batch.base.step], [3, 2, 2, 1])
    chex.assert_type([batch.nb_tools, batch.nb_len, batch.base.step], [jnp.int32, jnp.int32, jnp.int32])
    return self._module.apply({"params": params}, batch, self.tool_emb)
