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

Meshes use `AxisType.Auto` axes: shardings are set on inputs and parameters and XLA's partitioner
propagates them through the model (the maths contains no PartitionSpec).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

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


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
  """mesh_shape: sizes of (data, fsdp, tensor); one entry may be -1 = all remaining devices
  (no experiment config sets it yet). rules: logical-axis rules."""
  mesh_shape: tuple[int, int, int] = (-1, 1, 1)
  rules: tuple[tuple[str, Any], ...] = DEFAULT_RULES


def make_mesh(mesh_shape: Sequence[int] = (-1, 1, 1), *, devices: Sequence[Any] | None = None) -> Mesh:
  """A (data, fsdp, tensor) mesh with Auto axes over `devices` (default: all).

  Raises:
    ValueError when the sizes do not multiply to the number of devices.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = [int(s) for s in mesh_shape]
  if len(shape) != 3:
    raise ValueError(f"mesh_shape {mesh_shape} needs 3 sizes for axes {MESH_AXES}.")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh_shape {mesh_shape}: at most one -1.")
  if -1 in shape:
    rest = math.prod(s for s in shape if s != -1)
    if len(devices) % rest:
      raise ValueError(f"mesh_shape {mesh_shape} does not divide {len(devices)} devices.")
    shape[shape.index(-1)] = len(devices) // rest
  if math.prod(shape) != len(devices):
    raise ValueError(f"mesh_shape {tuple(shape)} has {math.prod(shape)} slots but there are {len(devices)} "
                     "devices; set config mesh.shape so the product equals the device count.")
  arr = np.asarray(devices, dtype=object).reshape(shape)
  return Mesh(arr, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)


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
  """Every array of a batch pytree sharded over its leading (row) dimension.

  Raises:
    ValueError naming the leaf when the row count is not divisible by the batch axes' size.
  """
  axes = tuple(a for a in _rule_table(rules).get("batch", ()) if a in mesh.shape)
  n = math.prod(mesh.shape[a] for a in axes)

  def put(x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if x.ndim and x.shape[0] % n:
      raise ValueError(f"batch leaf of shape {x.shape}: {x.shape[0]} rows do not divide over {n} devices "
                       f"of mesh axes {axes}; make the batch a multiple of {n}.")
    return jax.device_put(x, batch_sharding(mesh, rules, ndim=max(x.ndim, 1)) if x.ndim else
                          NamedSharding(mesh, P()))
  return jax.tree_util.tree_map(put, batch)


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
