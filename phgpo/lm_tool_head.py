"""A tool head: one logit per tool from the decoder's last hidden state.

  logits[b, n] = h_b . w_n + c_n,   h_b = final normalised hidden state at row b's last real token,
  w_n initialised to the mean input embedding of tool n's name tokens, c_n = 0.
So at initialisation a tool scores by how well the state's last hidden state aligns with the embedding of
its name -- the same inner product the (tied) LM head uses to predict that name's tokens -- rather than
at random. Source: PhGPO (arXiv 2602.13691) chooses among V_tool with a policy pi_theta(a | s) on an LLM
backbone; the head's exact form is not published: this is our choice (config `policy.kind = 'lm'`).
"""

from __future__ import annotations

from typing import Any, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np


def tool_name_token_ids(tokenizer: Any, tool_names: Sequence[str]) -> list[list[int]]:
  """Token ids of each tool name (no special tokens). Raises ValueError for a name with no tokens."""
  out = []
  for name in tool_names:
    ids = list(tokenizer.encode(name, add_special_tokens=False))
    if not ids:
      raise ValueError(f"tool name {name!r} encodes to no tokens; give every tool a non-empty name.")
    out.append(ids)
  return out


def init_tool_head(embed: Any, name_token_ids: Sequence[Sequence[int]], *, dtype: Any = jnp.float32) -> dict:
  """{'kernel': [D, N], 'bias': [N]}: column n = mean embedding row of tool n's name tokens, bias 0.

  Args:
    embed: [V, D] input embedding matrix (host or device).
    name_token_ids: N lists of token ids (each non-empty, ids < V).
    dtype: parameter dtype.
  """
  emb = np.asarray(jax.device_get(embed), np.float32)
  v = emb.shape[0]
  cols = []
  for n, ids in enumerate(name_token_ids):
    ids = np.asarray(ids, np.int64)
    if ids.size == 0 or ids.min() < 0 or ids.max() >= v:
      raise ValueError(f"tool {n}: name token ids {ids.tolist()} must be non-empty and in [0, {v}).")
    cols.append(emb[ids].mean(axis=0))
  kernel = np.stack(cols, axis=1)
  return {"kernel": jnp.asarray(kernel, dtype), "bias": jnp.zeros((len(cols),), dtype)}


def last_token_hidden(hidden: jax.Array, mask: jax.Array) -> jax.Array:
  """[B, D] hidden state at each row's last real token (position max{t : mask[b, t] = 1}; 0 if none)."""
  chex.assert_rank([hidden, mask], [3, 2])
  t = mask.shape[1]
  idx = jnp.max(jnp.where(mask.astype(bool), jnp.arange(t)[None, :], 0), axis=1)
  return jnp.take_along_axis(hidden, idx[:, None, None], axis=1)[:, 0]


def tool_logits(head: dict, last_hidden: jax.Array) -> jax.Array:
  """f32[B, N] = last_hidden [B, D] @ kernel [D, N] + bias, accumulated in float32."""
  chex.assert_rank(last_hidden, 2)
  k = head["kernel"].astype(last_hidden.dtype)
  return (jnp.dot(last_hidden, k, preferred_element_type=jnp.float32)
          + head["bias"].astype(jnp.float32))
