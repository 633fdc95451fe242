"""Device mesh and batch sharding: the only place that names a PartitionSpec.

The maths in `common/estimators.py` and `common/losses.py` is written for the global batch and never
mentions a mesh; data parallelism comes from placing the batch with `shard_batch` and calling the
jit-compiled step on it.

Axis types (jax.sharding.AxisType). We default to **Auto** axes: the compiler (GSPMD/Shardy)
propagates shardings through every op, so pure functions run unchanged on sharded and unsharded
inputs, with or without `jax.set_mesh`. **Explicit** axes put shardings in the types and make every
op whose output sharding is ambiguous (e.g. a scatter or gather with sharded indices, such as the
group statistics of `jax.ops.segment_sum`) name an `out_sharding`, and arrays on such a mesh must be
used inside `jax.set_mesh(mesh)`. The estimators in this package support both (they name the
sharding when the ambient mesh is Explicit), but library code elsewhere need not, so Auto is the
safe default; pass `axis_types='explicit'` to opt in (an argument; no experiment config sets the mesh
yet).
"""
import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

_AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


def make_mesh(shape: Sequence[int | None] = (None,), axis_names: Sequence[str] = ("data",), *,
              axis_types="auto", devices=None) -> Mesh:
  """Builds a device mesh with explicit axis types via `jax.make_mesh`.

  Args:
    shape: mesh shape; at most one entry may be None, meaning "all remaining devices"
      (default: one 'data' axis over every device).
    axis_names: one name per mesh axis.
    axis_types: 'auto' (default), 'explicit', an AxisType, or a sequence of those, one per axis.
      See the module docstring for the choice.
    devices: optional device list; default `jax.devices()`.

  Returns:
    jax.sharding.Mesh.

  Raises:
    ValueError: shape and axis_names differ in length; more than one None; the device count is not
      divisible by the fixed axes; the mesh needs more devices than exist; unknown axis type.
  """
  shape, axis_names = tuple(shape), tuple(axis_names)
  if len(shape) != len(axis_names):
    raise ValueError(f"shape {shape} and axis_names {axis_names} must have the same length.")
  devices = list(jax.devices()) if devices is None else list(devices)
  if sum(s is None for s in shape) > 1:
    raise ValueError(f"At most one mesh axis may be None (= all remaining devices), got {shape}.")
  fixed = math.prod(s for s in shape if s is not None)
  if None in shape:
    if fixed < 1 or len(devices) % fixed:
      raise ValueError(f"{len(devices)} devices cannot fill mesh shape {shape}: the fixed axes "
                       f"({fixed}) must divide the device count.")
    shape = tuple(len(devices) // fixed if s is None else s for s in shape)
  if math.prod(shape) > len(devices) or math.prod(shape) < 1:
    raise ValueError(f"Mesh shape {shape} needs {math.prod(shape)} devices but {len(devices)} "
                     f"exist (on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N "
                     f"before JAX starts).")
  if isinstance(axis_types, (str, AxisType)):
    axis_types = (axis_types,) * len(shape)
  resolved = []
  for t in axis_types:
    if isinstance(t, AxisType):
      resolved.append(t)
    elif isinstance(t, str) and t.lower() in _AXIS_TYPES:
      resolved.append(_AXIS_TYPES[t.lower()])
    else:
      raise ValueError(f"Unknown mesh axis type {t!r}; use 'auto' or 'explicit' (or an AxisType).")
  if len(resolved) != len(shape):
    raise ValueError(f"axis_types {axis_types} must give one type per mesh axis {axis_names}.")
  return jax.make_mesh(shape, axis_names, axis_types=tuple(resolved),
                       devices=devices[:math.prod(shape)])


def batch_sharding(mesh: Mesh, ndim: int, *, axis_name: str = "data") -> NamedSharding:
  """NamedSharding that splits axis 0 over the mesh axis `axis_name` and replicates the rest.

  Args:
    mesh: the device mesh.
    ndim: rank of the array to place (>= 1).
    axis_name: mesh axis for the batch dimension.

  Returns:
    NamedSharding(mesh, PartitionSpec(axis_name, None, ..., None)).

  Raises:
    ValueError: ndim < 1, or axis_name not a mesh axis.
  """
  if ndim < 1:
    raise ValueError(f"batch_sharding needs an array of rank >= 1 (axis 0 is the batch), "
                     f"got ndim={ndim}.")
  if axis_name not in mesh.axis_names:
    raise ValueError(f"Mesh axis {axis_name!r} not in mesh axes {mesh.axis_names}.")
  return NamedSharding(mesh, PartitionSpec(axis_name, *([None] * (ndim - 1))))


def shard_batch(tree, mesh: Mesh, *, axis_name: str = "data"):
  """Places every leaf of a pytree on the mesh with axis 0 split over `axis_name`.

  Args:
    tree: pytree of arrays (NumPy or JAX), each of rank >= 1 with a leading batch axis B.
    mesh: the device mesh.
    axis_name: mesh axis for the batch dimension.

  Returns:
    The same pytree of jax.Arrays, each sharded by `batch_sharding(mesh, leaf.ndim)`.

  Raises:
    ValueError: a leaf is a scalar, or its axis 0 is not divisible by the mesh axis size; the
      message names the leaf (its pytree path) and the sizes, and suggests padding the batch with
      masked rows.
  """
  if axis_name not in mesh.axis_names:
    raise ValueError(f"Mesh axis {axis_name!r} not in mesh axes {mesh.axis_names}.")
  size = mesh.shape[axis_name]

  def place(path, leaf):
    name = jax.tree_util.keystr(path) or "<root>"
    ndim = np.ndim(leaf)
    if ndim < 1:
      raise ValueError(f"Leaf {name} is a scalar; shard_batch needs a leading batch axis on "
                       f"every leaf.")
    batch = np.shape(leaf)[0]
    if batch % size:
      raise ValueError(f"Leaf {name} has batch axis 0 of size {batch}, not divisible by the "
                       f"{size} devices of mesh axis {axis_name!r}: pad the batch to a multiple of "
                       f"{size} (with masked rows) or change the mesh.")
    return jax.device_put(leaf, batch_sharding(mesh, ndim, axis_name=axis_name))

  return jax.tree_util.tree_map_with_path(place, tree)
