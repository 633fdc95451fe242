"""Tests for common/metrics.py: the unbiased pass@k estimator (NumPy and JAX)."""
import functools
import math
from fractions import Fraction

import chex
import jax
import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import metrics

RTOL = ATOL = 1e-5


def _ref_pass_at_k(n, c, k):
  """Exact rational 1 - C(n - c, k) / C(n, k) (math.comb is 0 when k > n - c)."""
  return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def _grid(max_n=12):
  ns, cs, ks = [], [], []
  for n in range(1, max_n + 1):
    for c in range(n + 1):
      for k in range(1, n + 1):
        ns.append(n)
        cs.append(c)
        ks.append(k)
  return np.array(ns), np.array(cs), np.array(ks)


class PassAtKTest(parameterized.TestCase):

  @pytest.mark.fast
  def test_numpy_matches_exact_binomials_on_a_grid(self):
    ns, cs, ks = _grid()
    for k in np.unique(ks):
      sel = ks == k
      got = metrics.pass_at_k(ns[sel], cs[sel], int(k))
      want = [_ref_pass_at_k(int(n), int(c), int(k)) for n, c in zip(ns[sel], cs[sel])]
      self.assertEqual(got.dtype, np.float64)
      np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

  @pytest.mark.fast
  def test_exact_values(self):
    self.assertEqual(metrics.pass_at_k(10, 0, 5), 0.0)
    self.assertEqual(metrics.pass_at_k(10, 10, 1), 1.0)
    self.assertEqual(metrics.pass_at_k(10, 6, 5), 1.0)  # n - c < k: every 5-subset has a success
    np.testing.assert_allclose(metrics.pass_at_k(10, 3, 1), 0.3, rtol=1e-15)  # pass@1 = c / n
    np.testing.assert_allclose(metrics.pass_at_k(4, 1, 2), 0.5, rtol=1e-15)  # 1 - C(3,2)/C(4,2)
    np.testing.assert_allclose(metrics.pass_at_k(8, 2, 8), 1.0)

  @pytest.mark.fast
  def test_large_n_is_stable(self):
    # C(1000, 100) ~ 6e139 would overflow float64 products of binomials; the product form does not.
    for n, c, k in ((1000, 1, 100), (1000, 37, 200), (5000, 2, 2500)):
      np.testing.assert_allclose(metrics.pass_at_k(n, c, k), _ref_pass_at_k(n, c, k), rtol=1e-10)
    np.testing.assert_allclose(metrics.pass_at_k(1000, 1, 100), 0.1, rtol=1e-12)

  @pytest.mark.fast
  def test_vectorised_with_broadcasting(self):
    got = metrics.pass_at_k(16, np.array([[0, 1], [8, 16]]), 4)
    want = [[_ref_pass_at_k(16, c, 4) for c in row] for row in ([0, 1], [8, 16])]
    chex.assert_shape(got, (2, 2))
    np.testing.assert_allclose(got, want, rtol=1e-12)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(1, 2, 5, 8)
  def test_jnp_matches_numpy(self, k):
    ns, cs, ks = _grid()
    sel = ns >= k
    fn = self.variant(metrics.pass_at_k_jnp, static_argnames="k")
    got = fn(ns[sel], cs[sel], k=k)
    chex.assert_type(got, np.float32)
    want = [_ref_pass_at_k(int(n), int(c), k) for n, c in zip(ns[sel], cs[sel])]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

  @pytest.mark.fast
  def test_jnp_invalid_entries_are_nan_under_jit(self):
    fn = jax.jit(metrics.pass_at_k_jnp, static_argnames="k")
    got = fn(np.array([4, 4, 2]), np.array([1, 5, 0]), k=3)
    np.testing.assert_allclose(got[0], _ref_pass_at_k(4, 1, 3), rtol=1e-6)
    self.assertTrue(np.isnan(got[1]))  # c > n
    self.assertTrue(np.isnan(got[2]))  # k > n

  @pytest.mark.fast
  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "k <= n"):
      metrics.pass_at_k(4, 1, 5)
    with self.assertRaisesRegex(ValueError, "c=5 > n=4"):
      metrics.pass_at_k(np.array([4, 4]), np.array([1, 5]), 2)
    with self.assertRaisesRegex(ValueError, "k must be a Python int >= 1"):
      metrics.pass_at_k(4, 1, 0)
    with self.assertRaisesRegex(ValueError, "c .* must be >= 0"):
      metrics.pass_at_k(4, -1, 1)
    with self.assertRaisesRegex(ValueError, "k <= n"):
      metrics.pass_at_k_jnp(np.array([4]), np.array([1]), 5)
    with self.assertRaisesRegex(ValueError, "whole numbers"):
      metrics.pass_at_k(4.5, 1, 1)

  @pytest.mark.fast
  def test_no_retrace_for_new_counts(self):
    @functools.partial(jax.jit, static_argnames="k")
    @chex.assert_max_traces(n=1)
    def f(n, c, k):
      return metrics.pass_at_k_jnp(n, c, k)

    for c in range(3):
      f(np.full(5, 8), np.full(5, c), k=4).block_until_ready()


if __name__ == "__main__":
  absltest.main()
