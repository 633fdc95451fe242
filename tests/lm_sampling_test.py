"""Sampler: log-probs equal teacher forcing, stops, per-row limits, padding invariance, one compile per bucket."""

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from common.lm import model as model_lib
from common.lm import sampling
from common.lm import testing
from common.lm.config import ModelConfig

CONFIG = ModelConfig(family="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, qkv_bias=True, tie_embeddings=True,
                     eos_token_ids=(2,))
PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(CONFIG, seed=0, std=0.3))
_logprobs = jax.jit(sampling.completion_logprobs, static_argnames=("config",))
P, N = 16, 12                       # one prompt bucket and one new-token bucket for every test: few compiles
GREEDY = sampling.SamplingConfig(temperature=0.0)
HOT = sampling.SamplingConfig(temperature=0.7, top_k=20, top_p=0.9)
NO_STOP = np.full((4, 2), -1, np.int32)


def _prompts(seed=0, lengths=(5, 11, 2, 8)):
  rng = np.random.default_rng(seed)
  return [list(rng.integers(3, CONFIG.vocab_size, n)) for n in lengths]


def _run(cfg, key=0, prompts=None, stops=NO_STOP, row_max=None):
  ids, mask = sampling.left_pad(_prompts() if prompts is None else prompts, length=P)
  out = sampling.generate(PARAMS, jnp.asarray(ids), jnp.asarray(mask), jax.random.key(key), config=CONFIG,
                          max_new_tokens=N, sampling=cfg, stop_tokens=stops,
                          row_max_new_tokens=np.full((4,), N, np.int32) if row_max is None else row_max)
  return ids, mask, out


class SamplerTest(parameterized.TestCase):

  @parameterized.named_parameters(("greedy", GREEDY, 1.0), ("t07_topk20_topp09", HOT, 0.7))
  def test_logprobs_equal_teacher_forced(self, cfg, temperature):
    ids, mask, out = _run(cfg, key=3)
    tf = _logprobs(PARAMS, jnp.asarray(ids), jnp.asarray(mask), out.tokens, out.mask, config=CONFIG,
                   temperature=temperature)
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(tf), rtol=1e-5, atol=1e-5)
    self.assertTrue(np.all(np.asarray(out.logprobs) <= 0))
    self.assertTrue(np.asarray(out.mask).all())
    np.testing.assert_array_equal(np.asarray(out.lengths), N)

  def test_stop_tokens_per_row_and_row_limits(self):
    prompts = _prompts(1)
    ft = np.asarray(_run(GREEDY, prompts=prompts)[2].tokens)
    # Row 0 stops at (the first occurrence of) its 4th token, row 1 at its 7th (different stop sets),
    # row 2 is limited to 3 tokens, row 3 has no stop and runs to the end.
    stops = NO_STOP.copy()
    stops[0, 0], stops[1, 1] = ft[0, 3], ft[1, 6]
    row_max = np.array([N, N, 3, N], np.int32)
    out = _run(GREEDY, prompts=prompts, stops=stops, row_max=row_max)[2]
    expected = [list(ft[0]).index(ft[0, 3]) + 1, list(ft[1]).index(ft[1, 6]) + 1, 3, N]
    lengths = np.asarray(out.lengths)
    np.testing.assert_array_equal(lengths, expected)
    for r in range(4):
      np.testing.assert_array_equal(np.asarray(out.tokens)[r, :lengths[r]], ft[r, :lengths[r]])
      np.testing.assert_array_equal(np.asarray(out.tokens)[r, lengths[r]:], 0)
      np.testing.assert_array_equal(np.asarray(out.logprobs)[r, lengths[r]:], 0.0)
      np.testing.assert_array_equal(np.asarray(out.mask)[r], np.arange(N) < lengths[r])

  def test_one_compile_per_bucket(self):
    _run(HOT, key=0)
    size = sampling._generate_jit._cache_size()
    for seed in range(1, 4):
      prompts = _prompts(seed, lengths=(3 + seed, 9, 12 - seed, 1 + seed))
      ids, _ = sampling.left_pad(prompts)              # all land in the 16 bucket
      self.assertEqual(ids.shape, (4, P))
      _run(HOT, key=seed, prompts=prompts, row_max=np.array([4, 3, 2, 1], np.int32))
    self.assertEqual(sampling._generate_jit._cache_size(), size)

  def test_sampling_is_keyed(self):
    a, b, c = (np.asarray(_run(HOT, key=k)[2].tokens) for k in (5, 5, 6))
    np.testing.assert_array_equal(a, b)
    self.assertFalse(np.array_equal(a, c))


  @parameterized.named_parameters(("typed", jax.random.key), ("raw", jax.random.PRNGKey))
  def test_per_row_keys_draw_each_row_on_its_own(self, make_key):
    # B keys: row b's tokens depend on key[b] and its prompt only, not on the other rows or the batch size.
    prompts = _prompts(2)
    keys = jax.vmap(lambda i: jax.random.fold_in(make_key(4), i))(jnp.arange(4))
    batch = sampling.generate(PARAMS, *map(jnp.asarray, sampling.left_pad(prompts, length=P)), keys,
                              config=CONFIG, max_new_tokens=N, sampling=HOT, stop_tokens=NO_STOP)
    self.assertTrue(sampling.per_row_keys(keys))
    self.assertFalse(sampling.per_row_keys(make_key(4)))
    for r in (3, 0):   # each alone, in a batch of one
      one = sampling.generate(PARAMS, *map(jnp.asarray, sampling.left_pad([prompts[r]], length=P)), keys[r:r + 1],
                              config=CONFIG, max_new_tokens=N, sampling=HOT, stop_tokens=NO_STOP[:1])
      np.testing.assert_array_equal(np.asarray(one.tokens)[0], np.asarray(batch.tokens)[r])
      np.testing.assert_allclose(np.asarray(one.logprobs)[0], np.asarray(batch.logprobs)[r], rtol=1e-5, atol=1e-5)
    # Rows with the same prompt and different keys draw differently.
    same = sampling.generate(PARAMS, *map(jnp.asarray, sampling.left_pad([prompts[0]] * 4, length=P)), keys,
                             config=CONFIG, max_new_tokens=N, sampling=HOT, stop_tokens=NO_STOP)
    self.assertGreater(len({tuple(np.asarray(t)) for t in same.tokens}), 1)


class FilterTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_top_k_top_p_filter_against_numpy(self):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 12)).astype(np.float32)
    cfg = sampling.SamplingConfig(temperature=0.5, top_k=6, top_p=0.8)
    got = np.asarray(self.variant(lambda x: sampling._filter_logits(x, cfg))(jnp.asarray(logits)))
    for r in range(3):
      x = logits[r].astype(np.float64) / 0.5
      order = np.argsort(-x)
      keep = set(order[:6])
      p = np.exp(x[order[:6]] - x[order[:6]].max())
      p /= p.sum()
      mass, nucleus = 0.0, set()
      for i, tok in enumerate(order[:6]):
        if mass < 0.8:
          nucleus.add(tok)
        mass += p[i]
      keep &= nucleus
      for v in range(12):
        if v in keep:
          np.testing.assert_allclose(got[r, v], x[v], rtol=1e-5, atol=1e-5)
        else:
          self.assertEqual(got[r, v], -np.inf)

  @chex.variants(with_jit=True, without_jit=True)
  def test_top_k_keeps_exactly_k_on_ties(self):
    logits = jnp.asarray([[1.0, 3.0, 3.0, 3.0, 0.5, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]], jnp.float32)
    got = np.asarray(self.variant(lambda x: sampling._filter_logits(x, sampling.SamplingConfig(top_k=2)))(logits))
    np.testing.assert_array_equal(np.isfinite(got).sum(axis=-1), [2, 2])
    np.testing.assert_array_equal(np.isfinite(got), [[0, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])   # lower ids first
    key = jax.random.key(0)
    toks = {int(sampling.sample_token(logits, jax.random.fold_in(key, i), sampling.SamplingConfig(top_k=2))[0][0])
            for i in range(64)}
    self.assertEqual(toks, {1, 2})

  @chex.variants(with_jit=True)
  def test_top_k1_and_tiny_top_p_are_greedy(self):
    logits = jnp.asarray(np.random.default_rng(1).standard_normal((5, 30)), jnp.float32)
    best = np.argmax(np.asarray(logits), axis=-1)
    for cfg in (sampling.SamplingConfig(temperature=2.0, top_k=1),
                sampling.SamplingConfig(temperature=2.0, top_p=1e-6)):
      fn = self.variant(lambda x, key, cfg=cfg: sampling.sample_token(x, key, cfg))
      for k in range(2):
        tok, lp = fn(logits, jax.random.key(k))
        np.testing.assert_array_equal(np.asarray(tok), best)
        ref = jax.nn.log_softmax(logits / 2.0)[np.arange(5), best]
        np.testing.assert_allclose(np.asarray(lp), np.asarray(ref), rtol=1e-6)

  def test_bucket_and_left_pad(self):
    self.assertEqual(sampling.bucket_length(3), 16)
    self.assertEqual(sampling.bucket_length(17), 32)
    self.assertEqual(sampling.bucket_length(17, buckets=(24, 48)), 24)
    ids, mask = sampling.left_pad([[5, 6], [7]], length=4, pad_id=9)
    np.testing.assert_array_equal(ids, [[9, 9, 5, 6], [9, 9, 9, 7]])
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [0, 0, 0, 1]])
    with self.assertRaisesRegex(ValueError, "more than length"):
      sampling.left_pad([[1, 2, 3]], length=2)

  @chex.variants(with_jit=True, without_jit=True)
  def test_positions_from_mask(self):
    mask = jnp.asarray([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    got = self.variant(model_lib.positions_from_mask)(mask)
    np.testing.assert_array_equal(np.asarray(got), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]])


if __name__ == "__main__":
  absltest.main()
