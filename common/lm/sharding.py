"""Device mesh (axes data, fsdp, tensor) and logical-axis rules: how parameters, optimizer state and batches
are laid out. The model names logical axes only (`common.lm.model.param_logical_axes`); the rules here,
which the caller passes (ShardingConfig.mesh_shape, ShardingConfig.rules), map them to mesh axes (the MaxText pattern).

Default rules:
  batch    -> (data, fsdp)     rows of every batch array
  vocab    -> tensor           embedding / LM-head rows
  embed    -> fsdp             the model dimension of every weight (ZeRO-3 style parameter sharding)
  heads, kv_heads, mlp -> tensor   Megatron-style tensor parallelism of attention and MLP
  layers, lora, norm, head_dim, tools, length -> replicated
A dimension that the chosen mesh axes do not divide (e.g. 2 key/value heads over tensor = 4) is left
replicated rather than failing; an axis already used by an earlier dimension of the same array is skipped.

The one mesh builder of the codebase (`make_mesh`) and the batch placement (`shard_batch`) live here. Meshes
use `AxisType.Auto` axes by default: shardings are set on inputs and parameters and XLA's partitioner propagates
them through the model and the grouped maths (which contain no PartitionSpec); `axis_types='explicit'` opts in
to Explicit axes (see `make_mesh`). The maths in `common/estimators.py`, `common/losses.py`, `common/gigpo.py`
is written for the global batch and never mentions a mesh: data parallelism comes from placing the batch with
`shard_batch` and calling the jit-compiled step on it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from common.lm import model as model_lib

MESH_AXES = ("data", "fsdp", "tensor")
Rules = Sequence[tuple[str, Any]]
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("layers", None),
    ("lora", None),
    ("norm", None),
    ("head_dim", None),
    ("tools", None),
    ("length", None),
)
_AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
  """mesh_shape: sizes of (data, fsdp, tensor); one entry may be -1 = all remaining devices
  (no experiment config sets it yet). rules: logical-axis rules."""
  mesh_shape: tuple[int, int, int] = (-1, 1, 1)
  rules: tuple[tuple[str, Any], ...] = DEFAULT_RULES


def make_mesh(mesh_shape: Sequence[int | None] = (-1, 1, 1), axis_names: Sequence[str] = MESH_AXES, *,
              axis_types: Any = "auto", devices: Sequence[Any] | None = None) -> Mesh:
  """The one mesh builder: a mesh over `devices` (default: all) with named axes of the given types.

  The default is the (data, fsdp, tensor) mesh the logical-axis rules name (config `mesh.shape`); the maths
  tests use a data-parallel mesh, e.g. `make_mesh((8,), ("data",), axis_types="explicit")`. Axes the rules
  name but the mesh lacks are left out of every spec (replicated).

  Axis types (jax.sharding.AxisType). The default is **Auto**: the compiler propagates shardings through
  every op, so pure functions run unchanged on sharded and unsharded inputs, with or without
  `jax.set_mesh`. **Explicit** axes put shardings in the types: every op whose output sharding is
  ambiguous (a scatter or gather with sharded indices, as in the group statistics) must name an
  `out_sharding`, and arrays on such a mesh are used inside `jax.set_mesh(mesh)`. The grouped maths
  (`common/rows.py`) supports both; library code elsewhere need not, so Auto is the safe default.

  Args:
    mesh_shape: one size per axis; at most one entry may be -1 or None, meaning all remaining devices.
    axis_names: one name per axis (default MESH_AXES = (data, fsdp, tensor)).
    axis_types: 'auto' (default), 'explicit', an AxisType, or a sequence of those, one per axis.
    devices: the devices to lay out (default `jax.devices()`), in order (process order on several hosts).

  Returns:
    jax.sharding.Mesh whose sizes multiply to len(devices).

  Raises:
    ValueError: shape and axis_names differ in length; more than one -1/None; the fixed sizes do not divide
      the device count; the sizes do not multiply to the device count; an unknown axis type.
  """
  devices = list(jax.devices() if devices is None else devices)
  axis_names = tuple(axis_names)
  shape = [-1 if s is None else int(s) for s in mesh_shape]
  if len(shape) != len(axis_names):
    raise ValueError(f"mesh_shape {tuple(mesh_shape)} needs {len(axis_names)} sizes for axes {axis_names}.")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh_shape {tuple(mesh_shape)}: at most one -1 (or None) = all remaining devices.")
  if -1 in shape:
    rest = math.prod(s for s in shape if s != -1)
    if rest < 1 or len(devices) % rest:
      raise ValueError(f"mesh_shape {tuple(mesh_shape)} does not divide {len(devices)} devices: the fixed "
                       f"sizes ({rest}) must divide the device count.")
    shape[shape.index(-1)] = len(devices) // rest
  if math.prod(shape) != len(devices):
    raise ValueError(f"mesh_shape {tuple(shape)} needs {math.prod(shape)} devices but there are {len(devices)}; "
                     "set config mesh.shape so the product equals the device count (on CPU, "
                     "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts).")
  types = (axis_types,) * len(shape) if isinstance(axis_types, (str, AxisType)) else tuple(axis_types)
  resolved = []
  for t in types:
    if isinstance(t, AxisType):
      resolved.append(t)
    elif isinstance(t, str) and t.lower() in _AXIS_TYPES:
      resolved.append(_AXIS_TYPES[t.lower()])
    else:
      raise ValueError(f"Unknown mesh axis type {t!r}; use 'auto' or 'explicit' (or an AxisType).")
  if len(resolved) != len(shape):
    raise ValueError(f"axis_types {axis_types} must give one type per mesh axis {axis_names}.")
  arr = np.asarray(devices, dtype=object).reshape(shape)
  return Mesh(arr, axis_names, axis_types=tuple(resolved))


def _rule_table(rules: Rules | None) -> dict[str, tuple[str, ...]]:
  table = {}
  for name, axes in (DEFAULT_RULES if rules is None else rules):
    if axes is None:
      table[name] = ()
    elif isinstance(axes, str):
      table[name] = (axes,)
    else:
      table[name] = tuple(axes)
  return table


def logical_to_spec(logical_axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Rules | None = None) -> P:
  """PartitionSpec for an array of `shape` whose dimensions carry `logical_axes` (see module docstring)."""
  table = _rule_table(rules)
  used: set[str] = set()
  spec = []
  for name, dim in zip(logical_axes, shape):
    axes = [a for a in table.get(name, ()) if a in mesh.shape and a not in used and mesh.shape[a] > 1]
    while axes and dim % math.prod(mesh.shape[a] for a in axes):
      axes.pop()
    used.update(axes)
    spec.append(None if not axes else (axes[0] if len(axes) == 1 else tuple(axes)))
  return P(*spec)


def param_shardings(params: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """NamedSharding for every parameter (arrays or ShapeDtypeStructs), from `param_logical_axes`."""
  logical = model_lib.param_logical_axes(params)
  return jax.tree_util.tree_map(
      lambda x, ax: NamedSharding(mesh, logical_to_spec(ax, x.shape, mesh, rules)), params, logical,
      is_leaf=lambda x: isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x))


def shard_params(params: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """`params` placed in their shardings (use loading.load_params(shardings=...) to avoid the copy)."""
  return jax.device_put(params, param_shardings(params, mesh, rules))


def batch_sharding(mesh: Mesh, rules: Rules | None = None, *, ndim: int = 2) -> NamedSharding:
  """Rows over the 'batch' rule's axes, every other dimension replicated."""
  axes = tuple(a for a in _rule_table(rules).get("batch", ()) if a in mesh.shape)
  return NamedSharding(mesh, P(axes if axes else None, *([None] * (ndim - 1))))


