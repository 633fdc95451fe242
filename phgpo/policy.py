"""PhGPO's tool policy: state (task query plus call history) -> one logit per tool.

All policies share one interface, `ToolPolicy`: `featurize(...)` turns host-side decision states (task index,
calls so far, their observation status and text) into the policy's own batch pytree, `init(key) -> params`
and `apply(params, batch) -> f32[B, N]`. The trainer never looks inside a batch, so a language-model policy
(config `policy.kind = 'lm'`, `phgpo/lm_policy.py`, which renders the states as chat text) replaces this
one by config.

The default, `policy.kind = 'encoder_mlp'`, reads frozen all-MiniLM-L6-v2 sentence embeddings (a pretrained
6-layer BERT, `common/encoder.py`) of the query and of every tool's "name: description", and trains a small
scoring network on top. Why: on 2 CPU cores the whole three-policy, three-seed comparison must run in
minutes, and the frozen encoder embeds each text once (cached on disk) while still giving the policy a
pretrained notion of which tool suits which request, including for tools never seen in training. Fine-tuning
the encoder itself is the language-model policy's job.

Scoring (d = `policy.hidden`):
  tool_feat[n] = W_t e_tool[n] + u[n]                        (frozen embedding projected, plus a learned
                                                                per-tool offset)
  h_k          = tool_feat[tool_k] + status_emb[status_k]     (history item k < step)
  x            = [W_q e_query, h_{step-1} (or START), mean_k h_k, pos_emb[step]]
  z            = MLP(x)                                       (2 residual GELU layers, LayerNorm)
  logits[n]    = <z, tool_feat[n]> / sqrt(d) + b[n] + r * count_n(history)
where count_n is how often tool n was already called (r learned: repetition is rare in the data).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# Observation status codes of a history item (see common/envs/base.py StepResult.status).
STATUS_CODES = {"ok": 0, "failed": 1, "unavailable": 2, "invalid": 3}
NUM_STATUS = len(STATUS_CODES)


class PolicyBatch(NamedTuple):
  """A batch of decision states.

  Attributes:
    query_emb: f32[B, D], the task query's sentence embedding.
    history_tools: i32[B, H], tools called so far (-1 = none); only positions < step are read, so one
      whole trajectory's history can serve all of its decisions.
    history_status: i32[B, H], STATUS_CODES of each call's observation.
    step: i32[B], number of calls made before this decision (0 = first decision, from START).
  """
  query_emb: jax.Array
  history_tools: jax.Array
  history_status: jax.Array
  step: jax.Array


class ToolPolicy(Protocol):
  """What the PhGPO trainer needs from a policy."""
  num_tools: int
  uses_observations: bool   # featurize reads observation texts (the trainer records them only then)

  def featurize(self, task_idx: np.ndarray, history_tools: np.ndarray, history_status: np.ndarray,
                step: np.ndarray, observations: Sequence[Sequence[str]] | None = None) -> Any:
    """Decision states -> the policy's batch pytree (host side, outside jit).

    Args:
      task_idx: i64[B] task index (row of the problem's task list).
      history_tools: i32[B, H] tools called so far, -1 padded; positions >= step are ignored.
      history_status: i32[B, H] STATUS_CODES of the observations.
      step: i32[B] calls made before the decision.
      observations: B lists of observation texts (only when `uses_observations`).
    """
    ...

  def init(self, key: jax.Array) -> Any:
    ...

  def apply(self, params: Any, batch: PolicyBatch) -> jax.Array:
    """Returns f32[B, N] logits at temperature 1 over all N tools."""
    ...


class _ToolScorer(nn.Module):
  num_tools: int
  hidden: int
  max_steps: int

  @nn.compact
  def __call__(self, batch: PolicyBatch, tool_emb: jax.Array) -> jax.Array:
    d = self.hidden
    b, h = batch.history_tools.shape
    tool_feat = nn.Dense(d, name="tool_proj")(tool_emb) + self.param(
        "tool_offset", nn.initializers.zeros, (self.num_tools, d))
    start = self.param("start", nn.initializers.normal(0.02), (d,))
    status_emb = nn.Embed(NUM_STATUS, d, name="status_emb")
    pos_emb = nn.Embed(self.max_steps + 1, d, name="pos_emb")

    pos = jnp.arange(h)[None, :]
    valid = (pos < batch.step[:, None]) & (batch.history_tools >= 0)         # [B, H]
    tools = jnp.where(valid, batch.history_tools, 0)
    items = tool_feat[tools] + status_emb(jnp.clip(batch.history_status, 0, NUM_STATUS - 1))
    items = jnp.where(valid[..., None], items, 0.0)                            # [B, H, d]
    count = jnp.maximum(valid.sum(axis=1, keepdims=True), 1)
    mean_item = items.sum(axis=1) / count
    last = jnp.clip(batch.step - 1, 0, h - 1)
    prev = jnp.take_along_axis(items, last[:, None, None], axis=1)[:, 0]
    prev = jnp.where((batch.step > 0)[:, None], prev, start[None, :])
    x = jnp.concatenate([
        nn.Dense(d, name="query_proj")(batch.query_emb), prev, mean_item,
        pos_emb(jnp.clip(batch.step, 0, self.max_steps))], axis=-1)
    z = nn.gelu(nn.Dense(d, name="in")(x))
    for i in range(2):
      z = z + nn.Dense(d, name=f"res{i}")(nn.gelu(nn.LayerNorm(name=f"ln{i}")(z)))
    z = nn.Dense(d, name="out")(nn.LayerNorm(name="ln_out")(z))
    logits = z @ tool_feat.T / jnp.sqrt(d).astype(z.dtype)
    logits = logits + self.param("tool_bias", nn.initializers.zeros, (self.num_tools,))
    called = jax.nn.one_hot(tools, self.num_tools, dtype=z.dtype) * valid[..., None]
    logits = logits + self.param("repeat_bias", nn.initializers.zeros, ()) * called.sum(axis=1)
    del b
    return logits


class EncoderMLPPolicy:
  """Frozen-sentence-embedding tool policy (the default; see the module docstring).

  Args:
    tool_emb: f32[N, D] frozen embeddings of each tool's "name: description".
    query_emb: f32[num_tasks, D] frozen embeddings of the task queries (row = task index).
    hidden: width d of the scoring network (config `policy.hidden`).
    max_steps: longest history the position embedding covers (config `env.max_steps`).
  """
  uses_observations = False

  def __init__(self, tool_emb: Any, query_emb: Any, *, hidden: int = 256, max_steps: int = 20):
    self.query_emb = np.asarray(query_emb, np.float32)
    self.tool_emb = jnp.asarray(tool_emb, jnp.float32)
    chex.assert_rank(self.tool_emb, 2)
    self.num_tools = int(self.tool_emb.shape[0])
    self.embed_dim = int(self.tool_emb.shape[1])
    self.max_steps = max_steps
    self._module = _ToolScorer(num_tools=self.num_tools, hidden=hidden, max_steps=max_steps)

  def featurize(self, task_idx, history_tools, history_status, step, observations=None) -> PolicyBatch:
    """Host-side decision states -> `PolicyBatch` (observation texts are not read)."""
    del observations
    return PolicyBatch(
        query_emb=jnp.asarray(self.query_emb[np.asarray(task_idx)]),
        history_tools=jnp.asarray(history_tools, jnp.int32),
        history_status=jnp.asarray(history_status, jnp.int32),
        step=jnp.asarray(step, jnp.int32))

  def init(self, key: jax.Array) -> Any:
    dummy = PolicyBatch(
        query_emb=jnp.zeros((1, self.embed_dim), jnp.float32),
        history_tools=jnp.full((1, self.max_steps), -1, jnp.int32),
        history_status=jnp.zeros((1, self.max_steps), jnp.int32),
        step=jnp.zeros((1,), jnp.int32))
    return self._module.init(key, dummy, self.tool_emb)["params"]

  def apply(self, params: Any, batch: PolicyBatch) -> jax.Array:
    """Logits f32[B, N] at temperature 1 over all tools.

    Raises:
      AssertionError at trace time on wrong ranks or dtypes.
    """
    chex.assert_rank([batch.query_emb, batch.history_tools, batch.history_status, batch.step],
                     [2, 2, 2, 1])
    chex.assert_type([batch.history_tools, batch.step], [jnp.int32, jnp.int32])
    return self._module.apply({"params": params}, batch, self.tool_emb)
