"""Paired comparisons of two runs evaluated on the same units (seeds x tasks): mean difference and interval.

  d = paired_difference(x_run, x_reference, confidence=0.95, resamples=10_000, method="BCa", seed=0)
  d.mean, d.low, d.high, d.n

The interval is scipy.stats.bootstrap's (Efron & Tibshirani 1993; BCa by default) of the mean of the
per-unit differences x_run - x_reference: the units are resampled with replacement, and each unit keeps
its pairing. When every difference is equal (e.g. both runs succeed on every task) the interval is that
single value (scipy's BCa is undefined there).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats as sp_stats


class PairedDifference(NamedTuple):
  """Mean of the paired differences and its bootstrap interval (floats, the metric's units)."""
  mean: float
  low: float
  high: float
  n: int


def finite_or_none(x) -> float | None:
  """x as a float, or None where it is None, NaN or infinite: an interval bound as written to a results JSON
  (one seed or one task has no interval, and strict JSON has no NaN)."""
  return float(x) if x is not None and np.isfinite(float(x)) else None


def binomial_interval(successes: int, trials: int, *, confidence: float = 0.95) -> PairedDifference:
  """The success rate successes / trials with its exact (Clopper-Pearson) interval, scipy.stats.binomtest's.

  For independent 0/1 outcomes (one sample per instance, e.g. a gate's pass@1 with one rollout each), where a
  bootstrap over instances gives the zero-width interval [0, 0] when none passed; the exact one does not
  (0 of 20 at 95%: [0, 0.168]).

  Returns:
    PairedDifference(rate, low, high, trials), fractions in [0, 1].
  Raises:
    ValueError: trials < 1, successes outside [0, trials], or confidence outside (0, 1).
  """
  if trials < 1 or not 0 <= successes <= trials:
    raise ValueError(f"binomial_interval: {successes} successes of {trials} trials (need 0 <= successes <= trials, "
                     "trials >= 1)")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  ci = sp_stats.binomtest(int(successes), int(trials)).proportion_ci(confidence_level=confidence, method="exact")
  return PairedDifference(successes / trials, float(ci.low), float(ci.high), int(trials))


def paired_difference(x: Sequence[float], y: Sequence[float], *, confidence: float = 0.95,
                      resamples: int = 10_000, method: str = "BCa", seed: int = 0) -> PairedDifference:
  """Mean of x - y over paired units with a bootstrap confidence interval.

  Args:
    x, y: f64[n] the metric of the two runs on the same n units, in the same order (n >= 1).
    confidence: the interval's level in (0, 1).
    resamples: bootstrap resamples.
    method: scipy.stats.bootstrap method: 'BCa', 'percentile' or 'basic'.
    seed: the resampling seed (numpy Generator).

  Returns:
    PairedDifference(mean, low, high, n). With n == 1 the interval is (nan, nan).

  Raises:
    ValueError: x and y differ in length, are empty, or hold NaN; confidence outside (0, 1).
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1 or x.size == 0:
    raise ValueError(f"paired_difference needs two equal-length non-empty 1-D samples, got {x.shape} and {y.shape}")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  d = x - y
  if not np.all(np.isfinite(d)):
    raise ValueError("paired_difference: the samples hold NaN or inf")
  m = float(np.mean(d))
  if d.size == 1:
    return PairedDifference(m, float("nan"), float("nan"), 1)
  if np.all(d == d[0]):
    return PairedDifference(m, m, m, int(d.size))
  with warnings.catch_warnings():   # a degenerate BCa is handled below
    warnings.simplefilter("ignore", RuntimeWarning)
    warnings.simplefilter("ignore", getattr(sp_stats, "DegenerateDataWarning", RuntimeWarning))
    res = sp_stats.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=int(resamples),
                             method=method, rng=np.random.default_rng(seed))
  lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
  if not (np.isfinite(lo) and np.isfinite(hi)):   # BCa degenerate (e.g. one unit differs): percentile
    res = sp_stats.bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=int(resamples),
                             method="percentile", rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
  return PairedDifference(m, lo, hi, int(d.size))


def clustered_difference(x: Sequence[float], y: Sequence[float], clusters: Sequence, *,
                         confidence: float = 0.95, resamples: int = 10_000, method: str = "BCa",
                         seed: int = 0) -> PairedDifference:
  """`paired_difference` with the units grouped into clusters: each cluster's mean difference is one unit.

  The two-level design of a seeds x tasks table: resample tasks (the clusters), averaging each task's seeds
  first, so a task counts once however many seeds ran it, and a row that does not depend on the seed (a
  training-free baseline) gets the interval of its tasks, not one sqrt(seeds) too narrow. Seeds enter only
  through each task's mean (the design's inner level is averaged, not resampled: a conservative-enough choice
  with 3-5 seeds; Davison & Hinkley 1997, sec. 3.8).

  Args:
    x, y: f64[n] the metric of the two runs on the same units, paired in order.
    clusters: n hashable cluster ids (e.g. task ids); a cluster's units may come from any number of seeds.
    confidence, resamples, method, seed: as in `paired_difference`.
  Returns:
    PairedDifference(mean over clusters of the cluster means, low, high, n = number of clusters). With equal
    seeds per task the mean equals the mean over units.
  Raises:
    ValueError: x, y and clusters differ in length or are empty; NaN in the samples.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if len(clusters) != x.size or x.shape != y.shape or x.size == 0:
    raise ValueError(f"clustered_difference needs x, y and clusters of one non-zero length, got {x.size}, "
                     f"{y.size} and {len(clusters)}")
  order: dict = {}
  ids = np.array([order.setdefault(c, len(order)) for c in clusters])
  counts = np.bincount(ids)
  means = np.bincount(ids, weights=x - y) / counts
  return paired_difference(means, np.zeros_like(means), confidence=confidence, resamples=resamples,
                           method=method, seed=seed)
