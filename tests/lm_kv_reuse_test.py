"""Multi-turn KV reuse in LMSampler and chunked prefill: parity with a full re-prefill, prefill counts, rollback,
continuous batching (more episodes than rows), the cache-length fallback, and the pool under a byte budget
(fewer cache rows than episodes: the same samples as no budget and as no reuse)."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from common import policy_io
from common.lm import model as model_lib
from common.lm import sampler as sampler_lib
from common.lm import sampling
from common.lm import testing
from common.lm.config import ModelConfig

CONFIG = ModelConfig(family="qwen3", vocab_size=80, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True, tie_embeddings=False)
PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(CONFIG, seed=2, std=0.3))
N = 6                                  # max new tokens per turn
STOPS = (3, 4, 5)                      # a few ids, so some responses stop early
BUCKETS = (64,)                        # one prompt bucket for the re-prefill sampler and one cache length
_logprobs = jax.jit(sampling.completion_logprobs, static_argnames=("config",))


def _sampler(rows, *, kv_reuse, temperature=0.0, buckets=BUCKETS, **kw):
  return sampler_lib.LMSampler(PARAMS, CONFIG, key=jax.random.key(7), rows=rows, max_new_tokens=N,
                               temperature=temperature, stop_tokens=STOPS, pad_id=0, buckets=buckets,
                               kv_reuse=kv_reuse, **kw)


def _req(e, ctx, turn=0, max_new=N):
  return policy_io.PolicyRequest(e, "task", 0, turn, list(ctx), max_new)


def _tokens(rng, n):
  return [int(x) for x in rng.integers(6, CONFIG.vocab_size, n)]


def _teacher_forced(ctx, out, temperature):
  """Log-probs of out.token_ids after ctx by a full forward pass (common.lm.sampling.completion_logprobs)."""
  ids, mask = sampling.left_pad([ctx], length=64)
  comp = np.zeros((1, N), np.int32)
  comp[0, :len(out.token_ids)] = out.token_ids
  cmask = np.arange(N)[None] < len(out.token_ids)
  lp = _logprobs(PARAMS, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(comp), jnp.asarray(cmask),
                 config=CONFIG, temperature=temperature)
  return np.asarray(lp)[0, :len(out.token_ids)]


def _schedule(rng):
  """Episodes of a multi-turn run on 3 rows: e -> (first prompt, observations per later turn, max_new per turn).

  e0: 4 turns; e1: finishes after 2 turns, e3 joins (its row) at tick 2; e2: 4 turns, a shorter limit once.
  """
  return {0: (_tokens(rng, 9), [_tokens(rng, n) for n in (4, 3, 5)], [N, N, N, N]),
          1: (_tokens(rng, 17), [_tokens(rng, 6)], [N, N]),
          2: (_tokens(rng, 4), [_tokens(rng, n) for n in (7, 2, 3)], [N, 3, N, N]),
          3: (_tokens(rng, 12), [_tokens(rng, 5)], [N, N])}


STARTS = {0: 0, 1: 0, 2: 0, 3: 2}       # the tick each episode's first request comes


def _drive(policy, episodes, starts, ticks=4):
  """The driver's lock-step loop: each tick, every live episode asks with its whole context; the response and
  the next observation are appended. Returns [(tick, episode, context, output)]."""
  ctx = {e: list(p) for e, (p, _, _) in episodes.items()}
  turn = {e: 0 for e in episodes}
  log = []
  for tick in range(ticks):
    live = [e for e in episodes if starts[e] <= tick and turn[e] < len(episodes[e][2])]
    if not live:
      break
    reqs = [_req(e, ctx[e], turn[e], episodes[e][2][turn[e]]) for e in live]
    outs = policy(reqs)
    for e, r, o in zip(live, reqs, outs):
      log.append((tick, e, list(r.token_ids), o))
      if turn[e] < len(episodes[e][1]):
        ctx[e] = ctx[e] + list(o.token_ids) + episodes[e][1][turn[e]]
      turn[e] += 1
  return log


class KVReuseTest(parameterized.TestCase):

  def test_multi_turn_parity_and_prefill_count(self):
    episodes = _schedule(np.random.default_rng(0))
    reuse, full = _sampler(3, kv_reuse=True), _sampler(3, kv_reuse=False)
    got = _drive(reuse, episodes, STARTS)
    want = _drive(full, episodes, STARTS)
    self.assertEqual(len(got), 12)
    self.assertTrue(any(len(o.token_ids) < N for *_, o in got))          # some responses stopped early
    for (tick, e, ctx, o), (_, _, ctx2, o2) in zip(got, want):
      self.assertEqual(ctx, ctx2)
      self.assertEqual(o.token_ids, o2.token_ids, (tick, e))             # greedy: same tokens
      np.testing.assert_allclose(o.logprobs, _teacher_forced(ctx, o, 1.0), rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(o.logprobs, o2.logprobs, rtol=1e-5, atol=1e-5)
    # Only the new tokens were prefilled: each episode's first prompt, then its observations.
    new = sum(len(p) + sum(len(x) for x in obs) for p, obs, _ in episodes.values())
    self.assertEqual(reuse.prefill_tokens, new)
    self.assertEqual(full.prefill_tokens, sum(len(ctx) for _, _, ctx, _ in want))
    self.assertEqual(reuse.reused_tokens, full.prefill_tokens - new)
    # e3 joined the row e1 left (3 rows, 4 episodes).
    self.assertEqual(sorted(reuse._episode_row), [0, 2, 3])
    self.assertEqual(sorted(reuse._episode_row.values()), [0, 1, 2])
    self.assertEqual(reuse.cache_bytes, 2 * 2 * 3 * 64 * 2 * 8 * 4)      # k, v [L=2, rows=3, S=64, K=2, hd=8] f32
    self.assertEqual(full.cache_bytes, 0)
    # Another rollout of the same shapes compiles nothing new (one program per suffix and cache bucket).
    size = sampling._generate_cached_jit._cache_size()
    _drive(_sampler(3, kv_reuse=True), _schedule(np.random.default_rng(9)), STARTS)
    self.assertEqual(sampling._generate_cached_jit._cache_size(), size)

  def test_sampled_logprobs_equal_full_reprefill(self):
    episodes = _schedule(np.random.default_rng(1))
    reuse = _sampler(3, kv_reuse=True, temperature=0.7, top_k=20)
    for _, _, ctx, o in _drive(reuse, episodes, STARTS):
      np.testing.assert_allclose(o.logprobs, _teacher_forced(ctx, o, 0.7), rtol=1e-5, atol=1e-5)

  def test_rollback_on_edited_context(self):
    rng = np.random.default_rng(2)
    prompts = [_tokens(rng, 10), _tokens(rng, 14)]
    reuse = _sampler(2, kv_reuse=True)
    first = reuse([_req(e, p) for e, p in enumerate(prompts)])
    ctx = [p + list(o.token_ids) + _tokens(rng, 4) for p, o in zip(prompts, first)]
    ctx[0][3] = (ctx[0][3] + 1 - 6) % (CONFIG.vocab_size - 6) + 6     # an earlier token edited
    before = reuse.prefill_tokens
    got = reuse([_req(e, c, 1) for e, c in enumerate(ctx)])
    self.assertEqual(reuse.prefill_tokens - before, (len(ctx[0]) - 3) + 4)
    fresh = _sampler(2, kv_reuse=False)([_req(e, c, 1) for e, c in enumerate(ctx)])
    for c, o, f in zip(ctx, got, fresh):
      self.assertEqual(o.token_ids, f.token_ids)
      np.testing.assert_allclose(o.logprobs, f.logprobs, rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(o.logprobs, _teacher_forced(c, o, 1.0), rtol=1e-5, atol=1e-5)
    # A context that is a strict prefix of the cached one (window mode's re-rendered prompt): only its last
    # token is run again.
    before = reuse.prefill_tokens
    again = reuse([_req(1, ctx[1][:9], 2)])
    self.assertEqual(reuse.prefill_tokens - before, 1)
    self.assertEqual(again[0].token_ids, _sampler(1, kv_reuse=False)([_req(1, ctx[1][:9])])[0].token_ids)

  def test_cache_grows_with_the_context(self):
    rng = np.random.default_rng(7)
    reuse = _sampler(1, kv_reuse=True, buckets=(32,))
    ctx = _tokens(rng, 10)
    for turn, obs in enumerate((30, 0)):
      o = reuse([_req(0, ctx, turn)])[0]
      self.assertEqual(reuse._blocks[0].k.shape[2], (32, 64)[turn])    # 10 + 6 -> 32; 46 + 6 -> 64
      np.testing.assert_allclose(o.logprobs, _teacher_forced(ctx, o, 1.0), rtol=1e-5, atol=1e-5)
      ctx = ctx + list(o.token_ids) + _tokens(rng, obs)
    self.assertEqual(reuse.prefill_tokens, 10 + 30)

  def test_continuous_batching_equals_independent_runs(self):
    rng = np.random.default_rng(3)
    # 5 episodes through 2 rows: turns 3, 1, 2, 2, 1; a new one starts as soon as a row is free.
    turns = [3, 1, 2, 2, 1]
    episodes = {e: (_tokens(rng, 5 + 3 * e), [_tokens(rng, 3) for _ in range(t - 1)], [N] * t)
                for e, t in enumerate(turns)}
    reuse = _sampler(2, kv_reuse=True, chunk_rows=1)                    # two blocks of one row
    ctx = {e: list(p) for e, (p, _, _) in episodes.items()}
    turn, queue, live, got = {e: 0 for e in episodes}, list(episodes), [], {}
    while queue or live:
      while queue and len(live) < 2:
        live.append(queue.pop(0))
      outs = reuse([_req(e, ctx[e], turn[e]) for e in live])
      for e, o in zip(list(live), outs):
        got.setdefault(e, []).append((list(ctx[e]), o))
        if turn[e] < len(episodes[e][1]):
          ctx[e] = ctx[e] + list(o.token_ids) + episodes[e][1][turn[e]]
        turn[e] += 1
        if turn[e] == turns[e]:
          live.remove(e)
    self.assertLessEqual(len(reuse._episode_row), 2)
    for e in episodes:   # each alone, through a re-prefill sampler
      alone = _drive(_sampler(1, kv_reuse=False), {e: episodes[e]}, {e: 0}, ticks=turns[e])
      self.assertLen(got[e], turns[e])
      for (c, o), (_, _, c2, o2) in zip(got[e], alone):
        self.assertEqual(c, c2)
        self.assertEqual(o.token_ids, o2.token_ids)
        np.testing.assert_allclose(o.logprobs, o2.logprobs, rtol=1e-5, atol=1e-5)

  def test_release_shares_prefix_and_cache_len_fallback(self):
    rng = np.random.default_rng(4)
    prompt = _tokens(rng, 20)
    reuse = _sampler(2, kv_reuse=True)
    a = reuse([_req(0, prompt)])[0]
    reuse.release(0)
    self.assertEqual(reuse.cached_length(0), 0)
    before = reuse.prefill_tokens
    b = reuse([_req(1, prompt)])[0]                                       # same first prompt (a task's group)
    self.assertEqual(reuse.prefill_tokens - before, 1)
    self.assertEqual(a.token_ids, b.token_ids)
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)
    # cache_len: a request needing more slots is served by a full re-prefill, equal to the plain sampler's.
    capped = _sampler(2, kv_reuse=True, cache_len=32)
    short, long = prompt[:8], prompt + _tokens(rng, 10)
    got = capped([_req(0, short), _req(1, long)])
    self.assertEqual(capped.prefill_tokens, len(short) + len(long))
    self.assertEqual(capped.cached_length(1), 0)
    self.assertEqual(capped.cached_length(0), len(short) + len(got[0].token_ids))
    want = _sampler(2, kv_reuse=False)([_req(0, short), _req(1, long)])
    for o, w in zip(got, want):
      self.assertEqual(o.token_ids, w.token_ids)
      np.testing.assert_allclose(o.logprobs, w.logprobs, rtol=1e-5, atol=1e-5)
    with self.assertRaisesRegex(ValueError, "one episode"):
      reuse([_req(3, prompt), _req(3, prompt)])


ROW = sampler_lib.row_bytes(CONFIG, 64)                          # one cache row of 64 slots: 8192 bytes (f32)


class KVPoolTest(parameterized.TestCase):
  """The pool under a byte budget: rows first come, first kept; the rest re-prefilled; samples unchanged."""

  def test_pool_rows_and_options(self):
    self.assertEqual(ROW, 64 * 2 * 2 * 2 * 8 * 4)                       # slots x (k, v) x L x K x hd x f32
    self.assertEqual(sampler_lib.pool_rows(CONFIG, 8, 64, 0), 8)         # no budget: every row
    self.assertEqual(sampler_lib.pool_rows(CONFIG, 8, 64, 3 * ROW - 1), 2)
    self.assertEqual(sampler_lib.pool_rows(CONFIG, 8, 64, 100 * ROW), 8)
    with self.assertRaisesRegex(ValueError, "cache_len"):
      sampler_lib.pool_rows(CONFIG, 8, 0, ROW)
    with self.assertRaisesRegex(ValueError, "cache_len"):
      _sampler(3, kv_reuse=True, cache_max_bytes=ROW)
    gib = 2.5 * ROW / 2 ** 30
    opts = sampler_lib.reuse_options(CONFIG, enabled=True, rows=8, context_tokens=64, max_gib=gib, key="gspo")
    self.assertEqual(opts, {"kv_reuse": True, "cache_len": 64, "cache_max_bytes": int(gib * 2 ** 30)})
    self.assertEqual(_sampler(8, **opts).pool_rows, 2)
    with self.assertLogs(level="WARNING") as logs:                       # not even one row: reuse off
      opts = sampler_lib.reuse_options(CONFIG, enabled=True, rows=8, context_tokens=64, max_gib=0.5 * ROW / 2 ** 30,
                                       key="gspo")
    self.assertIn("gspo.kv_reuse off", logs.output[0])
    self.assertEqual(opts, {"kv_reuse": False, "cache_len": 64, "cache_max_bytes": 0})
    self.assertEqual(sampler_lib.reuse_options(CONFIG, enabled=True, rows=8, context_tokens=64, max_gib=0,
                                               key="gspo")["cache_max_bytes"], 0)
    # Re-prefill batches of the requests without a pool row.
    for n, chunk, want in ((1, 512, 1), (3, 512, 4), (64, 512, 64), (65, 512, 128), (384, 512, 384),
                           (385, 512, 448), (512, 512, 512), (5, 6, 5), (100, 100, 100), (3, 3, 3)):
      self.assertEqual(sampler_lib.padded_rows(n, chunk), want, (n, chunk))

  @parameterized.named_parameters(("greedy", 0.0, 0), ("sampled", 0.9, 30))
  def test_budget_below_rows_gives_the_same_tokens_and_logprobs(self, temperature, top_k):
    # 4 episodes on 3 rows (e3 takes e1's place at tick 2), a pool of 2 rows: e0 and e1 come first and keep
    # theirs; e2 is re-prefilled at ticks 0 and 1, then takes e1's row (e1 stopped asking) with its whole
    # context; e3 finds the pool full and is re-prefilled at ticks 2 and 3.
    episodes = _schedule(np.random.default_rng(10))
    kw = dict(temperature=temperature, top_k=top_k, cache_len=64)
    pooled = _sampler(3, kv_reuse=True, cache_max_bytes=2 * ROW + ROW // 2, **kw)
    self.assertEqual(pooled.pool_rows, 2)
    unbudgeted = _sampler(3, kv_reuse=True, **kw)
    reprefill = _sampler(3, kv_reuse=False, **kw)
    got = _drive(pooled, episodes, STARTS)
    self.assertLessEqual(pooled.cache_bytes, 2 * ROW + ROW // 2)
    self.assertEqual(pooled.cache_bytes, 2 * ROW)                        # [L, 2 rows, 64, K, hd] k and v
    for other in (unbudgeted, reprefill):                                 # same key: same tokens, any layout
      want = _drive(other, episodes, STARTS)
      self.assertEqual(len(got), len(want))
      for (tick, e, ctx, o), (_, e2, ctx2, o2) in zip(got, want):
        self.assertEqual((e, ctx), (e2, ctx2))
        self.assertEqual(o.token_ids, o2.token_ids, (tick, e))
        np.testing.assert_allclose(o.logprobs, o2.logprobs, rtol=1e-5, atol=1e-5)
    for _, _, ctx, o in got:
      np.testing.assert_allclose(o.logprobs, _teacher_forced(ctx, o, temperature or 1.0), rtol=1e-5, atol=1e-5)
    # Prefill: pooled episodes their new tokens only; the others their whole context.
    ctx = {(tick, e): len(c) for tick, e, c, _ in got}
    prev = {(tick, e): len(c) + len(o.token_ids) for tick, e, c, o in got}
    new = lambda tick, e: ctx[tick, e] - prev[tick - 1, e]
    want_prefill = (ctx[0, 0] + sum(new(t, 0) for t in (1, 2, 3)) + ctx[0, 1] + new(1, 1)
                    + ctx[0, 2] + ctx[1, 2] + ctx[2, 2] + new(3, 2) + ctx[2, 3] + ctx[3, 3])
    self.assertNotEqual(episodes[2][0][0], episodes[1][0][0])            # e2 shares no prefix with e1's row
    self.assertEqual(pooled.prefill_tokens, want_prefill)
    self.assertEqual(pooled.overflow_requests, 4)
    self.assertEqual(pooled.prefill_tokens + pooled.reused_tokens, reprefill.prefill_tokens)
    self.assertLess(unbudgeted.prefill_tokens, pooled.prefill_tokens)
    self.assertLess(pooled.prefill_tokens, reprefill.prefill_tokens)
    self.assertEqual(sorted(pooled._episode_row.items()), [(0, 0), (2, 1)])

  def test_same_tokens_in_any_grouping_of_the_requests(self):
    # Request k of episode e draws with its own key: one call of three, or three calls of one, or another order.
    rng = np.random.default_rng(11)
    prompts = {e: _tokens(rng, 5 + 4 * e) for e in range(3)}
    together = _sampler(3, kv_reuse=True, temperature=1.0)([_req(e, p) for e, p in prompts.items()])
    alone = _sampler(3, kv_reuse=True, temperature=1.0)
    apart = {e: alone([_req(e, prompts[e])])[0] for e in (2, 0, 1)}
    for e, o in enumerate(together):
      self.assertEqual(o.token_ids, apart[e].token_ids)
      np.testing.assert_allclose(o.logprobs, apart[e].logprobs, rtol=1e-5, atol=1e-5)
    # A second request of an episode draws afresh (k = 1), even with the same context.
    again = alone([_req(0, prompts[0])])[0]
    self.assertNotEqual(again.token_ids, apart[0].token_ids)


class CallKeysTest(parameterized.TestCase):
  """sample_keys='call', the stream of the sampler before the KV pool (common.lm.sampler's module doc), against a
  reference drawn with its keys through common.lm.sampling directly: call t's key fold_in(key, t); without reuse
  chunk c of the call fold_in(that, c), padded to chunk_rows rows; with reuse cache block b fold_in(that, b), every
  block chunk_rows rows (the last one padded), and the re-prefills of requests too long for a row
  fold_in(that, 1_000_003 + c), padded to chunk_rows rows. Tokens and log-probs bit-identical (no budget)."""

  CHUNK, CACHE_LEN = 2, 40                       # 3 rows in blocks of 2: the last block padded
  SAMPLING = sampling.SamplingConfig(temperature=1.0, top_k=30)

  def _sampler(self, **kw):
    return _sampler(3, kv_reuse=kw.pop("kv_reuse"), temperature=1.0, top_k=30, chunk_rows=self.CHUNK,
                    cache_len=self.CACHE_LEN, **kw)

  def _ref_generate(self, contexts, limits, key):
    """A full re-prefill of `contexts`, padded to CHUNK rows (1-token rows with a 0-token limit), with one key."""
    ctx = [list(c) for c in contexts] + [[0]] * (self.CHUNK - len(contexts))
    limit = np.zeros(self.CHUNK, np.int32)
    limit[:len(contexts)] = limits
    ids, mask = sampling.left_pad(ctx, pad_id=0, buckets=BUCKETS)
    out = sampling.generate(PARAMS, jnp.asarray(ids), jnp.asarray(mask), key, config=CONFIG, max_new_tokens=N,
                            sampling=self.SAMPLING, stop_tokens=np.asarray(STOPS, np.int32),
                            row_max_new_tokens=jnp.asarray(limit), pad_id=0, prefill_chunk=2048)
    toks, lps, lens = jax.device_get((out.tokens, out.logprobs, out.lengths))
    return [(toks[i, :lens[i]].tolist(), lps[i, :lens[i]].tolist()) for i in range(len(contexts))]

  def _ref_block(self, cache, members, key):
    """One generate_cached call on a block of CHUNK rows: members {row in block: (context, cached tokens, limit)}
    (rows not in it: start, count and limit 0); returns ({row: (tokens, log-probs)}, the cache)."""
    start, count, limit = (np.zeros(self.CHUNK, np.int32) for _ in range(3))
    for j, (ctx, cached, lim) in members.items():
      start[j] = min(sampler_lib.common_prefix(np.asarray(ctx, np.int32), np.asarray(cached, np.int32)), len(ctx) - 1)
      count[j], limit[j] = len(ctx) - start[j], lim
    t = sampling.bucket_length(int(count.max()))
    suffix = np.zeros((self.CHUNK, t), np.int32)
    for j, (ctx, _, _) in members.items():
      suffix[j, t - count[j]:] = ctx[start[j]:]
    out, cache = sampling.generate_cached(PARAMS, cache, jnp.asarray(suffix), jnp.asarray(start),
                                          jnp.asarray(count), key, config=CONFIG, max_new_tokens=N,
                                          sampling=self.SAMPLING, stop_tokens=np.asarray(STOPS, np.int32),
                                          row_max_new_tokens=jnp.asarray(limit), pad_id=0, prefill_chunk=2048)
    toks, lps, lens = jax.device_get((out.tokens, out.logprobs, out.lengths))
    return {j: (toks[j, :lens[j]].tolist(), lps[j, :lens[j]].tolist()) for j in members}, cache

  def _calls(self):
    """Three calls' requests [(episode, context, limit)]: e1's second context is too long for a cache row
    (its context + N > CACHE_LEN), e3 joins at call 2 (e1's released row)."""
    rng = np.random.default_rng(21)
    p = {0: _tokens(rng, 9), 1: _tokens(rng, 17), 2: _tokens(rng, 4), 3: _tokens(rng, 10)}
    obs = {0: (_tokens(rng, 4), _tokens(rng, 3)), 1: (_tokens(rng, 20),), 2: (_tokens(rng, 3),)}
    return p, obs

  def _drive(self, sampler):
    p, obs = self._calls()
    ctx = dict(p)
    got = []
    for order, limits in (([0, 1, 2], (N, N, 3)), ([2, 1, 0], (N, N, N)), ([3, 0], (N, N))):
      outs = sampler([_req(e, ctx[e], max_new=m) for e, m in zip(order, limits)])
      got.append({e: (o.token_ids, o.logprobs) for e, o in zip(order, outs)})
      for e, o in zip(order, outs):
        if obs.get(e):
          ctx[e] = ctx[e] + o.token_ids + obs[e][0]
          obs[e] = obs[e][1:]
    return got, p

  def test_without_reuse_equals_the_reference(self):
    got, p = self._drive(self._sampler(kv_reuse=False, sample_keys="call"))
    _, obs = self._calls()
    k0, k1, k2 = (jax.random.fold_in(jax.random.key(7), t) for t in range(3))
    want0 = (self._ref_generate([p[0], p[1]], [N, N], jax.random.fold_in(k0, 0))
             + self._ref_generate([p[2]], [3], jax.random.fold_in(k0, 1)))
    ctx = {e: p[e] + want0[e][0] + obs[e][0] for e in range(3)}
    want1 = (self._ref_generate([ctx[2], ctx[1]], [N, N], jax.random.fold_in(k1, 0))
             + self._ref_generate([ctx[0]], [N], jax.random.fold_in(k1, 1)))
    ctx0 = ctx[0] + want1[2][0] + obs[0][1]
    want2 = self._ref_generate([p[3], ctx0], [N, N], jax.random.fold_in(k2, 0))
    self.assertEqual(got, [dict(zip([0, 1, 2], want0)), dict(zip([2, 1, 0], want1)), dict(zip([3, 0], want2))])

  def test_with_reuse_equals_the_reference(self):
    sampler = self._sampler(kv_reuse=True, sample_keys="call")
    got, p = self._drive(sampler)
    _, obs = self._calls()
    k0, k1, k2 = (jax.random.fold_in(jax.random.key(7), t) for t in range(3))
    blank = lambda: model_lib.init_cache(CONFIG, self.CHUNK, self.CACHE_LEN)   # every block CHUNK rows
    # call 0: e0, e1, e2 take rows 0, 1, 2 (blocks 0, 0, 1); block 1's second row is padding
    b0, c0 = self._ref_block(blank(), {0: (p[0], [], N), 1: (p[1], [], N)}, jax.random.fold_in(k0, 0))
    b1, c1 = self._ref_block(blank(), {0: (p[2], [], 3)}, jax.random.fold_in(k0, 1))
    want0 = {0: b0[0], 1: b0[1], 2: b1[0]}
    rows = {e: p[e] + want0[e][0] for e in range(3)}                      # the tokens each row holds
    ctx = {e: rows[e] + obs[e][0] for e in range(3)}
    self.assertGreater(len(ctx[1]) + N, self.CACHE_LEN)                  # e1: too long for a row
    # call 1 (e2, e1, e0): e1 re-prefilled with fold_in(k1, 1_000_003), its row released; blocks 0 and 1
    want1 = {1: self._ref_generate([ctx[1]], [N], jax.random.fold_in(k1, 1_000_003))[0]}
    b0, c0 = self._ref_block(c0, {0: (ctx[0], rows[0], N)}, jax.random.fold_in(k1, 0))
    b1, c1 = self._ref_block(c1, {0: (ctx[2], rows[2], N)}, jax.random.fold_in(k1, 1))
    want1.update({0: b0[0], 2: b1[0]})
    rows[0] = ctx[0] + want1[0][0]
    ctx0 = rows[0] + obs[0][1]
    # call 2 (e3, e0): e3 takes e1's released row 1 (block 0, with e0)
    b0, _ = self._ref_block(c0, {1: (p[3], rows[1], N), 0: (ctx0, rows[0], N)}, jax.random.fold_in(k2, 0))
    want2 = {3: b0[1], 0: b0[0]}
    self.assertEqual(got, [want0, want1, want2])
    self.assertEqual(sampler.cache_bytes, 2 * 2 * sampler_lib.row_bytes(CONFIG, self.CACHE_LEN))  # 2 blocks x 2 rows
    # per-request keys draw other tokens from the same requests
    request, _ = self._drive(self._sampler(kv_reuse=True, sample_keys="request"))
    self.assertNotEqual(request, got)

  def test_a_budget_below_the_rows_reprefills_the_overflow_with_the_reprefill_keys(self):
    # a pool of 1 row: e0 keeps it; e1 and e2 (no row) are re-prefilled, batches of CHUNK, keys 1_000_003 + c
    row = sampler_lib.row_bytes(CONFIG, self.CACHE_LEN)
    sampler = self._sampler(kv_reuse=True, sample_keys="call", cache_max_bytes=row + row // 2)
    self.assertEqual(sampler.pool_rows, 1)
    p, _ = self._calls()
    outs = sampler([_req(e, p[e], max_new=m) for e, m in ((0, N), (1, N), (2, 3))])
    k0 = jax.random.fold_in(jax.random.key(7), 0)
    self.assertEqual(sampler.overflow_requests, 2)
    self.assertEqual(sampler.cache_bytes, row)                            # the block holds the pool's 1 row
    cache = model_lib.init_cache(CONFIG, 1, self.CACHE_LEN)
    start, count = jnp.zeros(1, jnp.int32), jnp.full(1, len(p[0]), jnp.int32)
    t = sampling.bucket_length(len(p[0]))
    suffix = jnp.asarray([[0] * (t - len(p[0])) + p[0]], jnp.int32)
    out, _ = sampling.generate_cached(PARAMS, cache, suffix, start, count, jax.random.fold_in(k0, 0), config=CONFIG,
                                      max_new_tokens=N, sampling=self.SAMPLING, stop_tokens=np.asarray(STOPS, np.int32),
                                      row_max_new_tokens=jnp.full(1, N, jnp.int32), pad_id=0)
    want = [(np.asarray(out.tokens)[0, :int(out.lengths[0])].tolist())]
    want += [t for t, _ in self._ref_generate([p[1], p[2]], [N, 3], jax.random.fold_in(k0, 1_000_003))]
    self.assertEqual([o.token_ids for o in outs], want)

  def test_bad_value(self):
    with self.assertRaisesRegex(ValueError, r"sample_keys='per_call' must be one of \('request', 'call'\)"):
      _sampler(3, kv_reuse=True, sample_keys="per_call")
    with self.assertRaisesRegex(ValueError, r"config `gspo.sample_keys`=None must be one of"):
      sampler_lib.check_sample_keys(None, "config `gspo.sample_keys`")
    self.assertEqual(_sampler(3, kv_reuse=True).sample_keys, "request")   # the default


class ChunkedPrefillTest(parameterized.TestCase):

  @parameterized.named_parameters(("greedy", 0.0), ("hot", 0.8))
  def test_chunked_prefill_equals_one_block(self, temperature):
    rng = np.random.default_rng(5)
    ids, mask = sampling.left_pad([_tokens(rng, n) for n in (30, 7, 19)], length=32)
    cfg = sampling.SamplingConfig(temperature=temperature)
    outs = [sampling.generate(PARAMS, jnp.asarray(ids), jnp.asarray(mask), jax.random.key(1), config=CONFIG,
                              max_new_tokens=N, sampling=cfg, stop_tokens=[-1], prefill_chunk=c)
            for c in (0, 8, 12)]                                          # 12: P padded to 36
    for o in outs[1:]:
      np.testing.assert_array_equal(np.asarray(o.tokens), np.asarray(outs[0].tokens))
      np.testing.assert_allclose(np.asarray(o.logprobs), np.asarray(outs[0].logprobs), rtol=1e-5, atol=1e-5)

  def test_chunked_prefill_with_kv_reuse(self):
    episodes = _schedule(np.random.default_rng(6))
    one = _drive(_sampler(3, kv_reuse=True, prefill_chunk=0), episodes, STARTS)
    chunked = _drive(_sampler(3, kv_reuse=True, prefill_chunk=4), episodes, STARTS)
    for (*_, a), (*_, b) in zip(one, chunked):
      self.assertEqual(a.token_ids, b.token_ids)
      np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)


class BenchmarkProbeTest(absltest.TestCase):

  def test_time_multi_turn(self):
    kw = dict(rows=2, turns=3, prompt_len=8, obs_len=4, max_new_tokens=4, warmup=False, buckets=BUCKETS)
    with_reuse = sampler_lib.time_multi_turn(PARAMS, CONFIG, kv_reuse=True, **kw)
    without = sampler_lib.time_multi_turn(PARAMS, CONFIG, kv_reuse=False, **kw)
    self.assertEqual(with_reuse["generated_tokens"], 2 * 3 * 4)
    self.assertEqual(with_reuse["context_tokens"], without["context_tokens"])
    self.assertEqual(with_reuse["prefill_tokens"], 2 * (8 + 2 * 4))
    self.assertGreater(without["prefill_tokens"], with_reuse["prefill_tokens"])


if __name__ == "__main__":
  absltest.main()
