"""Batched generation with a KV cache, and the teacher-forced log-probs that match it.

Algorithm (one compiled program per (batch, prompt bucket, new-token bucket, SamplingConfig)):
  1. Prefill: the left-padded prompt [B, P] fills cache slots 0..P-1 (positions count real tokens only).
  2. `lax.while_loop` over steps n = 0..N-1 while some row is unfinished: draw token n of every row from
     the last logits, record it with its log-prob, mark rows that emitted one of their stop tokens or
     reached their own max-new-tokens, then run that token through the decoder at slot P + n.
  Rows stay aligned (one slot per step for all rows), so cache writes are dynamic_update_slice, never a
  scatter with sharded indices.
A long prompt is prefilled in blocks of `prefill_chunk` tokens (a `lax.scan` over blocks, each block one
`decode_step` that writes its slots and returns only the last position's logits), so the activations of one
block exist at a time; the result equals a one-block prefill (0 = one block).

`generate_cached` is the multi-turn form (KV reuse, common.lm.sampler.LMSampler): each row of a persistent
cache holds one episode's tokens contiguously from slot 0 (position = slot, no padding); a call prefills only
each row's new suffix at per-row slots, then decodes with per-row slots, every sampled token (the stop token
included) written to the cache, so the next turn's prefix covers the response too.

Sampling: logits / temperature, then top-k (keep the k largest) and top-p (keep the smallest set of most
likely tokens whose probability reaches p, always at least one), then a categorical draw; temperature 0
means greedy (argmax). The draws come from one key for the batch (split at every step) or from one key per row
(each row's draw at step n uses fold_in(its key, n), so a row samples the same tokens in any batch: how
LMSampler makes its samples independent of batching, KV reuse and the cache budget). Reported log-probs: log softmax(logits / T)[token] of the *untruncated* tempered
distribution (T = 1 when greedy) -- the quantity a policy-gradient ratio needs and exactly what
`completion_logprobs` recomputes under teacher forcing. The choice (untruncated) follows common RL practice
(e.g. verl); top-k/top-p only shape which tokens are drawn.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from common.lm import model as model_lib
from common.lm.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """Static sampling settings (config `sampling.*`).

  Attributes:
    temperature: > 0 samples at that temperature; 0 = greedy.
    top_k: 0 = off; otherwise keep exactly the k most likely tokens (on ties at the k-th value, the lower token
      ids, jax.lax.top_k's order; a threshold `logit >= k-th` would keep every tied token).
    top_p: 1.0 = off; otherwise nucleus sampling with mass p.
  """
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0


class SampleOutput(NamedTuple):
  """Result of `generate`.

  Attributes:
    tokens: i32[B, N] generated tokens (pad_id after a row finished).
    logprobs: f32[B, N] log-prob of each generated token (see module docstring), 0 where mask is 0.
    mask: bool[B, N], True for generated tokens up to and including the stop token.
    lengths: i32[B] number of generated tokens per row (= mask.sum(-1)).
  """
  tokens: jax.Array
  logprobs: jax.Array
  mask: jax.Array
  lengths: jax.Array


def _filter_logits(logits: jax.Array, cfg: SamplingConfig) -> jax.Array:
  """Tempered logits with everything outside top-k / top-p set to -inf. logits f32[B, V]."""
  x = logits / jnp.float32(cfg.temperature)
  neg = jnp.float32(-jnp.inf)
  if cfg.top_k and cfg.top_k < x.shape[-1]:
    idx = jax.lax.top_k(x, cfg.top_k)[1]                 # i32[B, k]; ties: lower ids first
    keep = jnp.zeros(x.shape, bool).at[jnp.arange(x.shape[0])[:, None], idx].set(True)
    x = jnp.where(keep, x, neg)
  if cfg.top_p < 1.0:
    srt = jnp.sort(x, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(srt, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs          # mass strictly above each sorted token
    keep = before < jnp.float32(cfg.top_p)               # the first token is always kept
    cutoff = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
    x = jnp.where(x < cutoff, neg, x)
  return x


def per_row_keys(key: jax.Array) -> bool:
  """Whether `key` is a batch of PRNG keys (typed key[B], or raw u32[B, 2]) rather than one key (static)."""
  typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
  return key.ndim == (1 if typed else 2)


def sample_token(logits: jax.Array, key: jax.Array, cfg: SamplingConfig) -> tuple[jax.Array, jax.Array]:
  """Draw one token per row. logits f32[B, V] -> (i32[B] token, f32[B] log-prob as in the module doc).

  key: one PRNG key for the whole batch, or B keys (`per_row_keys`): row b is then drawn with key[b] alone, so
  its token does not depend on the other rows or on where it sits in the batch.
  """
  if cfg.temperature == 0:
    tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    lp_all = jax.nn.log_softmax(logits, axis=-1)
  else:
    x = _filter_logits(logits, cfg)                      # row-wise: a row's filter ignores the other rows
    if per_row_keys(key):
      tok = jax.vmap(jax.random.categorical)(key, x).astype(jnp.int32)
    else:
      tok = jax.random.categorical(key, x, axis=-1).astype(jnp.int32)
    lp_all = jax.nn.log_softmax(logits / jnp.float32(cfg.temperature), axis=-1)
  return tok, jnp.take_along_axis(lp_all, tok[:, None], axis=-1)[:, 0]


def _chunked_prefill(params, tokens, positions, slots, key_valid, cache, *, config: ModelConfig, chunk: int):
  """Run T tokens into the cache in blocks of `chunk`; returns (f32[B, V] logits of column T - 1, cache).

  slots: i32[] first slot of column 0 for every row (aligned rows; column t goes to slots + t), or i32[B, T]
  per-token slots (>= S: padding, not written). T must be a multiple of chunk when 0 < chunk < T.
  """
  b, t = tokens.shape
  if not chunk or t <= chunk:
    return model_lib.decode_step(params, tokens, positions, key_valid, cache, slots, config=config, last_only=True)
  n = t // chunk
  per_row = jnp.ndim(slots) == 2

  def block(carry, c):
    cache, _ = carry
    start = c * chunk
    tok = jax.lax.dynamic_slice_in_dim(tokens, start, chunk, axis=1)
    pos = jax.lax.dynamic_slice_in_dim(positions, start, chunk, axis=1)
    slot = jax.lax.dynamic_slice_in_dim(slots, start, chunk, axis=1) if per_row else slots + start
    logits, cache = model_lib.decode_step(params, tok, pos, key_valid, cache, slot, config=config,
                                          last_only=True)
    return (cache, logits), None

  init = (cache, jnp.zeros((b, config.vocab_size), jnp.float32))
  (cache, logits), _ = jax.lax.scan(block, init, jnp.arange(n, dtype=jnp.int32))
  return logits, cache


def _pad_to_chunk(t: int, chunk: int) -> int:
  """Columns a prefill of t tokens is padded to: a multiple of chunk when chunk < t, else t."""
  return t if not chunk or t <= chunk else -(-t // chunk) * chunk


def _draw(n, last_logits, done, toks, lps, valid, key, max_new, stop_tokens, sampling: SamplingConfig, pad_id: int):
  """Decode step n's draw for every row: sample, record token / log-prob / validity at column n, update `done`.

  Rows already done get pad_id, log-prob 0 and validity False. A row is done after a stop token or its own
  max_new (i32[B]). Returns (tok i32[B], alive bool[B] before this step, done, toks, lps, valid, key).
  One key: split at every step. B keys (`per_row_keys`): row b draws step n with fold_in(key[b], n), the keys
  kept as they are.
  """
  if per_row_keys(key):
    sub = jax.vmap(jax.random.fold_in, in_axes=(0, None))(key, n)
  else:
    key, sub = jax.random.split(key)
  tok, lp = sample_token(last_logits, sub, sampling)
  alive = ~done
  tok = jnp.where(alive, tok, pad_id)
  lp = jnp.where(alive, lp, 0.0)
  toks = jax.lax.dynamic_update_slice(toks, tok[:, None], (0, n))
  lps = jax.lax.dynamic_update_slice(lps, lp[:, None], (0, n))
  valid = jax.lax.dynamic_update_slice(valid, alive[:, None], (0, n))
  is_stop = jnp.any(tok[:, None] == stop_tokens, axis=1)
  done = done | (alive & is_stop) | (n + 1 >= max_new)
  return tok, alive, done, toks, lps, valid, key


def _generate(params, prompt, prompt_mask, stop_tokens, max_new, key, *, config: ModelConfig,
              num_new: int, sampling: SamplingConfig, pad_id: int, prefill_chunk: int = 0) -> SampleOutput:
  prompt_mask = prompt_mask.astype(bool)
  extra = _pad_to_chunk(prompt.shape[1], prefill_chunk) - prompt.shape[1]
  if extra:   # more left padding: positions count real tokens only, so nothing changes but the slots
    prompt = jnp.pad(prompt, ((0, 0), (extra, 0)), constant_values=pad_id)
    prompt_mask = jnp.pad(prompt_mask, ((0, 0), (extra, 0)))
  b, p = prompt.shape
  s = p + num_new
  key_valid = jnp.concatenate([prompt_mask, jnp.ones((b, num_new), bool)], axis=1)        # [B, S]
  cache = model_lib.init_cache(config, b, s)
  # Prefill (in blocks of prefill_chunk).
  pos = model_lib.positions_from_mask(prompt_mask)
  last_logits, cache = _chunked_prefill(params, prompt, pos, jnp.int32(0), key_valid, cache, config=config,
                                        chunk=prefill_chunk)
  next_pos = jnp.sum(prompt_mask, axis=1).astype(jnp.int32)                                 # [B]

  def cond(carry):
    n, done = carry[0], carry[3]
    return (n < num_new) & ~jnp.all(done)

  def body(carry):
    n, cache, last_logits, done, cur_pos, toks, lps, valid, key = carry
    tok, _, done, toks, lps, valid, key = _draw(n, last_logits, done, toks, lps, valid, key, max_new,
                                                    stop_tokens, sampling, pad_id)
    slot = p + n
    logits, cache = model_lib.decode_step(params, tok[:, None], cur_pos[:, None], key_valid, cache,
                                          slot.astype(jnp.int32), config=config)
    return (n + 1, cache, logits[:, 0], done, cur_pos + 1, toks, lps, valid, key)

  init = (jnp.int32(0), cache, last_logits, max_new <= 0, next_pos,
          jnp.full((b, num_new), pad_id, jnp.int32), jnp.zeros((b, num_new), jnp.float32),
          jnp.zeros((b, num_new), bool), key)
  out = jax.lax.while_loop(cond, body, init)
  toks, lps, valid = out[5], out[6], out[7]
  return SampleOutput(toks, lps, valid, valid.sum(axis=1).astype(jnp.int32))


_generate_jit = jax.jit(_generate, static_argnames=("config", "num_new", "sampling", "pad_id", "prefill_chunk"))


def generate(params: Any, prompt: jax.Array, prompt_mask: jax.Array, key: jax.Array, *,
             config: ModelConfig, max_new_tokens: int, sampling: SamplingConfig = SamplingConfig(),
             stop_tokens: Any = None, row_max_new_tokens: Any = None, pad_id: int = 0,
             prefill_chunk: int = 2048) -> SampleOutput:
  """Sample continuations of a left-padded batch of prompts (jitted; one compile per shape and setting).

  Args:
    params: parameter pytree (may be sharded; the batch may be sharded over the mesh's data axes).
    prompt: i32[B, P] left-padded prompt tokens (use `left_pad` / `bucket_length` to keep P to a few
      bucket sizes: a new P or N means a new compile).
    prompt_mask: i32/bool[B, P], 1 = real token. Every row needs at least one real token.
    key: PRNG key (unused when greedy), or B keys, one per row (typed key[B] or raw u32[B, 2]): row b's n-th
      token is then drawn with fold_in(key[b], n), whatever the other rows and the batch size.
    config: static ModelConfig.
    max_new_tokens: static N, the length of the output arrays.
    sampling: static SamplingConfig.
    stop_tokens: i32[B, S] per-row stop ids padded with -1, or i32[S] shared by all rows, or None
      (= config.eos_token_ids). The stop token is kept (mask True) and ends the row.
    row_max_new_tokens: i32[B] per-row limits <= N, or None (= N).
    pad_id: token written after a row has finished.
    prefill_chunk: static; the prompt is prefilled in blocks of this many tokens (P is left-padded to a
      multiple of it when longer), so one block's activations exist at a time; 0 = one block. The outputs
      equal a one-block prefill (up to float rounding). LMSampler's prefill_chunk argument sets it.
  Returns:
    SampleOutput(tokens i32[B, N], logprobs f32[B, N], mask bool[B, N], lengths i32[B]).
  Raises:
    AssertionError at trace time on wrong ranks/dtypes.
  """
  chex.assert_rank([prompt, prompt_mask], 2)
  chex.assert_type(prompt, jnp.int32)
  stop, row_max = _stop_and_limits(stop_tokens, row_max_new_tokens, prompt.shape[0], max_new_tokens, config)
  return _generate_jit(params, prompt, jnp.asarray(prompt_mask), stop, row_max, key, config=config,
                       num_new=int(max_new_tokens), sampling=sampling, pad_id=int(pad_id),
                       prefill_chunk=int(prefill_chunk))


def _stop_and_limits(stop_tokens, row_max_new_tokens, b: int, max_new_tokens: int, config: ModelConfig):
  if stop_tokens is None:
    stop_tokens = list(config.eos_token_ids) or [-1]
  stop = jnp.asarray(stop_tokens, jnp.int32)
  if stop.ndim == 1:
    stop = jnp.broadcast_to(stop[None], (b, stop.shape[0]))
  chex.assert_rank(stop, 2)
  if row_max_new_tokens is None:
    row_max_new_tokens = jnp.full((b,), max_new_tokens, jnp.int32)
  return stop, jnp.asarray(row_max_new_tokens, jnp.int32)


def _generate_cached(params, cache, suffix, start, count, stop_tokens, max_new, key, *, config: ModelConfig,
                     num_new: int, sampling: SamplingConfig, pad_id: int, prefill_chunk: int):
  extra = _pad_to_chunk(suffix.shape[1], prefill_chunk) - suffix.shape[1]
  if extra:   # more padding in front of the right-aligned suffixes
    suffix = jnp.pad(suffix, ((0, 0), (extra, 0)), constant_values=pad_id)
  b, t = suffix.shape
  s = cache.k.shape[2]
  slot_ids = jnp.arange(s, dtype=jnp.int32)
  rel = jnp.arange(t, dtype=jnp.int32)[None, :] - (t - count[:, None])      # index within the row's suffix
  real = rel >= 0
  slots = jnp.where(real, start[:, None] + rel, s)                          # padding -> slot S: not written
  pos = jnp.where(real, start[:, None] + rel, 0)
  lens = start + count
  key_valid = slot_ids[None, :] < lens[:, None]
  last_logits, cache = _chunked_prefill(params, suffix, pos, slots, key_valid, cache, config=config,
                                        chunk=prefill_chunk)

  def cond(carry):
    n, done = carry[0], carry[3]
    return (n < num_new) & ~jnp.all(done)

  def body(carry):
    n, cache, last_logits, done, lens, toks, lps, valid, key = carry
    tok, alive, done, toks, lps, valid, key = _draw(n, last_logits, done, toks, lps, valid, key, max_new,
                                                    stop_tokens, sampling, pad_id)
    new_lens = lens + alive.astype(jnp.int32)            # every sampled token is written, the stop token too
    logits, cache = model_lib.decode_step(params, tok[:, None], lens[:, None], slot_ids[None, :] < new_lens[:, None],
                                          cache, jnp.where(alive, lens, s)[:, None], config=config)
    return (n + 1, cache, logits[:, 0], done, new_lens, toks, lps, valid, key)

  init = (jnp.int32(0), cache, last_logits, max_new <= 0, lens,
          jnp.full((b, num_new), pad_id, jnp.int32), jnp.zeros((b, num_new), jnp.float32),
          jnp.zeros((b, num_new), bool), key)
  out = jax.lax.while_loop(cond, body, init)
  toks, lps, valid = out[5], out[6], out[7]
  return SampleOutput(toks, lps, valid, valid.sum(axis=1).astype(jnp.int32)), out[1]


# The cache is donated: updated in place, never copied.
_generate_cached_jit = jax.jit(_generate_cached, static_argnames=("config", "num_new", "sampling", "pad_id",
                                                                  "prefill_chunk"), donate_argnames=("cache",))


def generate_cached(params: Any, cache: model_lib.KVCache, suffix: jax.Array, start: jax.Array, count: jax.Array,
                    key: jax.Array, *, config: ModelConfig, max_new_tokens: int,
                    sampling: SamplingConfig = SamplingConfig(), stop_tokens: Any = None,
                    row_max_new_tokens: Any = None, pad_id: int = 0,
                    prefill_chunk: int = 2048) -> tuple[SampleOutput, model_lib.KVCache]:
  """Extend each row of a persistent KV cache by its new tokens, then sample its continuation (KV reuse).

  Row b of the cache holds its sequence's tokens contiguously at slots 0 .. start[b] - 1 (rotary position =
  slot; slots >= start[b] are stale and ignored, which is how a caller rolls a row back to a common prefix).
  Its count[b] new tokens, right-aligned in suffix[b] (columns T - count[b] .. T - 1; the columns before are
  padding and are not written), go to slots start[b] .. start[b] + count[b] - 1 in blocks of prefill_chunk;
  then up to row_max_new_tokens[b] tokens are sampled as in `generate` (same sampling, stop and log-prob
  rules), each written at the row's next slot as it is drawn (the stop token included), so on return row b
  holds start[b] + count[b] + lengths[b] tokens. A row with count 0 and limit 0 is untouched (not in this call).
  The log-probs equal `completion_logprobs` on the row's whole sequence (the cache holds the same keys a full
  prefill would compute).

  Args:
    params: parameter pytree.
    cache: KVCache [L, B, S, K, hd], donated (updated in place: the array passed in is deleted; use the one
      returned).
    suffix: i32[B, T] new tokens, right-aligned per row (T: a length bucket, one compile each).
    start: i32[B] tokens of each row kept in the cache (its common prefix with the new context).
    count: i32[B] new tokens per row; >= 1 for a row that samples (its last new token gives the first logits).
    key: PRNG key (unused when greedy), or B keys, one per row (as in `generate`).
    config, max_new_tokens (static N), sampling, stop_tokens, row_max_new_tokens, pad_id: as in `generate`.
    prefill_chunk: static; new tokens prefilled per block (T is front-padded to a multiple of it); 0 = one block.
  Returns:
    (SampleOutput(tokens i32[B, N], logprobs f32[B, N], mask bool[B, N], lengths i32[B]), the updated cache).
  Raises:
    AssertionError at trace time on wrong ranks/dtypes. Not checked under jit: the caller must keep
    start + count + row_max_new_tokens <= S per row (a slot >= S is silently not written).
  """
  chex.assert_rank(suffix, 2)
  chex.assert_rank([start, count], 1)
  chex.assert_type([suffix, start, count], jnp.int32)
  stop, row_max = _stop_and_limits(stop_tokens, row_max_new_tokens, suffix.shape[0], max_new_tokens, config)
  if cache.k is cache.v:   # model_lib.init_cache shares one zero buffer; a buffer cannot be donated twice
    cache = model_lib.KVCache(cache.k, jnp.zeros_like(cache.v))
  return _generate_cached_jit(params, cache, suffix, start, count, stop, row_max, key, config=config,
                              num_new=int(max_new_tokens), sampling=sampling, pad_id=int(pad_id),
                              prefill_chunk=int(prefill_chunk))


def completion_logprobs(params: Any, prompt: jax.Array, prompt_mask: jax.Array, completion: jax.Array,
                        completion_mask: jax.Array, *, config: ModelConfig,
                        temperature: float = 1.0) -> jax.Array:
  """Teacher-forced log-probs of a completion after its (left-padded) prompt: the training twin of `generate`.

  out[b, n] = log softmax(logits(prompt_b, completion_b[<n]) / T)[completion[b, n]], 0 where the
  completion mask is 0. Equals `generate(...).logprobs` for the same tokens and temperature (T = 1 for
  greedy samples).

  Args:
    prompt, prompt_mask: i32[B, P], i32/bool[B, P] (left-padded).
    completion, completion_mask: i32[B, N], bool[B, N] (as returned by `generate`).
  Returns:
    f32[B, N].
  """
  chex.assert_rank([prompt, prompt_mask, completion, completion_mask], 2)
  tokens = jnp.concatenate([prompt, completion], axis=1)
  mask = jnp.concatenate([prompt_mask.astype(bool), completion_mask.astype(bool)], axis=1)
  lp = model_lib.token_logprobs(params, tokens, mask, config=config, temperature=temperature)
  return lp[:, prompt.shape[1]:]


def bucket_length(n: int, *, buckets: Sequence[int] = (), minimum: int = 16) -> int:
  """The bucket a length n is padded to: the smallest of `buckets` >= n, else the next power of two."""
  for b in sorted(buckets):
    if b >= n:
      return int(b)
  return int(max(minimum, 1 << max(0, (n - 1)).bit_length()))


def left_pad(seqs: Sequence[Sequence[int]], *, length: int | None = None, pad_id: int = 0,
             buckets: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
  """Left-pad token lists to one length (default: their bucket). Returns (i32[B, P] ids, i32[B, P] mask).

  Raises:
    ValueError if a sequence is longer than `length` or empty.
  """
  longest = max(len(s) for s in seqs)
  if any(len(s) == 0 for s in seqs):
    raise ValueError("left_pad: every prompt needs at least one token.")
  length = bucket_length(longest, buckets=buckets) if length is None else length
  if longest > length:
    raise ValueError(f"left_pad: a sequence has {longest} tokens, more than length={length}.")
  ids = np.full((len(seqs), length), pad_id, np.int32)
  mask = np.zeros((len(seqs), length), np.int32)
  for i, s in enumerate(seqs):
    ids[i, length - len(s):] = np.asarray(s, np.int32)
    mask[i, length - len(s):] = 1
  return ids, mask

