"""The rollout driver's Policy for a language model: batched common.lm.sampling generation (LMSampler).

  sampler = LMSampler(params, model_config, key=key, rows=64, max_new_tokens=256, temperature=1.0,
                      stop_tokens=eos_ids + chat.stop_ids, pad_id=0)           # kv_reuse=True by default
  trajectories = common.rollout.RolloutDriver(pool, sampler, chat, config=...).run(task_ids)

Shared by ProgAgent's GSPO rollouts (progagent/rollouts.py) and PlanPO's windowed rollouts
(planpo/rollouts.py). Everything runs on one device (`commit`).

Multi-turn KV reuse (kv_reuse=True; config keys `gspo.kv_reuse` in ProgAgent, `rollout.kv_reuse` in PlanPO).
Without it every driver tick re-prefills every episode's whole context, so an episode costs the square of its
turns. With it the sampler keeps a pool of cache rows (episode slots), split in blocks of chunk_rows rows (one
KVCache [L, rows of the block, S, K, hd] each; S grows as contexts grow, to the next length bucket but at least
doubling, and never shrinks until `reset`). Each row holds one episode's tokens contiguously from slot 0
(rotary position = slot, no padding) and the host keeps a copy of those token ids. On a request for episode e:
  1. row: e's own row if it still has one; else a free row (never used, or `release`d), the one sharing the
     longest token prefix with the request (the G rollouts of a task share their first prompt), least
     recently used on ties; else the least recently used row of an episode absent from this call (the driver
     never says that an episode finished: episodes that stop asking lose their rows to new ones, which is the
     continuous batching; an episode only between its tool calls that loses its row is re-prefilled later,
     never wrong); else none: the pool is full (below);
  2. prefix: the longest common prefix of the request's token_ids and the row's cached tokens (at most all
     but the last token, whose logits start the sampling); the row is rolled back to it (its length is set)
     and only the suffix is prefilled (right-aligned, padded to a power-of-two bucket across the block's
     rows, in blocks of prefill_chunk tokens; padding is not written);
  3. decode with per-row slots; every sampled token (the stop token included) is written to the row, so the
     next turn's prefix covers the response. PlanPO's window mode (each turn's prompt re-rendered) simply
     matches a shorter prefix.
Correctness never rests on the episode ids: a row is reused only through an exact token-prefix match. The
cached keys depend on the parameters, so assigning `params` (or calling `reset`) empties the cache.
A request whose context plus response would exceed cache_len (when set) falls back to a full re-prefill
(common.lm.sampling.generate) and its row is released: rows never truncate silently.

The pool's budget (cache_max_bytes; the trainers' `gspo.kv_cache_max_gb` / `rollout.kv_cache_max_gb` GiB,
0 = no limit). A row's largest size is cache_len slots x 2 (k and v) x layers x kv_heads x head_dim x the
model dtype's bytes (`row_bytes`), so the pool holds pool_rows = min(rows, floor(budget / row_bytes)) rows and
its cache never exceeds the budget (`pool_rows`; no budget: one row per request row, the whole batch). With
fewer pool rows than requests (e.g. 512 GSPO rollouts x 32k tokens of an 8B model would need terabytes),
rows are held first come, first kept, the preemption-by-recompute of vLLM's scheduler (Kwon et al. 2023,
"Efficient Memory Management for Large Language Model Serving with PagedAttention", arXiv:2309.06180,
sec. 4.5) at the granularity of whole episodes: an episode keeps its row for as long as it keeps asking; the
episodes of a call that have none take rows as step 1 frees them, in request order (the driver's order); an
episode left without one is re-prefilled in full this call (common.lm.sampling.generate, batches of up to
chunk_rows requests, padded as `padded_rows` says) and asks for a row again on its next turn (the next free row
takes its whole context, which it would have re-prefilled anyway). So a step keeps reuse for pool_rows
episodes at a time and, as episodes finish, for the ones that follow. Not LRU among the live episodes: in the
driver's lock step every live episode asks every tick, so evicting the least recently used row would evict an
episode that asks again at the next tick and re-prefill every episode every tick (no reuse at all). There is
no other choice, so no config key for one. The budget bounds the pool only: a re-prefill's cache (one batch
of up to chunk_rows rows, for the call) comes on top of it, as without reuse. Cost: a call runs one decode
loop per cache block it uses plus one per re-prefill batch, so a tick with both pays one decode loop more than
either alone; a small model on CPU, whose time is mostly per-step overhead, can lose more to that than it saves
in prefill (benchmarks/kv_pool_bench.py measures both against reuse off).

Sampling keys (sample_keys; config keys `gspo.sample_keys` in ProgAgent, `rollout.sample_keys` in PlanPO), one of
SAMPLE_KEYS:
  'request' (the default, and the configs' default for new runs): sampling does not depend on the layout. Request
     k of episode e (its k-th request to this sampler) draws with its own key, fold_in(fold_in(key, e), k), and
     decode step n with fold_in(that, n) (common.lm.sampling's per-row keys), whatever batch, cache block, pool
     row or re-prefill serves it. So the same key gives the same tokens with any budget, with or without KV
     reuse, with any chunk_rows and in any grouping of the driver's requests into calls; the log-probs agree to
     float rounding (a full re-prefill and a cached row compute the same keys and values in a different order),
     and a different rounding can only flip a draw between two tokens whose Gumbel-perturbed logits tie to
     float precision.
  'call': the random stream of the sampler before the pool (commit 30ed640 and earlier), kept so that runs and
     tables made with it are reproduced exactly (the issue 25 and 26 experiment configs set it, and the trainers'
     ADDED_KEYS give it to workdirs saved before the key existed). Call t (the t-th call) has the call key
     fold_in(key, t): one key for a whole batch, split at every decode step, so a row's draws depend on where it
     sits. Without reuse, chunk c of the call (chunk_rows requests in request order) draws with
     fold_in(call key, c), its batch padded to chunk_rows rows. With reuse, cache block b (pool rows
     b x chunk_rows onwards) draws with fold_in(call key, b), every block chunk_rows rows (the last one padded,
     its padding never used), and the re-prefills (requests too long for a cache row) in batches c of up to
     chunk_rows requests, in request order, with fold_in(call key, 1_000_003 + c), padded to chunk_rows rows.
     Without a budget below the rows (pool_rows = rows) the tokens and log-probs are bit-identical to that
     sampler's with the decode attention of its time (config `model.decode_attention` 'grouped', which the
     planpo_twx explorer configs set; the default 'flat' agrees to float rounding, which can flip a draw); the block
     padding can then take the cache above a budget by fewer than chunk_rows rows, as it
     did. With a budget below the rows, the requests the full pool leaves without a row join the re-prefill
     batches and their keys (the blocks then hold pool_rows rows in all, as in 'request'), so the samples depend
     on the budget (and, in every case, on KV reuse, chunk_rows and the batching). The sampler before the pool
     turned reuse off when the budget could not hold every row: kv_reuse=False reproduces such a run.
"""

