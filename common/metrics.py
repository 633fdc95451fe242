"""Evaluation metrics shared by the methods: the unbiased pass@k estimator.

pass@k = 1 - C(n - c, k) / C(n, k), for n samples of which c succeed, in the numerically stable
product form C(n - c, k) / C(n, k) = prod_{i=0}^{k-1} (1 - c / (n - i)) (every factor lies in
[0, 1], so no binomial coefficient is ever formed and nothing overflows).

Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code", arXiv:2107.03374,
sec. 2.1 (eq. 1 and the numerically stable implementation of Figure 3).
"""
import jax
import jax.numpy as jnp
import numpy as np


def _check_k(k):
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
    raise ValueError(f"k must be a Python int >= 1 (static under jit), got {k!r}.")


def _check_counts(n, c, k):
  n, c = np.asarray(n), np.asarray(c)
  for name, x in (("n", n), ("c", c)):
    if x.size and not np.all(np.equal(np.mod(x, 1), 0)):
      raise ValueError(f"{name} must hold whole numbers (sample counts), got {x!r}.")
  if n.size and np.any(n < 1):
    raise ValueError(f"n (samples per task) must be >= 1, got min {n.min()}.")
  if c.size and np.any(c < 0):
    raise ValueError(f"c (successes) must be >= 0, got min {c.min()}.")
  if n.size and np.any(k > n):
    raise ValueError(f"pass@k needs k <= n: k={k} but some task has only n={n.min()} samples; "
                     f"lower k or draw more samples.")
  cb, nb = np.broadcast_arrays(c, n)
  if cb.size and np.any(cb > nb):
    bad = np.argwhere(cb > nb)[0]
    raise ValueError(f"c (successes) must be <= n (samples); at index {tuple(bad)} "
                     f"c={cb[tuple(bad)]} > n={nb[tuple(bad)]}.")


def pass_at_k(n, c, k):
  """Unbiased pass@k estimate, NumPy, vectorised over arrays of n and c.

  pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i=0}^{k-1} (1 - c / (n - i)), and exactly 1 when
  n - c < k (every k-subset contains a success). Average the result over tasks for the benchmark
  score.
  Source: Chen et al. 2021, arXiv:2107.03374, sec. 2.1, eq. 1.

  Args:
    n: int or int[...] samples drawn per task (>= 1).
    c: int or int[...] successes among them (0 <= c <= n); broadcast against n.
    k: Python int, 1 <= k <= n.

  Returns:
    float64[...] (a Python-compatible numpy float for scalar inputs) in [0, 1].

  Raises:
    ValueError: k > n, c > n, c < 0, n < 1, k < 1 or non-integer counts.
  """
  _check_k(k)
  _check_counts(n, c, k)
  n = np.asarray(n, dtype=np.float64)
  c = np.asarray(c, dtype=np.float64)
  i = np.arange(k, dtype=np.float64)
  terms = 1.0 - c[..., None] / (n[..., None] - i)
  result = np.where(n - c < k, 1.0, 1.0 - np.prod(np.clip(terms, 0.0, 1.0), axis=-1))
  return result[()] if result.ndim == 0 else result


def pass_at_k_jnp(n, c, k):
  """Unbiased pass@k estimate in JAX, jit-compatible (k static), vectorised over n and c.

  Same formula as `pass_at_k`: 1 - prod_{i=0}^{k-1} (1 - c / (n - i)), exactly 1 when n - c < k.
  Source: Chen et al. 2021, arXiv:2107.03374, sec. 2.1, eq. 1.
  Use as `jax.jit(pass_at_k_jnp, static_argnames='k')`.

  Args:
    n: int[...] or f32[...] samples per task.
    c: int[...] or f32[...] successes per task; broadcast against n.
    k: static Python int >= 1.

  Returns:
    f32[...] in [0, 1]; NaN under jit for invalid entries (k > n, c > n, c < 0), which cannot raise
    there.

  Raises:
    ValueError: k not an int >= 1; when n and c are concrete (outside jit), the same checks as
      `pass_at_k`.
  """
  _check_k(k)
  if not isinstance(n, jax.core.Tracer) and not isinstance(c, jax.core.Tracer):
    _check_counts(n, c, k)
  n = jnp.asarray(n, dtype=jnp.float32)
  c = jnp.asarray(c, dtype=jnp.float32)
  i = jnp.arange(k, dtype=jnp.float32)
  den = n[..., None] - i
  terms = 1.0 - c[..., None] / jnp.where(den > 0, den, 1.0)
  result = jnp.where(n - c < k, 1.0, 1.0 - jnp.prod(jnp.clip(terms, 0.0, 1.0), axis=-1))
  invalid = (k > n) | (c > n) | (c < 0)
  return jnp.where(invalid, jnp.nan, result)
