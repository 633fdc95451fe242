"""Edges of tool sequences as flat table ids, and replicated-table access under sharding.

A trajectory's calls a_0, a_1, ... traverse the edges (START, a_0), (a_0, a_1), ... of the tool graph; the
pheromone tables (`phgpo.pheromone`) and the memory bank (`phgpo.memory_bank`) index an edge (i, j) of an
[R, K] table by its flat id i * K + j. The tables are small and replicated; the batch axis B of the
trajectory inputs may be sharded, so the few B*H ids are gathered to every device before a scatter
(`replicated`) and rows are read for sharded indices with `take_rows`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def replicated(x: jax.Array) -> jax.Array:
  """Gathers an array that is explicitly sharded (Explicit mesh axes) onto every device.

  A no-op without a mesh, under Auto axes (the compiler then inserts the gather itself), and
  for unsharded arrays. Used on the small B*H index/amount arrays before a scatter into a
  replicated table: under Explicit axes a scatter with sharded indices is rejected.
  """
  sharding = jax.typeof(x).sharding
  spec = getattr(sharding, "spec", None)
  if spec is None or all(a is None for a in spec):
    return x
  return jax.sharding.reshard(
      x, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec()))


def take_rows(table: jax.Array, idx: jax.Array) -> jax.Array:
  """table[clip(idx, 0, R-1)]: rows of a replicated table for (possibly sharded) indices.

  Under Explicit mesh axes a gather with sharded indices needs its output sharding spelled
  out; the rows then follow the sharding of `idx`. Elsewhere this is `jnp.take(mode='clip')`.

  Args:
    table: [R, ...] replicated table.
    idx: i32[B] (or any shape) row indices, clamped into [0, R-1].
  Returns:
    idx.shape + table.shape[1:] rows, sharded like idx.
  """
  idx = jnp.clip(idx.astype(jnp.int32), 0, table.shape[0] - 1)
  sharding = jax.typeof(idx).sharding
  spec = getattr(sharding, "spec", None)
  if spec is None or all(a is None for a in spec):
    return jnp.take(table, idx, axis=0)
  out = jax.sharding.NamedSharding(
      sharding.mesh, jax.sharding.PartitionSpec(*spec, *([None] * (table.ndim - 1))))
  return table.at[idx].get(out_sharding=out)


def first_visits(flat: jax.Array, valid: jax.Array) -> jax.Array:
  """bool[B, H]: valid and the first valid occurrence of flat[b, h] within row b."""
  h = flat.shape[1]
  same = (flat[:, :, None] == flat[:, None, :]) & valid[:, None, :]
  earlier = jnp.tril(jnp.ones((h, h), bool), k=-1)  # [h, h'] with h' < h
  return valid & ~jnp.any(same & earlier, axis=-1)


def edge_ids(table_shape, prev, nxt, mask):
  """Flattened ids prev * K + next and their validity (in range and masked in)."""
  rows, cols = table_shape
  valid = mask & (prev >= 0) & (prev < rows) & (nxt >= 0) & (nxt < cols)
  flat = jnp.where(valid, prev * cols + nxt, rows * cols)
  return flat.astype(jnp.int32), valid
