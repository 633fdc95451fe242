"""Tests for phgpo/metrics.py: exact values, brute-force references, batched == host."""

import functools
import itertools
import math

import chex
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest

from common import metrics as common_metrics
from phgpo import metrics


def brute_lcs(a, b):
  """Longest common subsequence by enumerating subsequences of the shorter sequence."""
  short, long_ = (a, b) if len(a) <= len(b) else (b, a)
  for r in range(len(short), 0, -1):
    for idx in itertools.combinations(range(len(short)), r):
      sub = [short[i] for i in idx]
      it = iter(long_)
      if all(any(x == y for y in it) for x in sub):
        return r
  return 0


def pad(seqs, width):
  out = np.full((len(seqs), width), -7, np.int32)
  for i, s in enumerate(seqs):
    out[i, :len(s)] = s
  return out, np.array([len(s) for s in seqs], np.int32)


@pytest.mark.fast
class HostMetricsTest(parameterized.TestCase):

  def test_match_ratio_exact_values(self):
    self.assertEqual(metrics.match_ratio(["a", "b", "c"], ["a", "x", "c", "d"]), 0.5)
    self.assertEqual(metrics.match_ratio([1, 2, 3, 4], [1, 2, 3, 4]), 1.0)
    # Horizon cuts the gold: 2 of the first 2 positions.
    self.assertEqual(metrics.match_ratio([1, 2, 9, 9], [1, 2, 3, 4], horizon=2), 1.0)
    # A short prediction: missing positions count as misses.
    self.assertEqual(metrics.match_ratio([1], [1, 2, 3, 4]), 0.25)
    # Extra predicted calls beyond the gold are ignored (the authors' zip with gold[:horizon]).
    self.assertEqual(metrics.match_ratio([1, 2, 5, 6], [1, 2]), 1.0)
    # Position-wise, not order-aware: a shifted sequence scores 0.
    self.assertEqual(metrics.match_ratio([0, 1, 2, 3], [1, 2, 3]), 0.0)
    self.assertEqual(metrics.match_ratio([], []), 0.0)
    self.assertEqual(metrics.match_ratio([1], []), 0.0)
    with self.assertRaisesRegex(ValueError, "horizon"):
      metrics.match_ratio([1], [1], horizon=0)

  def test_authors_formula(self):
    # prefix_match_ratio = matches over zip(actions, gt[:H]) / max(1, min(H, len(gt))), with a
    # rollout of exactly H = min(max_steps, len(gt)) actions.
    rng = np.random.default_rng(0)
    for _ in range(200):
      gold = rng.integers(0, 4, size=rng.integers(0, 30)).tolist()
      h = min(20, len(gold))
      actions = rng.integers(0, 4, size=h).tolist()
      authors = sum(a == g for a, g in zip(actions, gold[:h])) / max(1, min(h, len(gold)))
      self.assertAlmostEqual(metrics.match_ratio(actions, gold, horizon=20), authors)

  def test_exact_match_and_lcs(self):
    self.assertTrue(metrics.exact_match(["a", "b"], ("a", "b")))
    self.assertFalse(metrics.exact_match(["a", "b"], ["a", "b", "c"]))
    self.assertTrue(metrics.exact_match([], []))
    self.assertEqual(metrics.lcs_score([0, 1, 2, 3], [1, 2, 3]), 0.75)
    self.assertEqual(metrics.lcs_score([], []), 1.0)
    self.assertEqual(metrics.lcs_score([1], []), 0.0)
    self.assertEqual(metrics.lcs_score([1, 2, 3], [3, 2, 1]), 1 / 3)
    rng = np.random.default_rng(1)
    for _ in range(150):
      a = rng.integers(0, 3, size=rng.integers(0, 8)).tolist()
      b = rng.integers(0, 3, size=rng.integers(0, 8)).tolist()
      self.assertEqual(metrics.lcs_length(a, b), brute_lcs(a, b))

  def test_success_threshold(self):
    self.assertTrue(metrics.success(0.7))
    self.assertFalse(metrics.success(0.69999))
    self.assertTrue(metrics.success(0.5, threshold=0.5))
    np.testing.assert_array_equal(metrics.success(np.array([0.6, 0.7, 1.0])), [False, True, True])

  def test_pass_at_k(self):
    for n, c, k in [(5, 0, 1), (5, 5, 3), (10, 3, 2), (10, 1, 10), (7, 2, 3), (20, 4, 5)]:
      want = 1.0 - math.comb(n - c, k) / math.comb(n, k)
      self.assertAlmostEqual(common_metrics.pass_at_k(n, c, k), want, places=12)
    np.testing.assert_allclose(common_metrics.pass_at_k([5, 5], [1, 2], 1), [0.2, 0.4])
    with self.assertRaisesRegex(ValueError, "pass@k"):
      common_metrics.pass_at_k(3, 1, 4)

  def test_summarize(self):
    preds = [[1, 2, 3], [1, 9], []]
    golds = [[1, 2, 3], [1, 2, 3, 4], [5]]
    s = metrics.summarize(preds, golds, horizon=20)
    self.assertEqual(s["count"], 3)
    self.assertAlmostEqual(s["match_ratio"], (1.0 + 0.25 + 0.0) / 3)
    self.assertAlmostEqual(s["exact_match"], 1 / 3)
    self.assertAlmostEqual(s["lcs"], (1.0 + 0.25 + 0.0) / 3)
    self.assertAlmostEqual(s["success"], 1 / 3)
    with self.assertRaisesRegex(ValueError, "predictions"):
      metrics.summarize([[1]], [])


