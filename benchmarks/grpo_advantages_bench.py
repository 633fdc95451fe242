"""Benchmark: GRPO advantages for 65,536 rollouts (groups of 8), jit-compiled JAX vs NumPy loops.

Run:  python -m benchmarks.grpo_advantages_bench [--quick]

Measured in the same run, on the same data (rollouts in shuffled, non-contiguous group order):
  * jax:        `common.estimators.grpo_advantages` under jax.jit, compile and warm-up excluded,
                `block_until_ready` on every call;
  * numpy_loop: a per-group NumPy loop (one mean/std per group over its members, found once with
                argsort), the way a straightforward implementation does it;
  * numpy_vec:  a vectorised NumPy version (np.bincount), printed for context so that the ratio is
                not only against a loop.
Each time is the median of several repeats. The three results are checked to agree (max |diff|).
Ratios are the point; absolute times depend on the machine.
"""
import argparse
import functools
import statistics
import time

import jax
import numpy as np

from common import estimators

EPS = 1e-6


def _make_batch(n, group_size, seed=0):
  rng = np.random.default_rng(seed)
  num_groups = n // group_size
  group_ids = rng.permutation(np.repeat(np.arange(num_groups), group_size)).astype(np.int32)
  rewards = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.random(n)).astype(np.float32)
  return rewards, group_ids, num_groups


def grpo_numpy_loop(rewards, group_ids, num_groups, eps=EPS):
  """Per-group loop: population std, constant groups and groups of one get 0."""
  out = np.zeros_like(rewards)
  order = np.argsort(group_ids, kind="stable")
  bounds = np.searchsorted(group_ids[order], np.arange(num_groups + 1))
  for g in range(num_groups):
    idx = order[bounds[g]:bounds[g + 1]]
    if idx.size == 0:
      continue
    r = rewards[idx]
    if np.all(r == r[0]):
      continue
    out[idx] = (r - r.mean()) / (r.std() + eps)
  return out


def grpo_numpy_vectorised(rewards, group_ids, num_groups, eps=EPS):
  """Vectorised NumPy (bincount) with the same conventions, shifted by the group minimum."""
  count = np.bincount(group_ids, minlength=num_groups).astype(np.float32)
  gmin = np.full(num_groups, np.inf, np.float32)
  np.minimum.at(gmin, group_ids, rewards)
  centered = rewards - gmin[group_ids]
  mean = np.bincount(group_ids, centered, minlength=num_groups) / np.maximum(count, 1)
  dev = centered - mean[group_ids].astype(np.float32)
  var = np.bincount(group_ids, dev * dev, minlength=num_groups) / np.maximum(count, 1)
  std = np.sqrt(var).astype(np.float32)
  return np.where(std[group_ids] > 0, dev / (std[group_ids] + eps), 0.0).astype(np.float32)


def _median_seconds(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def run(quick: bool = False) -> dict:
  """Runs the benchmark and returns its numbers.

  Args:
    quick: a smaller batch (8,192 rollouts) and fewer repeats, for smoke tests.

  Returns:
    dict with n_rollouts, group_size, backend, repeats, jax_ms, numpy_loop_ms, numpy_vec_ms,
    speedup_vs_loop (numpy_loop / jax), speedup_vs_vec (numpy_vec / jax) and max_abs_diff (largest
    disagreement between the three implementations).
  """
  n, group_size = (8_192, 8) if quick else (65_536, 8)
  repeats = 3 if quick else 7
  rewards, group_ids, num_groups = _make_batch(n, group_size)
  fn = jax.jit(functools.partial(estimators.grpo_advantages, num_groups=num_groups, eps=EPS))
  rewards_d, group_ids_d = jax.device_put(rewards), jax.device_put(group_ids)
  out_jax = np.asarray(fn(rewards_d, group_ids_d).block_until_ready())  # compile + warm-up
  fn(rewards_d, group_ids_d).block_until_ready()
  jax_s = _median_seconds(lambda: fn(rewards_d, group_ids_d).block_until_ready(), repeats)
  out_loop = grpo_numpy_loop(rewards, group_ids, num_groups)
  loop_s = _median_seconds(lambda: grpo_numpy_loop(rewards, group_ids, num_groups),
                           max(1, repeats // 2))
  out_vec = grpo_numpy_vectorised(rewards, group_ids, num_groups)
  vec_s = _median_seconds(lambda: grpo_numpy_vectorised(rewards, group_ids, num_groups), repeats)
  diff = float(max(np.abs(out_jax - out_loop).max(), np.abs(out_vec - out_loop).max()))
  return dict(
      n_rollouts=n, group_size=group_size, backend=jax.default_backend(), repeats=repeats,
      jax_ms=jax_s * 1e3, numpy_loop_ms=loop_s * 1e3, numpy_vec_ms=vec_s * 1e3,
      speedup_vs_loop=loop_s / jax_s, speedup_vs_vec=vec_s / jax_s, max_abs_diff=diff)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="8,192 rollouts, fewer repeats")
  result = run(quick=parser.parse_args().quick)
  print(f"GRPO advantages, {result['n_rollouts']:,} rollouts in groups of {result['group_size']} "
        f"(backend {result['backend']}, median of {result['repeats']}):")
  print(f"  jax.jit            {result['jax_ms']:9.3f} ms")
  print(f"  numpy per-group    {result['numpy_loop_ms']:9.3f} ms   "
        f"ratio {result['speedup_vs_loop']:7.1f}x")
  print(f"  numpy vectorised   {result['numpy_vec_ms']:9.3f} ms   "
        f"ratio {result['speedup_vs_vec']:7.1f}x")
  print(f"  max |difference| between implementations: {result['max_abs_diff']:.2e}")


if __name__ == "__main__":
  main()
