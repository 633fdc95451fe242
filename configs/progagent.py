r"""ProgAgent: the published setting, and the paradigm table (DTC vs PTC vs Hybrid).

Published setting (SPEC.md, ProgAgent): SFT on teacher trajectories, then GSPO over v0..v3, then the held-out
evaluation (pass@k per level):

  python -m experiments.train --config=configs/progagent.py --workdir=runs/progagent \
      --config.model.checkpoint=/path/to/Qwen3-8B --config.sft.teacher_jsonl=teacher_ptc.jsonl

Teacher data comes from `python -m progagent.teacher --base-url URL --model NAME --mode ptc --k 16 --out FILE`
(any OpenAI-compatible endpoint, e.g. a vLLM server); with it, GSPO's task pool is the difficulty filter of
the teacher's PTC pass@8 in (0, 0.8). GSPO: 150 steps, 32 tasks x 16 rollouts, lr 1e-6, temperature 1.0, clip
3e-4 / 4e-4, no KL, levels drawn uniformly from v0..v3 (`env.scales`, `env.scale_weights`). Needs a GPU/TPU-sized
machine; the CPU smoke run is configs/progagent_smoke.py.

The paradigm table, `:paradigms`:

  python -m experiments.train --config=configs/progagent.py:paradigms --workdir=runs/progagent_paradigms

trains the same policy with the same budget under each harness (DTC, PTC, Hybrid; `paradigms.modes`) and
evaluates each under its own harness on held-out seeds at v0..v3: pass@1 with 95% intervals and pass@2,
context tokens, tool calls, errors, program structure (results_paradigms.txt / .json in the workdir). On CPU
(the default here) the policy is a small Qwen2-shaped model trained from scratch (`model.checkpoint`
'tiny:qwen2', width `model.tiny_hidden_size`), SFT only (`gspo.steps` 0) on the oracle's episodes of each
harness on the training seeds `sft.oracle_seeds` at v0..v3, `sft.steps` updates for every harness; under 30
minutes on 2 cores. On a GPU, give it a real checkpoint and teacher data and turn GSPO on:

  --config.model.checkpoint=/path/to/Qwen3-8B --config.sft.teacher_jsonl=teacher_all_modes.jsonl \
  --config.gspo.steps=150 --config.model.dtype=bfloat16 --config.env.max_context_tokens=32768

Scale (progagent.train.default_config): `mesh.shape` is the (data, fsdp, tensor) mesh of the updates ((1, 1, 1) =
one device, the default; e.g. --config.mesh.shape=-1,1,1 for data parallelism over every device, 1,-1,1 for
ZeRO-3-style parameter sharding); `model.remat` ('full', 'dots', ...) checkpoints each layer's activations;
`model.param_dtype`=bfloat16 with `optim.master_weights`=True keeps float32 master weights and optimizer state;
`model.lora_rank` > 0 trains LoRA adapters only; `sft.micro_batch_size` / `gspo.micro_batch_size` accumulate
gradients over strided micro-batches. An 8B model on 8 accelerators, for example:

  --config.mesh.shape=1,8,1 --config.model.remat=full --config.model.param_dtype=bfloat16 \
  --config.optim.master_weights=True --config.gspo.micro_batch_size=8
"""

import ml_collections

from progagent import train

# Four tasks of four domains whose DTC oracle fits the 2,560-token context at v0 (one with transient
# errors and values in two units to discover: devops/slowest_service); each harness trains and is evaluated
# on the same ones.
PARADIGM_TASKS = ("retail/pending_over_500", "library/morland_copies", "school/failing_cs101",
                  "devops/slowest_service")


def paradigms() -> ml_collections.ConfigDict:
  """The paradigm comparison on CPU (module docstring)."""
  c = train.default_config()
  c.paradigms.modes = ("dtc", "ptc", "hybrid")
  c.tasks = PARADIGM_TASKS
  c.runtime = "inprocess"          # oracle programs and the policy's programs; 'sandboxed' for untrusted models
  c.model.checkpoint = "tiny:qwen2"
  c.model.tiny_hidden_size = 64
  c.model.tiny_vocab = 4096
  c.model.tiny_num_layers = 2
  c.model.dtype = "float32"
  c.model.param_dtype = "float32"
  c.env.max_turns = 6
  c.env.max_context_tokens = 2560
  c.env.max_response_tokens = 320
  c.env.max_observation_chars = 2000
  c.lengths.buckets = (1024, 1536, 2048, 2560)
  c.sft.oracle_scales = (0, 1, 2, 3)
  c.sft.oracle_seeds = (0, 1, 2)
  c.sft.steps = 100
  c.sft.batch_size = 4
  c.sft.learning_rate = 1e-2
  c.sft.max_tokens = 2560
  c.gspo.steps = 0
  c.gspo.generate_batch_size = 16   # rows per generate call: bounds the prefill's memory
  c.gspo.kv_reuse = True            # keep each episode's KV cache across turns (common.lm.sampler)
  c.eval.seeds = (1000, 1001, 1002)
  c.eval.levels = (0, 1, 2, 3)
  c.eval.samples = 2
  c.eval.k = (1, 2)
  c.eval.temperature = 0.7
  c.checkpoint.every = 50
  c.logging.tensorboard = False
  return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  if arg in (None, ""):
    return train.default_config()
  if arg == "paradigms":
    return paradigms()
  raise ValueError(f"unknown config variant {arg!r}; valid: '' (the published setting), 'paradigms'")
