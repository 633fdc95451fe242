"""Tests for common/stats.py: paired differences and their bootstrap interval."""

import numpy as np
from absl.testing import absltest
import pytest

from common import stats

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes


class PairedDifferenceTest(absltest.TestCase):

  def test_mean_and_interval(self):
    x = [1, 0, 1, 1, 0, 1, 1, 1]
    y = [0, 0, 1, 0, 0, 1, 0, 1]
    d = stats.paired_difference(x, y, resamples=2000)
    self.assertAlmostEqual(d.mean, 3 / 8)
    self.assertEqual(d.n, 8)
    self.assertLessEqual(d.low, d.mean)
    self.assertGreaterEqual(d.high, d.mean)
    self.assertGreaterEqual(d.low, 0.0)   # every difference is 0 or 1
    self.assertLessEqual(d.high, 1.0)

  def test_pairing_matters(self):
    """A constant shift has a zero-width interval although both samples vary a lot."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=50) * 10
    d = stats.paired_difference(y + 2.0, y)
    self.assertAlmostEqual(d.mean, 2.0)
    self.assertAlmostEqual(d.low, 2.0)
    self.assertAlmostEqual(d.high, 2.0)

  def test_single_unit_has_no_interval(self):
    d = stats.paired_difference([3.0], [1.0])
    self.assertEqual(d.mean, 2.0)
    self.assertTrue(np.isnan(d.low) and np.isnan(d.high))

  def test_one_differing_unit_falls_back_to_percentile(self):
    d = stats.paired_difference([1, 0, 0, 0, 0], [0, 0, 0, 0, 0], resamples=2000)
    self.assertTrue(np.isfinite(d.low) and np.isfinite(d.high))
    self.assertEqual(d.low, 0.0)

  def test_bad_input_is_named(self):
    with self.assertRaisesRegex(ValueError, "equal-length"):
      stats.paired_difference([1, 2], [1])
    with self.assertRaisesRegex(ValueError, "NaN"):
      stats.paired_difference([1, float("nan")], [1, 2])
    with self.assertRaisesRegex(ValueError, "confidence"):
      stats.paired_difference([1, 2], [1, 2], confidence=95)


class BinomialIntervalTest(absltest.TestCase):

  def test_exact_interval(self):
    # Clopper-Pearson: 0 of 20 at 95% is [0, 1 - 0.025 ** (1 / 20)], not a zero-width interval
    ci = stats.binomial_interval(0, 20)
    self.assertEqual((ci.mean, ci.low, ci.n), (0.0, 0.0, 20))
    self.assertAlmostEqual(ci.high, 1 - 0.025 ** (1 / 20), places=9)
    ci = stats.binomial_interval(20, 20)
    self.assertAlmostEqual(ci.low, 0.025 ** (1 / 20), places=9)
    self.assertEqual(ci.high, 1.0)
    ci = stats.binomial_interval(10, 20, confidence=0.9)
    self.assertLess(ci.low, 0.5)
    self.assertGreater(ci.high, 0.5)
    self.assertAlmostEqual(ci.low + ci.high, 1.0, places=9)   # symmetric at one half

  def test_bad_input_is_named(self):
    with self.assertRaisesRegex(ValueError, "successes"):
      stats.binomial_interval(3, 2)
    with self.assertRaisesRegex(ValueError, "trials >= 1"):
      stats.binomial_interval(0, 0)
    with self.assertRaisesRegex(ValueError, "confidence"):
      stats.binomial_interval(1, 2, confidence=95)


if __name__ == "__main__":
  absltest.main()
