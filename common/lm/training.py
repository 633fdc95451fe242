"""Pieces every language-model trainer shares: the mesh from config, strided micro-batches and gradient
accumulation, float32 master weights for low-precision parameters, and placing a train state on a mesh.

Used by the trainer kit (common/lm/updates.py, common/lm/stages.py) and PhGPO's LM policy (phgpo/steps.py).
The jitted update steps name no PartitionSpec: the parameters, the optimizer state and the batch are placed
here (`place_state`, `place_batch`) and XLA propagates the shardings through the maths (common.lm.sharding).

Mesh (config node `mesh`, read by `mesh_from_config`):
  mesh.shape  sizes of the (data, fsdp, tensor) axes; one entry may be -1 = all remaining devices. The default
              (1, 1, 1) trains on one device (the first), as before; (-1, 1, 1) is pure data parallelism over
              every device, (1, -1, 1) ZeRO-3-style parameter sharding, (2, 2, 2) all three. When no entry is
              -1 the mesh takes the first prod(shape) devices.
  rules       optional entry mesh.rules, logical-axis pairs; default common.lm.sharding.DEFAULT_RULES.
Batch rows are sharded over (data, fsdp): every update's row count must be a multiple of
`batch_shards(mesh, rules)` (`place_batch` raises a ValueError naming the fix otherwise).

Gradient accumulation (`accumulate_grads`): the rows are split into n micro-batches STRIDED, micro-batch j =
rows j, j + n, j + 2n, ... (`micro_batches`), so that with rows sharded in contiguous blocks over the data
devices every micro-batch keeps rows on every device (a contiguous split would put micro-batch 0 on the first
devices only); a lax.scan sums the loss and the gradient over the micro-batches, which equals the one-pass
gradient of the summed loss (up to float32 summation order). `micro_batched_apply` is the other form, for
losses that normalise several terms over the whole batch (PhGPO's): the forward pass runs micro-batch by
micro-batch under jax.checkpoint and the full output is reassembled in row order, so the loss (and its
gradient) is exactly that of one pass while the activations of one micro-batch only are alive at a time.

Mixed precision (`init_opt_state(..., master_weights=True)` + `apply_gradients`): parameters stored in
bfloat16 (config `model.param_dtype`, configs/schema.py) and a float32 master copy of
every trainable leaf kept in the optimizer state (`MasterState.master`), together with a float32 inner
optimizer state; each step casts the gradient to float32, updates the master weights and writes params =
master.astype(param dtype). Frozen leaves (LoRA's base weights) get no master copy. Config key
`optim.master_weights`. Without it, the optimizer
state has the parameters' dtype and the update is added in that dtype (lossy in bfloat16).
Source: Micikevicius et al. 2018, "Mixed Precision Training", arXiv:1710.03740, sec. 3.1 (FP32 master copy
of weights).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from common import config_util
from common.lm import sharding as sharding_lib

DEFAULT_MESH_SHAPE = (1, 1, 1)


# --- mesh ------------------------------------------------------------------------------------------------

def mesh_from_config(cfg: Any = None, *, devices: Sequence[Any] | None = None) -> tuple[Mesh, tuple]:
  """(mesh, rules) from a config node with `shape` (3 ints, default (1, 1, 1)) and optional `rules`.

  A shape without -1 uses the first prod(shape) of `devices` (default jax.devices()); with -1, all of them
  (common.lm.sharding.make_mesh).

  Several processes (common/distributed.py): a shape without -1 that fits in this process's own devices
  (e.g. the default (1, 1, 1)) is laid out over `jax.local_devices()`: every process holds the whole train
  state and runs the jitted steps on the same gathered global batch (replicated computation, the same values
  on every process; the trainers' module docstrings). A shape with -1, or one larger than the local devices,
  spans every process's devices: one SPMD program whose batches go through common.distributed.global_batch.

  Raises:
    ValueError: a shape that is not 3 sizes, has more than one -1, or asks for more devices than there are
      (the message names config `mesh.shape`).
  """
  shape = tuple(int(s) for s in config_util.get(cfg, "shape", DEFAULT_MESH_SHAPE))
  if devices is None:
    local = jax.process_count() > 1 and -1 not in shape and math.prod(shape) <= jax.local_device_count()
    devices = jax.local_devices() if local else jax.devices()
  devices = list(devices)
  if len(shape) != 3:
    raise ValueError(f"config `mesh.shape`={shape} needs 3 sizes, for the axes {sharding_lib.MESH_AXES}.")
  if -1 not in shape:
    need = math.prod(shape)
    if need > len(devices) or need < 1:
      raise ValueError(f"config `mesh.shape`={shape} needs {need} devices but there are {len(devices)}; "
                       "make the product at most the device count, or use -1 for one axis.")
    devices = devices[:need]
  node = {"shape": shape, "rules": config_util.get(cfg, "rules", None)}
  return sharding_lib.from_config(node, devices=devices)


def check_scale_config(model: Any, mesh: Any, *, model_key: str) -> None:
  """Validates the scale keys of a config before anything is written: the model node's attention_impl,
  decode_attention, attention_chunk, logits_chunk, remat, dtype and param_dtype (where present) and `mesh.shape`.

  Args:
    model: the `model` config node (configs/schema.py).
    mesh: the `mesh` config node, or None.
    model_key: that node's name, used in the messages.
  Raises:
    ValueError naming the key, the allowed values and the fix.
  """
  from common.lm import config as config_lib  # pylint: disable=g-import-not-at-top
  get = lambda k: config_util.get(model, k, None)
  allowed = {"attention_impl": config_lib.ATTENTION_IMPLS, "remat": config_lib.REMAT_POLICIES,
             "decode_attention": config_lib.DECODE_ATTENTIONS,
             "dtype": ("float32", "bfloat16"), "param_dtype": ("float32", "bfloat16", "", None)}
  for key, values in allowed.items():
    v = get(key)
    if v is not None and v not in values:
      raise ValueError(f"config {model_key}.{key}={v!r} is not one of {tuple(x for x in values if x)}.")
  for key, low in (("attention_chunk", 1), ("logits_chunk", 0)):
    v = get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
      raise ValueError(f"config {model_key}.{key}={v!r} must be an integer >= {low}.")
  if mesh is None:
    return
  shape = mesh.get("shape", DEFAULT_MESH_SHAPE) if hasattr(mesh, "get") else getattr(mesh, "shape")
  shape = tuple(shape)
  n = len(jax.devices())
  if (len(shape) != 3 or any(not isinstance(x, int) or isinstance(x, bool) for x in shape)
      or any(x == 0 or x < -1 for x in shape) or shape.count(-1) > 1):
    raise ValueError(f"config mesh.shape={shape} must be 3 integers (data, fsdp, tensor), each >= 1 or one of "
                     f"them -1 (= the remaining devices); this process sees {n} devices.")
  fixed = math.prod(x for x in shape if x != -1)
  if (-1 in shape and n % fixed) or (-1 not in shape and fixed > n):
    raise ValueError(f"config mesh.shape={shape} does not fit the {n} devices this process sees; make the product "
                     "of the sizes at most the device count (or divide it, with a -1).")


def batch_shards(mesh: Mesh, rules: Any = None) -> int:
  """How many ways batch rows are split: the product of the mesh axes of the 'batch' rule (data x fsdp)."""
  axes = dict(sharding_lib.DEFAULT_RULES if rules is None else rules).get("batch", ())
  axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
  return math.prod(mesh.shape[a] for a in axes if a in mesh.shape)


# --- micro-batches ---------------------------------------------------------------------------------------

def micro_batches(batch: Any, n: int) -> Any:
  """Every leaf [B, ...] -> [n, B/n, ...], micro-batch j = rows j, j + n, j + 2n, ... (strided).

  Args:
    batch: pytree of arrays with a common leading row dimension B.
    n: number of micro-batches (static), dividing B.
  Returns:
    The same pytree with leaves [n, B/n, ...]; leaf[j, k] = original row k * n + j.
  Raises:
    ValueError: n does not divide B (names the leaf shape).
  """
  def split(x):
    if x.shape[0] % n:
      raise ValueError(f"{x.shape[0]} rows (leaf of shape {x.shape}) do not split into {n} micro-batches; "
                       "make the batch a multiple of the micro-batch count.")
    return jnp.swapaxes(x.reshape((x.shape[0] // n, n) + x.shape[1:]), 0, 1)
  return jax.tree.map(split, batch)


def merge_micro_batches(stacked: Any) -> Any:
  """Inverse of `micro_batches`: leaves [n, B/n, ...] -> [B, ...] in the original row order."""
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), stacked)


def accumulate_grads(loss_sum_fn: Callable, params: Any, batch: Any, n: int, *,
                     has_aux: bool = False) -> tuple[jax.Array, Any, Any]:
  """Loss and gradient summed over n strided micro-batches (lax.scan): equal to one pass when the loss is a sum.

  sum_j L(params, micro_j) and sum_j dL/dparams(params, micro_j), micro_j = `micro_batches(batch, n)[j]`.
  For a loss that is a sum over rows (or rows weighted by batch-level constants computed outside, e.g. a
  token count), this equals L(params, batch) and its gradient up to float32 summation order.

  Args:
    loss_sum_fn: (params, micro_batch) -> f32[] (or (f32[], aux) with has_aux).
    params: the pytree the gradient is taken with respect to.
    batch: pytree of [B, ...] arrays.
    n: micro-batch count (static), dividing B; 1 = one pass (no scan).
    has_aux: loss_sum_fn also returns an aux pytree.
  Returns:
    (loss f32[], grads with params' structure in float32 (bfloat16 parameters get float32 gradients, summed
     in float32),
     aux stacked over micro-batches [n, ...] (None without has_aux); reduce it as the metric needs).
  Raises:
    ValueError: n does not divide B.
  """
  fn = loss_sum_fn if has_aux else (lambda p, b: (loss_sum_fn(p, b), None))
  grad_fn = jax.value_and_grad(fn, has_aux=True)
  if n == 1:
    (loss, aux), g = grad_fn(params, batch)
    g = jax.tree.map(lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32)), g)
    return loss, g, jax.tree.map(lambda x: x[None], aux)

  def body(acc, mb):
    (loss, aux), g = grad_fn(params, mb)
    return (acc[0] + loss, jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc[1], g)), aux

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params)
  (loss, g), aux = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), micro_batches(batch, n))
  return loss, g, aux


def micro_batched_apply(fn: Callable, params: Any, batch: Any, n: int) -> Any:
  """fn(params, batch) computed over n strided micro-batches under jax.checkpoint, in the original row order.

  The output equals fn(params, batch) for a row-wise fn (each output row depends on its input row only), and
  so does the gradient of any loss of it; in the backward pass one micro-batch's forward is recomputed at a
  time, so activation memory is that of B/n rows (plus the outputs).

  Args:
    fn: (params, batch) -> pytree of [B, ...] arrays, row-wise.
    params: parameters.
    batch: pytree of [B, ...] arrays.
    n: micro-batch count (static); when it does not divide B the rows are padded with copies of row 0 (their
      outputs are dropped, so they carry no gradient); 1 = fn itself.
  Returns:
    fn's output, [B, ...] leaves.
  """
  if n == 1:
    return fn(params, batch)
  rows = jax.tree.leaves(batch)[0].shape[0]
  extra = pad_rows(rows, n) - rows
  if extra:
    batch = jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(jnp.asarray(x)[:1], extra, axis=0)]), batch)
  step = jax.checkpoint(lambda mb: fn(params, mb))
  _, out = jax.lax.scan(lambda c, mb: (c, step(mb)), None, micro_batches(batch, n))
  return jax.tree.map(lambda x: x[:rows], merge_micro_batches(out))


# --- optimizer with float32 master weights ---------------------------------------------------------------

class MasterState(NamedTuple):
  """Optimizer state with float32 master weights.

  Attributes:
    master: params' structure; f32 copy of each trainable leaf, optax.MaskedNode() for a frozen one.
    inner: the inner optimizer's state, built on the float32 master tree (so its moments are float32).
  """
  master: Any
  inner: Any


def _is_masked(x) -> bool:
  return isinstance(x, optax.MaskedNode)


def _full_master(master: Any, params: Any) -> Any:
  """The master tree with each frozen slot filled by its (low-precision) parameter."""
  return jax.tree.map(lambda m, p: p if _is_masked(m) else m, master, params, is_leaf=_is_masked)


def init_opt_state(tx: optax.GradientTransformation, params: Any, *, master_weights: bool = False,
                   trainable: Any = None) -> Any:
  """tx.init(params), or with master_weights a MasterState (float32 master of the trainable leaves).

  Args:
    tx: the optimizer (may itself keep frozen leaves still, e.g. common.lm.lora.adapter_optimizer).
    params: parameter pytree (any float dtypes).
    master_weights: keep float32 master weights (config `optim.master_weights`).
    trainable: bool pytree like params (None = every leaf trains); frozen leaves get no master copy.
  Returns:
    The optimizer state for `apply_gradients`.
  """
  if not master_weights:
    return tx.init(params)
  mask = jax.tree.map(lambda _: True, params) if trainable is None else trainable
  master = jax.tree.map(lambda p, m: p.astype(jnp.float32) if m else optax.MaskedNode(), params, mask)
  return MasterState(master=master, inner=tx.init(_full_master(master, params)))


def apply_gradients(tx: optax.GradientTransformation, grads: Any, opt_state: Any, params: Any) -> tuple[Any, Any]:
  """One optimizer step: (new params, new opt_state).

  Plain state: params + tx.update(grads) (optax.apply_updates, in the parameters' dtype).
  MasterState: g32 = grads in float32; master += tx.update(g32, inner, master); params = master cast to each
  parameter's dtype (frozen leaves unchanged: `tx` must give them zero updates).
  """
  if not isinstance(opt_state, MasterState):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  full = _full_master(opt_state.master, params)
  g32 = jax.tree.map(lambda g: g.astype(jnp.float32), grads)
  updates, inner = tx.update(g32, opt_state.inner, full)
  master = jax.tree.map(lambda m, u: m if _is_masked(m) else m + u.astype(jnp.float32), opt_state.master, updates,
                        is_leaf=_is_masked)
  new_params = jax.tree.map(lambda m, p: p if _is_masked(m) else m.astype(p.dtype), master, params,
                            is_leaf=_is_masked)
  return new_params, MasterState(master=master, inner=inner)


# --- placement on a mesh ---------------------------------------------------------------------------------

def _path_key(path) -> tuple:
  return tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def state_shardings(tree: Any, params: Any, mesh: Mesh, rules: Any = None) -> Any:
  """A NamedSharding for every leaf of `tree` (a train state): parameter-shaped leaves like their parameter,
  everything else (step, RNG key, optimizer counts, scalars) replicated.

  A leaf follows parameter p when the end of its key path is p's key path and the shapes agree: params
  themselves, the Adam moments (`mu`/`nu` subtrees), the float32 master weights of `MasterState`; the choice
  of matching by path suffix makes this work for any optax chain, multi_transform or wrapper without knowing
  its state type. The parameter shardings are common.lm.sharding.param_shardings(params, mesh, rules).
  """
  ps = sharding_lib.param_shardings(params, mesh, rules)
  table = {}
  for (path, leaf), (_, s) in zip(jax.tree_util.tree_flatten_with_path(params)[0],
                                  jax.tree_util.tree_flatten_with_path(ps)[0]):
    table[_path_key(path)] = (tuple(leaf.shape), s)
  replicated = NamedSharding(mesh, P())
  depth = max((len(k) for k in table), default=0)

  def pick(path, leaf):
    key, shape = _path_key(path), tuple(getattr(leaf, "shape", ()))
    for start in range(max(0, len(key) - depth), len(key)):
      hit = table.get(key[start:])
      if hit is not None and hit[0] == shape:
        return hit[1]
    return replicated
  return jax.tree_util.tree_map_with_path(pick, tree)


def place_state(tree: Any, params: Any, mesh: Mesh, rules: Any = None) -> Any:
  """`tree` (a train state holding `params`) device_put to `state_shardings` (parameters sharded by the rules,
  optimizer state following them, the rest replicated). Restoring a checkpoint into the placed state keeps
  these shardings (common.checkpoint restores into the target's shardings)."""
  return jax.device_put(tree, state_shardings(tree, params, mesh, rules))


def place_batch(batch: Any, mesh: Mesh, rules: Any = None) -> Any:
  """Every leaf's rows sharded over the batch axes (common.lm.sharding.shard_batch); scalars replicated.

  Raises:
    ValueError naming the leaf when its rows are not a multiple of `batch_shards(mesh, rules)`.
  """
  return sharding_lib.shard_batch(batch, mesh, rules)


def pad_rows(n: int, multiple: int) -> int:
  """The smallest multiple of `multiple` >= n (rows to pad a batch to)."""
  return -(-int(n) // int(multiple)) * int(multiple)


def lcm(*xs: int) -> int:
  return int(np.lcm.reduce([max(1, int(x)) for x in xs]))
