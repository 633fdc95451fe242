"""Tests for common/losses.py: masked means, aggregation, clipped surrogate, GSPO, KL, entropy."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import losses
from common.lm import sharding

RTOL = ATOL = 1e-5


# -------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops.


def _ref_aggregate(per_token, mask, mode, norm_constant=None):
  b, t = per_token.shape
  c = t if norm_constant is None else norm_constant
  if mode == "token_mean":
    total, count = 0.0, 0
    for i in range(b):
      for j in range(t):
        if mask[i, j]:
          total += float(per_token[i, j])
          count += 1
    return total / count if count else 0.0
  seq_values = []
  for i in range(b):
    vals = [float(per_token[i, j]) for j in range(t) if mask[i, j]]
    if not vals:
      continue
    seq_values.append(sum(vals) / len(vals) if mode == "seq_mean_token_mean" else sum(vals) / c)
  return sum(seq_values) / len(seq_values) if seq_values else 0.0


def _ref_surrogate(logp_new, logp_old, adv, mask, clip_low, clip_high, mode, norm_constant=None):
  b, t = logp_new.shape
  per_token = np.zeros((b, t))
  ratios, clipped_flags, kls = [], [], []
  for i in range(b):
    for j in range(t):
      if not mask[i, j]:
        continue
      a = adv[i] if adv.ndim == 1 else adv[i, j]
      r = np.exp(float(logp_new[i, j]) - float(logp_old[i, j]))
      unclipped, clipped = r * a, min(max(r, 1 - clip_low), 1 + clip_high) * a
      per_token[i, j] = -min(unclipped, clipped)
      ratios.append(r)
      clipped_flags.append(clipped < unclipped)
      kls.append(r - 1 - np.log(r))
  loss = _ref_aggregate(per_token, mask, mode, norm_constant)
  return loss, dict(clip_fraction=np.mean(clipped_flags), ratio_mean=np.mean(ratios),
                    ratio_max=np.max(ratios), approx_kl=np.mean(kls))


def _ref_gspo(logp_new, logp_old, adv, mask, clip_low, clip_high):
  per_seq, ratios, flags = [], [], []
  for i in range(logp_new.shape[0]):
    idx = [j for j in range(logp_new.shape[1]) if mask[i, j]]
    if not idx:
      continue
    s = np.exp(np.mean([float(logp_new[i, j]) - float(logp_old[i, j]) for j in idx]))
    unclipped, clipped = s * adv[i], min(max(s, 1 - clip_low), 1 + clip_high) * adv[i]
    per_seq.append(-min(unclipped, clipped))
    ratios.append(s)
    flags.append(clipped < unclipped)
  return np.mean(per_seq), dict(clip_fraction=np.mean(flags), ratio_mean=np.mean(ratios),
                                ratio_max=np.max(ratios))


def _ref_entropy(logits):
  out = np.zeros(logits.shape[:-1])
  for idx in np.ndindex(*logits.shape[:-1]):
    row = [float(v) for v in logits[idx] if v != -np.inf]
    if not row:
      continue
    m = max(row)
    z = sum(np.exp(v - m) for v in row)
    out[idx] = -sum((np.exp(v - m) / z) * (v - m - np.log(z)) for v in row)
  return out


def _batch(seed, b=6, t=7, spread=0.3):
  rng = np.random.default_rng(seed)
  logp_old = np.log(rng.uniform(0.05, 1.0, (b, t))).astype(np.float32)
  logp_new = (logp_old + rng.normal(0, spread, (b, t))).astype(np.float32)
  lengths = rng.integers(1, t + 1, b)
  lengths[-1] = 0  # an all-padding row
  mask = np.arange(t)[None, :] < lengths[:, None]
  adv = rng.normal(size=b).astype(np.float32)
  return logp_new, logp_old, adv, mask


def _pollute(x, mask):
  """Writes NaN and +-inf into the masked positions of a copy of x."""
  x = np.array(x, copy=True)
  bad = np.flatnonzero(~mask.reshape(-1))
  flat = x.reshape(-1)
  flat[bad[0::3]] = np.nan
  flat[bad[1::3]] = np.inf
  flat[bad[2::3]] = -np.inf
  return flat.reshape(x.shape)


def _issue_case():
  """A = [2, 2, 2, 2] (4 tokens), B = [1] (1 token), plus an all-masked row full of NaN."""
  per_token = np.array([[2., 2., 2., 2.], [1., np.nan, np.inf, -np.inf],
                        [np.nan, np.nan, np.nan, np.nan]], np.float32)
  mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]], bool)
  return per_token, mask


@pytest.mark.fast
class AggregationTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(
      ("token_mean", None, 1.8), ("seq_mean_token_mean", None, 1.5),
      ("seq_mean_token_sum", 1.0, 4.5), ("seq_mean_token_sum", None, (8 / 4 + 1 / 4) / 2))
  def test_issue_case_exact(self, mode, norm_constant, expected):
    per_token, mask = _issue_case()
    fn = self.variant(functools.partial(losses.aggregate_loss, mode=mode,
                                        norm_constant=norm_constant))
    np.testing.assert_array_equal(fn(per_token, mask), np.float32(expected))
    # Dropping the all-masked row changes nothing: it is not a sequence.
    np.testing.assert_array_equal(fn(per_token[:2], mask[:2]), np.float32(expected))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(mode=losses.AGG_MODES, seed=(0, 1))
  def test_matches_numpy_loop(self, mode, seed):
    rng = np.random.default_rng(seed)
    per_token = rng.normal(size=(5, 9)).astype(np.float32)
    mask = rng.random((5, 9)) < 0.6
    mask[2] = False
    fn = self.variant(functools.partial(losses.aggregate_loss, mode=mode, norm_constant=3.0))
    np.testing.assert_allclose(fn(per_token, mask), _ref_aggregate(per_token, mask, mode, 3.0),
                               rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*losses.AGG_MODES)
  def test_masked_nan_inf_change_neither_value_nor_gradient(self, mode):
    per_token, mask = _issue_case()
    clean = np.where(mask, per_token, 0.0).astype(np.float32)
    fn = self.variant(jax.value_and_grad(functools.partial(losses.aggregate_loss, mode=mode)))
    v_clean, g_clean = fn(clean, mask)
    v_dirty, g_dirty = fn(per_token, mask)
    np.testing.assert_array_equal(v_dirty, v_clean)
    np.testing.assert_array_equal(g_dirty, g_clean)
    np.testing.assert_array_equal(np.asarray(g_dirty)[~mask], 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_all_masked_is_zero(self):
    for mode in losses.AGG_MODES:
      fn = self.variant(functools.partial(losses.aggregate_loss, mode=mode))
      np.testing.assert_array_equal(fn(jnp.full((2, 3), jnp.nan), jnp.zeros((2, 3), bool)), 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_masked_mean(self):
    x = np.array([[1., np.nan, 3.], [np.inf, 5., 6.]], np.float32)
    mask = np.array([[1, 0, 1], [0, 1, 0]], bool)
    np.testing.assert_array_equal(self.variant(losses.masked_mean)(x, mask), np.float32(9 / 3))
    fn = self.variant(functools.partial(losses.masked_mean, axis=1))
    np.testing.assert_array_equal(fn(x, mask), np.array([2., 5.], np.float32))
    np.testing.assert_array_equal(fn(x, np.zeros_like(mask)), np.array([0., 0.], np.float32))
    grad = self.variant(jax.grad(losses.masked_mean))(x, mask)
    np.testing.assert_array_equal(grad, np.where(mask, 1 / 3, 0.0).astype(np.float32))

  def test_bad_mode_and_constant(self):
    with self.assertRaisesRegex(ValueError, "'token_mean', 'seq_mean_token_mean'"):
      losses.aggregate_loss(jnp.zeros((1, 2)), jnp.ones((1, 2), bool), mode="token-mean")
    with self.assertRaisesRegex(ValueError, "norm_constant must be > 0"):
      losses.aggregate_loss(jnp.zeros((1, 2)), jnp.ones((1, 2), bool), mode="seq_mean_token_sum",
                            norm_constant=0)
    with self.assertRaises(AssertionError):
      losses.aggregate_loss(jnp.zeros((1, 2)), jnp.ones((1, 3), bool), mode="token_mean")


class SurrogateTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(mode=losses.AGG_MODES, per_token_adv=(False, True), seed=(0,))
  @pytest.mark.fast
  def test_clipped_surrogate_matches_numpy(self, mode, per_token_adv, seed):
    logp_new, logp_old, adv, mask = _batch(seed)
    if per_token_adv:
      adv = np.random.default_rng(seed + 10).normal(size=mask.shape).astype(np.float32)
    fn = self.variant(functools.partial(losses.clipped_surrogate_loss, clip_low=0.2,
                                        clip_high=0.28, agg_mode=mode, norm_constant=4.0))
    loss, metrics = fn(logp_new, logp_old, adv, mask)
    want_loss, want_metrics = _ref_surrogate(logp_new, logp_old, adv, mask, 0.2, 0.28, mode, 4.0)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL, atol=ATOL)
    self.assertEqual(set(metrics), set(want_metrics))
    for key, value in want_metrics.items():
      np.testing.assert_allclose(metrics[key], value, rtol=RTOL, atol=ATOL, err_msg=key)
    self.assertGreater(float(metrics["clip_fraction"]), 0.0)  # the batch does exercise clipping

  @chex.variants(with_jit=True, without_jit=True)
  def test_clipped_surrogate_gradient_is_masked_policy_gradient(self):
    # token_mean: dL/dlogp_new = -r A / n_valid where the unclipped term is active, else 0.
    logp_new, logp_old, adv, mask = _batch(3)
    grad = self.variant(jax.grad(lambda lp: losses.clipped_surrogate_loss(
        lp, logp_old, adv, mask, clip_low=0.2, clip_high=0.2)[0]))(logp_new)
    want = np.zeros(mask.shape)
    n = mask.sum()
    for i, j in zip(*np.nonzero(mask)):
      r = np.exp(float(logp_new[i, j]) - float(logp_old[i, j]))
      a = float(adv[i])
      if r * a <= min(max(r, 0.8), 1.2) * a:
        want[i, j] = -r * a / n
    np.testing.assert_allclose(grad, want, rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(*losses.AGG_MODES)
  @pytest.mark.fast
  def test_clipped_surrogate_masked_nan_inf(self, mode):
    logp_new, logp_old, _, mask = _batch(4)
    adv = np.random.default_rng(0).normal(size=mask.shape).astype(np.float32)
    fn = self.variant(jax.value_and_grad(
        lambda lp, lo, a: losses.clipped_surrogate_loss(lp, lo, a, mask, agg_mode=mode),
        argnums=(0, 2), has_aux=True))
    (v_clean, m_clean), g_clean = fn(logp_new, logp_old, adv)
    (v_dirty, m_dirty), g_dirty = fn(_pollute(logp_new, mask), _pollute(logp_old, mask),
                                     _pollute(adv, mask))
    np.testing.assert_array_equal(v_dirty, v_clean)
    chex.assert_trees_all_equal(m_dirty, m_clean)
    chex.assert_trees_all_equal(g_dirty, g_clean)
    self.assertTrue(all(np.all(np.isfinite(g)) for g in g_dirty))

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_extreme_log_ratio_is_finite(self):
    logp_new = jnp.array([[0.0, -200.0]], jnp.float32)
    logp_old = jnp.array([[-150.0, 0.0]], jnp.float32)
    mask = jnp.ones((1, 2), bool)
    fn = self.variant(jax.value_and_grad(lambda lp: losses.clipped_surrogate_loss(
        lp, logp_old, jnp.array([-1.0]), mask)[0]))
    value, grad = fn(logp_new)
    self.assertTrue(np.isfinite(value))
    self.assertTrue(np.all(np.isfinite(grad)))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((3e-4, 4e-4, 0.01), (0.2, 0.2, 0.3))
  @pytest.mark.fast
  def test_gspo_matches_numpy(self, clip_low, clip_high, spread):
    logp_new, logp_old, adv, mask = _batch(5, spread=spread)
    fn = self.variant(functools.partial(losses.gspo_loss, clip_low=clip_low, clip_high=clip_high))
    loss, metrics = fn(logp_new, logp_old, adv, mask)
    want_loss, want_metrics = _ref_gspo(logp_new, logp_old, adv, mask, clip_low, clip_high)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL, atol=ATOL)
    for key, value in want_metrics.items():
      np.testing.assert_allclose(metrics[key], value, rtol=RTOL, atol=ATOL, err_msg=key)
    self.assertIn("approx_kl", metrics)

  @chex.variants(with_jit=True, without_jit=True)
  def test_gspo_defaults_and_sequence_level_clipping(self):
    # One sequence, mean log-ratio 0.01 > log(1 + 4e-4): clipped, so with A > 0 the gradient is 0;
    # with A < 0 the unclipped term is active and d/dlogp_t = -s A / |y|.
    logp_old = jnp.zeros((1, 4), jnp.float32)
    logp_new = jnp.array([[0.02, 0.0, 0.01, 5.0]], jnp.float32)
    mask = jnp.array([[True, True, True, False]])
    fn = self.variant(jax.value_and_grad(
        lambda lp, a: losses.gspo_loss(lp, logp_old, a, mask), has_aux=True))
    (loss_pos, metrics), grad_pos = fn(logp_new, jnp.array([1.0]))
    s = np.exp(0.01)
    np.testing.assert_allclose(loss_pos, -(1 + 4e-4), rtol=1e-6)
    np.testing.assert_array_equal(grad_pos, 0.0)
    np.testing.assert_array_equal(metrics["clip_fraction"], 1.0)
    np.testing.assert_allclose(metrics["ratio_mean"], s, rtol=1e-6)
    (loss_neg, _), grad_neg = fn(logp_new, jnp.array([-2.0]))
    np.testing.assert_allclose(loss_neg, 2 * s, rtol=1e-6)
    np.testing.assert_allclose(grad_neg, [[2 * s / 3] * 3 + [0.0]], rtol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_gspo_masked_nan_inf(self):
    logp_new, logp_old, adv, mask = _batch(6)
    fn = self.variant(jax.value_and_grad(
        lambda lp, lo: losses.gspo_loss(lp, lo, adv, mask, clip_low=0.1, clip_high=0.1),
        has_aux=True))
    (v_clean, m_clean), g_clean = fn(logp_new, logp_old)
    (v_dirty, m_dirty), g_dirty = fn(_pollute(logp_new, mask), _pollute(logp_old, mask))
    np.testing.assert_array_equal(v_dirty, v_clean)
    chex.assert_trees_all_equal(m_dirty, m_clean)
    np.testing.assert_array_equal(g_dirty, g_clean)
    self.assertTrue(np.all(np.isfinite(g_dirty)))

  @pytest.mark.fast
  def test_bad_hyper_parameters(self):
    lp, lo, adv, mask = _batch(0)
    with self.assertRaisesRegex(ValueError, "clip_low must be >= 0"):
      losses.clipped_surrogate_loss(lp, lo, adv, mask, clip_low=-0.1)
    with self.assertRaisesRegex(ValueError, "valid modes"):
      losses.clipped_surrogate_loss(lp, lo, adv, mask, agg_mode="sum")
    with self.assertRaises(AssertionError):  # advantages of the wrong length
      losses.clipped_surrogate_loss(lp, lo, adv[:-1], mask)
    with self.assertRaises(AssertionError):  # per-token advantages for GSPO
      losses.gspo_loss(lp, lo, np.zeros(mask.shape, np.float32), mask)

  @pytest.mark.fast
  def test_no_retrace_for_new_values_of_the_same_shape(self):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(lp, lo, adv, mask):
      return losses.clipped_surrogate_loss(lp, lo, adv, mask, agg_mode="seq_mean_token_mean")

    for seed in range(3):
      jax.block_until_ready(step(*_batch(seed)))


class KLEntropyTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_k1_k3_match_numpy(self):
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.01, 1, 50)).astype(np.float32)
    logp_ref = np.log(rng.uniform(0.01, 1, 50)).astype(np.float32)
    d = logp_ref.astype(np.float64) - logp
    np.testing.assert_allclose(self.variant(losses.kl_k1)(logp, logp_ref), -d, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(self.variant(losses.kl_k3)(logp, logp_ref), np.exp(d) - d - 1,
                               rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_k3_exact_zero_and_finite_at_log_ratio_100(self):
    k3 = self.variant(jax.value_and_grad(losses.kl_k3, argnums=(0, 1)))
    value, grads = k3(jnp.float32(-3.0), jnp.float32(-3.0))
    self.assertEqual(float(value), 0.0)
    np.testing.assert_array_equal(grads, [0.0, 0.0])
    value, grads = k3(jnp.float32(0.0), jnp.float32(100.0))  # log pi_ref - log pi = 100
    self.assertTrue(np.isfinite(value))
    self.assertTrue(np.all(np.isfinite(grads)))
    np.testing.assert_allclose(value, np.exp(20.0) - 21.0, rtol=1e-6)  # the documented clamp
    value, grads = k3(jnp.float32(100.0), jnp.float32(0.0))
    self.assertTrue(np.isfinite(value) and np.all(np.isfinite(grads)))
    np.testing.assert_allclose(value, np.exp(-20.0) + 19.0, rtol=1e-6)
    self.assertIn("[-20, 20]", losses.kl_k3.__doc__)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(estimator=losses.KL_ESTIMATORS, mode=losses.AGG_MODES)
  @pytest.mark.fast
  def test_kl_penalty_matches_numpy_and_ignores_masked_nan(self, estimator, mode):
    logp, logp_ref, _, mask = _batch(7)
    d = logp_ref.astype(np.float64) - logp
    per_token = -d if estimator == "k1" else np.exp(d) - d - 1
    fn = self.variant(jax.value_and_grad(functools.partial(
        losses.kl_penalty, estimator=estimator, agg_mode=mode)))
    value, grad = fn(logp, logp_ref, mask)
    np.testing.assert_allclose(value, _ref_aggregate(per_token, mask, mode), rtol=RTOL, atol=ATOL)
    v_dirty, g_dirty = fn(_pollute(logp, mask), _pollute(logp_ref, mask), mask)
    np.testing.assert_array_equal(v_dirty, value)
    np.testing.assert_array_equal(g_dirty, grad)

  @pytest.mark.fast
  def test_kl_penalty_bad_estimator(self):
    with self.assertRaisesRegex(ValueError, "'k1', 'k3'"):
      losses.kl_penalty(jnp.zeros((1, 1)), jnp.zeros((1, 1)), jnp.ones((1, 1), bool),
                        estimator="k2")

  @chex.variants(with_jit=True, without_jit=True)
  def test_entropy_matches_numpy_with_minus_inf(self):
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 3, (4, 5, 11)).astype(np.float32)
    logits[rng.random(logits.shape) < 0.3] = -np.inf
    logits[0, 0] = -np.inf  # no valid action at all
    logits[0, 1] = -np.inf
    logits[0, 1, 3] = 2.0  # exactly one valid action
    got = self.variant(losses.entropy_from_logits)(logits)
    chex.assert_shape(got, (4, 5))
    np.testing.assert_allclose(got, _ref_entropy(logits), rtol=RTOL, atol=ATOL)
    self.assertEqual(float(got[0, 0]), 0.0)
    self.assertEqual(float(got[0, 1]), 0.0)
    grad = self.variant(jax.grad(lambda z: jnp.sum(losses.entropy_from_logits(z))))(logits)
    self.assertTrue(np.all(np.isfinite(grad)))
    np.testing.assert_array_equal(np.asarray(grad)[np.isneginf(logits)], 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_entropy_gradient_matches_analytic(self):
    # dH/dz_v = -p_v (log p_v + H).
    z = np.array([0.3, -1.0, 2.0, -np.inf, 0.0], np.float32)
    grad = self.variant(jax.grad(losses.entropy_from_logits))(z)
    zf = z[np.isfinite(z)].astype(np.float64)
    p = np.exp(zf - zf.max()) / np.exp(zf - zf.max()).sum()
    h = -np.sum(p * np.log(p))
    want = np.zeros(5)
    want[np.isfinite(z)] = -p * (np.log(p) + h)
    np.testing.assert_allclose(grad, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(self.variant(losses.entropy_from_logits)(np.zeros(8, np.float32)),
                               np.log(8), rtol=1e-6)


class ShardedLossesTest(parameterized.TestCase):

  @parameterized.parameters("auto", "explicit")
  def test_sharded_batch_matches_unsharded(self, axis_types):
    self.assertGreaterEqual(jax.device_count(), 8, "tests/conftest.py must give 8 CPU devices")
    mesh = sharding.make_mesh((8,), ("data",), axis_types=axis_types)
    logp_new, logp_old, adv, mask = _batch(8, b=16, t=5)
    logits = np.random.default_rng(2).normal(size=(16, 5, 6)).astype(np.float32)

    def all_losses(lp, lo, a, m, z):
      out = {}
      for mode in losses.AGG_MODES:
        out[f"surrogate_{mode}"], metrics = losses.clipped_surrogate_loss(lp, lo, a, m,
                                                                          agg_mode=mode)
        out[f"kl_{mode}"] = losses.kl_penalty(lp, lo, m, agg_mode=mode)
      out["gspo"], gspo_metrics = losses.gspo_loss(lp, lo, a, m, clip_low=0.1, clip_high=0.1)
      out["entropy"] = losses.masked_mean(losses.entropy_from_logits(z), m)
      out.update(metrics)
      out.update({f"gspo_{k}": v for k, v in gspo_metrics.items()})
      return out

    fn = jax.jit(all_losses)
    grad_fn = jax.jit(jax.grad(lambda lp, *rest: sum(
        v for k, v in all_losses(lp, *rest).items() if k.startswith(("surrogate", "kl", "gspo")))))
    args = (logp_new, logp_old, adv, mask, logits)
    want, want_grad = fn(*args), grad_fn(*args)
    sharded = sharding.shard_batch(args, mesh)
    self.assertEqual(len(sharded[0].sharding.device_set), 8)
    with jax.set_mesh(mesh):
      got, got_grad = fn(*sharded), grad_fn(*sharded)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-6, atol=1e-6)
    for mode in losses.AGG_MODES:
      np.testing.assert_allclose(
          got[f"surrogate_{mode}"],
          _ref_surrogate(logp_new, logp_old, adv, mask, 0.2, 0.2, mode)[0], rtol=RTOL, atol=ATOL)


if __name__ == "__main__":
  absltest.main()
