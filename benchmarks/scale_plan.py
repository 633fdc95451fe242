r"""The published sizes on paper: per-device memory of one RL update and one sampling call on a (data, fsdp,
tensor) mesh, against a named accelerator's memory, and the smallest mesh that fits.

  python -m benchmarks.scale_plan                                  # the three published settings
  python -m benchmarks.scale_plan --config=configs/progagent.py    # one of them
  python -m benchmarks.scale_plan --config=configs/progagent.py --config.model.param_dtype=bfloat16 \
      --config.optim.master_weights=True                           # the published setting with a change
  python -m benchmarks.scale_plan --config=configs/progagent.py:smoke --nopublished --max_devices=8  # tiny

The settings (SPEC.md), each from the repository's config file plus the sizes that file does not hold
(PUBLISHED; a `--config.KEY=VALUE` override is applied after them, so it wins; `--nopublished` plans the config
as it is, its model from `model.checkpoint`: a local Hugging Face folder's config.json or a 'tiny:' shape):
  ProgAgent  configs/progagent.py's default is the published setting: GSPO steps of 32 tasks x 16 rollouts in
             `gspo.minibatches` = 4 updates of 128 rows, contexts of `env.max_context_tokens` = 32,768 tokens,
             replies of 4,096, full fine-tuning (`model.lora_rank` 0), float32 parameters and AdamW moments with
             bfloat16 compute (`model.dtype`); backbone Qwen3-8B (the config's docstring, SPEC.md).
  PlanPO     configs/planpo_scienceworld.py (the paper's 7B result is on ScienceWorld: turn limit 20, KL 1e-3 to a
             frozen reference) with the Qwen2.5-7B backbone, bfloat16 compute, N = 8 rollouts per task (SPEC.md),
             16 tasks per step and replies of 512 tokens (verl-agent's scripts, the reference framework: PlanPO
             does not state them), 128 sampler rows (`env.workers`: one per rollout) and 4,096-token rows
             (configs/planpo_base.py's `rollout.max_context_tokens`). One turn is one training row: a step has
             16 x 8 x 20 rows at most, in `rl.minibatches` = 2 updates.
  PhGPO      configs/phgpo_traject.py with the LM policy (`policy.kind` 'lm': Qwen2.5-7B with LoRA rank 64 /
             alpha 128 on q/k/v/o, phgpo.lm_tool_policy's targets, plus the tool head), bfloat16 compute,
             M = 5 rollouts of at most 20 steps (SPEC.md) for `rl.tasks_per_step` = 16 tasks: 1,600 decision
             states per update, each rendered in at most `policy.lm_max_length` = 1,024 tokens
             (LMToolPolicy's default; the paper does not state it; the config's 256 is its CPU size). The tool
             head has NUM_TOOLS columns (a stand-in: [D, N] is a few MB whatever N is).
Backbone shapes (BACKBONES) are the checkpoints' public config.json values.

Programs, lowered and compiled for each candidate mesh on fake CPU devices (XLA_FLAGS=
--xla_force_host_platform_device_count=N, set from --max_devices before JAX starts) from abstract inputs only
(jax.eval_shape, ShapeDtypeStructs carrying their NamedSharding: no weights exist):
  update  the trainer's own jitted step: ProgAgent progagent.updates.gspo_update on one minibatch, PlanPO
          planpo.train.rl_step on one minibatch, PhGPO phgpo.steps.Compiled.rl_update on one RL batch (its policy
          is LMToolPolicy's own apply and trainable mask on a config, without a checkpoint folder).
  sample  ProgAgent and PlanPO: the sampler's jitted program (common.lm.sampling.generate_cached: a prefill of
          min(2,048, context) new tokens in one LMSampler prefill block, then the decode loop of the reply's tokens)
          on one sampler block of rows, its KV cache of the context limit donated as the sampler does; PhGPO: the
          decision's forward pass (LMToolPolicy.apply on the tasks x M states of one turn; PhGPO's LM policy
          scores tools and generates no text, so it has no KV cache).
Per device (each row of the table):
  params  exact: every parameter's shard shape (its NamedSharding, common.lm.sharding.param_shardings) x dtype size
  opt     exact: the optimizer state, float32 master weights included (common.lm.training.state_shardings)
  ref     exact: PlanPO's frozen KL reference parameters (`planpo.kl_coef` > 0), resident the whole step
  KV      exact: the KV cache rows held, [L, B, S, K, hd] in the compute dtype, B over (data, fsdp) and K over
          tensor (the rules' 'batch' and 'kv_heads'): with KV reuse the pool's blocks (LMSampler keeps them all:
          every row, or the rows the config's `*.kv_cache_max_gb` budget holds plus one block of chunk rows for
          the others' re-prefill; `kv_bytes`), one block without
  act     measured: XLA's temporary allocation of the compiled program (memory_analysis().temp_size_in_bytes):
          activations, gradients and their float32 accumulators, optimizer temporaries, attention and logit blocks
  io      measured: the program's other inputs (batch rows, the sampler's suffix) and its outputs that alias no
          input. The trainers' jitted updates donate nothing, so the new train state is written beside the old
          one (io holds a second params + opt); --donate plans them with the state donated.
  total   argument + output - alias + temp bytes of the compiled program, plus what stays resident beside it
          (the optimizer state and the reference while sampling, the other KV blocks)
Nothing is extrapolated: every program is compiled at full depth (the decoder's layers are one lax.scan, so a
compile takes about as long at 36 layers as at 2: ~20 s on 2 busy cores).

Search (`plan`): mesh sizes n = 1, 2, 4, ... up to --max_devices; at each n the shapes (n/t, 1, t) and (1, n/t, t)
for tensor sizes t that divide both head counts, in order of their exact resident bytes. For each shape the update
is tried from the config's own options towards the ones that save memory: the config's `model.remat` and micro-batch,
then remat 'full', then micro-batches of 4 and of 1 row per device (`gspo.micro_batch_size`, PlanPO
`rl.micro_batch_size`, PhGPO `policy.micro_batches`); and the sampler from the config's rows per call
(`gspo.generate_batch_size`, PlanPO `env.workers`) and KV reuse down to one row per device. A ladder stops at
the first rung that fits the smallest budget still unmet that this mesh can reach. A rung is not compiled (its
total is then '>' a lower bound) when its exact bytes already exceed the largest budget still unmet, for an update
with lower bounds added: the new train state (unless --donate), the gradients (the trainable leaves in the
parameter dtype) and the saved activations (every layer's input for the rows of one micro-batch on the device,
layers x rows x tokens x hidden x the compute dtype's bytes: `saved_inputs_bytes`). A device's budget is
--usable (0.9) of its memory (JAX on a GPU preallocates 75% unless XLA_PYTHON_CLIENT_MEM_FRACTION says
otherwise). A mesh fits a device when an update rung and a sampler rung both fit it; the search stops when every
device has its smallest fitting mesh.

What the numbers are not. XLA:CPU is not the accelerator's compiler: it computes bfloat16 matmuls and
elementwise ops in float32 in places, and fuses differently, so `act` is an estimate, on the high side, of what
a GPU or TPU compiler allocates (the exact columns are the same everywhere). Attention is the model's blocked
XLA path (`model.attention_impl` 'xla'): [rows, heads, `model.attention_chunk`, S] float32 scores per block, which
a flash kernel would not hold. The trainers' LMSampler runs on one device (common.lm.sampler.commit): the sample
rows are the memory of its program on the mesh. The SFT stage (ProgAgent: 64 rows per update, fewer than GSPO's
128), the log-prob scoring passes and the pheromone tables are smaller than what is planned here and left out.

What the code costs (measured here, none changed here): (1) the jitted updates donate nothing, so `io` holds a
second train state (--donate plans the same updates with it donated; XLA:CPU then allocates temporaries for most
of the new state, so the total drops by less than the state's size); (2) the decoder's activations carry no
sharding constraint, so on an fsdp axis XLA's partitioner gathers the whole micro-batch's hidden states on every
device (all-gathers of f32[rows, T, D]) and `act` grows with the fsdp size instead of shrinking: prefer tensor
before fsdp for long rows; (3) PhGPO's LoRA update (phgpo.steps.Compiled.rl_update) differentiates the whole
parameter tree, so its `act` holds float32 gradients of the frozen base weights too (the kit's updates with
`model.lora_rank` > 0 do the same; common.lm.lora.partition would leave them out).
"""

