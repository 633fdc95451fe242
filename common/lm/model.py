"""The decoder: a Flax (linen) transformer for the Qwen2/Qwen2.5, Qwen3 and Llama-3.x families.

Per layer l (pre-norm, residual):
  h = x + o_proj( Attn( rope(qn(q_proj(RMS(x)))), rope(kn(k_proj(RMS(x)))), v_proj(RMS(x)) ) )
  x' = h + down_proj( silu(gate_proj(RMS(h))) * up_proj(RMS(h)) )
with RMS(x) = w * x / sqrt(mean(x^2) + eps), qn/kn the per-head RMSNorms of Qwen3 (identity otherwise),
grouped-query attention (each of num_kv_heads key/value heads serves num_heads / num_kv_heads query heads),
scores scaled by head_dim^-1/2, a causal mask combined with a key-padding mask; logits = RMS(x_L) W_out^T,
W_out the embedding when tied. Sources: see `common/lm/config.py`.

Parameters are a plain nested dict (the pytree at every jit boundary), layers stacked on a leading axis
and run with `nn.scan` (compile time independent of depth):
  {'embed': [V, D], 'final_norm': {'scale': [D]}, 'lm_head': [D, V] (untied only),
   'layers': {'input_norm': {'scale': [L, D]}, 'post_attn_norm': {'scale': [L, D]},
              'attn': {'q_proj': {'kernel': [L, D, H*hd], 'bias'?, 'lora_a'?, 'lora_b'?}, 'k_proj', 'v_proj',
                       'o_proj', 'q_norm'?: {'scale': [L, hd]}, 'k_norm'?},
              'mlp': {'gate_proj', 'up_proj', 'down_proj'}}}
Kernels are stored [in, out] (transposed from Hugging Face's [out, in]); `loading.py` holds the key map.

Attention runs through `jax.nn.dot_product_attention` in query blocks (`attend`, config `model.attention_impl`,
`model.attention_chunk`); a one-query decode step reads the cache in its own layout instead (`attend_flat`, config
`model.decode_attention`), and log-probs project to the vocabulary in blocks (`model.logits_chunk`), so neither a
[T, S] score tensor nor a [T, V] logit tensor exists in training.

A key/value cache (`KVCache`, [L, B, S, K, hd]) makes the same function serve prefill and one-token
decoding: the T new keys are written at slot `cache_slot` for every row (left-padded rows stay aligned), or
at per-row slots (rows of different lengths, multi-turn KV reuse), and queries attend to every valid cache
slot <= their own. The whole cache is the layer scan's carry: each layer writes its slots in place (under jit
with the cache donated, as the samplers do, nothing of size [L, B, S, K, hd] is copied per step).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from common.lm import config as config_lib
from common.lm.config import ModelConfig

Params = Any
_MASK_VALUE = float(np.finfo(np.float32).min)


class KVCache(NamedTuple):
  """Keys and values of every layer: k, v f32/bf16[L, B, S, K, hd], S = cache length (slots)."""
  k: jax.Array
  v: jax.Array


def init_cache(config: ModelConfig, batch: int, length: int) -> KVCache:
  """An all-zero cache of `length` slots for `batch` rows, in the compute dtype."""
  shape = (config.num_layers, batch, length, config.num_kv_heads, config.head_dim)
  z = jnp.zeros(shape, jnp.dtype(config.dtype))
  return KVCache(z, z)


def _remat_policy(name: str):
  return {"full": jax.checkpoint_policies.nothing_saveable,
          "dots": jax.checkpoint_policies.checkpoint_dots,
          "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}[name]


class RMSNorm(nn.Module):
  """y = w * x / sqrt(mean(x^2) + eps); statistics in float32, result in the compute dtype."""
  eps: float
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
    return scale.astype(self.dtype) * y.astype(self.dtype)


class Linear(nn.Module):
  """y = x W (+ b) (+ (alpha / r) x A B when lora_rank > 0; A [in, r], B [r, out], B initialised to 0)."""
  features: int
  use_bias: bool
  lora_rank: int
  lora_scale: float
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    d_in = x.shape[-1]
    kernel = self.param("kernel", nn.initializers.normal(0.02), (d_in, self.features), self.param_dtype)
    y = jnp.dot(x.astype(self.dtype), kernel.astype(self.dtype))
    if self.use_bias:
      y = y + self.param("bias", nn.initializers.zeros, (self.features,), self.param_dtype).astype(self.dtype)
    if self.lora_rank:
      bound = 1.0 / np.sqrt(d_in)
      a = self.param("lora_a", _uniform(bound), (d_in, self.lora_rank), self.param_dtype)
      b = self.param("lora_b", nn.initializers.zeros, (self.lora_rank, self.features), self.param_dtype)
      y = y + (jnp.dot(jnp.dot(x.astype(self.dtype), a.astype(self.dtype)), b.astype(self.dtype))
               * jnp.asarray(self.lora_scale, self.dtype))
    return y


def _uniform(bound):
  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def _rotate_half(x: jax.Array) -> jax.Array:
  h = x.shape[-1] // 2
  return jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope_tables(config: ModelConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
  """cos, sin f32[B, T, hd] for integer positions i32[B, T] (angles positions * inv_freq, duplicated)."""
  inv = jnp.asarray(config.rope_inv_freq())
  ang = positions.astype(jnp.float32)[..., None] * inv
  ang = jnp.concatenate([ang, ang], axis=-1)
  return jnp.cos(ang), jnp.sin(ang)


def attend_reference(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Dense softmax(q k^T / sqrt(hd), masked) v: the reference the memory-efficient path is tested against.

  Materialises float32 scores [B, K, G, T, S]; use only for tests and short sequences (config
  `model.attention_impl` = 'dense' selects it in the model).

  Args: q [B, T, H, hd]; k, v [B, S, K, hd] with H a multiple of K (query head h uses kv head h // (H/K));
    mask bool[B, T, S]. Scores and softmax in float32; a fully masked row gives a finite mean of v.
  Returns: [B, T, H, hd] in q's dtype.
  """
  b, t, h, hd = q.shape
  kh = k.shape[2]
  qg = q.reshape(b, t, kh, h // kh, hd)
  scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32)
  scores = scores * jnp.float32(hd ** -0.5)
  scores = jnp.where(mask[:, None, None, :, :], scores, _MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
  return jnp.einsum("bkgts,bskd->btkgd", probs, v).reshape(b, t, h, hd)


def slot_mask(q_slots: jax.Array, key_valid: jax.Array) -> jax.Array:
  """bool[B, T, S]: query t (at key slot q_slots[b, t]) sees key s iff s <= q_slots[b, t] and key_valid[b, s]."""
  s = jnp.arange(key_valid.shape[-1], dtype=jnp.int32)
  return (s[None, None, :] <= q_slots[:, :, None]) & key_valid.astype(bool)[:, None, :]


def attend_flat(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array, key_valid: jax.Array) -> jax.Array:
  """Grouped-query attention for a few queries against a long cache, without a transposed copy of the cache.

  The same function as `attend` (softmax over keys s <= q_slots[b, t] with key_valid[b, s], scores scaled by
  hd^-1/2, logits and softmax in float32, probabilities in q's dtype). jax.nn.dot_product_attention batches its
  dots over (B, K), so XLA first copies k and v from [B, S, K, hd] to head-major layouts: for one decode query
  that copy is most of the step's time (4x the dots at S = 8192, B = 8 on 2 CPU cores;
  benchmarks/lm_bench.py's decode line). Here k and v are read as [B, S*K, hd] (a free reshape), every query
  head is scored against all S*K key vectors (K times the dot FLOPs, negligible for one query), and the
  scores of the other groups' heads are dropped before the softmax (a select, so they contribute exactly 0).
  Config `model.decode_attention` = 'flat' selects it for T = 1 under attention_impl 'xla' (common.lm.model.
  Attention); 'grouped' keeps jax.nn.dot_product_attention there.

  Args: q [B, T, H, hd] (rotary applied); k, v [B, S, K, hd] with H a multiple of K (query head h uses kv head
    h // (H/K)); q_slots i32[B, T]; key_valid bool[B, S].
  Returns: [B, T, H, hd] in q's dtype; a query that sees no key gets the mean of v over its group (finite).
  Cost: [B, T, H, S*K] float32 scores: meant for small T (decode), not for prefill.
  Raises:
    ValueError: H is not a multiple of K.
  """
  b, t, h, hd = q.shape
  s, kh = k.shape[1], k.shape[2]
  if h % kh:
    raise ValueError(f"attend_flat: {h} query heads are not a multiple of {kh} key/value heads.")
  own = (jnp.arange(h) // (h // kh))[:, None] == jnp.arange(kh)[None, :]          # [H, K]: head h's kv head
  scores = jnp.einsum("bthd,bnd->bthn", q, k.reshape(b, s * kh, hd),
                      preferred_element_type=jnp.float32).reshape(b, t, h, s, kh)
  scores = jnp.sum(jnp.where(own[None, None, :, None, :], scores, 0.0), axis=-1) * jnp.float32(hd ** -0.5)
  scores = jnp.where(slot_mask(q_slots, key_valid)[:, :, None, :], scores, _MASK_VALUE)    # [B, T, H, S]
  probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
  probs = jnp.where(own[None, None, :, None, :], probs[..., None], 0).reshape(b, t, h, s * kh)
  return jnp.einsum("bthn,bnd->bthd", probs, v.reshape(b, s * kh, hd))


def _sdpa(q, k, v, q_slots, key_valid, implementation):
  """jax.nn.dot_product_attention on one query block; the mask is built here, [B, 1, Tq, S] bool."""
  mask = slot_mask(q_slots, key_valid)[:, None]
  return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, q_slots: jax.Array, key_valid: jax.Array, *,
           implementation: str = "xla", chunk: int = 1024, decode: str = "grouped") -> jax.Array:
  """Grouped-query attention in query blocks through `jax.nn.dot_product_attention`, without a [T, S] score tensor.

  out[b, t] = softmax_s(q[b, t] . k[b, s] / sqrt(hd) over keys s <= q_slots[b, t] with key_valid[b, s]) v[b, s].
  The T queries are processed in blocks of `chunk` (config `model.attention_chunk`); each block is one
  `jax.nn.dot_product_attention` call (logits float32, probabilities in the model dtype: JAX's own numerics),
  run one after another; a custom VJP keeps only q, k, v as residuals and the backward pass recomputes each
  block's scores, so neither pass holds more than one block's scores [B, H, chunk, S]. The padding/causal mask
  is built per block from q_slots and key_valid; no [B, T, S] mask exists either. Choice: every block reads all
  S keys (static shapes), so a causal training pass does about twice the attention FLOPs of a kernel that skips
  blocks above the diagonal. The mask is always passed explicitly (left padding and cache slots are not a plain
  causal mask), so 'cudnn' does not skip them either (not measured here: no GPU).

  Args:
    q: [B, T, H, hd] queries (rotary applied); k, v: [B, S, K, hd], H a multiple of K (GQA; JAX groups the
      heads without copying k/v).
    q_slots: i32[B, T] key index each query occupies (its own key slot).
    key_valid: bool[B, S] keys that may be attended (real tokens, written cache slots).
    implementation: 'xla' (any backend), 'cudnn' (NVIDIA GPUs, bf16/fp16; the flash kernel), None (JAX picks),
      or 'dense' (attend_reference: float32 [B, K, G, T, S] scores); config `model.attention_impl`.
    chunk: query block length; T <= chunk is one call.
    decode: 'flat' runs a one-query call (T = 1) under implementation 'xla' through `attend_flat`; 'grouped' (the
      default here) keeps jax.nn.dot_product_attention (config `model.decode_attention`, whose default is 'flat').
  Returns:
    [B, T, H, hd] in q's dtype. A query that sees no key gets the mean of v (finite).
  Raises:
    ValueError: chunk < 1, H not a multiple of K, or `decode` not in common.lm.config.DECODE_ATTENTIONS.
  """
  if chunk < 1:
    raise ValueError(f"attend: chunk={chunk} must be >= 1 (config model.attention_chunk).")
  if q.shape[2] % k.shape[2]:
    raise ValueError(f"attend: {q.shape[2]} query heads are not a multiple of {k.shape[2]} key/value heads.")
  if decode not in config_lib.DECODE_ATTENTIONS:
    raise ValueError(f"attend: decode={decode!r} is not one of {config_lib.DECODE_ATTENTIONS} "
                     "(config model.decode_attention).")
  if implementation == "dense":
    return attend_reference(q, k, v, slot_mask(q_slots, key_valid))
  if decode == "flat" and implementation == "xla" and q.shape[1] == 1:
    return attend_flat(q, k, v, q_slots, key_valid)
  impl = None if implementation in (None, "auto") else implementation
  if q.shape[1] <= chunk:
    return _sdpa(q, k, v, q_slots, key_valid, impl)
  return _blocked_attention(q, k, v, q_slots, key_valid, impl, chunk)


def _blocks(q, k, v, q_slots, key_valid, impl, chunk):
  """Query blocks one after another (lax.map), each recomputed in the backward pass (jax.checkpoint)."""
  b, t, h, hd = q.shape
  n = -(-t // chunk)
  pad = n * chunk - t
  qs = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(b, n, chunk, h, hd).swapaxes(0, 1)
  ss = jnp.pad(q_slots, ((0, 0), (0, pad)), constant_values=-1).reshape(b, n, chunk).swapaxes(0, 1)
  block = jax.checkpoint(functools.partial(_sdpa, implementation=impl))
  out = jax.lax.map(lambda a: block(a[0], k, v, a[1], key_valid), (qs, ss))
  return out.swapaxes(0, 1).reshape(b, n * chunk, h, hd)[:, :t]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _blocked_attention(q, k, v, q_slots, key_valid, impl, chunk):
  return _blocks(q, k, v, q_slots, key_valid, impl, chunk)


def _blocked_fwd(q, k, v, q_slots, key_valid, impl, chunk):
  # Residuals are the inputs only: the scores are recomputed block by block in the backward pass. (A plain
  # jax.checkpoint inside the layer scan was not enough: without layer remat the scan kept every block's scores.)
  return _blocks(q, k, v, q_slots, key_valid, impl, chunk), (q, k, v, q_slots, key_valid)


def _blocked_bwd(impl, chunk, res, g):
  q, k, v, q_slots, key_valid = res
  _, vjp = jax.vjp(lambda q, k, v: _blocks(q, k, v, q_slots, key_valid, impl, chunk), q, k, v)
  return (*vjp(g), None, None)


_blocked_attention.defvjp(_blocked_fwd, _blocked_bwd)


class Attention(nn.Module):
  """Grouped-query self-attention with rotary embeddings and an optional slot-addressed KV cache."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, key_valid, cache, layer, cache_slot):
    """cache: None, or the whole cache (k, v) [L, B, S, K, hd]: layer `layer` (i32[]) is written in place and
    read; returns (out [B, T, D], the cache)."""
    c = self.config
    dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
    b, t, _ = x.shape
    h, k, hd = c.num_heads, c.num_kv_heads, c.head_dim

    def proj(name, feats, bias):
      r = c.lora_rank if name in c.lora_targets else 0
      return Linear(feats, bias, r, c.lora_scale, dt, pdt, name=name)

    q = proj("q_proj", h * hd, c.qkv_bias)(x).reshape(b, t, h, hd)
    kk = proj("k_proj", k * hd, c.qkv_bias)(x).reshape(b, t, k, hd)
    v = proj("v_proj", k * hd, c.qkv_bias)(x).reshape(b, t, k, hd)
    if c.qk_norm:
      q = RMSNorm(c.rms_norm_eps, dt, pdt, name="q_norm")(q)
      kk = RMSNorm(c.rms_norm_eps, dt, pdt, name="k_norm")(kk)
    cos_, sin_ = cos[:, :, None, :].astype(dt), sin[:, :, None, :].astype(dt)
    q = q * cos_ + _rotate_half(q) * sin_
    kk = kk * cos_ + _rotate_half(kk) * sin_

    if cache is None:
      keys, values = kk, v
      q_slots = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None], (b, t))
    else:
      # The whole [L, ...] cache travels in the layer scan's carry and this layer's T new slots are written
      # into it in place; as a scanned input/output each step copied every layer's [B, S, K, hd] slice in
      # and out (most of a decode step's time at 8k slots: benchmarks/lm_bench.py's decode section).
      ck, cv = cache
      if cache_slot.ndim == 0:   # aligned rows: one contiguous write
        ck = jax.lax.dynamic_update_slice(ck, kk[None].astype(ck.dtype), (layer, 0, cache_slot, 0, 0))
        cv = jax.lax.dynamic_update_slice(cv, v[None].astype(cv.dtype), (layer, 0, cache_slot, 0, 0))
        q_slots = jnp.broadcast_to(cache_slot + jnp.arange(t, dtype=jnp.int32)[None], (b, t))
      else:                      # per-row slots i32[B, T]; out-of-range slots are dropped
        rows = jnp.arange(b, dtype=jnp.int32)[:, None]
        ck = ck.at[layer, rows, cache_slot].set(kk.astype(ck.dtype), mode="drop")
        cv = cv.at[layer, rows, cache_slot].set(v.astype(cv.dtype), mode="drop")
        q_slots = cache_slot
      cache = (ck, cv)
      keys = jax.lax.dynamic_index_in_dim(ck, layer, 0, keepdims=False).astype(dt)
      values = jax.lax.dynamic_index_in_dim(cv, layer, 0, keepdims=False).astype(dt)

    out = attend(q, keys, values, q_slots, key_valid, implementation=c.attention_impl, chunk=c.attention_chunk,
                 decode=c.decode_attention).reshape(b, t, h * hd)
    out = proj("o_proj", c.hidden_size, c.o_bias)(out)
    return out, cache


class MLP(nn.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)

    def proj(name, feats):
      r = c.lora_rank if name in c.lora_targets else 0
      return Linear(feats, c.mlp_bias, r, c.lora_scale, dt, pdt, name=name)

    g = proj("gate_proj", c.intermediate_size)(x)
    u = proj("up_proj", c.intermediate_size)(x)
    return proj("down_proj", c.hidden_size)(jax.nn.silu(g) * u)


class DecoderLayer(nn.Module):
  """One pre-norm block; scanned over layers (carry = (hidden state, whole cache or None), scanned input =
  the layer's index)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, carry, layer, cos, sin, key_valid, cache_slot):
    c = self.config
    dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
    x, cache = carry
    y = RMSNorm(c.rms_norm_eps, dt, pdt, name="input_norm")(x)
    y, cache = Attention(c, name="attn")(y, cos, sin, key_valid, cache, layer, cache_slot)
    x = x + y
    y = RMSNorm(c.rms_norm_eps, dt, pdt, name="post_attn_norm")(x)
    x = x + MLP(c, name="mlp")(y)
    return (x, cache), None


class Decoder(nn.Module):
  """Token ids -> final normalised hidden states (and the updated cache); `logits` projects them."""
  config: ModelConfig

  def setup(self):
    c = self.config
    pdt = jnp.dtype(c.param_dtype)
    self.embed = self.param("embed", nn.initializers.normal(0.02), (c.vocab_size, c.hidden_size), pdt)
    layer = DecoderLayer
    if c.remat != "none":
      layer = nn.remat(layer, prevent_cse=False, policy=_remat_policy(c.remat))
    self.layers = nn.scan(
        layer, variable_axes={"params": 0}, split_rngs={"params": True},
        in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
        length=c.num_layers)(c)
    self.final_norm = RMSNorm(c.rms_norm_eps, jnp.dtype(c.dtype), pdt)
    if not c.tie_embeddings:
      self.lm_head = self.param("lm_head", nn.initializers.normal(0.02), (c.hidden_size, c.vocab_size), pdt)

  def __call__(self, tokens, positions, key_valid, cache=None, cache_slot=0):
    """Args: tokens i32[B, T]; positions i32[B, T] (rotary positions); key_valid bool[B, S] keys that exist
    (real tokens / written cache slots); cache KVCache or None (then S = T and query t sees keys <= t);
    cache_slot i32[] first slot written by all rows (query t sits at slot cache_slot + t), or i32[B, T] each
    token's own slot (out-of-range slots are not written: padding). A query sees valid keys at slots <= its own.
    Returns: (hidden [B, T, D] after the final norm, new KVCache or None)."""
    c = self.config
    # mode='clip': an out-of-range id (e.g. a pad id of -1) must not produce NaN rows (the default 'fill'),
    # which would leak through attention even where masked (0 * NaN).
    x = jnp.take(self.embed, tokens, axis=0, mode="clip").astype(jnp.dtype(c.dtype))
    cos, sin = rope_tables(c, positions)
    kv = None if cache is None else (cache.k, cache.v)
    (x, kv), _ = self.layers((x, kv), jnp.arange(c.num_layers, dtype=jnp.int32), cos, sin,
                             key_valid.astype(bool), jnp.asarray(cache_slot, jnp.int32))
    x = self.final_norm(x)
    return x, (None if kv is None else KVCache(*kv))

  def logits(self, hidden):
    """f32[..., V] = hidden W_out (W_out = embed^T when tied), accumulated in float32."""
    c = self.config
    dt = jnp.dtype(c.dtype)
    if c.tie_embeddings:
      return jnp.einsum("...d,vd->...v", hidden, self.embed.astype(dt), preferred_element_type=jnp.float32)
    return jnp.einsum("...d,dv->...v", hidden, self.lm_head.astype(dt), preferred_element_type=jnp.float32)



# ----------------------------------------------------------------------------------------------------
# Pure functions over the params pytree.


def init_params(key: jax.Array, config: ModelConfig) -> Params:
  """Random parameters (normal(0.02) kernels, unit norms, zero biases, LoRA B = 0): tests and benchmarks.

  Real runs load a checkpoint (`common.lm.loading.load_params`) instead.
  """
  tokens = jnp.zeros((1, 1), jnp.int32)
  return Decoder(config).init(key, tokens, tokens, jnp.ones((1, 1), bool))["params"]


def abstract_params(config: ModelConfig) -> Params:
  """ShapeDtypeStructs of the parameters (no memory): the loader's and the sharder's template."""
  return jax.eval_shape(lambda k: init_params(k, config), jax.random.key(0))


def positions_from_mask(mask: jax.Array) -> jax.Array:
  """i32[B, T] position of each token counting only real tokens (0 at and before the first real token).

  Matches transformers' generate: cumsum(mask) - 1, padding positions clipped to 0 (they are masked).
  """
  return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def hidden_states(params: Params, tokens: jax.Array, mask: jax.Array | None = None, *,
                  config: ModelConfig) -> jax.Array:
  """Final normalised hidden states [B, T, D] (compute dtype) of a full, uncached forward pass.

  Args:
    params: the parameter pytree.
    tokens: i32[B, T] token ids, padding anywhere (left padding for prompts).
    mask: i32/bool[B, T], 1 for real tokens; None = all real.
    config: static ModelConfig.
  Returns:
    [B, T, D]; rows at padding positions are finite but meaningless.
  """
  chex.assert_rank(tokens, 2)
  chex.assert_type(tokens, jnp.int32)
  if mask is None:
    mask = jnp.ones(tokens.shape, bool)
  h, _ = Decoder(config).apply({"params": params}, tokens, positions_from_mask(mask), mask)
  return h


def forward(params: Params, tokens: jax.Array, mask: jax.Array | None = None, *,
            config: ModelConfig) -> jax.Array:
  """Next-token logits f32[B, T, V] of a full forward pass (logits[:, t] predicts tokens[:, t + 1])."""
  h = hidden_states(params, tokens, mask, config=config)
  return Decoder(config).apply({"params": params}, h, method=Decoder.logits)


def project_logits(params: Params, hidden: jax.Array, *, config: ModelConfig) -> jax.Array:
  """f32[..., V] logits from final hidden states."""
  return Decoder(config).apply({"params": params}, hidden, method=Decoder.logits)


def token_logprobs(params: Params, tokens: jax.Array, mask: jax.Array | None = None, *,
                   config: ModelConfig, temperature: float = 1.0) -> jax.Array:
  """Teacher-forced log-probabilities of each token given the ones before it.

  out[b, t] = log softmax(logits[b, t - 1] / temperature)[tokens[b, t]] for t >= 1 where mask[b, t] and
  mask[b, t - 1] are 1; 0 at t = 0, at padding, and at the first real token after left padding (it has no
  context, and its value would depend on how padding queries are blocked). This is the training-side twin of
  the sampler's log-probs (same temperature).

  Args:
    params: parameter pytree.
    tokens: i32[B, T].
    mask: i32/bool[B, T], 1 = real token; None = all real.
    config: static ModelConfig.
    temperature: float > 0, may be traced (greedy samples are scored at 1.0).
  Returns:
    f32[B, T] log-probs (nats).
  """
  if mask is None:
    mask = jnp.ones(tokens.shape, bool)
  h = hidden_states(params, tokens, mask, config=config)[:, :-1]
  tgt = _target_logprobs(params, h, tokens[:, 1:], jnp.asarray(temperature, jnp.float32), config)
  tgt = jnp.where(mask[:, 1:].astype(bool) & mask[:, :-1].astype(bool), tgt, 0.0)
  return jnp.concatenate([jnp.zeros_like(tgt[:, :1]), tgt], axis=1)


def _target_logprobs(params, hidden, targets, temperature, config: ModelConfig) -> jax.Array:
  """f32[B, T] log softmax(hidden W_out / temperature)[targets], in blocks of config.logits_chunk positions.

  Each block's logits f32[B, chunk, V] are made, reduced to (target logit, logsumexp) and dropped; under
  jax.checkpoint the backward pass recomputes them, so no [B, T, V] tensor is ever held (at 32k tokens and
  Qwen's 151,936-token vocabulary that would be 20 GB per sequence). The target logit is picked with a fused
  compare-and-sum rather than a gather, so the backward pass has no scatter (which fails with batch-sharded
  indices under Explicit mesh axes, and is slow on CPU).
  """
  def block(h, tg):
    logits = project_logits(params, h, config=config) / temperature
    vocab = jnp.arange(logits.shape[-1], dtype=jnp.int32)
    picked = jnp.sum(jnp.where(vocab == tg[..., None], logits, 0.0), axis=-1)
    return picked - jax.nn.logsumexp(logits, axis=-1)

  b, t = targets.shape
  chunk = config.logits_chunk
  if not chunk or t <= chunk:
    return block(hidden, targets)
  n = -(-t // chunk)
  pad = n * chunk - t
  hp = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, -1).swapaxes(0, 1)
  tp = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)
  out = jax.lax.map(lambda a: jax.checkpoint(block)(*a), (hp, tp))
  return out.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]


def decode_step(params: Params, tokens: jax.Array, positions: jax.Array, key_valid: jax.Array,
                cache: KVCache, cache_slot: jax.Array, *, config: ModelConfig,
                last_only: bool = False) -> tuple[jax.Array, KVCache]:
  """Run T new tokens through the cached decoder: (logits f32[B, T, V] or f32[B, V], updated cache).

  Args:
    tokens, positions: i32[B, T] ids and rotary positions.
    key_valid: bool[B, S] cache slots holding real keys once these tokens are written.
    cache: KVCache with S slots.
    cache_slot: i32[] slot of tokens[:, 0] for every row (the T tokens fill slots cache_slot ..
      cache_slot + T - 1), or i32[B, T] the slot of each token (rows at different lengths: multi-turn KV
      reuse; a slot >= S marks padding, which is not written). Each query sees the valid keys at slots <= its own.
    last_only: return only the last position's logits f32[B, V] (prefill: no [B, T, V] tensor).
  """
  dec = Decoder(config)
  h, cache = dec.apply({"params": params}, tokens, positions, key_valid, cache, cache_slot)
  if last_only:
    h = h[:, -1]
  return dec.apply({"params": params}, h, method=Decoder.logits), cache


def param_logical_axes(params: Params) -> Params:
  """The logical axis names of every parameter (a tree of tuples, one name per dimension).

  Names: 'vocab', 'embed', 'heads', 'kv_heads', 'mlp', 'head_dim', 'norm', 'layers', 'lora', 'tools'.
  `common.lm.sharding` maps them to mesh axes with the config's rules, so the maths never names a mesh axis.
  """
  io = {"q_proj": ("embed", "heads"), "k_proj": ("embed", "kv_heads"), "v_proj": ("embed", "kv_heads"),
        "o_proj": ("heads", "embed"), "gate_proj": ("embed", "mlp"), "up_proj": ("embed", "mlp"),
        "down_proj": ("mlp", "embed"), "tool_head": ("embed", "tools")}

  def axes(path, leaf):
    names = [getattr(p, "key", getattr(p, "name", str(p))) for p in path]
    nd = len(getattr(leaf, "shape", ()))
    lead = ("layers",) if "layers" in names else ()
    last = names[-1]
    owner = next((n for n in reversed(names[:-1]) if n in io), None)
    if last == "embed":
      out = ("vocab", "embed")
    elif last == "lm_head":
      out = ("embed", "vocab")
    elif owner is not None and last == "kernel":
      out = lead + io[owner]
    elif owner is not None and last == "bias":
      out = lead + io[owner][1:]
    elif owner is not None and last == "lora_a":
      out = lead + (io[owner][0], "lora")
    elif owner is not None and last == "lora_b":
      out = lead + ("lora", io[owner][1])
    elif last == "scale":
      out = lead + (("head_dim",) if any(n in ("q_norm", "k_norm") for n in names) else ("norm",))
    else:
      out = (None,) * nd
    if len(out) != nd:
      out = (None,) * nd
    return out

  return jax.tree_util.tree_map_with_path(axes, params)