def shard_batch(batch: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """Every array of a batch pytree sharded over its leading (row) dimension; scalars replicated.

  The rows go over the 'batch' rule's mesh axes that the mesh has ((data, fsdp) by default; 'data' alone
  on a data-parallel mesh).

  Raises:
    ValueError naming the leaf (its pytree path) when the row count is not divisible by the batch axes' size.
  """
  axes = tuple(a for a in _rule_table(rules).get("batch", ()) if a in mesh.shape)
  n = math.prod(mesh.shape[a] for a in axes)

  def put(path, x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if x.ndim and x.shape[0] % n:
      name = jax.tree_util.keystr(path) or "<root>"
      raise ValueError(f"batch leaf {name} of shape {x.shape}: axis 0 of size {x.shape[0]} does not divide over "
                       f"{n} devices of mesh axes {axes}; make the batch a multiple of {n} (pad with masked "
                       "rows) or change the mesh.")
    return jax.device_put(x, batch_sharding(mesh, rules, ndim=max(x.ndim, 1)) if x.ndim else
                          NamedSharding(mesh, P()))
  return jax.tree_util.tree_map_with_path(put, batch)


def opt_state_shardings(tx: optax.GradientTransformation, params: Any, mesh: Mesh,
                        rules: Rules | None = None) -> Any:
  """Shardings of `tx.init(params)`: parameter-shaped state like its parameter, the rest replicated."""
  shardings = param_shardings(params, mesh, rules)
  abstract = jax.eval_shape(tx.init, params)
  replicated = NamedSharding(mesh, P())
  return optax.tree_map_params(
      tx, lambda _, s: s, abstract, shardings,
      transform_non_params=lambda _: replicated,
      is_leaf=lambda x: isinstance(x, (jax.ShapeDtypeStruct, NamedSharding)))


def init_opt_state(tx: optax.GradientTransformation, params: Any, mesh: Mesh,
                   rules: Rules | None = None) -> Any:
  """tx.init(params), created directly in its sharding."""
  return jax.jit(tx.init, out_shardings=opt_state_shardings(tx, params, mesh, rules))(params)


def from_config(cfg: Any, *, devices: Sequence[Any] | None = None) -> tuple[Mesh, tuple]:
  """(mesh, rules) from a config node with optional `shape` (3 ints) and `rules` (pairs)."""
  shape = tuple(cfg.get("shape", (-1, 1, 1))) if hasattr(cfg, "get") else tuple(cfg.shape)
  rules = cfg.get("rules", None) if hasattr(cfg, "get") else getattr(cfg, "rules", None)
  rules = DEFAULT_RULES if rules is None else tuple((r[0], r[1] if r[1] is None or isinstance(r[1], str)
                                                     else tuple(r[1])) for r in rules)
  return make_mesh(shape, devices=devices), rules