from __future__ import annotations

import os
import sys


def _argv_int(name: str, default: int) -> int:
  """The value of --name=N or --name N in sys.argv (read before JAX starts)."""
  for i, a in enumerate(sys.argv):
    if a.startswith(f"--{name}="):
      return int(a.split("=", 1)[1])
    if a == f"--{name}" and i + 1 < len(sys.argv):
      return int(sys.argv[i + 1])
  return default


DEFAULT_MAX_DEVICES = 64
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count="
                             f"{_argv_int('max_devices', DEFAULT_MAX_DEVICES)}").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from typing import Any, Callable, NamedTuple, Sequence  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from common import config_util  # noqa: E402
from common.lm import checkpoints as lm_checkpoints  # noqa: E402
from common.lm import config as config_lib  # noqa: E402
from common.lm import model as model_lib  # noqa: E402
from common.lm import sampler as sampler_lib  # noqa: E402
from common.lm import sampling  # noqa: E402
from common.lm import sharding as sharding_lib  # noqa: E402
from common.lm import stages  # noqa: E402
from common.lm import training  # noqa: E402
from common.lm import updates as kit  # noqa: E402
from common.lm.config import ModelConfig  # noqa: E402

GiB = 2 ** 30
MiB = 2 ** 20

# The checkpoints' public config.json shapes (Hugging Face: Qwen/Qwen2.5-7B, meta-llama/Llama-3.1-8B, Qwen/Qwen3-8B).
BACKBONES = {
    "qwen2.5-7b": ModelConfig(family="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                              num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128, rms_norm_eps=1e-6,
                              rope_theta=1e6, max_position_embeddings=32768, qkv_bias=True, tie_embeddings=False),
    "llama3.1-8b": ModelConfig(family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                               num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5,
                               rope_theta=5e5, rope_type="llama3", rope_factor=8.0, rope_low_freq_factor=1.0,
                               rope_high_freq_factor=4.0, rope_original_max_position=8192,
                               max_position_embeddings=131072, tie_embeddings=False),
    "qwen3-8b": ModelConfig(family="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                            num_layers=36, num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6,
                            rope_theta=1e6, max_position_embeddings=40960, qk_norm=True, tie_embeddings=False),
}
BACKBONE_NAMES = {"qwen2.5-7b": "Qwen2.5-7B", "llama3.1-8b": "Llama-3.1-8B", "qwen3-8b": "Qwen3-8B"}


class Published(NamedTuple):
  """A method's published setting: its config file, backbone and the overrides the file does not hold."""
  name: str
  config: str
  backbone: str
  overrides: dict


# config.method -> the published setting (sources: the module docstring).
PUBLISHED = {
    "progagent": Published("ProgAgent", "configs/progagent.py", "qwen3-8b", {}),
    "planpo": Published("PlanPO", "configs/planpo_scienceworld.py", "qwen2.5-7b", {
        "model.dtype": "bfloat16", "rl.tasks_per_step": 16, "rl.rollouts_per_task": 8, "env.workers": 128,
        "rollout.max_context_tokens": 4096, "rollout.max_response_tokens": 512}),
    "phgpo_compare": Published("PhGPO", "configs/phgpo_traject.py", "qwen2.5-7b", {
        "policy.kind": "lm", "model.dtype": "bfloat16", "policy.lm_max_length": 1024}),
}
METHOD_NAMES = {"progagent": "ProgAgent", "planpo": "PlanPO", "phgpo_compare": "PhGPO"}


class Device(NamedTuple):
  """A named accelerator: its memory in bytes (NVIDIA: nvidia-smi's total; TPU v5e: 16 GiB of HBM per chip)."""
  name: str
  memory: int


DEVICES = {"H100": Device("H100 80 GB", 81559 * MiB), "H200": Device("H200 141 GB", 143771 * MiB),
           "v5e": Device("TPU v5e 16 GB", 16 * GiB)}
NUM_TOOLS = 256          # PhGPO's tool head columns (a stand-in; the head is [D, N])
PREFILL_CHUNK = 2048     # LMSampler's prefill block (common.lm.sampler.LMSampler(prefill_chunk=2048))
PHGPO_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")   # phgpo.lm_tool_policy.LMToolPolicy's default


# --- the setting --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class Setting:
  """One method's sizes, read from its config (`build_setting`).

  Attributes:
    name, method: e.g. 'ProgAgent', config.method.
    config: the ConfigDict it was read from.
    model: the ModelConfig (LoRA fields set when the method trains adapters).
    backbone: a BACKBONES key or the config's checkpoint.
    update_rows, update_length: rows and padded tokens of one optimizer step's batch.
    micro_rows: the config's rows per micro-batch (0 = one pass).
    sample_rows: episodes (rows) the sampler holds; sample_chunk_rows: rows per generate call (a cache block).
    sample_context: KV slots per row (the context limit); sample_new: tokens generated per call (0: no sampler).
    kv_reuse: the config's multi-turn KV reuse, after the trainers' size guard (common.lm.sampler.reuse_options:
      off only when not even one row fits the budget).
    one_block: the sampler's rows per call are all its rows (PlanPO: `env.workers` rows, no block size), so fewer
      rows per call means fewer episodes at once and KV reuse never keeps other blocks.
    reference: a frozen copy of the parameters is resident (a KL reference).
    keys: config keys printed with a rung: 'remat', 'micro', 'sample_rows', 'kv_reuse'.
    describe: one line of sizes for the table's header.
    kv_pool_rows: rows of the sampler's KV pool within the config's `*.kv_cache_max_gb` budget
      (common.lm.sampler.pool_rows; sample_rows when they all fit, 0 without reuse).
    sample_keys: the config's `*.sample_keys` ('request' | 'call': the pool's block layout, pool_blocks).
  """
  name: str
  method: str
  config: Any
  model: ModelConfig
  backbone: str
  update_rows: int
  update_length: int
  micro_rows: int
  sample_rows: int
  sample_chunk_rows: int
  sample_context: int
  sample_new: int
  kv_reuse: bool
  one_block: bool
  reference: bool
  keys: dict
  describe: str
  kv_pool_rows: int = 0
  sample_keys: str = "request"