from __future__ import annotations

import hashlib
import time
from typing import Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from common import policy_io
from common.lm import model as model_lib
from common.lm import sampling
from common.lm.config import ModelConfig


def commit(tree):
  """Committed single-device arrays (restored and fresh arrays then hit the same jit cache entry)."""
  return jax.device_put(tree, jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))


def row_bytes(model: ModelConfig, slots: int) -> int:
  """Bytes of one KV cache row of `slots` slots: slots x 2 (k and v) x layers x kv_heads x head_dim x the
  model dtype's bytes."""
  per = 2 * model.num_layers * model.num_kv_heads * model.head_dim * jnp.dtype(model.dtype).itemsize
  return int(slots) * per


def pool_rows(model: ModelConfig, rows: int, cache_len: int, max_bytes: int) -> int:
  """Rows of the KV pool (module doc): min(rows, floor(max_bytes / row_bytes(model, cache_len))); rows when
  max_bytes <= 0 (no limit).

  Raises:
    ValueError: a budget without cache_len (a row's size would have no bound).
  """
  if max_bytes <= 0:
    return int(rows)
  if cache_len <= 0:
    raise ValueError("a KV cache budget (cache_max_bytes) needs cache_len > 0 to bound a row's size")
  return int(min(rows, int(max_bytes) // row_bytes(model, cache_len)))


def reuse_options(model: ModelConfig, *, enabled: bool, rows: int, context_tokens: int, max_gib: float,
                  key: str) -> dict:
  """LMSampler keyword arguments of a trainer: {'kv_reuse', 'cache_len', 'cache_max_bytes'}.

  Cache rows are capped at context_tokens slots (cache_len) and the pool at max_gib GiB (cache_max_bytes =
  max_gib x 2**30; <= 0: no limit; module doc). When the budget holds fewer than `rows` rows, the others are
  re-prefilled each turn (logged once, naming the config key prefix `key`, e.g. 'gspo', 'rollout'); when it
  holds not even one row, reuse is turned off with a logged warning.
  """
  reuse = bool(enabled)
  budget = int(float(max_gib) * 2 ** 30) if float(max_gib) > 0 else 0
  if reuse and rows and budget:
    held = pool_rows(model, rows, int(context_tokens), budget)
    need = rows * row_bytes(model, int(context_tokens)) / 2 ** 30
    if held == 0:
      logging.warning("%s.kv_reuse off: one KV cache row of %d tokens needs %.2f GiB, more than "
                      "%s.kv_cache_max_gb=%s.", key, int(context_tokens), need / rows, key, max_gib)
      reuse = False
    elif held < rows:
      logging.info("%s.kv_cache_max_gb=%s holds the KV caches of %d of %d rows (all would need %.1f GiB); "
                   "episodes without a row are re-prefilled each turn.", key, max_gib, held, rows, need)
  return {"kv_reuse": reuse, "cache_len": int(context_tokens), "cache_max_bytes": budget if reuse else 0}


# LMSampler(sample_keys=...): the module doc's two key layouts; 'request' is the default
SAMPLE_KEYS = ("request", "call")


def check_sample_keys(value, key: str = "sample_keys") -> str:
  """`value` if it is one of SAMPLE_KEYS ('request' | 'call', module doc).

  Raises:
    ValueError: naming `key` (e.g. the config key 'gspo.sample_keys') and the valid values.
  """
  if not isinstance(value, str) or value not in SAMPLE_KEYS:
    raise ValueError(f"{key}={value!r} must be one of {SAMPLE_KEYS}: 'request' (per-request keys, samples "
                     "independent of batching, KV reuse and budget; the default) or 'call' (one key per call and "
                     "block: the stream of the sampler before the KV pool, common.lm.sampler)")
  return value


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
  """Length of the longest common prefix of two i32 token arrays."""
  n = min(len(a), len(b))
  neq = np.flatnonzero(a[:n] != b[:n])
  return int(neq[0]) if neq.size else n


def pool_blocks(rows: int, chunk_rows: int, pool: int, sample_keys: str = "request") -> list[int]:
  """Rows of each KV cache block of an LMSampler of `rows` rows, `chunk_rows` rows per call (0 = all) and a pool of
  `pool` rows (`pool_rows`): blocks of min(chunk, pool) rows, the last one holding what is left of the pool;
  sample_keys 'call' with every row pooled (pool = rows): every block chunk rows, the last one padded (the layout
  before the pool, module doc). [] without a pool."""
  chunk = chunk_rows if 0 < chunk_rows < rows else rows
  if pool <= 0:
    return []
  if sample_keys == "call" and pool == rows:
    return [chunk] * -(-rows // chunk)
  block = max(1, min(chunk, pool))
  return [min(block, pool - b) for b in range(0, pool, block)]


@jax.jit
def _request_keys(key, draws):
  """Key of every request: fold_in(fold_in(key, episode), k) for draws u32[B, 2] = (episode, k) rows."""
  return jax.vmap(lambda d: jax.random.fold_in(jax.random.fold_in(key, d[0]), d[1]))(draws)


def padded_rows(n: int, chunk: int) -> int:
  """Rows a re-prefill of n <= chunk requests is padded to: the next power of two up to chunk // 8 (at least 1),
  then the next multiple of chunk // 8, at most chunk. At most ~2x the rows and at most chunk // 8 padding rows,
  in about log2(chunk) + 8 batch sizes (one compile each per prompt bucket)."""
  unit = max(1, chunk // 8)
  if n <= unit:
    return min(1 << max(0, int(n) - 1).bit_length(), unit)
  return min(chunk, -(-n // unit) * unit)


class LMSampler:
  """The driver's Policy for a language model: batched generation, with multi-turn KV reuse in a pool of cache
  rows held up to a byte budget (module doc).

  With sample_keys 'request' (the default), request k of episode e (its k-th to this sampler) samples with
  fold_in(fold_in(key, e), k): the tokens do not depend on the batching, on KV reuse or on the budget; 'call' keeps
  the stream of the sampler before the pool, one key per call and block (module doc). Without KV reuse the batch is
  padded to chunk_rows rows (absent episodes become 1-token rows with a 0-token limit) and the prompt to a length
  bucket (`lengths.buckets`), so a rollout compiles once per bucket; with it, once per (suffix bucket, cache-length
  bucket), plus the re-prefills of what the pool does not hold (per `padded_rows` size and prompt bucket). The
  log-probs equal a full re-prefill's to float rounding.

  Args:
    params: model parameters (committed to one device here). Assigning sampler.params empties the cache.
    model: the ModelConfig.
    key: PRNG key of this GSPO step.
    rows: most episodes per call (gspo.tasks_per_step x gspo.rollouts_per_task).
    max_new_tokens: response cap (`env.max_response_tokens`); requests may ask for fewer.
    temperature, top_k, top_p: `gspo.temperature`, `gspo.top_k`, `gspo.top_p`.
    stop_tokens: ids ending a response (the model's eos ids and the chat template's end-of-turn id).
    pad_id: padding id.
    buckets: padded prompt lengths (re-prefill) and cache lengths (KV reuse: the next bucket, at least doubling).
    chunk_rows: rows per generate call and per cache block (`gspo.generate_batch_size`; 0 = all rows).
    kv_reuse: keep each episode's KV cache across turns (config keys `gspo.kv_reuse`, `rollout.kv_reuse`).
    cache_len: most slots of a cache row (0 = no limit: rows grow by buckets); a request needing more is
      served by a full re-prefill instead.
    cache_max_bytes: the pool's budget in bytes (`gspo.kv_cache_max_gb` / `rollout.kv_cache_max_gb` x 2**30,
      through `reuse_options`; 0 = no limit): the pool holds `pool_rows` rows of cache_len slots.
    prefill_chunk: prompt tokens prefilled per block (common.lm.sampling.generate; 0 = one block).
    sample_keys: 'request' (default) or 'call' (SAMPLE_KEYS, module doc; config keys `gspo.sample_keys`,
      `rollout.sample_keys`).
  Attributes:
    pool_rows: cache rows the pool holds (rows without a budget; 0 without reuse).
    prefill_tokens: tokens run through prefill so far (real tokens, padding not counted).
    cache_bytes: bytes of KV cache held now (at most cache_max_bytes; 'call' without a budget below the rows:
      plus the last block's padding).
    reused_tokens: context tokens served from the cache instead (0 without reuse).
    overflow_requests: requests re-prefilled because the pool was full (0 without a budget below rows).
    calls: policy calls so far.
  Raises:
    ValueError: cache_max_bytes > 0 with cache_len 0, or sample_keys not in SAMPLE_KEYS; on call: more requests
      than rows, an empty context, or two requests of one episode.
  """

  def __init__(self, params, model: ModelConfig, *, key, rows: int, max_new_tokens: int, temperature: float,
               top_k: int = 0, top_p: float = 1.0, stop_tokens: Sequence[int], pad_id: int,
               buckets: Sequence[int] = (), chunk_rows: int = 0, kv_reuse: bool = True, cache_len: int = 0,
               cache_max_bytes: int = 0, prefill_chunk: int = 2048, sample_keys: str = "request"):
    self.sample_keys = check_sample_keys(sample_keys)
    self.model, self.key, self.rows = model, key, rows
    self.max_new_tokens = max_new_tokens
    self.sampling = sampling.SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    self.stop_ids = tuple(sorted(set(int(t) for t in stop_tokens)))
    self.stop = np.asarray(self.stop_ids, np.int32)
    self.pad_id = pad_id
    self.buckets = tuple(buckets)
    self.chunk = chunk_rows if 0 < chunk_rows < rows else rows
    self.kv_reuse = bool(kv_reuse)
    self.cache_len = int(cache_len or 0)
    self.cache_max_bytes = int(cache_max_bytes or 0)
    self.pool_rows = pool_rows(model, rows, self.cache_len, self.cache_max_bytes) if self.kv_reuse else 0
    self.block_rows = max(1, min(self.chunk, self.pool_rows))   # pool row r is in block r // block_rows
    self._block_rows = pool_blocks(rows, self.chunk, self.pool_rows, self.sample_keys)   # rows of each block
    self.prefill_chunk = int(prefill_chunk or 0)
    self.calls = 0
    self.prefill_tokens = 0
    self.reused_tokens = 0
    self.overflow_requests = 0
    self._asked: dict[int, int] = {}   # requests so far per episode (the k of its draws)
    self.params = params          # commits, and empties the cache

  @property
  def params(self):
    return self._params

  @params.setter
  def params(self, value):
    self._params = commit(value)
    self.reset()

  def reset(self) -> None:
    """Empty the KV cache (every row free, nothing cached). Counters are kept."""
    self._blocks: list[model_lib.KVCache | None] = [None] * len(self._block_rows)
    self._row_episode: list[int | None] = [None] * self.pool_rows
    self._row_tokens: list[np.ndarray] = [np.zeros(0, np.int32) for _ in range(self.pool_rows)]
    self._row_used = [-1] * self.pool_rows
    self._episode_row: dict[int, int] = {}

  def release(self, episode: int) -> None:
    """Free the row of a finished episode (its cached tokens stay, for a prefix match of a later episode)."""
    row = self._episode_row.pop(episode, None)
    if row is not None:
      self._row_episode[row] = None

  @property
  def cache_bytes(self) -> int:
    """Bytes of KV cache held now (0 without reuse)."""
    return sum(x.size * x.dtype.itemsize for c in self._blocks if c is not None for x in c)

  def cached_length(self, episode: int) -> int:
    """Tokens of `episode` held in its cache row (0 if it has none)."""
    row = self._episode_row.get(episode)
    return 0 if row is None else len(self._row_tokens[row])

  def __call__(self, requests: Sequence[policy_io.PolicyRequest]) -> list[policy_io.PolicyOutput]:
    n = len(requests)
    if n > self.rows:
      raise ValueError(f"{n} requests for a sampler of {self.rows} rows")
    if any(len(r.token_ids) == 0 for r in requests):
      raise ValueError("LMSampler: every request needs at least one context token")
    episodes = [int(r.episode) for r in requests]
    if len(set(episodes)) != len(episodes):
      raise ValueError("LMSampler: two requests of one episode in one call")
    draws = []
    for e in episodes:
      k = self._asked.get(e, 0)
      self._asked[e] = k + 1
      draws.append((e % 2 ** 32, k % 2 ** 32))
    # 'call': this call's key (module doc); None: per-request keys
    call_key = jax.random.fold_in(self.key, self.calls) if self.sample_keys == "call" else None
    self.calls += 1
    if self.kv_reuse:
      return self._call_reuse(requests, draws, call_key)
    out = []
    for c, i in enumerate(range(0, n, self.chunk)):   # chunks of `chunk` rows (the last one padded)
      part = range(i, min(n, i + self.chunk))
      key = self._keys([draws[j] for j in part], self.chunk) if call_key is None else jax.random.fold_in(call_key, c)
      out += self._generate([requests[j].token_ids for j in part], [requests[j].max_new_tokens for j in part],
                            key, self.chunk)
    return out

  def _keys(self, draws, m: int):
    """Keys of m rows: those of `draws` ((episode, k) pairs), then filler rows' (never drawn from)."""
    d = np.zeros((m, 2), np.uint32)
    d[:len(draws)] = np.asarray(draws, np.uint32).reshape(-1, 2)
    return _request_keys(self.key, d)

  # ------------------------------------------------------------------------------------------------
  # Full re-prefill.

  def _generate(self, contexts, max_new, key, m: int) -> list[policy_io.PolicyOutput]:
    """One common.lm.sampling.generate call on the contexts, padded to m rows; key: one key, or m (`_keys`)."""
    n = len(contexts)
    ctx = [list(c) for c in contexts] + [[self.pad_id]] * (m - n)
    limit = np.zeros(m, np.int32)
    limit[:n] = np.minimum(np.asarray(max_new, np.int32), self.max_new_tokens)
    ids, mask = sampling.left_pad(ctx, pad_id=self.pad_id, buckets=self.buckets)
    self.prefill_tokens += sum(len(c) for c in contexts)
    out = sampling.generate(self.params, jnp.asarray(ids), jnp.asarray(mask), commit(key),
                            config=self.model, max_new_tokens=self.max_new_tokens, sampling=self.sampling,
                            stop_tokens=self.stop, row_max_new_tokens=jnp.asarray(limit), pad_id=self.pad_id,
                            prefill_chunk=self.prefill_chunk)
    toks, lps, lens = jax.device_get((out.tokens, out.logprobs, out.lengths))
    return [policy_io.PolicyOutput(toks[i, :lens[i]].tolist(), lps[i, :lens[i]].tolist()) for i in range(n)]

  # ------------------------------------------------------------------------------------------------
  # KV reuse.

  def _limit(self, r) -> int:
    return int(max(0, min(r.max_new_tokens, self.max_new_tokens)))

  def _assign_rows(self, episodes, ctxs) -> list[int]:
    """Pool row of every request, -1 where the pool is full (module doc, step 1); updates the episode <-> row
    maps."""
    here = set(episodes)
    rows = [self._episode_row.get(e, -1) for e in episodes]
    taken = {r for r in rows if r >= 0}
    spare = [r for r in range(self.pool_rows) if r not in taken and self._row_episode[r] not in here]
    free = [r for r in spare if self._row_episode[r] is None]
    absent = [r for r in spare if self._row_episode[r] is not None]   # rows of episodes absent from this call
    for i, e in enumerate(episodes):
      if rows[i] >= 0:
        continue
      if free:
        best = max(free, key=lambda r: (common_prefix(ctxs[i], self._row_tokens[r]), -self._row_used[r]))
        free.remove(best)
      elif absent:   # least recently used first
        best = min(absent, key=lambda r: (self._row_used[r], -common_prefix(ctxs[i], self._row_tokens[r])))
        absent.remove(best)
        del self._episode_row[self._row_episode[best]]
      else:          # the pool is full: re-prefilled this call
        continue
      self._row_episode[best] = e
      self._episode_row[e] = best
      rows[i] = best
    for r in rows:
      if r >= 0:
        self._row_used[r] = self.calls
    return rows

  def _block_size(self, b: int) -> int:
    """Rows of cache block b (`pool_blocks`)."""
    return self._block_rows[b]

  def _block_cache(self, b: int, need: int) -> model_lib.KVCache:
    """Block b's cache with at least `need` slots (allocated, or grown to max(bucket, twice its length); never
    shrunk)."""
    cache = self._blocks[b]
    have = 0 if cache is None else cache.k.shape[2]
    if need <= have:
      return cache
    # Grow geometrically (at least double), so a rollout compiles for a few cache lengths only, capped by
    # the largest bucket when the need fits in it.
    size = max(sampling.bucket_length(need, buckets=self.buckets), 2 * have)
    if self.buckets and need <= max(self.buckets):
      size = min(size, max(self.buckets))
    if self.cache_len:
      size = min(size, self.cache_len)
    if cache is None:   # k and v as two buffers (init_cache shares one, which a donating call cannot take)
      abstract = jax.eval_shape(lambda: model_lib.init_cache(self.model, self._block_size(b), size).k)
      cache = commit(model_lib.KVCache(*(jnp.zeros(abstract.shape, abstract.dtype) for _ in range(2))))
    else:
      pad = ((0, 0), (0, 0), (0, size - have), (0, 0), (0, 0))
      cache = model_lib.KVCache(jnp.pad(cache.k, pad), jnp.pad(cache.v, pad))
    self._blocks[b] = cache
    return cache

  def _call_reuse(self, requests, draws, call_key) -> list[policy_io.PolicyOutput]:
    """One call with KV reuse; call_key: the call's key ('call', module doc), or None (per-request keys)."""
    ctxs = [np.asarray(r.token_ids, np.int32) for r in requests]
    limits = [self._limit(r) for r in requests]
    fits = [not self.cache_len or len(c) + m <= self.cache_len for c, m in zip(ctxs, limits)]
    # Too long for a cache row: full re-prefill, and the episode's row is freed.
    for i, f in enumerate(fits):
      if not f:
        self.release(int(requests[i].episode))
    keep = [i for i, f in enumerate(fits) if f]
    rows = self._assign_rows([int(requests[i].episode) for i in keep], [ctxs[i] for i in keep])
    pooled = [(i, r) for i, r in zip(keep, rows) if r >= 0]
    self.overflow_requests += sum(r < 0 for r in rows)
    over = sorted(set(range(len(requests))) - {i for i, _ in pooled})
    outs: list[policy_io.PolicyOutput | None] = [None] * len(requests)
    for c, j in enumerate(range(0, len(over), self.chunk)):   # without a pool row: re-prefilled
      part = over[j:j + self.chunk]
      if call_key is None:   # `padded_rows`
        m = padded_rows(len(part), self.chunk)
        key = self._keys([draws[i] for i in part], m)
      else:                  # the layout before the pool: chunk rows, key fold_in(call key, 1_000_003 + c)
        m, key = self.chunk, jax.random.fold_in(call_key, 1_000_003 + c)
      res = self._generate([requests[i].token_ids for i in part], [limits[i] for i in part], key, m)
      for i, o in zip(part, res):
        outs[i] = o
    by_block: dict[int, list[tuple[int, int]]] = {}
    for i, r in pooled:
      by_block.setdefault(r // self.block_rows, []).append((i, r))
    for b, members in sorted(by_block.items()):
      self._run_block(b, members, ctxs, limits, draws, outs, call_key)
    return outs

  def _run_block(self, b, members, ctxs, limits, draws, outs, call_key) -> None:
    """One generate_cached call on block b for its (request index, row) members; keys per request, or
    fold_in(call_key, b) ('call')."""
    m, first = self._block_size(b), b * self.block_rows
    start, count = np.zeros(m, np.int32), np.zeros(m, np.int32)
    limit = np.zeros(m, np.int32)
    block_draws = np.zeros((m, 2), np.uint32)
    suffixes = {}
    for i, r in members:
      ctx, j = ctxs[i], r - first
      keep = min(common_prefix(ctx, self._row_tokens[r]), len(ctx) - 1)   # the last token is always run
      start[j], count[j], limit[j] = keep, len(ctx) - keep, limits[i]
      block_draws[j] = draws[i]
      suffixes[j] = ctx[keep:]
    t = sampling.bucket_length(int(count.max()))
    suffix = np.full((m, t), self.pad_id, np.int32)
    for j, s in suffixes.items():
      suffix[j, t - len(s):] = s
    cache = self._block_cache(b, int((start + count + limit).max()))
    out, cache = sampling.generate_cached(
        self.params, cache, jnp.asarray(suffix), jnp.asarray(start), jnp.asarray(count),
        commit(_request_keys(self.key, block_draws) if call_key is None else jax.random.fold_in(call_key, b)),
        config=self.model, max_new_tokens=self.max_new_tokens,
        sampling=self.sampling, stop_tokens=self.stop, row_max_new_tokens=jnp.asarray(limit),
        pad_id=self.pad_id, prefill_chunk=self.prefill_chunk)
    self._blocks[b] = cache
    toks, lps, lens = jax.device_get((out.tokens, out.logprobs, out.lengths))
    for i, r in members:
      j = r - first
      gen = toks[j, :lens[j]]
      self._row_tokens[r] = np.concatenate([ctxs[i], gen.astype(np.int32)])
      self.prefill_tokens += int(count[j])
      self.reused_tokens += int(start[j])
      outs[i] = policy_io.PolicyOutput(gen.tolist(), lps[j, :lens[j]].tolist())


def time_multi_turn(params, model: ModelConfig, *, rows: int, turns: int, prompt_len: int, obs_len: int,
                    max_new_tokens: int, kv_reuse: bool, seed: int = 0, warmup: bool = True,
                    **sampler_kwargs) -> dict:
  """Wall time of one synthetic multi-turn episode batch through LMSampler (the benchmark's probe).

  `rows` episodes, each a random prompt of prompt_len tokens; every turn samples up to max_new_tokens
  (greedy, no stop tokens unless given in sampler_kwargs) and appends obs_len random observation tokens, as
  the rollout driver does, for `turns` turns. warmup: run the same batch once before timing (compiles).
  Args:
    params, model: the model; sampler_kwargs: further LMSampler arguments (buckets, chunk_rows, cache_len,
      cache_max_bytes, prefill_chunk, temperature, stop_tokens, ...).
  Returns:
    {'seconds': wall time of the timed run, 'prefill_tokens', 'reused_tokens', 'generated_tokens',
     'context_tokens' (final context length summed over rows), 'overflow_requests', 'pool_rows',
     'cache_bytes' (the sampler's at the end: its largest), 'digest' (SHA-1 of every generated token id, in
     order: equal digests = the same tokens)}.
  """
  kw = dict(temperature=0.0, stop_tokens=(), pad_id=0)
  kw.update(sampler_kwargs)

  def once():
    rng = np.random.default_rng(seed)
    sampler = LMSampler(params, model, key=jax.random.key(seed), rows=rows, max_new_tokens=max_new_tokens,
                        kv_reuse=kv_reuse, **kw)
    ctx = [list(rng.integers(1, model.vocab_size, prompt_len)) for _ in range(rows)]
    gen, digest = 0, hashlib.sha1()
    t0 = time.perf_counter()
    for turn in range(turns):
      reqs = [policy_io.PolicyRequest(e, "t", 0, turn, ctx[e], max_new_tokens) for e in range(rows)]
      outs = sampler(reqs)
      for e, o in enumerate(outs):
        gen += len(o.token_ids)
        digest.update(np.asarray(o.token_ids, np.int32).tobytes() + b"|")
        ctx[e] = ctx[e] + list(o.token_ids) + list(rng.integers(1, model.vocab_size, obs_len))
    dt = time.perf_counter() - t0
    return {"seconds": dt, "prefill_tokens": sampler.prefill_tokens, "reused_tokens": sampler.reused_tokens,
            "generated_tokens": gen, "context_tokens": sum(len(c) for c in ctx),
            "overflow_requests": sampler.overflow_requests, "pool_rows": sampler.pool_rows,
            "cache_bytes": sampler.cache_bytes, "digest": digest.hexdigest()}

  if warmup:
    once()
  return once()
