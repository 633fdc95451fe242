"""The decoder's configuration, read from a Hugging Face `config.json` through transformers' config classes.

One frozen, hashable `ModelConfig` describes every supported family; it is a static argument of every jitted
function in `common/lm/`. What differs between the families:

  family   q/k/v bias        o bias           q/k RMSNorm   rotary scaling            embeddings
  qwen2    yes               no               no            default / linear          tied (small) or untied
  qwen3    attention_bias    attention_bias   yes (per head) default / linear         tied or untied
  llama    attention_bias    attention_bias   no            default / linear / llama3 tied (3.2 1B/3B) or untied

All three: grouped-query attention (num_key_value_heads <= num_attention_heads), RMSNorm before attention and
MLP, SwiGLU MLP (silu(gate) * up -> down), rotary embeddings on the rotate-half layout.
Sources: Qwen2 Technical Report (Yang et al. 2024, arXiv:2407.10671); Qwen3 Technical Report (Yang et al.
2025, arXiv:2505.09388, sec. 2: QK-Norm); The Llama 3 Herd of Models (Grattafiori et al. 2024,
arXiv:2407.21783, sec. 3.2; the 'llama3' RoPE frequency rescaling of Llama 3.1).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

SUPPORTED_FAMILIES = ("qwen2", "qwen3", "llama")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
ATTENTION_IMPLS = ("xla", "cudnn", "auto", "dense")
DECODE_ATTENTIONS = ("flat", "grouped")


class CheckpointError(ValueError):
  """A checkpoint directory that cannot be used; the message names the file and the problem."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture plus numerics of one decoder (hashable: a static jit argument).

  Attributes:
    family: 'qwen2', 'qwen3' or 'llama' (the checkpoint's `model_type`).
    vocab_size: rows of the embedding matrix (may exceed the tokenizer's size; Qwen pads it).
    hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim: the shapes.
    rms_norm_eps: RMSNorm epsilon.
    rope_theta: rotary base.
    rope_type: 'default', 'linear' or 'llama3'.
    rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position: scaling
      parameters ('linear' uses rope_factor; 'llama3' uses all four).
    max_position_embeddings: longest context the checkpoint was trained for (informational).
    qkv_bias, o_bias, mlp_bias, qk_norm, tie_embeddings: family switches (table in the module docstring).
    bos_token_id, eos_token_ids, pad_token_id: from config.json (eos may be several ids).
    dtype: compute dtype, 'float32' or 'bfloat16' (config `model.dtype`); softmax and RMSNorm statistics
      are always float32.
    param_dtype: storage dtype of the weights (config `model.param_dtype`); loading converts to it.
    remat: activation checkpointing of each decoder layer: 'none', 'full' (save nothing), 'dots' (save
      matmul outputs), 'dots_no_batch' (save matmuls without batch dims) (no experiment config sets it).
    lora_rank: 0 = no adapters; otherwise the rank r of every adapted projection (config `model.lora_rank`,
      every method's `model.lora_rank`).
    lora_alpha: LoRA alpha; the adapter output is scaled by alpha / r (config `model.lora_alpha`, PhGPO
      `model.lora_alpha`).
    lora_targets: which projections get adapters, names from LORA_TARGETS (config `model.lora_targets`).
    attention_impl: 'xla' (jax.nn.dot_product_attention's XLA path, every backend; the default), 'cudnn'
      (its cuDNN flash kernel, NVIDIA GPUs in bf16/fp16), 'auto' (JAX picks) or 'dense' (the float32
      reference that materialises [B, K, G, T, S] scores; tests only); config `model.attention_impl`.
    attention_chunk: queries per attention block: each block holds at most [B, H, chunk, S] scores
      (config `model.attention_chunk`).
    decode_attention: one-query steps (decoding against a KV cache) under attention_impl 'xla': 'flat' (the
      default; common.lm.model.attend_flat: the cache read in its own [S, K, hd] layout, no transposed copy of it
      per step) or 'grouped' (jax.nn.dot_product_attention, as for prefill: the path before 'flat', which
      reproduces runs made with it bit for bit); the two agree to float rounding (config `model.decode_attention`).
    logits_chunk: positions per vocabulary-projection block in log-probs (0 = all at once; config
      `model.logits_chunk`).
  """
  family: str
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_type: str = "default"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_position: int = 8192
  max_position_embeddings: int = 32768
  qkv_bias: bool = False
  o_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False
  tie_embeddings: bool = False
  bos_token_id: int | None = None
  eos_token_ids: tuple[int, ...] = ()
  pad_token_id: int | None = None
  dtype: str = "float32"
  param_dtype: str = "float32"
  remat: str = "none"
  lora_rank: int = 0
  lora_alpha: float = 0.0
  lora_targets: tuple[str, ...] = ()
  attention_impl: str = "xla"
  attention_chunk: int = 1024
  logits_chunk: int = 1024
  decode_attention: str = "flat"

  def __post_init__(self):
    if self.family not in SUPPORTED_FAMILIES:
      raise ValueError(f"family {self.family!r} is not supported; use one of {SUPPORTED_FAMILIES}.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}.")
    if self.rope_type not in SUPPORTED_ROPE_TYPES:
      raise ValueError(f"rope_type {self.rope_type!r} is not supported; use one of {SUPPORTED_ROPE_TYPES}.")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"attention_impl {self.attention_impl!r} is not one of {ATTENTION_IMPLS}.")
    if self.decode_attention not in DECODE_ATTENTIONS:
      raise ValueError(f"decode_attention {self.decode_attention!r} is not one of {DECODE_ATTENTIONS} "
                       "(config model.decode_attention).")
    if self.attention_chunk < 1 or self.logits_chunk < 0:
      raise ValueError(f"attention_chunk={self.attention_chunk} must be >= 1 and logits_chunk="
                       f"{self.logits_chunk} >= 0 (0 = one block).")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"remat {self.remat!r} is not one of {REMAT_POLICIES}.")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"{name}={getattr(self, name)!r}; use 'float32' or 'bfloat16'.")
    bad = [t for t in self.lora_targets if t not in LORA_TARGETS]
    if bad:
      raise ValueError(f"lora_targets {bad} unknown; choose from {LORA_TARGETS}.")
    if self.lora_rank < 0 or (self.lora_rank > 0 and not self.lora_targets):
      raise ValueError("lora_rank > 0 needs at least one lora_targets entry (e.g. ('q_proj', 'v_proj')).")

  @property
  def lora_scale(self) -> float:
    """alpha / r (Hu et al. 2021, "LoRA", arXiv:2106.09685, sec. 4.1)."""
    return self.lora_alpha / self.lora_rank if self.lora_rank else 0.0

  def replace(self, **changes: Any) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def with_lora(self, *, rank: int, alpha: float, targets=LORA_TARGETS) -> "ModelConfig":
    """This config with LoRA adapters of rank `rank`, scale alpha / rank, on `targets`."""
    return self.replace(lora_rank=int(rank), lora_alpha=float(alpha), lora_targets=tuple(targets))

  def num_params(self, *, include_lora: bool = False) -> int:
    """Number of base weights (embedding counted once when tied)."""
    d, f, h, k, hd = self.hidden_size, self.intermediate_size, self.num_heads, self.num_kv_heads, self.head_dim
    attn = d * h * hd * 2 + d * k * hd * 2
    attn += (h * hd + 2 * k * hd) * self.qkv_bias + d * self.o_bias + 2 * hd * self.qk_norm
    mlp = 3 * d * f + (2 * f + d) * self.mlp_bias
    per_layer = attn + mlp + 2 * d
    n = self.num_layers * per_layer + self.vocab_size * d * (1 if self.tie_embeddings else 2) + d
    if include_lora and self.lora_rank:
      n += self.num_layers * sum(self.lora_rank * (i + o) for t, (i, o) in self.projection_shapes().items()
                                 if t in self.lora_targets)
    return n

  def projection_shapes(self) -> dict[str, tuple[int, int]]:
    """(in, out) features of every linear projection of one layer."""
    d, f, h, k, hd = self.hidden_size, self.intermediate_size, self.num_heads, self.num_kv_heads, self.head_dim
    return {"q_proj": (d, h * hd), "k_proj": (d, k * hd), "v_proj": (d, k * hd), "o_proj": (h * hd, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}

  def rope_inv_freq(self) -> np.ndarray:
    """f32[head_dim // 2] inverse frequencies of the rotary embedding, after the family's scaling.

    default: inv_freq_i = theta^(-2i / d).
    linear:  inv_freq_i / factor.
    llama3:  wavelengths 2 pi / inv_freq longer than orig / low_freq_factor are divided by factor, shorter
             than orig / high_freq_factor kept, and in between interpolated with
             s = (orig / wavelen - low) / (high - low): (1 - s) inv_freq / factor + s inv_freq
             (Llama 3.1 release; the same formula as transformers' `_compute_llama3_parameters`).
    Computed in float32 like the reference, so that positions * inv_freq agree bit for bit.
    """
    d = self.head_dim
    inv = (1.0 / (np.float32(self.rope_theta) ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d))))
    inv = inv.astype(np.float32)
    if self.rope_type == "linear":
      inv = (inv / np.float32(self.rope_factor)).astype(np.float32)
    elif self.rope_type == "llama3":
      factor = np.float32(self.rope_factor)
      low, high = np.float32(self.rope_low_freq_factor), np.float32(self.rope_high_freq_factor)
      old = np.float32(self.rope_original_max_position)
      wavelen = np.float32(2 * np.pi) / inv
      scaled = np.where(wavelen > old / low, inv / factor, inv)
      smooth = (old / wavelen - low) / (high - low)
      smoothed = (1 - smooth) * scaled / factor + smooth * scaled
      medium = ~(wavelen < old / high) & ~(wavelen > old / low)
      inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def _first(d: dict, *keys, default=None):
  for k in keys:
    if d.get(k) is not None:
      return d[k]
  return default


def from_hf_config(hf_config: Any, *, source: str = "config.json", **overrides: Any) -> ModelConfig:
  """Build a `ModelConfig` from a transformers config object (Qwen2Config, Qwen3Config, LlamaConfig).

  Args:
    hf_config: a transformers `PretrainedConfig` (or anything with `to_dict()`).
    source: file name used in error messages.
    **overrides: fields of ModelConfig to set (dtype, param_dtype, remat, lora_*).
  Returns:
    The ModelConfig.
  Raises:
    CheckpointError naming `source` when the architecture is unsupported (model_type, activation,
    sliding-window attention, rope type).
  """
  d = hf_config.to_dict() if hasattr(hf_config, "to_dict") else dict(hf_config)
  family = d.get("model_type")
  if family not in SUPPORTED_FAMILIES:
    raise CheckpointError(
        f"{source}: unsupported architecture model_type={family!r} (architectures={d.get('architectures')}); "
        f"common/lm supports {SUPPORTED_FAMILIES} (Qwen2/Qwen2.5, Qwen3, Llama-3.x). Convert the checkpoint "
        "or add the family to common/lm/config.py.")
  act = d.get("hidden_act", "silu")
  if act != "silu":
    raise CheckpointError(f"{source}: hidden_act={act!r} unsupported; the {family} decoder here uses SwiGLU (silu).")
  if d.get("use_sliding_window"):
    raise CheckpointError(f"{source}: use_sliding_window=true is not supported; set it to false "
                          "(Qwen2.5 checkpoints ship with it off).")
  rope = dict(d.get("rope_parameters") or {})
  legacy = d.get("rope_scaling") or {}
  rope = {**legacy, **rope}
  rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
  if rope_type not in SUPPORTED_ROPE_TYPES:
    raise CheckpointError(f"{source}: rope type {rope_type!r} unsupported; supported: {SUPPORTED_ROPE_TYPES}.")
  theta = _first(rope, "rope_theta", default=_first(d, "rope_theta", default=10000.0))
  heads = int(d["num_attention_heads"])
  head_dim = d.get("head_dim") or d["hidden_size"] // heads
  attention_bias = bool(d.get("attention_bias", False))
  eos = d.get("eos_token_id")
  eos = () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
  fields = dict(
      family=family,
      vocab_size=int(d["vocab_size"]),
      hidden_size=int(d["hidden_size"]),
      intermediate_size=int(d["intermediate_size"]),
      num_layers=int(d["num_hidden_layers"]),
      num_heads=heads,
      num_kv_heads=int(d.get("num_key_value_heads") or heads),
      head_dim=int(head_dim),
      rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
      rope_theta=float(theta),
      rope_type=rope_type,
      rope_factor=float(rope.get("factor", 1.0) or 1.0),
      rope_low_freq_factor=float(rope.get("low_freq_factor", 1.0)),
      rope_high_freq_factor=float(rope.get("high_freq_factor", 4.0)),
      rope_original_max_position=int(rope.get("original_max_position_embeddings")
                                     or d.get("max_position_embeddings", 8192)),
      max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
      qkv_bias=True if family == "qwen2" else attention_bias,
      o_bias=False if family == "qwen2" else attention_bias,
      mlp_bias=bool(d.get("mlp_bias", False)) if family == "llama" else False,
      qk_norm=family == "qwen3",
      tie_embeddings=bool(d.get("tie_word_embeddings", False)),
      bos_token_id=d.get("bos_token_id"),
      eos_token_ids=eos,
      pad_token_id=d.get("pad_token_id"),
  )
  fields.update(overrides)
  return ModelConfig(**fields)


def load_config(path: str, **overrides: Any) -> ModelConfig:
  """Read `<path>/config.json` with transformers' AutoConfig (local files only) into a ModelConfig.

  Raises:
    CheckpointError naming the file when it is missing, unreadable or of an unsupported architecture.
  """
  import transformers  # pylint: disable=g-import-not-at-top

  cfg_file = os.path.join(path, "config.json")
  if not os.path.isfile(cfg_file):
    raise CheckpointError(f"{cfg_file}: missing; a Hugging Face checkpoint directory needs config.json.")
  try:
    hf = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
  except (ValueError, KeyError, OSError) as e:
    import json  # pylint: disable=g-import-not-at-top
    try:
      with open(cfg_file) as f:
        raw = json.load(f)
    except (OSError, ValueError) as e2:
      raise CheckpointError(f"{cfg_file}: not valid JSON ({e2}).") from e2
    if raw.get("model_type") not in SUPPORTED_FAMILIES:
      return from_hf_config(raw, source=cfg_file, **overrides)  # raises the unsupported-architecture error
    raise CheckpointError(f"{cfg_file}: transformers could not read it: {e}") from e
  return from_hf_config(hf, source=cfg_file, **overrides)


def to_hf_config(config: ModelConfig, *, dtype: str | None = None) -> Any:
  """The transformers config object (Qwen2Config / Qwen3Config / LlamaConfig) for `config`.

  Used by export; LoRA and compute options are not part of a Hugging Face config and are dropped.
  """
  import transformers  # pylint: disable=g-import-not-at-top

  rope: dict[str, Any] = {"rope_type": config.rope_type, "rope_theta": config.rope_theta}
  if config.rope_type == "linear":
    rope["factor"] = config.rope_factor
  elif config.rope_type == "llama3":
    rope.update(factor=config.rope_factor, low_freq_factor=config.rope_low_freq_factor,
                high_freq_factor=config.rope_high_freq_factor,
                original_max_position_embeddings=config.rope_original_max_position)
  eos = list(config.eos_token_ids)
  common = dict(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
      head_dim=config.head_dim, hidden_act="silu", rms_norm_eps=config.rms_norm_eps,
      max_position_embeddings=config.max_position_embeddings, rope_parameters=rope,
      tie_word_embeddings=config.tie_embeddings, bos_token_id=config.bos_token_id,
      eos_token_id=(eos[0] if len(eos) == 1 else (eos or None)), pad_token_id=config.pad_token_id,
      dtype=dtype or config.param_dtype)
  if config.family == "qwen2":
    cls = transformers.Qwen2Config
    common.update(use_sliding_window=False)
  elif config.family == "qwen3":
    cls = transformers.Qwen3Config
    common.update(attention_bias=config.o_bias, use_sliding_window=False)
  else:
    cls = transformers.LlamaConfig
    common.update(attention_bias=config.o_bias, mlp_bias=config.mlp_bias)
  hf = cls(**common)
  hf.architectures = [{"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                       "llama": "LlamaForCausalLM"}[config.family]]
  return hf