def _set(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
  """config[a][b]... = value for key 'a.b...' (an unknown key raises KeyError: the config is locked)."""
  *path, last = key.split(".")
  node = config
  for k in path:
    node = node[k]
  if last not in node:
    raise KeyError(f"config has no key {key!r}")
  node[last] = value


def published_config(method: str, config: ml_collections.ConfigDict | None = None,
                     overrides: dict | None = None) -> ml_collections.ConfigDict:
  """The published setting's config: `config` (default: PUBLISHED[method]'s file) with PUBLISHED's overrides,
  then `overrides` (the command line's, 'a.b' -> value) on top.

  Raises:
    KeyError: an unknown method or key.
  """
  pub = PUBLISHED[method]
  if config is None:
    config = load_config_file(pub.config)
  config = config.copy_and_resolve_references()
  for k, v in {**pub.overrides, **dict(overrides or {})}.items():
    _set(config, k, v)
  return config


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """get_config(variant) of 'configs/NAME.py[:VARIANT]' (the launcher's --config syntax)."""
  import importlib  # pylint: disable=g-import-not-at-top
  path, _, variant = spec.partition(":")
  module = importlib.import_module(os.path.splitext(path)[0].replace(os.sep, "."))
  return module.get_config(variant or None)


def model_of(model_node: Any, backbone: str | None) -> tuple[ModelConfig, str]:
  """(ModelConfig, its name) of a `model` config node: BACKBONES[backbone] when given, else `model.checkpoint`
  ('tiny:<family>': common.lm.testing.make_tiny_checkpoint's shapes with `model.tiny_sizes`, the vocabulary
  `model.tiny_vocab` rounded up to 16 (the tokenizer trained for it may be smaller); a local folder: its
  config.json), with the node's dtype, param_dtype ('' = dtype), remat and attention settings
  (common.lm.stages.model_overrides). No LoRA fields (see `build_setting`).

  Raises:
    ValueError: no backbone and an empty checkpoint.
  """
  over = stages.model_overrides(model_node)
  over["param_dtype"] = over["param_dtype"] or over["dtype"]
  if backbone:
    return BACKBONES[backbone].replace(**over), BACKBONE_NAMES.get(backbone, backbone)
  spec = str(config_util.get(model_node, "checkpoint", ""))
  if spec.startswith(lm_checkpoints.TINY_PREFIX):
    family = spec[len(lm_checkpoints.TINY_PREFIX):] or "qwen2"
    sizes = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    sizes.update(dict(config_util.get(model_node, "tiny_sizes", None) or {}))
    vocab = -(-int(config_util.get(model_node, "tiny_vocab", 2048)) // 16) * 16
    cfg = ModelConfig(family=family, vocab_size=vocab, head_dim=sizes["hidden_size"] // sizes["num_heads"],
                      qkv_bias=family == "qwen2", qk_norm=family == "qwen3", tie_embeddings=family != "llama",
                      **sizes)
    return cfg.replace(**over), spec
  if not spec:
    raise ValueError("no backbone and an empty model.checkpoint: give --backbone or a checkpoint folder")
  return config_lib.load_config(spec, **over), spec


def build_setting(config: ml_collections.ConfigDict, *, backbone: str | None = None, name: str = "") -> Setting:
  """The sizes of one update and one sampler call of config.method ('progagent', 'planpo', 'phgpo_compare').

  Raises:
    ValueError: another method, or PhGPO without `policy.kind` 'lm' (the other policies are not language models).
  """
  method = config.method
  name = name or METHOD_NAMES.get(method, method)
  model, bname = model_of(config.model, backbone)
  rank = int(config.model.get("lora_rank", 0) or 0)
  if method == "progagent":
    g, e = config.gspo, config.env
    if rank:
      model = model.with_lora(rank=rank, alpha=float(config.model.lora_alpha), targets=tuple(config.model.lora_targets))
    rows = int(g.tasks_per_step) * int(g.rollouts_per_task)
    length = sampling.bucket_length(int(e.max_context_tokens), buckets=tuple(config.lengths.buckets))
    opts = sampler_lib.reuse_options(model, enabled=g.get("kv_reuse", True), rows=rows,
                                     context_tokens=int(e.max_context_tokens),
                                     max_gib=float(g.get("kv_cache_max_gb", 32.0)), key="gspo")
    reuse = opts["kv_reuse"]
    pool = sampler_lib.pool_rows(model, rows, opts["cache_len"], opts["cache_max_bytes"]) if reuse else 0
    upd = rows // int(g.minibatches)
    return Setting(name, method, config, model, bname, upd, length, int(g.micro_batch_size), rows,
                   int(g.generate_batch_size) or rows, int(e.max_context_tokens), int(e.max_response_tokens),
                   bool(reuse), False, False,
                   dict(remat="model.remat", micro="gspo.micro_batch_size", sample_rows="gspo.generate_batch_size",
                        kv_reuse="gspo.kv_reuse"),
                   f"update {upd} rows x {length:,} tokens ({g.tasks_per_step} tasks x {g.rollouts_per_task} "
                   f"rollouts / {g.minibatches} minibatches); sampler {rows} rows x {int(e.max_context_tokens):,} "
                   f"KV slots, {int(e.max_response_tokens):,} new tokens",
                   kv_pool_rows=pool, sample_keys=str(g.get("sample_keys", "request")))
  if method == "planpo":
    from planpo import rollouts as planpo_rollouts  # pylint: disable=g-import-not-at-top
    rl, ro, e = config.rl, config.rollout, config.env
    if rank:
      model = model.with_lora(rank=rank, alpha=float(config.model.lora_alpha), targets=tuple(config.model.lora_targets))
    episodes = int(rl.tasks_per_step) * int(rl.rollouts_per_task)
    step_rows = episodes * int(e.max_turns)
    upd = -(-step_rows // int(rl.minibatches))
    length = sampling.bucket_length(int(ro.max_context_tokens), buckets=planpo_rollouts.LENGTH_BUCKETS)
    rows = max(1, min(episodes, int(e.workers)))
    opts = sampler_lib.reuse_options(model, enabled=ro.get("kv_reuse", True), rows=rows,
                                     context_tokens=int(ro.max_context_tokens),
                                     max_gib=float(ro.get("kv_cache_max_gb", 32.0)), key="rollout")
    reuse = opts["kv_reuse"]
    pool = sampler_lib.pool_rows(model, rows, opts["cache_len"], opts["cache_max_bytes"]) if reuse else 0
    return Setting(name, method, config, model, bname, upd, length, int(rl.micro_batch_size), rows, rows,
                   int(ro.max_context_tokens), int(ro.max_response_tokens), bool(reuse), True,
                   float(config.planpo.kl_coef) > 0,
                   dict(remat="model.remat", micro="rl.micro_batch_size", sample_rows="env.workers",
                        kv_reuse="rollout.kv_reuse"),
                   f"update {upd} turn rows x {length:,} tokens ({rl.tasks_per_step} tasks x {rl.rollouts_per_task} "
                   f"rollouts x {e.max_turns} turns / {rl.minibatches} minibatches); sampler {rows} rows x "
                   f"{int(ro.max_context_tokens):,} KV slots, {int(ro.max_response_tokens)} new tokens; "
                   f"KL reference resident", kv_pool_rows=pool, sample_keys=str(ro.get("sample_keys", "request")))
  if method == "phgpo_compare":
    if config.policy.kind != "lm":
      raise ValueError(f"PhGPO's policy.kind={config.policy.kind!r} is not a language model; plan it with "
                       "--config.policy.kind=lm")
    if rank:
      model = model.with_lora(rank=rank, alpha=float(config.model.lora_alpha), targets=PHGPO_LORA_TARGETS)
    b = int(config.rl.tasks_per_step) * int(config.rl.rollouts_per_task)
    h = int(config.env.max_steps)
    length = sampling.bucket_length(int(config.policy.lm_max_length))
    n = int(config.policy.get("micro_batches", 1))
    micro = 0 if n <= 1 else -(-b * h // n)
    return Setting(name, method, config, model, bname, b * h, length, micro, b, b, length, 0, False, True,
                   float(config.rl.kl_coef) > 0,
                   dict(remat="model.remat", micro="policy.micro_batches", sample_rows="", kv_reuse=""),
                   f"update {b * h} decision states x {length:,} tokens ({config.rl.tasks_per_step} tasks x "
                   f"{config.rl.rollouts_per_task} rollouts x {h} steps); decision forward {b} states, no KV cache")
  raise ValueError(f"config.method={method!r}: no plan for it; valid: {sorted(METHOD_NAMES)}")


# --- exact bytes ---------------------------------------------------------------------------------------------

def device_bytes(tree: Any) -> int:
  """Bytes one device holds of a pytree of ShapeDtypeStructs carrying NamedShardings: sum over leaves of
  prod(shard shape) x dtype size (a replicated leaf counts whole on every device)."""
  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) is not None else x.shape
    total += math.prod(shape) * _itemsize(x.dtype)
  return int(total)


def _itemsize(dtype) -> int:
  """Bytes of one element; a typed PRNG key counts its key data (e.g. u32[2] for threefry)."""
  if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
    data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
    return math.prod(data.shape) * data.dtype.itemsize
  return jnp.dtype(dtype).itemsize


def _placed(tree: Any, shardings: Any) -> Any:
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _rows_sharding(mesh, rows: int, ndim: int) -> NamedSharding:
  """Rows over the batch axes when they divide them (as common.lm.training.place_batch), else replicated."""
  if rows % training.batch_shards(mesh) == 0:
    return sharding_lib.batch_sharding(mesh, ndim=ndim)
  return NamedSharding(mesh, P())


def _rows(mesh, shape: tuple, dtype) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=_rows_sharding(mesh, shape[0], len(shape)))


class _ToolPolicy:
  """phgpo.lm_tool_policy.LMToolPolicy's apply and trainable mask over a ModelConfig, without a checkpoint folder
  (both read only `self.config`)."""

  def __init__(self, config: ModelConfig, num_tools: int):
    from phgpo import lm_tool_policy  # pylint: disable=g-import-not-at-top
    self.config, self.num_tools, self.mesh, self.rules = config, num_tools, None, None
    self._cls = lm_tool_policy.LMToolPolicy

  def apply(self, params, batch):
    return self._cls.apply(self, params, batch)

  def trainable_mask(self, params):
    return self._cls.trainable_mask(self, params)


class State(NamedTuple):
  """The resident state of a setting on a mesh: abstract placed pytrees and their exact bytes per device."""
  params: Any
  tree: Any           # the update's state argument: the TrainState (ProgAgent, PlanPO) or the optimizer state (PhGPO)
  params_bytes: int
  opt_bytes: int
  ref_bytes: int
  grad_bytes: int     # trainable leaves in the parameter dtype: a lower bound of the gradients


def abstract_params(setting: Setting) -> Any:
  """ShapeDtypeStructs of the setting's parameters (PhGPO: {'lm', 'tool_head'})."""
  params = model_lib.abstract_params(setting.model)
  if setting.method == "phgpo_compare":
    pdt = jnp.dtype(setting.model.param_dtype)
    params = {"lm": params, "tool_head": {"kernel": jax.ShapeDtypeStruct((setting.model.hidden_size, NUM_TOOLS), pdt),
                                          "bias": jax.ShapeDtypeStruct((NUM_TOOLS,), pdt)}}
  return params


def _learning_rate(setting: Setting) -> float:
  c = setting.config
  return float({"progagent": lambda: c.gspo.learning_rate, "planpo": lambda: c.rl.learning_rate,
                "phgpo_compare": lambda: c.rl.learning_rate}[setting.method]())


def _phgpo_compiled(setting: Setting, model: ModelConfig, micro_batches: int):
  """phgpo.steps.Compiled for the LM tool policy of `model` and `policy.micro_batches` = micro_batches, on a
  stand-in problem (the update reads none of it: the graph and embeddings serve the decision and the bank)."""
  from phgpo import steps  # pylint: disable=g-import-not-at-top
  config = setting.config.copy_and_resolve_references()
  config.policy.micro_batches = int(micro_batches)
  problem = types.SimpleNamespace(graph=types.SimpleNamespace(start_index=NUM_TOOLS,
                                                              template_mask=np.ones((NUM_TOOLS, 1), bool)),
                                  query_emb=np.zeros((1, 8), np.float32), tasks=[], split="random")
  return steps.Compiled(config, _ToolPolicy(model, NUM_TOOLS), problem)


def resident_state(setting: Setting, mesh) -> State:
  """The parameters and optimizer state of `setting` placed on `mesh` (abstract), with exact bytes per device."""
  params = abstract_params(setting)
  p_sh = sharding_lib.param_shardings(params, mesh)
  if setting.method == "phgpo_compare":
    compiled = _phgpo_compiled(setting, setting.model, 1)
    optim = kit.optim_settings(setting.config.optim, _learning_rate(setting))
    mask_fn = compiled.policy.trainable_mask
    opt = jax.eval_shape(lambda p: training.init_opt_state(compiled.optimizer, p, master_weights=optim.master_weights,
                                                           trainable=mask_fn(p)), params)
    opt = _placed(opt, training.state_shardings(opt, params, mesh))
    mask = mask_fn(params)
  else:
    optim = stages.stage_optim(setting.config, _learning_rate(setting))
    state = jax.eval_shape(lambda p: kit.init_state(p, optim, key=0, commit=False), params)
    opt = _placed(state, training.state_shardings(state, params, mesh))
    mask = kit.trainable_mask(optim, params) or jax.tree.map(lambda _: True, params)
  placed = _placed(params, p_sh)
  pb = device_bytes(placed)
  # ProgAgent / PlanPO: `opt` is the whole TrainState (params, opt_state, key, step); PhGPO: the optimizer state
  ob = device_bytes(opt) - (0 if setting.method == "phgpo_compare" else pb)
  grads = jax.tree.map(lambda x, m: x if m else None, placed, mask)
  return State(placed, opt, pb, ob, pb if setting.reference else 0, device_bytes(grads))


# --- options and programs ------------------------------------------------------------------------------------

class UpdateOption(NamedTuple):
  """remat: model.remat; micro_rows: rows per micro-batch (0 = one pass)."""
  remat: str
  micro_rows: int


class SampleOption(NamedTuple):
  """chunk_rows: rows per sampler call (one KV block); kv_reuse: the pool's blocks stay resident (`kv_bytes`)."""
  chunk_rows: int
  kv_reuse: bool


def update_ladder(setting: Setting, shards: int) -> list[UpdateOption]:
  """The config's (remat, micro-batch), then remat 'full', then 4 and 1 rows per device per micro-batch."""
  rows = setting.update_rows
  micro = setting.micro_rows if 0 < setting.micro_rows < rows else 0
  out = [UpdateOption(setting.model.remat, micro)]
  if setting.model.remat != "full":
    out.append(UpdateOption("full", micro))
  current = micro or rows
  for r in (4, 1):
    m = r * shards
    if m < current:
      out.append(UpdateOption("full", m))
      current = m
  return out


def sample_ladder(setting: Setting, shards: int) -> list[SampleOption]:
  """The config's rows per call and KV reuse, then reuse off (when the rows make several blocks), then half the rows
  per call down to one per device (PlanPO: fewer sampler rows, `env.workers`, its KV reuse unchanged)."""
  if not setting.sample_new:
    return [SampleOption(setting.sample_rows, False)]
  c = setting.sample_chunk_rows
  reuse = setting.kv_reuse and setting.one_block
  out = [SampleOption(c, setting.kv_reuse)]
  if setting.kv_reuse and c < setting.sample_rows and not setting.one_block:   # several blocks; without reuse: one
    out.append(SampleOption(c, False))
  while c // 2 >= shards and c % 2 == 0:
    c //= 2
    out.append(SampleOption(c, reuse))
  return out


def _update_program(setting: Setting, st: State, mesh, opt: UpdateOption, donate: bool):
  """(jitted step, abstract args) of one optimizer step of `setting` with option `opt` on `mesh`. Every program
  here is jitted with keep_unused=True, so XLA's argument bytes are all of its inputs, resident whether read or not."""
  model = setting.model.replace(remat=opt.remat)
  shards = training.batch_shards(mesh)
  length = setting.update_length
  if setting.method == "phgpo_compare":
    from phgpo import lm_tool_policy  # pylint: disable=g-import-not-at-top
    h = int(setting.config.env.max_steps)
    b = setting.update_rows // h
    n = 1 if not opt.micro_rows else -(-setting.update_rows // opt.micro_rows)
    compiled = _phgpo_compiled(setting, model, n)
    tokens = _rows(mesh, (b * h, length), jnp.int32)
    flat = lm_tool_policy.LMPolicyBatch(tokens, tokens)    # token ids and mask, both i32[B * H, L]
    bh = lambda dt: _rows(mesh, (b, h), dt)
    scalar = jax.ShapeDtypeStruct((), jnp.float32, sharding=NamedSharding(mesh, P()))
    args = (st.params, st.tree, flat, bh(jnp.int32), bh(jnp.float32), _rows(mesh, (b,), jnp.float32), bh(jnp.bool_),
            bh(jnp.bool_), bh(jnp.float32), bh(jnp.int32), bh(jnp.float32), scalar, scalar)
    return jax.jit(compiled.rl_update, donate_argnums=(0, 1) if donate else (), keep_unused=True), args
  optim = stages.stage_optim(setting.config, _learning_rate(setting))
  n, rows = kit.micro_layout(setting.update_rows, opt.micro_rows, shards)
  r = lambda dt, *shape: _rows(mesh, (rows,) + shape, dt)
  if setting.method == "progagent":
    from progagent import updates as pa_updates  # pylint: disable=g-import-not-at-top
    g = setting.config.gspo
    fn = functools.partial(pa_updates.gspo_update, model=model, optim=optim, micro=n, temperature=float(g.temperature),
                           clip_low=float(g.clip_low), clip_high=float(g.clip_high))
    batch = pa_updates.Batch(r(jnp.int32, length), r(jnp.bool_, length), r(jnp.bool_, length), r(jnp.float32, length),
                             r(jnp.float32))
    return jax.jit(fn, donate_argnums=(0,) if donate else (), keep_unused=True), (st.tree, batch)
  from planpo import train as planpo_train  # pylint: disable=g-import-not-at-top
  p = setting.config.planpo
  # planpo.train._loss_kw: the loss settings as sorted items
  loss_kw = tuple(sorted(dict(clip_low=float(p.clip_low), clip_high=float(p.clip_high), kl_coef=float(p.kl_coef),
                              agg_mode=p.agg_mode, ratio=p.ratio).items()))
  fn = functools.partial(planpo_train.rl_step, model=model, optim=optim,
                         temperature=float(setting.config.rl.temperature), loss_kw=loss_kw, micro=n)
  args = (st.tree, r(jnp.int32, length), r(jnp.bool_, length), r(jnp.bool_, length), r(jnp.float32, length),
          r(jnp.float32, length), r(jnp.float32), r(jnp.float32))
  return jax.jit(fn, donate_argnums=(0,) if donate else (), keep_unused=True), args


def kv_cache(setting: Setting, mesh, rows: int) -> model_lib.KVCache:
  """The abstract KV cache of `rows` rows x sample_context slots, sharded by the rules (B over batch, K over tensor)."""
  m = setting.model
  shape = (m.num_layers, rows, setting.sample_context, m.num_kv_heads, m.head_dim)
  spec = sharding_lib.logical_to_spec(("layers", "batch", "length", "kv_heads", "head_dim"), shape, mesh)
  x = jax.ShapeDtypeStruct(shape, jnp.dtype(m.dtype), sharding=NamedSharding(mesh, spec))
  return model_lib.KVCache(x, x)


def _sample_program(setting: Setting, st: State, mesh, opt: SampleOption):
  """(jitted program, abstract args) of one sampler call (module docstring)."""
  b = opt.chunk_rows
  if setting.method == "phgpo_compare":
    from phgpo import lm_tool_policy  # pylint: disable=g-import-not-at-top
    pol = _ToolPolicy(setting.model, NUM_TOOLS)
    batch = lm_tool_policy.LMPolicyBatch(_rows(mesh, (b, setting.sample_context), jnp.int32),
                                         _rows(mesh, (b, setting.sample_context), jnp.int32))
    # keep_unused: the LM head, which the tool policy never reads, stays resident (and counted)
    return jax.jit(pol.apply, keep_unused=True), (st.params, batch)
  t = min(PREFILL_CHUNK, setting.sample_context)
  rep = NamedSharding(mesh, P())
  key = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype, sharding=rep)
  # generate_cached's jitted program, its cache donated as the sampler does
  program = sampling._generate_cached_jit  # pylint: disable=protected-access
  fn = jax.jit(functools.partial(program, config=setting.model, num_new=setting.sample_new,
                                 sampling=sampling.SamplingConfig(), pad_id=0, prefill_chunk=PREFILL_CHUNK),
               donate_argnums=(1,), keep_unused=True)
  args = (st.params, kv_cache(setting, mesh, b), _rows(mesh, (b, t), jnp.int32), _rows(mesh, (b,), jnp.int32),
          _rows(mesh, (b,), jnp.int32), _rows(mesh, (b, 2), jnp.int32), _rows(mesh, (b,), jnp.int32), key)
  return fn, args


class Row(NamedTuple):
  """One (mesh, program, option) of the plan, bytes per device (module docstring). compiled False: not compiled,
  `total` is then a lower bound (update_meta, sample_row) and act, io, arguments are -1. arguments: XLA's argument
  bytes of the program (the exact bytes of its inputs)."""
  mesh: tuple
  program: str
  option: str
  keys: dict
  params: int
  opt: int
  ref: int
  kv: int
  act: int
  io: int
  total: int
  compiled: bool
  compile_s: float
  arguments: int = -1


def _measure(fn, args, *, resident: int) -> tuple[int, int, int, float, int]:
  """(temp, argument + output - alias, total, seconds, argument) of compiling fn(*args); total adds `resident`."""
  t0 = time.perf_counter()
  m = fn.lower(*args).compile().memory_analysis()
  seconds = time.perf_counter() - t0
  program = int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)
  temp = int(m.temp_size_in_bytes)
  return temp, program, program + temp + resident, seconds, int(m.argument_size_in_bytes)


def saved_inputs_bytes(model: ModelConfig, rows: int, tokens: int) -> int:
  """A lower bound of an update's activations on one device: every layer's input [rows, tokens, hidden] in the
  compute dtype, which the backward pass needs whatever the remat policy ('full' saves exactly these; the layer
  scan keeps its carries), for the rows of one micro-batch on this device."""
  return int(model.num_layers * rows * tokens * model.hidden_size * jnp.dtype(model.dtype).itemsize)


def update_meta(setting: Setting, st: State, mesh, opt: UpdateOption, *, donate: bool) -> tuple[str, dict, int]:
  """(label, config keys, lower bound of the total in bytes) of the update with option `opt` on `mesh`: the exact
  bytes, the new state (unless donated), the gradients and `saved_inputs_bytes`."""
  shards = training.batch_shards(mesh)
  if setting.method == "phgpo_compare":
    n = 1 if not opt.micro_rows else -(-setting.update_rows // opt.micro_rows)
    micro_val, per_dev = n, -(-setting.update_rows // (n * shards))
  else:
    n, rows = kit.micro_layout(setting.update_rows, opt.micro_rows, shards)
    micro_val = opt.micro_rows or (setting.update_rows if setting.method == "planpo" else 0)
    per_dev = -(-rows // (n * shards))
  label = (f"remat {opt.remat}, " + ("one pass" if n == 1 else f"{n} micro-batches")
           + f" of {per_dev} row{'s' if per_dev > 1 else ''}/device")
  keys = {setting.keys["remat"]: opt.remat, setting.keys["micro"]: micro_val}
  state_bytes = st.params_bytes + st.opt_bytes
  bound = (state_bytes + st.ref_bytes + (0 if donate else state_bytes) + st.grad_bytes
           + saved_inputs_bytes(setting.model, per_dev, setting.update_length))
  return label, keys, bound


def update_row(setting: Setting, st: State, mesh, opt: UpdateOption, *, donate: bool, budget: float) -> Row:
  """The update with option `opt` on `mesh`: compiled unless its lower bound (update_meta) exceeds `budget` bytes."""
  label, keys, bound = update_meta(setting, st, mesh, opt, donate=donate)
  state_bytes = st.params_bytes + st.opt_bytes
  if bound > budget:
    return Row(mesh_shape(mesh), "update", label, keys, st.params_bytes, st.opt_bytes, st.ref_bytes, 0, -1, -1,
               bound, False, 0.0)
  fn, args = _update_program(setting, st, mesh, opt, donate)
  temp, program, total, seconds, arguments = _measure(fn, args, resident=st.ref_bytes)
  io = program - state_bytes
  return Row(mesh_shape(mesh), "update", label, keys, st.params_bytes, st.opt_bytes, st.ref_bytes, 0, temp, io, total,
             True, seconds, arguments)


def kv_pool(setting: Setting, opt: SampleOption) -> tuple[int, int]:
  """(sampler rows, KV pool rows) of the sampler option `opt`: the pool holds min(rows, `kv_pool_rows`) (the rows
  within the budget); PlanPO's one block has opt.chunk_rows rows (`env.workers`). Pool 0 without reuse."""
  rows = opt.chunk_rows if setting.one_block else setting.sample_rows
  return rows, (min(rows, setting.kv_pool_rows) if opt.kv_reuse else 0)


def kv_bytes(setting: Setting, mesh, opt: SampleOption) -> tuple[int, int]:
  """(one block's, all resident) KV-cache bytes per device of the sampler option `opt`: one block of opt.chunk_rows
  rows without reuse; with it the pool's blocks (common.lm.sampler.pool_blocks: `kv_pool`), plus one block of
  chunk rows when the pool holds fewer rows than the sampler (the others' re-prefill, beside the pool)."""
  if not setting.sample_new:
    return 0, 0
  block = device_bytes(kv_cache(setting, mesh, opt.chunk_rows))
  rows, pool = kv_pool(setting, opt)
  if not pool:
    return block, block
  held = sum(device_bytes(kv_cache(setting, mesh, n))
             for n in sampler_lib.pool_blocks(rows, opt.chunk_rows, pool, setting.sample_keys))
  return block, held + (block if pool < rows else 0)


def sample_row(setting: Setting, st: State, mesh, opt: SampleOption, *, budget: float) -> Row:
  """The sampler call with option `opt` on `mesh`: compiled unless its exact bytes exceed `budget`."""
  shards = training.batch_shards(mesh)
  block, kv = kv_bytes(setting, mesh, opt)
  if setting.sample_new:
    rows, pool = kv_pool(setting, opt)
    label = (f"{opt.chunk_rows} row{'s' if opt.chunk_rows > 1 else ''}/call ({-(-opt.chunk_rows // shards)}/device), "
             "KV reuse "
             + ("off" if not opt.kv_reuse else "on" if pool == rows else f"on, a pool of {pool} of {rows} rows"))
    keys = {setting.keys["sample_rows"]: opt.chunk_rows, setting.keys["kv_reuse"]: opt.kv_reuse}
  else:
    label, keys = f"{opt.chunk_rows} states forward, no KV cache", {}
  exact = st.params_bytes + st.opt_bytes + st.ref_bytes + kv
  if exact > budget:
    return Row(mesh_shape(mesh), "sample", label, keys, st.params_bytes, st.opt_bytes, st.ref_bytes, kv, -1, -1,
               exact, False, 0.0)
  fn, args = _sample_program(setting, st, mesh, opt)
  # resident beside the program: the optimizer state, the reference, the other KV blocks
  temp, program, total, seconds, arguments = _measure(fn, args, resident=st.opt_bytes + st.ref_bytes + kv - block)
  io = program - st.params_bytes - block
  return Row(mesh_shape(mesh), "sample", label, keys, st.params_bytes, st.opt_bytes, st.ref_bytes, kv, temp, io, total,
             True, seconds, arguments)


# --- the search ----------------------------------------------------------------------------------------------

def mesh_shape(mesh) -> tuple[int, int, int]:
  return tuple(int(mesh.shape[a]) for a in sharding_lib.MESH_AXES)


def mesh_shapes(n: int, model: ModelConfig) -> list[tuple[int, int, int]]:
  """(n/t, 1, t) and (1, n/t, t) for powers of two t <= n dividing both head counts (distinct, t ascending)."""
  g = math.gcd(model.num_heads, model.num_kv_heads)
  out = []
  t = 1
  while t <= n:
    if g % t == 0 and n % t == 0:
      for s in ((n // t, 1, t), (1, n // t, t)):
        if s not in out:
          out.append(s)
    t *= 2
  return out


class Fit(NamedTuple):
  """A device's smallest fitting mesh: its size, shape and the first update / sampler rows that fit."""
  devices: int
  mesh: tuple
  update: Row
  sample: Row


class Plan(NamedTuple):
  setting: Setting
  budgets: dict      # device key -> bytes
  rows: list         # Row, in search order
  fits: dict         # device key -> Fit or None
  max_devices: int
  compiles: int
  seconds: float


def first_fit(updates: Sequence[Row], samples: Sequence[Row], budget: float) -> tuple[Row, Row] | None:
  """The first compiled update row and the first compiled sampler row whose totals are <= budget bytes, or None
  when either has none: a mesh fits a device when both its programs fit."""
  u = next((r for r in updates if r.compiled and r.total <= budget), None)
  s = next((r for r in samples if r.compiled and r.total <= budget), None)
  return None if u is None or s is None else (u, s)


def budgets_of(devices: Sequence[str], usable: float) -> dict:
  """device key -> usable bytes (memory x usable)."""
  return {d: DEVICES[d].memory * float(usable) for d in devices}


def plan(setting: Setting, budgets: dict, *, max_devices: int, donate: bool = False,
         log: Callable[[str], None] | None = None) -> Plan:
  """The search of the module docstring: the smallest mesh (devices, shape, options) that fits each budget.

  Args:
    setting: from build_setting.
    budgets: device name -> usable bytes per device.
    max_devices: the largest mesh tried (at most jax.device_count()).
    donate: plan the updates with their train state donated (the trainers do not donate it).
    log: called with one line per compiled program (progress).
  Returns:
    Plan; fits[d] is None when no mesh up to max_devices fits d.
  Raises:
    ValueError: max_devices above the devices JAX sees.
  """
  if max_devices > jax.device_count():
    raise ValueError(f"max_devices={max_devices} but JAX sees {jax.device_count()} devices (XLA_FLAGS="
                     "--xla_force_host_platform_device_count=N before JAX starts; --max_devices sets it)")
  t0 = time.perf_counter()
  rows: list[Row] = []
  fits: dict = {d: None for d in budgets}
  n = 1
  while n <= max_devices and any(v is None for v in fits.values()):
    open_ = {d: b for d, b in budgets.items() if fits[d] is None}
    shapes = []
    for shape in mesh_shapes(n, setting.model):
      mesh = sharding_lib.make_mesh(shape, devices=jax.devices()[:n])
      st = resident_state(setting, mesh)
      shapes.append((st.params_bytes + st.opt_bytes + st.ref_bytes, shape, mesh, st))
    shapes.sort(key=lambda x: x[0])
    for _, shape, mesh, st in shapes:
      if not open_:
        break
      hi = max(open_.values())
      shards = training.batch_shards(mesh)
      # A ladder stops at the first rung that fits the smallest budget it can reach at all (its floor: the
      # lowest lower bound of its rungs), so a budget out of reach on this mesh does not compile every rung.
      ladder = update_ladder(setting, shards)
      floor = min(update_meta(setting, st, mesh, o, donate=donate)[2] for o in ladder)
      lo = min([b for b in open_.values() if b >= floor] or [hi])
      ups = []
      for opt in ladder:
        row = update_row(setting, st, mesh, opt, donate=donate, budget=hi)
        rows.append(row)
        _progress(log, setting, row)
        ups.append(row)
        if row.compiled and row.total <= lo:
          break
      # the sampler matters only for the budgets some update rung fits
      met = {d: b for d, b in open_.items() if any(u.compiled and u.total <= b for u in ups)}
      if not met:
        continue
      hi = max(met.values())
      ladder = sample_ladder(setting, shards)
      floor = st.params_bytes + st.opt_bytes + st.ref_bytes + min(kv_bytes(setting, mesh, o)[1] for o in ladder)
      lo = min([b for b in met.values() if b >= floor] or [hi])
      sams = []
      for opt in ladder:
        row = sample_row(setting, st, mesh, opt, budget=hi)
        rows.append(row)
        _progress(log, setting, row)
        sams.append(row)
        if row.compiled and row.total <= lo:
          break
      for d, b in list(met.items()):
        pair = first_fit(ups, sams, b)
        if pair is not None:
          fits[d] = Fit(n, shape, *pair)
          del open_[d]
    n *= 2
  return Plan(setting, dict(budgets), rows, fits, max_devices, sum(r.compiled for r in rows),
              time.perf_counter() - t0)


def _progress(log, setting: Setting, row: Row) -> None:
  if log is not None and row.compiled:
    log(f"  [{setting.name}] {row.mesh} {row.program}: {row.option}: total {row.total / GiB:.2f} GiB "
        f"(compiled in {row.compile_s:.0f} s)")


# --- printing ------------------------------------------------------------------------------------------------

def _unit(p: Plan) -> tuple[float, str]:
  top = max([r.total for r in p.rows] + [max(p.budgets.values())])
  return (GiB, "GiB") if top >= GiB else (MiB, "MiB")


def _keys_text(keys: dict) -> str:
  return " ".join(f"--config.{k}={v}" for k, v in keys.items() if k)


def format_plan(p: Plan) -> str:
  """The printed table of one plan (module docstring), then the smallest fitting mesh per device."""
  s = p.setting
  div, unit = _unit(p)
  f = lambda b: "-" if b <= 0 else f"{b / div:.1f}"
  m = s.model
  trains = (f"LoRA rank {m.lora_rank} on {'/'.join(t.replace('_proj', '') for t in m.lora_targets)}"
            if m.lora_rank else "full fine-tuning")
  params = s.model.num_params(include_lora=True) / 1e9
  out = [f"== {s.name}: {s.backbone} ({params:.2f}B parameters, {trains}), {m.param_dtype} parameters, {m.dtype} "
         f"compute, remat {m.remat}, attention chunk {m.attention_chunk}",
         f"   {s.describe}",
         "   budgets (usable memory per device): " + ", ".join(
             f"{DEVICES[d].name} {b / div:.1f} {unit}" for d, b in p.budgets.items()),
         f"   per device, {unit}: params/opt/ref/KV exact; act (XLA temp) and io measured from the compile; rungs not "
         "compiled are one line, its total '>' the smallest of their lower bounds",
         f"{'mesh (d,f,t)':<13} {'program':<7} {'option':<50} {'params':>6} {'opt':>6} {'ref':>5} {'KV':>6} "
         f"{'act':>6} {'io':>6} {'total':>7}  " + " ".join(f"{d:>4}" for d in p.budgets)]

  def line(r: Row, option: str) -> str:
    total = f"{r.total / div:.1f}" if r.compiled else f">{r.total / div:.1f}"
    fits = " ".join(f"{('yes' if r.compiled and r.total <= b else 'no'):>4}" for b in p.budgets.values())
    return (f"{str(r.mesh):<13} {r.program:<7} {option:<50} {f(r.params):>6} {f(r.opt):>6} {f(r.ref):>5} "
            f"{f(r.kv):>6} {f(r.act) if r.compiled else '-':>6} {f(r.io) if r.compiled else '-':>6} {total:>7}  {fits}")

  i = 0
  while i < len(p.rows):        # each (mesh, program) group: its rungs not compiled on one line, then the others
    j = i
    while j < len(p.rows) and (p.rows[j].mesh, p.rows[j].program) == (p.rows[i].mesh, p.rows[i].program):
      j += 1
    group = p.rows[i:j]
    skipped = [r for r in group if not r.compiled]
    if skipped:
      low = min(skipped, key=lambda r: r.total)
      k = len(skipped)
      out.append(line(low, f"{k} rung{'s' if k > 1 else ''} not compiled"))
    out += [line(r, r.option) for r in group if r.compiled]
    i = j
  out.append("smallest fitting mesh:")
  for d, fit in p.fits.items():
    if fit is None:
      out.append(f"  {DEVICES[d].name}: none up to {p.max_devices} devices")
      continue
    keys = {"mesh.shape": ",".join(map(str, fit.mesh)), **fit.update.keys, **fit.sample.keys}
    out.append(f"  {DEVICES[d].name}: {fit.devices} device{'s' if fit.devices > 1 else ''}, mesh {fit.mesh}: update "
               f"{fit.update.option} ({fit.update.total / div:.1f} {unit}); sampler {fit.sample.option} "
               f"({fit.sample.total / div:.1f} {unit})\n      {_keys_text(keys)}")
  out.append(f"   {p.compiles} programs compiled in {p.seconds:.0f} s")
  return "\n".join(out)


def plan_json(p: Plan) -> dict:
  """A plan as JSON-ready data (bytes per device)."""
  row = lambda r: dict(r._asdict(), mesh=list(r.mesh))
  return {"setting": p.setting.name, "backbone": p.setting.backbone, "describe": p.setting.describe,
          "budgets": p.budgets, "rows": [row(r) for r in p.rows],
          "fits": {d: (None if f is None else {"devices": f.devices, "mesh": list(f.mesh), "update": row(f.update),
                                              "sample": row(f.sample)}) for d, f in p.fits.items()},
          "compiles": p.compiles, "seconds": round(p.seconds, 1)}


# --- command line --------------------------------------------------------------------------------------------

def main(argv: Sequence[str]) -> None:
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  F = flags.FLAGS
  if F.config is None:
    settings = [build_setting(published_config(method), backbone=pub.backbone, name=pub.name)
                for method, pub in PUBLISHED.items()]
  else:
    over = config_flags.get_override_values(F["config"])
    method = F.config.method
    if F.published:
      if method not in PUBLISHED:
        raise ValueError(f"config.method={method!r} has no published setting; valid: {sorted(PUBLISHED)}")
      config = published_config(method, F.config, over)
      backbone = F.backbone or PUBLISHED[method].backbone
    else:
      config, backbone = F.config, F.backbone or None
    settings = [build_setting(config, backbone=backbone)]
  budgets = budgets_of([d.strip() for d in F.devices.split(",") if d.strip()], F.usable)
  log = (lambda line: print(line, file=sys.stderr, flush=True)) if F.progress else None
  results = []
  for s in settings:
    p = plan(s, budgets, max_devices=min(F.max_devices, jax.device_count()), donate=F.donate, log=log)
    print(format_plan(p), flush=True)
    print(flush=True)
    results.append(plan_json(p))
  if F.json:
    with open(F.json, "w") as fh:
      json.dump(results, fh, indent=1)


def _define_flags() -> None:
  """The command line (defined here, not at import: the launcher defines its own --config)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config_flags.DEFINE_config_file("config", None, "A config file (configs/NAME.py[:VARIANT]); none = the three "
                                  "published settings.", lock_config=True)
  flags.DEFINE_bool("published", True, "Apply the method's published sizes and backbone (PUBLISHED) before the "
                    "--config.* overrides; --nopublished plans the config as it is.")
  flags.DEFINE_string("backbone", "", f"One of {sorted(BACKBONES)}; '' = the published one (or, with "
                      "--nopublished, the config's model.checkpoint).")
  flags.DEFINE_integer("max_devices", DEFAULT_MAX_DEVICES, "Largest mesh tried (the fake CPU device count).")
  flags.DEFINE_string("devices", ",".join(DEVICES), f"Named devices, from {sorted(DEVICES)}.")
  flags.DEFINE_float("usable", 0.9, "Fraction of a device's memory a program may use.")
  flags.DEFINE_bool("donate", False, "Plan the updates with the train state donated (the trainers do not).")
  flags.DEFINE_bool("progress", True, "One line per compiled program on stderr.")
  flags.DEFINE_string("json", None, "Also write the plans to this JSON file.")


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  _define_flags()
  app.run(main)
