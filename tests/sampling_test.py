"""Tests for phgpo/sampling.py: edge cases with exact values, empirical distributions, sharding."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import pytest

from phgpo import sampling

NEG_INF = -np.inf


def np_fused_probs(logits, log_prior, *, top_k, temperature, beta):
  """float64 reference: softmax((log pi + beta log prior) / T) over the top-K valid tools."""
  logits = np.asarray(logits, np.float64)
  valid = np.isfinite(logits)
  lse = np.log(np.sum(np.exp(logits[valid] - logits[valid].max()))) + logits[valid].max()
  log_pi = np.where(valid, logits - lse, NEG_INF)
  order = sorted(np.nonzero(valid)[0], key=lambda i: (-logits[i], i))[:top_k]
  score = np.array([log_pi[i] + beta * log_prior[i] for i in order]) / temperature
  p = np.exp(score - score.max())
  out = np.zeros(len(logits))
  out[order] = p / p.sum()
  return out


def chi_square(counts, probs):
  expected = probs * counts.sum()
  keep = expected > 0
  return float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))


class EdgeCaseTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_all_invalid_rows_give_no_candidate_not_index_zero(self):
    logits = jnp.array([[NEG_INF] * 4, [1.0, 2.0, 0.0, 3.0], [np.nan] * 4, [0.0, 5.0, 1.0, 2.0]],
                       jnp.float32)
    valid_mask = jnp.array([[True] * 4, [True] * 4, [True] * 4, [False] * 4])
    fn = self.variant(functools.partial(sampling.sample_tools, top_k=2, temperature=0.7, beta=0.5))
    tools, has = fn(jax.random.key(0), logits, jnp.zeros((4, 4)), valid_mask=valid_mask)
    np.testing.assert_array_equal(has, [False, True, False, False])
    np.testing.assert_array_equal(np.asarray(tools)[[0, 2, 3]], [-1, -1, -1])
    self.assertIn(int(tools[1]), (1, 3))
    self.assertEqual(tools.dtype, jnp.int32)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.0, -1.0)
  def test_temperature_zero_takes_argmax(self, temperature):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 12)).astype(np.float32)
    log_prior = np.log(rng.uniform(0.1, 1.0, size=(6, 12))).astype(np.float32)
    fn = self.variant(functools.partial(sampling.sample_tools, top_k=4, temperature=temperature,
                                        beta=0.7))
    tools, has = fn(jax.random.key(1), logits, log_prior)
    expected = [int(np.argmax(np_fused_probs(l, p, top_k=4, temperature=1.0, beta=0.7)))
                for l, p in zip(logits, log_prior)]
    np.testing.assert_array_equal(tools, expected)
    self.assertTrue(np.all(has))
    self.assertTrue(np.all(np.isfinite(np.asarray(tools))))

  @pytest.mark.fast
  def test_temperature_zero_with_beta_zero_is_policy_argmax(self):
    logits = jnp.array([[0.0, 3.0, 1.0], [2.0, -1.0, NEG_INF]], jnp.float32)
    tools, _ = sampling.sample_tools(jax.random.key(2), logits, jnp.full((2, 3), jnp.nan),
                                     top_k=2, temperature=0.0, beta=0.0)
    np.testing.assert_array_equal(tools, [1, 0])  # a NaN prior is ignored when beta == 0

  def test_single_valid_tool_is_always_sampled(self):
    logits = jnp.array([[NEG_INF, NEG_INF, 0.3]] * 50, jnp.float32)
    tools, has = sampling.sample_tools(jax.random.key(3), logits, jnp.zeros((50, 3)), top_k=20,
                                       temperature=5.0, beta=1.0)
    np.testing.assert_array_equal(tools, np.full(50, 2))
    self.assertTrue(np.all(has))

  @pytest.mark.fast
  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "top_k must be >= 1"):
      sampling.sample_tools(jax.random.key(0), jnp.zeros((1, 3)), jnp.zeros((1, 3)), top_k=0)
    with self.assertRaises(AssertionError):
      sampling.sample_tools(jax.random.key(0), jnp.zeros((3,)), jnp.zeros((3,)))

  @pytest.mark.fast
  def test_no_retrace_for_new_beta_or_temperature(self):
    f = sampling.sample_tools
    args = (jax.random.key(0), jnp.zeros((2, 5)), jnp.zeros((2, 5)))
    f(*args, top_k=3, temperature=0.7, beta=0.0)
    before = f._cache_size()
    for beta, t in [(0.1, 0.5), (0.7, 1.0), (0.3, 0.0)]:
      f(*args, top_k=3, temperature=t, beta=beta)
    self.assertEqual(f._cache_size(), before)


class DistributionTest(parameterized.TestCase):

  @parameterized.parameters((0.0, 0.7), (0.7, 0.7), (0.5, 1.3))
  def test_empirical_distribution_matches_fused_top_k(self, beta, temperature):
    rng = np.random.default_rng(4)
    n, k, draws = 30, 6, 20000
    logits = rng.normal(scale=1.5, size=n).astype(np.float32)
    log_prior = np.log(rng.uniform(0.05, 1.0, size=n)).astype(np.float32)
    tools, has = sampling.sample_tools(
        jax.random.key(5), jnp.broadcast_to(logits, (draws, n)),
        jnp.broadcast_to(log_prior, (draws, n)), top_k=k, temperature=temperature, beta=beta)
    self.assertTrue(np.all(has))
    counts = np.bincount(np.asarray(tools), minlength=n).astype(np.float64)
    probs = np_fused_probs(logits, log_prior, top_k=k, temperature=temperature, beta=beta)
    # Top-K restriction: tools outside C are never drawn.
    self.assertEqual(counts[probs == 0].sum(), 0)
    self.assertEqual(np.count_nonzero(probs), k)
    # Chi-square with k - 1 = 5 degrees of freedom: 25 is far in the tail (p ~ 1e-4).
    self.assertLess(chi_square(counts, probs), 25.0)
    np.testing.assert_allclose(counts / draws, probs, atol=0.015)

  def test_beta_zero_equals_policy_top_k_distribution(self):
    rng = np.random.default_rng(6)
    n, k, draws, temperature = 40, 20, 20000, 0.7
    logits = rng.normal(size=n).astype(np.float32)
    tools, _ = sampling.sample_tools(jax.random.key(7), jnp.broadcast_to(logits, (draws, n)),
                                     jnp.asarray(rng.normal(size=(draws, n)), jnp.float32),
                                     top_k=k, temperature=temperature, beta=0.0)
    top = np.argsort(-logits)[:k]
    probs = np.zeros(n)
    z = np.exp((logits[top] - logits[top].max()) / temperature)
    probs[top] = z / z.sum()  # softmax(logits / T) renormalised on the top-K
    counts = np.bincount(np.asarray(tools), minlength=n).astype(np.float64)
    self.assertEqual(counts[probs == 0].sum(), 0)
    self.assertLess(chi_square(counts, probs), 2 * (k - 1) + 6 * np.sqrt(2 * (k - 1)))

  def test_rollouts_use_different_keys(self):
    logits = jnp.zeros((64, 10), jnp.float32)
    tools, _ = sampling.sample_tools(jax.random.key(8), logits, logits, top_k=10, temperature=1.0)
    self.assertGreater(len(set(np.asarray(tools).tolist())), 5)
    again, _ = sampling.sample_tools(jax.random.key(8), logits, logits, top_k=10, temperature=1.0)
    np.testing.assert_array_equal(tools, again)


class BehaviourLogProbTest(parameterized.TestCase):
  """`sample_tools_with_logp`: the log-probability of each draw under softmax(score / T) over the top-K."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((0.0, 0.7, 3), (0.7, 0.7, 4), (0.5, 1.3, 20), (0.7, 0.0, 4), (0.7, -1.0, 4))
  def test_same_draw_as_sample_tools(self, beta, temperature, top_k):
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(32, 9)).astype(np.float32)
    logits[3] = NEG_INF
    logits[5, :4] = np.nan
    log_prior = np.log(rng.uniform(0.1, 1.0, size=(32, 9))).astype(np.float32)
    kw = dict(top_k=top_k, temperature=temperature, beta=beta)
    want = sampling.sample_tools(jax.random.key(12), logits, log_prior, **kw)
    tools, has, logp = self.variant(functools.partial(sampling.sample_tools_with_logp, **kw))(
        jax.random.key(12), logits, log_prior)
    np.testing.assert_array_equal(tools, want[0])
    np.testing.assert_array_equal(has, want[1])
    self.assertEqual(logp.dtype, jnp.float32)
    self.assertEqual(float(logp[3]), 0.0)  # no candidate: 0
    if temperature <= 0:
      np.testing.assert_array_equal(logp, np.zeros(32))  # argmax: mu(a) = 1
    else:
      self.assertTrue(np.all(np.isfinite(np.asarray(logp))) and np.all(np.asarray(logp) <= 0))

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_matches_numpy_softmax_over_top_k(self):
    # One row, N = 5, K = 3; by hand: log pi = logits - logsumexp(logits); C = {1, 3, 0} (largest logits);
    # score = log pi + 0.5 log prior on C; mu = softmax(score / 0.7) on C.
    logits = np.array([1.0, 2.5, -0.5, 2.0, 0.0], np.float32)
    prior = np.array([0.9, 0.2, 0.5, 0.6, 0.3])
    log_pi = logits.astype(np.float64) - np.log(np.sum(np.exp(logits.astype(np.float64))))
    cand = np.array([1, 3, 0])
    score = (log_pi[cand] + 0.5 * np.log(prior[cand])) / 0.7
    log_mu = score - np.max(score) - np.log(np.sum(np.exp(score - np.max(score))))
    want = dict(zip(cand.tolist(), log_mu.tolist()))
    np.testing.assert_allclose(np.exp(list(want.values())), np_fused_probs(
        logits, np.log(prior), top_k=3, temperature=0.7, beta=0.5)[cand], rtol=1e-12)
    draws = 400
    fn = self.variant(functools.partial(sampling.sample_tools_with_logp, top_k=3, temperature=0.7, beta=0.5))
    tools, has, logp = fn(jax.random.key(13), jnp.broadcast_to(logits, (draws, 5)),
                          jnp.broadcast_to(jnp.log(jnp.asarray(prior, jnp.float32)), (draws, 5)))
    self.assertTrue(np.all(has))
    got = {}
    for a, lp in zip(np.asarray(tools).tolist(), np.asarray(logp).tolist()):
      np.testing.assert_allclose(lp, want[a], rtol=1e-5, atol=1e-5)
      got[a] = lp
    self.assertEqual(set(got), {0, 1, 3})  # every candidate drawn, nothing outside C
    self.assertAlmostEqual(float(np.sum(np.exp(list(got.values()), dtype=np.float64))), 1.0, places=5)

  def test_valid_mask_and_invalid_tools_are_outside_the_support(self):
    # Tool 1 masked, tool 2 -inf: C = {0, 3} for K = 3 (only two valid); mu = softmax(log pi / T) on {0, 3}.
    logits = jnp.array([[0.3, 5.0, NEG_INF, -0.2]] * 300, jnp.float32)
    valid = jnp.array([[True, False, True, True]] * 300)
    tools, _, logp = sampling.sample_tools_with_logp(jax.random.key(14), logits, jnp.zeros((300, 4)), top_k=3,
                                                     temperature=2.0, beta=0.7, valid_mask=valid)
    z = np.array([0.3, -0.2]) / 2.0
    log_mu = z - np.log(np.sum(np.exp(z)))
    self.assertEqual(set(np.asarray(tools).tolist()), {0, 3})
    np.testing.assert_allclose(logp, np.where(np.asarray(tools) == 0, *log_mu), rtol=1e-5, atol=1e-5)

  def test_no_retrace_for_new_beta_or_temperature(self):
    f = sampling.sample_tools_with_logp
    args = (jax.random.key(0), jnp.zeros((2, 5)), jnp.zeros((2, 5)))
    f(*args, top_k=3, temperature=0.7, beta=0.0)
    before = f._cache_size()
    for beta, t in [(0.1, 0.5), (0.7, 1.0), (0.3, 0.0)]:
      f(*args, top_k=3, temperature=t, beta=beta)
    self.assertEqual(f._cache_size(), before)


class TemplateTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_invalid_tools_and_masked_templates(self):
    tau_arg = jnp.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], jnp.float32)
    mask = jnp.array([[True, False, False], [False, True, True]])
    fn = self.variant(sampling.sample_templates)
    out = fn(jax.random.key(0), tau_arg, mask, jnp.array([0, -1, 2, 0], jnp.int32))
    np.testing.assert_array_equal(out, [0, -1, -1, 0])
    out = fn(jax.random.key(1), tau_arg, mask, jnp.ones((200,), jnp.int32))
    self.assertTrue(set(np.asarray(out).tolist()) <= {1, 2})

  def test_empirical_distribution_proportional_to_tau_arg(self):
    tau_arg = jnp.array([[0.2, 1.0, 0.6, 5.0]], jnp.float32)
    mask = jnp.array([[True, True, True, False]])
    draws = 20000
    out = sampling.sample_templates(jax.random.key(2), tau_arg, mask,
                                    jnp.zeros((draws,), jnp.int32))
    counts = np.bincount(np.asarray(out), minlength=4).astype(np.float64)
    probs = np.array([0.2, 1.0, 0.6, 0.0]) / 1.8
    self.assertEqual(counts[3], 0)
    self.assertLess(chi_square(counts, probs), 20.0)


class ShardingTest(parameterized.TestCase):

  @parameterized.parameters(jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto)
  def test_sampling_sharded_equals_unsharded(self, axis_type):
    if jax.device_count() < 8:
      self.skipTest("needs 8 devices (tests/conftest.py sets XLA_FLAGS)")
    rng = np.random.default_rng(9)
    b, n, tm = 16, 24, 3
    logits = jnp.asarray(rng.normal(size=(b, n)), jnp.float32).at[3].set(-jnp.inf)
    log_prior = jnp.asarray(np.log(rng.uniform(0.1, 1, size=(b, n))), jnp.float32)
    tau_arg = jnp.asarray(rng.uniform(0.1, 1, size=(n, tm)), jnp.float32)
    tmask = jnp.asarray(rng.random((n, tm)) < 0.7).at[:, 0].set(True)
    key = jax.random.key(10)

    def step(logits, log_prior):
      k1, k2 = jax.random.split(key)
      tools, has = sampling.sample_tools(k1, logits, log_prior, top_k=5, temperature=0.7,
                                         beta=0.7)
      return tools, has, sampling.sample_templates(k2, tau_arg, tmask, tools)

    want = jax.jit(step)(logits, log_prior)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
      shard = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))
      got = jax.jit(step)(shard(logits), shard(log_prior))
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)
    self.assertEqual(int(np.asarray(got[0])[3]), -1)


if __name__ == "__main__":
  absltest.main()
