"""LoRA adapters on the decoder's projections: add, train only them, merge them for export.

W x  ->  W x + (alpha / r) B^T A^T x, i.e. in the [in, out] kernel layout y = x W + (alpha / r) (x A) B with
A [in, r] ~ U(-1/sqrt(in), 1/sqrt(in)) and B [r, out] = 0, so the adapted model equals the base model at
initialisation. Source: Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models",
arXiv:2106.09685, sec. 4.1 (scale alpha / r; B = 0 at start). The uniform A follows the common PEFT
default (Kaiming-uniform with a = sqrt(5), which is U(+-1/sqrt(in))).
PhGPO's published setting: rank 64, alpha 128 (config `model.lora_rank`, `model.lora_alpha`; ProgAgent's
are `model.lora_rank`, `model.lora_alpha`, `model.lora_targets`).

The adapters live in the same parameter pytree as the base weights (leaves named 'lora_a' / 'lora_b'
beside each adapted 'kernel'), so one `apply` serves both; `trainable_mask` / `adapter_optimizer` keep the
optimizer to the adapters (plus any extra trainable subtree such as the tool head), and `partition` /
`combine` split the tree so gradients are taken with respect to the adapters only.
No external LoRA library is used (qwix was considered; ~100 lines here keep the pure-function design).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.lm.config import ModelConfig

ADAPTER_LEAVES = ("lora_a", "lora_b")


def _names(path) -> list[str]:
  return [str(getattr(p, "key", getattr(p, "name", p))) for p in path]


def add_adapters(key: jax.Array, params: Any, config: ModelConfig) -> Any:
  """Return `params` with fresh adapters on every projection in `config.lora_targets`.

  Args:
    key: PRNG key (split per adapted projection).
    params: base parameter pytree (nested dicts); not modified.
    config: ModelConfig with lora_rank > 0.
  Returns:
    A new pytree: each targeted {'kernel': [L, in, out], ...} gains 'lora_a' [L, in, r] (uniform) and
    'lora_b' [L, r, out] (zeros), in config.param_dtype, on the default device: place them on a mesh
    with `common.lm.sharding.shard_params` (base leaves already in place are not copied).
  Raises:
    ValueError if config.lora_rank == 0.
  """
  if not config.lora_rank:
    raise ValueError("add_adapters needs config.lora_rank > 0 (config `model.lora_rank`).")
  r = config.lora_rank
  dtype = jnp.dtype(config.param_dtype)
  out = jax.tree_util.tree_map(lambda x: x, params)  # shallow structural copy
  groups = {"attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
  for grp, projs in groups.items():
    for name in projs:
      if name not in config.lora_targets:
        continue
      node = out["layers"][grp][name]
      kernel = node["kernel"]
      layers, d_in, d_out = kernel.shape
      key, sub = jax.random.split(key)
      bound = 1.0 / np.sqrt(d_in)
      a = jax.random.uniform(sub, (layers, d_in, r), jnp.float32, -bound, bound).astype(dtype)
      b = jnp.zeros((layers, r, d_out), dtype)
      node = dict(node)
      node["lora_a"], node["lora_b"] = a, b
      out["layers"][grp] = dict(out["layers"][grp])
      out["layers"][grp][name] = node
  return out


def is_adapter_path(path) -> bool:
  return _names(path)[-1] in ADAPTER_LEAVES


def trainable_mask(params: Any, *, extra: Sequence[str] = ("tool_head",)) -> Any:
  """bool pytree: True for adapter leaves and for every leaf under a top-level key in `extra`."""
  def f(path, _):
    names = _names(path)
    return names[-1] in ADAPTER_LEAVES or (len(names) > 0 and names[0] in extra)
  return jax.tree_util.tree_map_with_path(f, params)


def adapter_optimizer(tx: optax.GradientTransformation, params: Any, *,
                      extra: Sequence[str] = ("tool_head",)) -> optax.GradientTransformation:
  """`tx` on adapters (and `extra` subtrees) only; every other leaf gets a zero update and no state.

  optax.multi_transform with labels 'train' / 'frozen' (frozen -> optax.set_to_zero(), which holds no
  optimizer state; under jit the unused base-weight gradients are dead code and are not computed).
  """
  mask = trainable_mask(params, extra=extra)
  labels = jax.tree_util.tree_map(lambda m: "train" if m else "frozen", mask)
  return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)


def partition(params: Any, *, extra: Sequence[str] = ("tool_head",)) -> tuple[Any, Any]:
  """(trainable, frozen): two pytrees of the same structure, None where a leaf belongs to the other.

  Take gradients w.r.t. `trainable` only: loss(combine(trainable, frozen)); the optimizer then sees
  only adapter-sized state.
  """
  mask = trainable_mask(params, extra=extra)
  train = jax.tree_util.tree_map(lambda x, m: x if m else None, params, mask)
  frozen = jax.tree_util.tree_map(lambda x, m: None if m else x, params, mask)
  return train, frozen


def combine(trainable: Any, frozen: Any) -> Any:
  """Inverse of `partition`."""
  return jax.tree_util.tree_map(lambda a, b: b if a is None else a, trainable, frozen,
                                is_leaf=lambda x: x is None)


def merge(params: Any, config: ModelConfig) -> Any:
  """Fold adapters into the kernels: W' = W + (alpha / r) A B (per layer), and drop the adapter leaves.

  Computed in float32 and cast back to the kernel's dtype. The result has the base-model structure
  (use it with `config.replace(lora_rank=0)`), ready for `loading.export_pretrained`.
  """
  scale = config.lora_scale

  def walk(node):
    if not isinstance(node, dict):
      return node
    if "lora_a" in node and "kernel" in node:
      k = node["kernel"]
      delta = jnp.einsum("lir,lro->lio", node["lora_a"].astype(jnp.float32), node["lora_b"].astype(jnp.float32))
      out = {n: v for n, v in node.items() if n not in ADAPTER_LEAVES}
      out["kernel"] = (k.astype(jnp.float32) + scale * delta).astype(k.dtype)
      return out
    return {n: walk(v) for n, v in node.items()}

  return walk(params)


def count(params: Any, *, extra: Sequence[str] = ("tool_head",)) -> tuple[int, int]:
  """(trainable, total) number of scalars."""
  mask = trainable_mask(params, extra=extra)
  sizes = jax.tree_util.tree_map(lambda x: int(np.prod(x.shape)), params)
  t = sum(s for s, m in zip(jax.tree_util.tree_leaves(sizes), jax.tree_util.tree_leaves(mask)) if m)
  return t, sum(jax.tree_util.tree_leaves(sizes))
