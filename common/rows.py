"""Per-row primitives shared by the grouped maths: masks, safe division, segment sums, row checks.

A batch is a flat axis of N rows (rollouts, or turn rows of rollouts), each tagged with an integer segment
id (its group, rollout or (rollout, turn) cell) and an optional boolean mask. The estimators
(`common/estimators.py`), GiGPO (`common/gigpo.py`) and PlanPO's advantages (`planpo/advantages.py`) are
written with these functions, so each of them works unchanged with the row axis sharded over a device
mesh with Auto or Explicit axes (`common/lm/sharding.py`).

Sharding. Under a mesh with Explicit axes (inside `jax.set_mesh`), a scatter or a gather whose indices
are sharded must name its output sharding; under Auto axes or no mesh, XLA chooses. `segment_sum` and
`segment_min` return replicated tables (the per-segment tables are small); `gather` keeps the sharding of
its indices, so per-row results are sharded like the rows.

The `check_*` functions run at trace time (Python values and concrete arrays only); under jit an
out-of-range id is not checked and is silently dropped by the scatter.
"""
import chex
import jax
import jax.numpy as jnp
import numpy as np


# -------------------------------------------------------------------------------------------------
# Sharding-aware scatter and gather.


def explicit_mesh() -> bool:
  """True when the ambient (abstract) mesh has at least one Explicit axis (inside `jax.set_mesh`)."""
  mesh = jax.sharding.get_abstract_mesh()
  return (not mesh.empty) and any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)


def segment_sum(data, segment_ids, num_segments):
  """Sum of `data` per segment: out[s] = sum_{i : segment_ids[i] = s} data[i].

  Args:
    data: f32[N] (or any numeric dtype) per-row values.
    segment_ids: i32[N] in [0, num_segments); out-of-range ids are dropped.
    num_segments: static Python int S.

  Returns:
    [S] array of data's dtype, 0 for an empty segment; replicated under an Explicit mesh.
  """
  out_sharding = jax.sharding.PartitionSpec() if explicit_mesh() else None
  return jax.ops.segment_sum(data, segment_ids, num_segments=num_segments,
                             out_sharding=out_sharding)


def segment_min(data, segment_ids, num_segments):
  """Minimum of `data` per segment: out[s] = min_{i : segment_ids[i] = s} data[i].

  Args:
    data: f32[N] (or any numeric dtype) per-row values.
    segment_ids: i32[N] in [0, num_segments); out-of-range ids are dropped.
    num_segments: static Python int S.

  Returns:
    [S] array of data's dtype; an empty segment holds the dtype's maximum (+inf for floats), as
    `jax.ops.segment_min`. Replicated under an Explicit mesh.
  """
  out_sharding = jax.sharding.PartitionSpec() if explicit_mesh() else None
  return jax.ops.segment_min(data, segment_ids, num_segments=num_segments,
                             out_sharding=out_sharding)


def gather(table, ids):
  """table[ids]: a per-segment table read back onto the rows.

  Args:
    table: [S] (or [S, ...]) per-segment values.
    ids: i32[N] in [0, S).

  Returns:
    [N] (or [N, ...]) values, sharded like `ids` under an Explicit mesh.
  """
  if explicit_mesh():
    return table.at[ids].get(out_sharding=jax.typeof(ids).sharding)
  return table[ids]


# -------------------------------------------------------------------------------------------------
# Masks, dtypes and safe arithmetic.


def as_valid(mask, like):
  """The row mask as booleans: None means every row of `like` is valid; a non-bool mask is `mask != 0`.

  Args:
    mask: None or [N] array of any dtype (nonzero = valid).
    like: [N] array whose shape an all-valid mask takes.

  Returns:
    bool[N] (bool of `like`'s shape when mask is None). The shape is not checked here.
  """
  if mask is None:
    return jnp.ones(jnp.shape(like), dtype=bool)
  mask = jnp.asarray(mask)
  return mask if mask.dtype == jnp.bool_ else mask != 0


def float_dtype(x):
  """The floating dtype the maths computes `x` in: x's dtype promoted with float32 (f64 stays f64)."""
  return jnp.promote_types(jnp.asarray(x).dtype, jnp.float32)


def safe_sqrt(x):
  """sqrt(x) where x > 0, else 0, with a finite gradient at 0 (the gradient there is set to 0).

  Args:
    x: float array, expected >= 0.

  Returns:
    Array of x's shape and dtype.
  """
  positive = x > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def safe_div(num, den):
  """num / den where den > 0, else 0; no NaN or inf in value or gradient (double-where).

  Args:
    num: float array.
    den: float array broadcastable with num.

  Returns:
    The broadcast array of num / den, exactly 0 where den <= 0.
  """
  positive = den > 0
  return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0)


# -------------------------------------------------------------------------------------------------
# Checks (at trace time).


def check_int(name, value, minimum=1):
  """Checks a static integer (a shape-fixing count such as num_groups).

  Raises:
    ValueError: `value` is not a Python or NumPy int (bools refused), or is below `minimum`.
  """
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name} must be a Python int >= {minimum} (static under jit: pass it with "
                     f"static_argnames), got {value!r}.")


def check_choice(name, value, choices, key):
  """Checks that `value` is one of `choices`; the message names `key` (the key of the value in its config).

  Raises:
    ValueError: unknown value (the message lists the valid ones).
  """
  if value not in choices:
    raise ValueError(f"Unknown {name} {value!r}; valid values are "
                     f"{', '.join(repr(c) for c in choices)} (config key `{key}`).")


def check_range(name, ids, upper):
  """Checks ids in [0, upper) when concrete (under jit an out-of-range id is silently dropped).

  Args:
    name: what the ids are, for the message.
    ids: int array (checked only when not a tracer).
    upper: exclusive bound.

  Raises:
    ValueError: an id outside [0, upper).
  """
  if not isinstance(ids, jax.core.Tracer):
    a = np.asarray(ids)
    if a.size and (a.min() < 0 or a.max() >= upper):
      raise ValueError(f"{name} must lie in [0, {upper}), got values in [{a.min()}, {a.max()}]. "
                       f"(Not checked under jit, where out-of-range ids are silently dropped.)")


def check_rows(values, ids, mask=None):
  """Checks a per-row layout: `values` float rank-1 arrays, `ids` int rank-1 arrays, equal shapes.

  Args:
    values: sequence of f32[R] arrays.
    ids: sequence of i32[R] arrays.
    mask: optional bool[R].

  Raises:
    AssertionError: wrong rank, dtype or shape (at trace time).
  """
  chex.assert_rank(list(values) + list(ids), 1)
  chex.assert_type(list(values), float)
  chex.assert_type(list(ids), int)
  chex.assert_equal_shape(list(values) + list(ids) + ([] if mask is None else [mask]))
