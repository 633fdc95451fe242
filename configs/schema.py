"""The `model`, `optim` and `mesh` sub-configs every method's config shares: one schema, one builder.

Every file in configs/ builds these nodes here, so PhGPO's language-model policy, PlanPO and ProgAgent read
the same keys (common.lm.stages.load_policy, common.lm.updates.optim_settings,
common.lm.training.mesh_from_config). Not a config itself (no `get_config`).

model:
  checkpoint       'tiny:<family>' (a tiny random checkpoint written into `cache_dir` with a tokenizer trained on
                   the method's texts) or a local Hugging Face checkpoint folder
  cache_dir        tiny checkpoints' folder ('' = $AGENTIC_RL_CACHE, else ~/.cache/agentic-rl-jax)
  tiny_vocab       a tiny checkpoint's BPE vocabulary
  tiny_sizes       a tiny checkpoint's shapes (hidden_size, num_layers, num_heads, num_kv_heads,
                   intermediate_size); {} = common.lm.testing.make_tiny_checkpoint's defaults
  dtype            compute dtype, 'float32' | 'bfloat16'
  param_dtype      storage dtype of the parameters ('float32' | 'bfloat16'; '' = dtype)
  remat            activation checkpointing per decoder layer: 'none' | 'full' | 'dots' | 'dots_no_batch'
  attention_impl   'xla' | 'cudnn' | 'auto' | 'dense' (common.lm.config.ModelConfig)
  attention_chunk  queries per attention block; logits_chunk: positions per vocabulary-projection block
  decode_attention one-query decode steps under 'xla': 'flat' (default; the cache read in place) | 'grouped'
                   (jax.nn.dot_product_attention, the path before 'flat'); equal to float rounding
  lora_rank        0 = full fine-tuning; r > 0 adds LoRA adapters (lora_alpha, lora_targets) and trains only them
optim (the learning rates are each stage's own, e.g. `sft.learning_rate`):
  name             'adamw' | 'adam'
  grad_clip        global-norm clipping
  weight_decay, b1, b2, eps   the Adam(W) settings
  master_weights   float32 master weights and optimizer state for `model.param_dtype` 'bfloat16'
mesh:
  shape            (data, fsdp, tensor) device mesh of the updates; -1 = the remaining devices; (1, 1, 1) = one
                   device. A `rules` entry (logical-axis pairs) may be added; absent = the default rules.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from common.lm import config as lm_config


def model_config(**overrides: Any) -> ml_collections.ConfigDict:
  """The `model` node with the schema's defaults, `overrides` applied (unknown keys are errors).

  Raises:
    KeyError: an override that is not a key of the schema.
  """
  c = ml_collections.ConfigDict(dict(
      checkpoint="", cache_dir="", tiny_vocab=2048, tiny_sizes={}, dtype="float32", param_dtype="float32",
      remat="none", attention_impl="xla", attention_chunk=1024, logits_chunk=1024, decode_attention="flat",
      lora_rank=0,
      lora_alpha=128.0, lora_targets=lm_config.LORA_TARGETS))
  return _apply(c, overrides, "model")


def optim_config(**overrides: Any) -> ml_collections.ConfigDict:
  """The `optim` node with the schema's defaults, `overrides` applied (unknown keys are errors).

  Raises:
    KeyError: an override that is not a key of the schema.
  """
  c = ml_collections.ConfigDict(dict(name="adamw", grad_clip=1.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8,
                                     master_weights=False))
  return _apply(c, overrides, "optim")


def sft_config(extra: dict | None = None, **overrides: Any) -> ml_collections.ConfigDict:
  """The `sft` node: the SFT stage's keys read by common.lm.stages.run_sft (learning_rate, batch_size, epochs,
  steps (0 = `epochs` passes), micro_batch_size (0 = one pass)) with `overrides` applied, plus the method's own
  SFT keys in `extra` (its data: PlanPO's detours, ProgAgent's teacher files).

  Raises:
    KeyError: an override that is not a key of the schema, or an `extra` key that shadows one.
  """
  c = ml_collections.ConfigDict(dict(learning_rate=1e-5, batch_size=32, epochs=1, steps=0, micro_batch_size=0))
  c = _apply(c, overrides, "sft")
  for k, v in (extra or {}).items():
    if k in c:
      raise KeyError(f"sft.{k} is a key of the shared SFT schema; pass it as a keyword, not in `extra`")
    c[k] = v
  return c


def mesh_config(shape: tuple = (1, 1, 1)) -> ml_collections.ConfigDict:
  """The `mesh` node: (data, fsdp, tensor) sizes."""
  return ml_collections.ConfigDict(dict(shape=tuple(shape)))


def _apply(c: ml_collections.ConfigDict, overrides: dict, name: str) -> ml_collections.ConfigDict:
  for k, v in overrides.items():
    if k not in c:
      raise KeyError(f"`{name}.{k}` is not a key of the {name} schema (configs/schema.py): {sorted(c)}")
    c[k] = v
  return c