class BatchMetricsTest(parameterized.TestCase):

  def _random(self, rng, b=40, h=9, g=11):
    preds = [rng.integers(0, 3, size=rng.integers(0, h + 1)).tolist() for _ in range(b)]
    golds = [rng.integers(0, 3, size=rng.integers(0, g + 1)).tolist() for _ in range(b)]
    preds[0], golds[0] = [1, 2], [1, 2]  # make sure an exact match is present
    return preds, golds, pad(preds, h), pad(golds, g)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(20, 4)
  def test_batched_equal_host(self, horizon):
    preds, golds, (p, pl), (g, gl) = self._random(np.random.default_rng(horizon))
    mr = self.variant(functools.partial(metrics.match_ratio_batch, horizon=horizon))(p, pl, g, gl)
    np.testing.assert_allclose(mr, [metrics.match_ratio(a, b, horizon=horizon)
                                    for a, b in zip(preds, golds)], rtol=1e-5, atol=1e-5)
    em = self.variant(metrics.exact_match_batch)(p, pl, g, gl)
    np.testing.assert_array_equal(em, [metrics.exact_match(a, b) for a, b in zip(preds, golds)])
    lcs = self.variant(metrics.lcs_length_batch)(p, pl, g, gl)
    np.testing.assert_array_equal(lcs, [metrics.lcs_length(a, b) for a, b in zip(preds, golds)])
    ls = self.variant(metrics.lcs_score_batch)(p, pl, g, gl)
    np.testing.assert_allclose(ls, [metrics.lcs_score(a, b) for a, b in zip(preds, golds)],
                               rtol=1e-5, atol=1e-5)

  def test_padding_values_never_match(self):
    # Pads hold the same value (-7) in pred and gold: they must not count.
    (p, pl), (g, gl) = pad([[1], []], 4), pad([[1, 2], []], 4)
    np.testing.assert_allclose(metrics.match_ratio_batch(p, pl, g, gl), [0.5, 0.0])
    np.testing.assert_array_equal(metrics.exact_match_batch(p, pl, g, gl), [False, True])
    np.testing.assert_allclose(metrics.lcs_score_batch(p, pl, g, gl), [0.5, 1.0])

  def test_summarize_batch_equals_host_and_row_mask(self):
    preds, golds, (p, pl), (g, gl) = self._random(np.random.default_rng(7), b=12)
    got = metrics.summarize_batch(p, pl, g, gl, horizon=20)
    want = metrics.summarize(preds, golds, horizon=20)
    for k in ("match_ratio", "exact_match", "lcs", "success"):
      self.assertAlmostEqual(float(got[k]), want[k], places=5)
    row_mask = np.arange(12) < 5
    got = metrics.summarize_batch(p, pl, g, gl, horizon=20, row_mask=jnp.asarray(row_mask))
    want = metrics.summarize(preds[:5], golds[:5], horizon=20)
    for k in ("match_ratio", "exact_match", "lcs", "success"):
      self.assertAlmostEqual(float(got[k]), want[k], places=5)


if __name__ == "__main__":
  absltest.main()
