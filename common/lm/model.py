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

A key/value cache (`KVCache`, [L, B, S, K, hd]) makes the same function serve prefill and one-token
decoding: the T new keys are written at slot `cache_slot` for every row (rows are left-padded, so they stay
aligned), and queries attend to every cache slot <= their own that `key_mask` marks valid.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

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


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """softmax(q k^T / sqrt(hd), masked) v with grouped-query heads.

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


class Attention(nn.Module):
  """Grouped-query self-attention with rotary embeddings and an optional slot-addressed KV cache."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, mask, layer_cache, cache_slot):
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

    if layer_cache is not None:
      ck, cv = layer_cache
      ck = jax.lax.dynamic_update_slice(ck, kk.astype(ck.dtype), (0, cache_slot, 0, 0))
      cv = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (0, cache_slot, 0, 0))
      keys, values, new_cache = ck.astype(dt), cv.astype(dt), (ck, cv)
    else:
      keys, values, new_cache = kk, v, None

    out = attend(q, keys, values, mask).reshape(b, t, h * hd)
    out = proj("o_proj", c.hidden_size, c.o_bias)(out)
    return out, new_cache


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
  """One pre-norm block; scanned over layers (carry = hidden state, scanned input/output = layer cache)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, layer_cache, cos, sin, mask, cache_slot):
    c = self.config
    dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
    y = RMSNorm(c.rms_norm_eps, dt, pdt, name="input_norm")(x)
    y, new_cache = Attention(c, name="attn")(y, cos, sin, mask, layer_cache, cache_slot)
    x = x + y
    y = RMSNorm(c.rms_norm_eps, dt, pdt, name="post_attn_norm")(x)
    x = x + MLP(c, name="mlp")(y)
    return x, new_cache


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

  def __call__(self, tokens, positions, mask, cache=None, cache_slot=0):
    """Args: tokens i32[B, T]; positions i32[B, T]; mask bool[B, T, S] (query t may see key s);
    cache KVCache or None (then S = T); cache_slot i32[] first slot written.
    Returns: (hidden [B, T, D] after the final norm, new KVCache or None)."""
    c = self.config
    # mode='clip': an out-of-range id (e.g. a pad id of -1) must not produce NaN rows (the default 'fill'),
    # which would leak through attention even where masked (0 * NaN).
    x = jnp.take(self.embed, tokens, axis=0, mode="clip").astype(jnp.dtype(c.dtype))
    cos, sin = rope_tables(c, positions)
    xs = None if cache is None else (cache.k, cache.v)
    x, new = self.layers(x, xs, cos, sin, mask, jnp.asarray(cache_slot, jnp.int32))
    x = self.final_norm(x)
    return x, (None if new is None else KVCache(*new))

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
  mask = jnp.ones((1, 1, 1), bool)
  return Decoder(config).init(key, tokens, tokens, mask)["params"]


def abstract_params(config: ModelConfig) -> Params:
  """ShapeDtypeStructs of the parameters (no memory): the loader's and the sharder's template."""
  return jax.eval_shape(lambda k: init_params(k, config), jax.random.key(0))


def positions_from_mask(mask: jax.Array) -> jax.Array:
  """i32[B, T] position of each token counting only real tokens (0 at and before the first real token).

  Matches transformers' generate: cumsum(mask) - 1, padding positions clipped to 0 (they are masked).
  """
  return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def causal_mask(mask: jax.Array) -> jax.Array:
  """bool[B, T, T]: query t sees key s iff s <= t and s is a real token."""
  t = mask.shape[-1]
  causal = jnp.tril(jnp.ones((t, t), bool))
  return causal[None] & mask.astype(bool)[:, None, :]


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
  h, _ = Decoder(config).apply({"params": params}, tokens, positions_from_mask(mask), causal_mask(mask))
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

  out[b, t] = log softmax(logits[b, t - 1] / temperature)[tokens[b, t]] for t >= 1 with mask[b, t] = 1;
  0 at t = 0 and at padding. This is the training-side twin of the sampler's log-probs (same temperature).

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
  logits = forward(params, tokens, mask, config=config)[:, :-1] / jnp.asarray(temperature, jnp.float32)
  # log p = logit[target] - logsumexp(logits); the target logit is picked with a fused compare-and-sum
  # rather than a gather, so the backward pass has no scatter (which fails with batch-sharded indices
  # under Explicit mesh axes, and is slow on CPU).
  vocab = jnp.arange(logits.shape[-1], dtype=jnp.int32)
  picked = jnp.sum(jnp.where(vocab == tokens[:, 1:, None], logits, 0.0), axis=-1)
  tgt = picked - jax.nn.logsumexp(logits, axis=-1)
  tgt = jnp.where(mask[:, 1:].astype(bool), tgt, 0.0)
  return jnp.concatenate([jnp.zeros_like(tgt[:, :1]), tgt], axis=1)


def decode_step(params: Params, tokens: jax.Array, positions: jax.Array, mask: jax.Array,
                cache: KVCache, cache_slot: jax.Array, *, config: ModelConfig) -> tuple[jax.Array, KVCache]:
  """Run T new tokens through the cached decoder: (logits f32[B, T, V], updated cache).

  Args:
    tokens, positions: i32[B, T]; mask bool[B, T, S]; cache KVCache with S slots;
    cache_slot: i32[], slot of tokens[:, 0] (the T tokens fill slots cache_slot .. cache_slot + T - 1).
  """
  dec = Decoder(config)
  h, cache = dec.apply({"params": params}, tokens, positions, mask, cache, cache_slot)
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
