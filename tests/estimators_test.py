"""Tests for common/estimators.py: GRPO, Dr.GRPO and RLOO advantages, group statistics, sharding."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import estimators
from common.lm import sharding

RTOL = ATOL = 1e-5


# -------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops.


def _ref_stats(rewards, group_ids, mask, num_groups, ddof):
  mean = np.zeros(num_groups)
  std = np.zeros(num_groups)
  count = np.zeros(num_groups)
  for g in range(num_groups):
    vals = [float(rewards[i]) for i in range(len(rewards)) if group_ids[i] == g and mask[i]]
    count[g] = len(vals)
    if vals:
      mean[g] = sum(vals) / len(vals)
    if len(vals) > ddof:
      std[g] = np.sqrt(sum((v - mean[g]) ** 2 for v in vals) / (len(vals) - ddof))
  return mean, std, count


def _ref_advantages(estimator, rewards, group_ids, mask, num_groups, eps=1e-6, ddof=0):
  mean, std, count = _ref_stats(rewards, group_ids, mask, num_groups, ddof)
  out = np.zeros(len(rewards))
  for i in range(len(rewards)):
    if not mask[i]:
      continue
    g = group_ids[i]
    members = [j for j in range(len(rewards)) if group_ids[j] == g and mask[j]]
    if len(set(float(rewards[j]) for j in members)) == 1:
      continue  # constant group (or group of one): exactly 0
    if estimator == "grpo":
      out[i] = (rewards[i] - mean[g]) / (std[g] + eps)
    elif estimator == "drgrpo":
      out[i] = rewards[i] - mean[g]
    elif estimator == "rloo":
      others = [float(rewards[j]) for j in members if j != i]
      out[i] = rewards[i] - sum(others) / len(others)
  return out


def _random_batch(seed, n, num_groups, masked_fraction):
  rng = np.random.default_rng(seed)
  rewards = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.random(n)).astype(np.float32)
  group_ids = rng.integers(0, num_groups, n).astype(np.int32)
  mask = rng.random(n) >= masked_fraction
  return rewards, group_ids, mask


def _estimator_fn(name):
  return {"grpo": estimators.grpo_advantages, "drgrpo": estimators.drgrpo_advantages,
          "rloo": estimators.rloo_advantages}[name]


class AdvantagesTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(
      estimator=("grpo", "drgrpo", "rloo"), masked_fraction=(0.0, 0.3), seed=(0,))
  @pytest.mark.fast
  def test_matches_numpy_loop(self, estimator, masked_fraction, seed):
    # Non-contiguous ids, unequal group sizes, singleton and empty groups (G=13 for N=40).
    rewards, group_ids, mask = _random_batch(seed, 40, 13, masked_fraction)
    fn = self.variant(functools.partial(_estimator_fn(estimator), num_groups=13))
    got = fn(jnp.asarray(rewards), jnp.asarray(group_ids), mask=jnp.asarray(mask))
    want = _ref_advantages(estimator, rewards, group_ids, mask, 13)
    chex.assert_type(got, jnp.float32)
    chex.assert_shape(got, (40,))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0, 1)
  @pytest.mark.fast
  def test_grpo_ddof_and_eps_match_numpy(self, ddof):
    rewards, group_ids, mask = _random_batch(3, 50, 7, 0.2)
    fn = self.variant(functools.partial(estimators.grpo_advantages, num_groups=7, ddof=ddof,
                                        eps=1e-3))
    got = fn(rewards, group_ids, mask=mask)
    want = _ref_advantages("grpo", rewards, group_ids, mask, 7, eps=1e-3, ddof=ddof)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0, 1)
  @pytest.mark.fast
  def test_group_stats_match_numpy(self, ddof):
    rewards, group_ids, mask = _random_batch(4, 60, 9, 0.25)
    fn = self.variant(functools.partial(estimators.group_stats, num_groups=9, ddof=ddof))
    mean, std, count = fn(rewards, group_ids, mask=mask)
    want_mean, want_std, want_count = _ref_stats(rewards, group_ids, mask, 9, ddof)
    np.testing.assert_allclose(mean, want_mean, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(std, want_std, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(count, want_count)

  # --- Cases that must hold (issue 2), exact values. ---

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(estimator=("grpo", "drgrpo", "rloo"), ddof=(0, 1))
  @pytest.mark.fast
  def test_constant_group_is_exactly_zero(self, estimator, ddof):
    fn = self.variant(functools.partial(estimators.compute_advantages, estimator, num_groups=3,
                                        ddof=ddof))
    rewards = jnp.array([1., 1., 1., 1., 0.1, 0.1, 0.1, 0.7], jnp.float32)
    group_ids = jnp.array([0, 0, 0, 0, 1, 1, 1, 2], jnp.int32)
    got = fn(rewards, group_ids)
    np.testing.assert_array_equal(got, np.zeros(8, np.float32))
    self.assertFalse(np.any(np.isnan(got)))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(estimator=("grpo", "drgrpo", "rloo"), ddof=(0, 1), eps=(0.0,))
  @pytest.mark.fast
  def test_group_of_one_is_zero_never_nan(self, estimator, ddof, eps):
    fn = self.variant(functools.partial(estimators.compute_advantages, estimator, num_groups=2,
                                        ddof=ddof, eps=eps))
    got = fn(jnp.array([0.3, 0.0, 1.0], jnp.float32), jnp.array([0, 1, 1], jnp.int32))
    self.assertEqual(float(got[0]), 0.0)
    self.assertTrue(np.all(np.isfinite(got)))

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_rewards_0_1_population_vs_sample_std(self):
    rewards = jnp.array([0., 1.], jnp.float32)
    group_ids = jnp.array([0, 0], jnp.int32)
    pop = self.variant(functools.partial(estimators.grpo_advantages, num_groups=1, eps=0.0))
    np.testing.assert_array_equal(pop(rewards, group_ids), np.array([-1., 1.], np.float32))
    sample = self.variant(functools.partial(estimators.grpo_advantages, num_groups=1, eps=0.0,
                                            ddof=1))
    np.testing.assert_allclose(sample(rewards, group_ids), [-0.70710678, 0.70710678], rtol=1e-6)
    # With the default eps = 1e-6 and default ddof (population), +-1 up to eps.
    default = self.variant(functools.partial(estimators.grpo_advantages, num_groups=1))
    np.testing.assert_allclose(default(rewards, group_ids), [-1., 1.], rtol=RTOL, atol=ATOL)

  @pytest.mark.fast
  def test_population_std_is_the_documented_default(self):
    import inspect
    for fn in (estimators.grpo_advantages, estimators.group_stats, estimators.compute_advantages):
      self.assertEqual(inspect.signature(fn).parameters["ddof"].default, 0)
    self.assertIn("population std (ddof=0)", estimators.grpo_advantages.__doc__)
    self.assertIn("advantage.ddof", estimators.grpo_advantages.__doc__)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_masked_rollout_excluded_from_group_stats(self):
    rewards = jnp.array([1., 1., 0., 0.], jnp.float32)
    group_ids = jnp.zeros(4, jnp.int32)
    mask = jnp.array([True, False, True, True])
    stats = self.variant(functools.partial(estimators.group_stats, num_groups=1))
    mean, std, count = stats(rewards, group_ids, mask=mask)
    np.testing.assert_array_equal(count, [3.])
    np.testing.assert_allclose(mean, [1 / 3], rtol=1e-6)
    np.testing.assert_allclose(std, [np.sqrt(2 / 9)], rtol=1e-6)
    adv = self.variant(functools.partial(estimators.grpo_advantages, num_groups=1, eps=0.0))
    got = adv(rewards, group_ids, mask=mask)
    s = np.sqrt(2 / 9)
    np.testing.assert_allclose(got, [(2 / 3) / s, 0., (-1 / 3) / s, (-1 / 3) / s], rtol=1e-6)
    self.assertEqual(float(got[1]), 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("grpo", "drgrpo", "rloo")
  def test_nan_inf_in_masked_rewards_change_neither_value_nor_gradient(self, estimator):
    rewards, group_ids, mask = _random_batch(7, 24, 5, 0.3)
    weights = jnp.asarray(np.random.default_rng(1).normal(size=24), jnp.float32)
    dirty = rewards.copy()
    masked_idx = np.flatnonzero(~mask)
    dirty[masked_idx[0::2]] = np.nan
    dirty[masked_idx[1::2]] = np.inf
    clean = np.where(mask, rewards, 0.0).astype(np.float32)

    def objective(r):
      adv = estimators.compute_advantages(estimator, r, group_ids, num_groups=5, mask=mask)
      return jnp.sum(adv * weights), adv

    fn = self.variant(jax.value_and_grad(objective, has_aux=True))
    (v_clean, a_clean), g_clean = fn(jnp.asarray(clean))
    (v_dirty, a_dirty), g_dirty = fn(jnp.asarray(dirty))
    np.testing.assert_array_equal(a_dirty, a_clean)
    np.testing.assert_array_equal(v_dirty, v_clean)
    np.testing.assert_array_equal(g_dirty, g_clean)
    self.assertTrue(np.all(np.isfinite(g_dirty)))
    np.testing.assert_array_equal(np.asarray(g_dirty)[masked_idx], 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_gradient_matches_finite_differences(self):
    rewards, group_ids, mask = _random_batch(9, 12, 3, 0.0)
    rewards = rewards + np.linspace(0, 0.3, 12, dtype=np.float32)  # no constant groups
    weights = np.random.default_rng(2).normal(size=12)

    def objective64(r):
      return float(np.sum(_ref_advantages("grpo", r, group_ids, mask, 3, eps=1e-3) * weights))

    grad = self.variant(jax.grad(lambda r: jnp.sum(estimators.grpo_advantages(
        r, group_ids, num_groups=3, mask=mask, eps=1e-3) * weights)))(jnp.asarray(rewards))
    r64 = rewards.astype(np.float64)
    fd = np.array([(objective64(r64 + h) - objective64(r64 - h)) / 2e-6
                   for h in np.eye(12) * 1e-6])
    np.testing.assert_allclose(grad, fd, rtol=1e-3, atol=1e-3)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_dispatch_matches_direct_calls(self):
    rewards, group_ids, mask = _random_batch(5, 30, 6, 0.2)
    for name in estimators.ESTIMATORS:
      got = self.variant(functools.partial(estimators.compute_advantages, name, num_groups=6))(
          rewards, group_ids, mask=mask)
      want = _estimator_fn(name)(rewards, group_ids, num_groups=6, mask=mask)
      np.testing.assert_array_equal(got, want)

  @pytest.mark.fast
  def test_bad_inputs_raise_clear_errors(self):
    r = jnp.zeros(4, jnp.float32)
    g = jnp.zeros(4, jnp.int32)
    with self.assertRaisesRegex(ValueError, "'grpo', 'drgrpo', 'rloo'"):
      estimators.compute_advantages("gpro", r, g, num_groups=1)
    with self.assertRaisesRegex(ValueError, r"group_ids must lie in \[0, num_groups\)"):
      estimators.grpo_advantages(r, jnp.array([0, 1, 2, 3], jnp.int32), num_groups=3)
    with self.assertRaisesRegex(ValueError, "num_groups must be a positive Python int"):
      estimators.grpo_advantages(r, g, num_groups=0)
    with self.assertRaisesRegex(ValueError, "ddof"):
      estimators.grpo_advantages(r, g, num_groups=1, ddof=-1)
    with self.assertRaisesRegex(ValueError, "eps"):
      estimators.grpo_advantages(r, g, num_groups=1, eps=-1.0)
    with self.assertRaises(AssertionError):  # rank
      estimators.grpo_advantages(jnp.zeros((2, 2)), g, num_groups=1)
    with self.assertRaises(AssertionError):  # integer rewards
      estimators.grpo_advantages(g, g, num_groups=1)
    with self.assertRaises(AssertionError):  # float group ids
      estimators.grpo_advantages(r, r, num_groups=1)
    with self.assertRaises(AssertionError):  # mask shape
      estimators.grpo_advantages(r, g, num_groups=1, mask=jnp.ones(3, bool))

  @pytest.mark.fast
  def test_no_retrace_for_new_values_of_the_same_shape(self):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(rewards, group_ids, mask):
      return estimators.grpo_advantages(rewards, group_ids, num_groups=8, mask=mask)

    for seed in range(3):
      rewards, group_ids, mask = _random_batch(seed, 32, 8, 0.2)
      step(rewards, group_ids, mask).block_until_ready()


@pytest.mark.fast
class ShardedAdvantagesTest(parameterized.TestCase):

  @parameterized.parameters("auto", "explicit")
  def test_sharded_batch_matches_unsharded(self, axis_types):
    self.assertGreaterEqual(jax.device_count(), 8, "tests/conftest.py must give 8 CPU devices")
    mesh = sharding.make_mesh((8,), ("data",), axis_types=axis_types)
    rewards, group_ids, mask = _random_batch(11, 64, 10, 0.2)

    @jax.jit
    def fn(r, g, m):
      out = {name: estimators.compute_advantages(name, r, g, num_groups=10, mask=m)
             for name in estimators.ESTIMATORS}
      out["stats"] = estimators.group_stats(r, g, num_groups=10, mask=m, ddof=1)
      return out

    want = fn(rewards, group_ids, mask)
    batch = sharding.shard_batch({"r": rewards, "g": group_ids, "m": mask}, mesh)
    self.assertEqual(len(batch["r"].sharding.device_set), 8)
    with jax.set_mesh(mesh):
      got = fn(batch["r"], batch["g"], batch["m"])
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)
    for name in estimators.ESTIMATORS:
      np.testing.assert_allclose(got[name], _ref_advantages(name, rewards, group_ids, mask, 10),
                                 rtol=RTOL, atol=ATOL)

  def test_shard_batch_names_the_bad_leaf(self):
    mesh = sharding.make_mesh((8,), ("data",))
    with self.assertRaisesRegex(ValueError, r"\['rewards'\].*size 12.*8"):
      sharding.shard_batch({"ids": np.zeros(16, np.int32), "rewards": np.zeros(12)}, mesh)
    step = sharding.shard_batch({"step": np.float32(1.0)}, mesh)["step"]   # scalars are replicated
    self.assertEqual(tuple(step.sharding.spec), ())

  def test_make_mesh_fills_none_and_sets_axis_types(self):
    mesh = sharding.make_mesh()
    self.assertEqual(dict(mesh.shape), {"data": jax.device_count(), "fsdp": 1, "tensor": 1})
    self.assertEqual(mesh.axis_types, (jax.sharding.AxisType.Auto,) * 3)
    mesh2 = sharding.make_mesh((None, 2), ("data", "model"), axis_types="explicit")
    self.assertEqual(dict(mesh2.shape), {"data": jax.device_count() // 2, "model": 2})
    self.assertEqual(mesh2.axis_types, (jax.sharding.AxisType.Explicit,) * 2)
    spec = sharding.batch_sharding(mesh2, ndim=3).spec   # rows over the 'batch' rule's axes the mesh has
    self.assertEqual(tuple(spec), ("data", None, None))
    with self.assertRaisesRegex(ValueError, "axis type"):
      sharding.make_mesh(axis_types="manual-ish")
    with self.assertRaisesRegex(ValueError, "needs 1024 devices"):
      sharding.make_mesh((1024,), ("data",))


if __name__ == "__main__":
  absltest.main()
