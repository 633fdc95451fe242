r"""ProgAgent: the published setting, and the paradigm table (DTC vs PTC vs Hybrid).

Published setting (SPEC.md, ProgAgent): SFT on teacher trajectories, then GSPO over v0..v3, then the held-out
evaluation (pass@k per level):

  python -m experiments.train --config=configs/progagent.py --workdir=runs/progagent \
      --config.model.checkpoint=/path/to/Qwen3-8B --config.sft.teacher_jsonl=teacher_ptc.jsonl

Teacher data comes from `python -m progagent.teacher --base-url URL --model NAME --mode ptc --k 16 --out FILE`
(any OpenAI-compatible endpoint, e.g. a vLLM server); with it, GSPO's task pool is the difficulty filter of
the teacher's PTC pass@8 in (0, 0.8). GSPO: 150 steps, 32 tasks x 16 rollouts, lr 1e-6, temperature 1.0, clip
3e-4 / 4e-4, no KL, levels drawn uniformly from v0..v3 (`env.scales`, `env.scale_weights`). Needs a GPU/TPU-sized
machine; the CPU smoke run is `:smoke`.

The paradigm table, `:paradigms`:

  python -m experiments.train --config=configs/progagent.py:paradigms --workdir=runs/progagent_paradigms

trains the same policy with the same budget under each harness (DTC, PTC, Hybrid; `paradigms.modes`) and
evaluates each under its own harness on held-out seeds at v0..v3: pass@1 with 95% intervals and pass@2,
context tokens, tool calls, errors, program structure (results_paradigms.txt / .json in the workdir). On CPU
(the default here) the policy is a small Qwen2-shaped model trained from scratch (`model.checkpoint`
'tiny:qwen2', shapes `model.tiny_sizes`), SFT only (`gspo.steps` 0) on the oracle's episodes of each
harness on the training seeds `sft.oracle_seeds` at v0..v3, `sft.steps` updates for every harness; under 30
minutes on 2 cores. On a GPU, give it a real checkpoint and teacher data and turn GSPO on:

  --config.model.checkpoint=/path/to/Qwen3-8B --config.sft.teacher_jsonl=teacher_all_modes.jsonl \
  --config.gspo.steps=150 --config.model.dtype=bfloat16 --config.env.max_context_tokens=32768

The few-shot table, `:paradigms_fewshot` (C1; paradigms_fewshot below): the pretrained SmolLM2-135M-Instruct
(`gguf:smollm2`), no training, one demonstration per prompt, DTC and PTC at v0..v3 within its 8k window:

  python -m experiments.train --config=configs/progagent.py:paradigms_fewshot --workdir=runs/progagent_fewshot

the error-recovery table, `:errors_fewshot` (errors_fewshot below: the 'errors' tasks with error normalisation off
and on, per harness):

  python -m experiments.train --config=configs/progagent.py:errors_fewshot --workdir=runs/progagent_errors

and `:paradigms_read` (C2; paradigms_read below), the same model fine-tuned per harness with one token budget, a
reading gate on the DTC arm, then a few GSPO steps:

  python -m experiments.train --config=configs/progagent.py:paradigms_read --workdir=runs/progagent_read

Scale (the `model` / `optim` / `mesh` keys of configs/schema.py): `mesh.shape` is the (data, fsdp, tensor) mesh of the updates ((1, 1, 1) =
one device, the default; e.g. --config.mesh.shape=-1,1,1 for data parallelism over every device, 1,-1,1 for
ZeRO-3-style parameter sharding); `model.remat` ('full', 'dots', ...) checkpoints each layer's activations;
`model.param_dtype`=bfloat16 with `optim.master_weights`=True keeps float32 master weights and optimizer state;
`model.lora_rank` > 0 trains LoRA adapters only; `sft.micro_batch_size` / `gspo.micro_batch_size` accumulate
gradients over strided micro-batches. An 8B model on 8 accelerators, for example:

  --config.mesh.shape=1,8,1 --config.model.remat=full --config.model.param_dtype=bfloat16 \
  --config.optim.master_weights=True --config.gspo.micro_batch_size=8
"""

import ml_collections

from common import tool_wire
from configs import schema

# Four tasks of four domains whose DTC oracle fits the 2,560-token context at v0 (one with transient
# errors and values in two units to discover: devops/slowest_service); each harness trains and is evaluated
# on the same ones.
PARADIGM_TASKS = ("retail/pending_over_500", "library/morland_copies", "school/failing_cs101",
                  "devops/slowest_service")


def default_config() -> ml_collections.ConfigDict:
  """ProgAgent's published setting (SPEC.md, ProgAgent); `:smoke` and `:paradigms` shrink it."""
  c = ml_collections.ConfigDict()
  c.method = "progagent"
  c.seed = 0
  c.tasks = ()                    # task ids or domain names; () = every task of progagent.tasks
  c.mode = "ptc"                  # harness: 'ptc' | 'dtc' | 'hybrid'
  c.runtime = "sandboxed"         # PTC program runtime: 'sandboxed' (kernel) | 'inprocess' (trusted only)
  # scales: the levels GSPO draws each task at (weights `scale_weights`, () = uniform): the paper trains over
  # v0..v3 (training on v0 only is its weaker ablation).
  # normalize_errors: {"ok": false, "error": ...} records become failed calls; max_state_bytes: what one episode's
  # tool calls may store on the host (database rows, call counters; progagent.task_env), past it a call fails.
  # backend: 'local' (the ProgEnv workers in this process) or 'ray' (each built by a Ray actor on a node of the
  # cluster at ray_address: 'HOST:PORT', 'auto', '' = Ray's default; progagent.rollouts.make_pool)
  # mcp: tasks over external MCP servers instead of the task library (progagent.mcp_task_env): servers, a tuple of
  # 'NAME=COMMAND' (empty: the library); tasks_file, JSON lines {task_id, instruction, workspace, groundtruth,
  # evaluator}; evaluator, the default verdict command ({workspace}, {groundtruth}; exit 0 = reward 1);
  # reuse_servers, servers kept across episodes (the others restart at each reset); namespace 'clash' | 'always'.
  c.env = dict(scales=(0, 1, 2, 3), scale_weights=(), seed=0, vary_seed=True, max_turns=16,
               max_context_tokens=32768, max_response_tokens=4096, max_observation_chars=tool_wire.MAX_OUTPUT_CHARS,
               normalize_errors=False, max_state_bytes=32 * 1024 ** 2, backend="local", ray_address="",
               mcp=dict(servers=(), tasks_file="", evaluator="", evaluator_timeout_s=600.0, reuse_servers=(),
                        namespace="clash", max_steps=200))
  c.model = schema.model_config(dtype="bfloat16")
  c.chat = dict(format="auto", enable_thinking=False)   # format: 'auto' | 'qwen' | 'llama3' | 'fallback'
  c.lengths = dict(buckets=())    # padded lengths used for training and sampling; () = powers of two
  c.optim = schema.optim_config()
  c.mesh = schema.mesh_config()
  # steps: SFT updates in all (0 = `epochs` passes over the data); a fixed number gives several harnesses
  # the same budget whatever their data size. oracle_seeds: the environment seeds of the oracle fallback.
  c.sft = schema.sft_config(epochs=3, steps=0, batch_size=64, micro_batch_size=0, learning_rate=1e-5,
                            extra=dict(enabled=True, teacher_jsonl="", min_score=0.7, modes=(), oracle_modes=("ptc",),
                                       oracle_scales=(0, 1, 2, 3), oracle_seeds=(0,), max_tokens=32768,
                                       token_budget=0,    # token_budget > 0: updates for that many row tokens
                                       # sft/eval_loss (before and after SFT) on this many rows drawn once with
                                       # `seed` (0 = all rows; each batch padded to its own length bucket)
                                       eval_rows=0))
  c.gspo = dict(steps=150, tasks_per_step=32, rollouts_per_task=16, learning_rate=1e-6, temperature=1.0,
                top_k=0, top_p=1.0, clip_low=3e-4, clip_high=4e-4, minibatches=4, epochs=1, micro_batch_size=0,
                logp_old="recompute", task_filter="", generate_batch_size=0, kv_reuse=True, kv_cache_max_gb=32.0,
                # the sampler's random keys (common.lm.sampler): 'request' draws each episode's turn with its own
                # key (the same tokens at any kv_cache_max_gb, kv_reuse, generate_batch_size); 'call': the stream
                # before the KV pool, one key per call and cache block (the tables made before it; workdirs saved
                # without the key resume with 'call')
                sample_keys="request",
                # a rollout with a reply cut by env.max_response_tokens: 'keep' trains on it (verl); 'mask': it
                # leaves the loss (DAPO's overlong filtering); progagent.updates.gspo_batch
                truncated_responses="keep",
                # tasks (whole groups) per sampling block: one sampler keyed fold_in(key, block), one worker pool;
                # the blocks are shared out among the processes of a multi-process run (progagent.train.run_gspo),
                # so the samples do not depend on the process count; 0 = one block (as before)
                block_tasks=0,
                advantage=dict(estimator="grpo", eps=1e-6, ddof=0),
                # the difficulty filter computed from the teacher records (sft.teacher_jsonl) when task_filter
                # is empty: keep tasks whose PTC pass@filter_k lies in (filter_low, filter_high)
                filter_from_teacher=True, filter_k=8, filter_stat="pass_at_k", filter_low=0.0, filter_high=0.8)
  # held-out evaluation after training (progagent.evaluation): seeds disjoint from every training seed
  c.eval = dict(enabled=True, seeds=(1000, 1001, 1002), levels=(0, 1, 2, 3), samples=8, k=(1, 8), temperature=1.0,
                tasks=(), batch_instances=0)   # tasks: () = the training tasks; batch_instances: instances per
                                               # sampler batch (its KV cache holds them x samples rows; 0 = all)
  c.stats = dict(confidence=0.95, resamples=10_000)
  # paradigms: harnesses trained and evaluated one after the other with the same budget (workdir/<mode>/),
  # then the paradigm table (results_paradigms.txt/.json); () = one run of `mode`
  # zero_rows: also the rows that must score 0 (no call; seed-0 answer); read_gate: after SFT, DTC must pass
  # min_pass of the tasks at `level` on held-out `seeds` or the run stops (0 = no gate; progagent.train.read_gate)
  # normalize_errors: () = each harness once with env.normalize_errors; (False, True) = each harness under both
  # (rows '<mode>' and '<mode>+norm', and their paired difference; progagent.train.paradigm_arms)
  # primary: the cell named before the run (printed first, then above the table): pass@1(arm) - pass@1(baseline)
  # at `level` (row labels of the table), minus the same at `from_level` when >= 0, paired by (task, seed) with
  # an interval resampling tasks (progagent.train.primary_cell); arm '' = none
  c.paradigms = dict(modes=(), zero_rows=False, read_gate=dict(level=0, min_pass=0.0, seeds=(900, 901), samples=1),
                     normalize_errors=(), primary=dict(arm="", baseline="", level=0, from_level=-1))
  # fewshot: one demonstration (the oracle episode of `task` at `level`, environment seed `seed`) between the
  # system message and the instruction of every evaluation prompt; task '' = none (progagent.evaluation)
  c.fewshot = dict(task="", level=0, seed=0)
  c.checkpoint = dict(every=10, max_to_keep=2)
  c.logging = dict(every=1, tensorboard=True, save_rollouts=True)
  return c


def tiny_sizes(hidden_size: int, num_layers: int) -> dict:
  """A tiny checkpoint's shapes for width `hidden_size` and `num_layers` layers: hidden_size // 32 query heads
  (head width 32) and one key/value head, so that long contexts stay cheap on a CPU."""
  return dict(hidden_size=hidden_size, num_heads=max(1, hidden_size // 32), num_kv_heads=1,
              intermediate_size=4 * hidden_size, num_layers=num_layers)


def smoke() -> ml_collections.ConfigDict:
  """SFT then GSPO on a tiny random Qwen2 checkpoint, 3 tasks at v0, on CPU in 1-3 minutes.

  The checkpoint ('tiny:qwen2') is written once into the cache folder ($AGENTIC_RL_CACHE, else
  ~/.cache/agentic-rl-jax; config `model.cache_dir`) with a tokenizer trained on the three tasks' prompts, tool
  schemas and oracle programs and a Qwen3-style tool-calling chat template (no download): prompts,
  programmatic_tool_call calls and tool results are in that native format (about 1,000 prompt tokens, hence
  the 1,536-token context). No teacher endpoint: SFT uses the tasks' PTC oracle episodes as a stand-in teacher
  (--config.sft.teacher_jsonl=FILE for real teacher data from `python -m progagent.teacher`). SFT here is 80
  epochs at lr 1e-2 over the 3 oracle episodes (not the published 3 epochs at 1e-5), enough for the tiny model
  to nearly memorise the calls, so that GSPO's samples (temperature 1) mix passing and failing programs and its
  groups have non-zero advantages. PTC programs run in-process (runtime='inprocess': trusted, no sandbox);
  --config.runtime=sandboxed uses the sandboxed kernel as the full run does. This run checks the plumbing, not
  learning.
  """
  c = default_config()
  c.tasks = ("retail/pending_over_500", "inventory/electrical_value", "library/morland_copies")
  c.runtime = "inprocess"
  c.env.scales = (0, 1)
  c.env.max_turns = 2
  c.env.max_context_tokens = 1536
  c.env.max_response_tokens = 96
  c.env.max_observation_chars = 400
  c.model.checkpoint = "tiny:qwen2"
  c.model.dtype = "float32"
  c.model.param_dtype = "float32"
  c.lengths.buckets = (1536,)
  c.sft.oracle_scales = (0,)
  c.sft.epochs = 80
  c.sft.batch_size = 3
  c.sft.learning_rate = 1e-2
  c.sft.max_tokens = 1536
  c.gspo.steps = 2
  c.gspo.tasks_per_step = 2
  c.gspo.rollouts_per_task = 3
  c.gspo.minibatches = 2
  c.gspo.learning_rate = 1e-4
  c.gspo.kv_reuse = True            # multi-turn KV reuse in the sampler (common.lm.sampler)
  c.gspo.block_tasks = 1            # one group per sampling block: the same samples in 1 or 2 processes
  c.eval.seeds = (1000,)
  c.eval.levels = (0, 1)
  c.eval.samples = 2
  c.eval.k = (1, 2)
  c.stats.resamples = 1000
  return c


def paradigms() -> ml_collections.ConfigDict:
  """The paradigm comparison on CPU (module docstring)."""
  c = default_config()
  c.paradigms.modes = ("dtc", "ptc", "hybrid")
  c.tasks = PARADIGM_TASKS
  c.runtime = "inprocess"          # oracle programs and the policy's programs; 'sandboxed' for untrusted models
  c.model.checkpoint = "tiny:qwen2"
  c.model.tiny_sizes = tiny_sizes(64, 2)
  c.model.tiny_vocab = 4096
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


# C1 (issue 26): tasks whose DTC oracle reads one tool result at v0 on every seed (one data call, then the answer),
# whose rendered v0 DTC context is at most 4,096 tokens of SmolLM2's tokenizer on every seed (the demonstration
# and the replies fit the 8k window) and whose mean DTC context at v3 is at least 1.5x that at v0 (`python -m
# progagent.context_cost --tokenizer gguf:smollm2 --seeds 1000,1001,1002`: nine tasks), plus the one paging task
# whose DTC oracle also reads one result at v0 (devops/oldest_open_bug, 3.9k-4.9k tokens). The demonstration
# task (FEWSHOT_TASK: one data call, a context that does not grow) is not among them.
FEWSHOT_TASKS = ("restaurant/oversized_parties", "museum/on_display_2023_value", "insurance/auto_premiums_july",
                 "sports/veteran_keeper_salary", "rentals/unpaid_june", "pharmacy/controlled_stock_value",
                 "realestate/lisbon_price_per_sqm", "realestate/cheapest_porto_3bed", "sports/penalty_specialists",
                 "devops/oldest_open_bug")
FEWSHOT_TASK = "library/morland_copies"


def paradigms_fewshot(smoke: bool = False) -> ml_collections.ConfigDict:
  """C1: the pretrained SmolLM2-135M-Instruct (gguf:smollm2, float32), no training, one-shot.

  Each harness (DTC, PTC) is evaluated on FEWSHOT_TASKS at v0..v3 on held-out seeds 1000-1001, 2 samples at
  temperature 0.7 (pass@1 with 95% intervals over (task, seed) instances, pass@2), every prompt holding one
  demonstration (the FEWSHOT_TASK oracle episode at v0, seed 0) in the harness's native tool-call format
  (ChatML with Hermes <tool_call> JSON: SmolLM2's template is ChatML). The context window is the model's 8,192
  tokens; an episode that outgrows it ends 'length_limit' (the overflow column). Beside them, the rows that
  must score 0: no call, and the seed-0 answer. `smoke` (tests): 2 tasks, v0 and v1, one seed, 96-token replies.

  Reading gate first (progagent.train.read_gate, `paradigms.read_gate`): the question is whether PTC's advantage
  grows with the state when DTC can read, so before the table the one-shot model under DTC must pass >= 50% of the
  tasks at v0 on held-out seeds 900-901 (one sample each); if it does not, the run stops there with the gate line
  (exit 3) and no paradigm table. At this model's speed on CPU the full table costs hours (the first DTC unit, 8
  episodes, took 24 min on 2 cores at 69eb452), and a DTC arm that cannot read at v0 makes every level's gap a gap
  with a broken arm. `--config.paradigms.read_gate.min_pass=0` runs the table without the gate.
  """
  c = default_config()
  c.paradigms.modes = ("dtc", "ptc")
  c.paradigms.zero_rows = True
  c.paradigms.read_gate = dict(level=0, min_pass=0.5, seeds=(900, 901), samples=1)
  # the question: does PTC's advantage over DTC grow with the state? (PTC - DTC at v3) - (PTC - DTC at v0)
  c.paradigms.primary = dict(arm="ptc", baseline="dtc", level=3, from_level=0)
  c.tasks = FEWSHOT_TASKS
  c.fewshot = dict(task=FEWSHOT_TASK, level=0, seed=0)
  c.runtime = "inprocess"          # the demonstration's and the policy's programs; 'sandboxed' for the kernel
  c.model.checkpoint = "gguf:smollm2"
  c.model.dtype = "float32"
  c.model.param_dtype = "float32"
  c.sft.enabled = False
  c.gspo.steps = 0
  c.gspo.generate_batch_size = 8
  c.gspo.kv_reuse = True
  # 'call': the sampler's random keys before the KV pool (common.lm.sampler), the keys of the runs made before it
  # (issue 26; paradigms_read and errors_fewshot are built from this config). The same keys, not always the same
  # tokens: model.decode_attention 'flat' (the default since f839c09) sums in another order than 'grouped' (float32
  # rounding), which can flip a sample; --config.model.decode_attention=grouped decodes as those runs did
  c.gspo.sample_keys = "call"
  c.env.max_turns = 6
  c.env.max_context_tokens = 8192
  c.env.max_response_tokens = 256
  c.lengths.buckets = (2048, 4096, 6144, 8192)
  c.eval.seeds = (1000, 1001)
  c.eval.levels = (0, 1, 2, 3)
  c.eval.samples = 2
  c.eval.k = (1, 2)
  c.eval.temperature = 0.7
  c.eval.batch_instances = 4       # 8 rows of an 8k KV cache at a time (about 6 GB in float32)
  c.checkpoint.every = 50
  c.logging.tensorboard = False
  if smoke:
    c.tasks = FEWSHOT_TASKS[:2]
    c.eval.seeds = (1000,)
    c.eval.levels = (0, 1)
    c.env.max_turns = 3
    c.env.max_response_tokens = 96
    c.paradigms.read_gate.min_pass = 0.0
    c.paradigms.primary.level = 1
  return c


def paradigms_read(smoke: bool = False) -> ml_collections.ConfigDict:
  """C2: SmolLM2-135M-Instruct (gguf:smollm2) fine-tuned per harness, behind a reading gate.

  The C1 tasks (FEWSHOT_TASKS), SFT on the oracle's episodes of each harness on training seeds 0-29 at v0..v3
  (episodes longer than the 8k window left out), the same token budget for every harness (`sft.token_budget`,
  row tokens), no demonstration. Reading gate (progagent.train.read_gate): after SFT, DTC must pass >= 50% at v0
  on held-out seeds 900-901, else the run stops with "DTC did not learn to read" and no paradigm result. Then 2
  GSPO steps of 4 tasks x 4 rollouts with levels drawn uniformly from v0..v3, and the held-out table (seeds
  1000-1001, v0..v3, 2 samples, pass@1 / pass@2) with the rows that must score 0. `smoke` (tests): a tiny budget.

  Cost on 2 CPU cores (float32): an update of two rows of about 2,800 tokens took about 3.4 min, the loss of 16
  rows of up to 8,192 tokens (no update) 6 to 12 min; the DTC arm's SFT alone (150,000 row tokens, 18 updates of
  rows up to 8,192 tokens) is hours, and the whole table a day or more. A machine with an accelerator is the
  place for it.
  """
  c = paradigms_fewshot()
  c.gspo.sample_keys = "call"      # the random keys before the KV pool (paradigms_fewshot's comment)
  c.fewshot.task = ""
  c.sft.enabled = True
  c.sft.oracle_seeds = tuple(range(30))
  c.sft.oracle_scales = (0, 1, 2, 3)
  c.sft.max_tokens = 8192
  c.sft.batch_size = 2
  c.sft.learning_rate = 5e-5
  c.sft.token_budget = 150_000
  c.sft.eval_rows = 16             # the loss before/after on all 941 rows would cost more than the 18 updates
  # memory: SmolLM2's first float32 update, two rows (4,523 and 2,543 tokens) padded to 6,144, went past 24 GB
  # (killed, 923e610); each layer recomputed in the backward pass and one row per micro-batch (the same gradient):
  # about 6 GB with rows of up to 4,096 tokens (6,144 and 8,192 not measured)
  c.model.remat = "full"
  c.sft.micro_batch_size = 1
  c.paradigms.read_gate = dict(level=0, min_pass=0.5, seeds=(900, 901), samples=1)
  c.gspo.steps = 2
  c.gspo.tasks_per_step = 4
  c.gspo.rollouts_per_task = 4
  c.gspo.minibatches = 2
  c.gspo.learning_rate = 1e-5
  c.gspo.temperature = 1.0
  c.env.scales = (0, 1, 2, 3)
  c.env.seed = 100                 # GSPO's instances: seeds 100, 101 (held out from SFT's 0-29 and the evaluations)
  if smoke:
    c.tasks = FEWSHOT_TASKS[:2]
    c.sft.oracle_seeds = (0, 1)
    c.sft.oracle_scales = (0,)
    c.sft.token_budget = 4000
    c.paradigms.read_gate.seeds = (900,)
    c.gspo.steps = 1
    c.gspo.tasks_per_step = 2
    c.gspo.rollouts_per_task = 2
    c.gspo.minibatches = 1
    c.eval.seeds = (1000,)
    c.eval.levels = (0, 1)
    c.env.max_turns = 3
    c.env.max_response_tokens = 96
    c.paradigms.primary.level = 1
  return c


def errors_fewshot(smoke: bool = False) -> ml_collections.ConfigDict:
  """Error recovery (issue 26, item 5): C1's few-shot SmolLM2 on the 27 tasks tagged 'errors', normalisation off/on.

  The tasks whose tools fail on purpose (`tasks` 'tag:errors': transient failures and error records
  {"ok": false, "error": ...} without MCP's isError flag), at v0 on held-out seeds 1000-1001, 2 samples each, under
  DTC and PTC, each with error normalisation off and on (`paradigms.normalize_errors`; progagent.task_env): rows
  'dtc', 'dtc+norm', 'ptc', 'ptc+norm', then on - off per harness paired by (task, seed) instance with an interval
  resampling tasks. The same demonstration as C1 (library/morland_copies, not an 'errors' task). The DTC oracle
  needs 7-145 calls on these tasks at v0, so `env.max_turns` is 12 (a reply may hold up to 8 calls,
  common.rollout.RolloutConfig.max_calls_per_turn). `smoke` (tests): 2 tasks, one seed, 96-token replies.
  """
  c = paradigms_fewshot()
  c.gspo.sample_keys = "call"      # the random keys before the KV pool (paradigms_fewshot's comment)
  c.tasks = ("tag:errors",)
  c.paradigms.normalize_errors = (False, True)
  c.paradigms.read_gate.min_pass = 0.0   # no reading gate: the question is each harness's recovery, on vs off
  # the paper's number (38.3 -> 34.5 with detection off) is its programmatic harness's: PTC on - off at v0
  c.paradigms.primary = dict(arm="ptc+norm", baseline="ptc", level=0, from_level=-1)
  c.eval.levels = (0,)
  c.env.max_turns = 12
  if smoke:
    c.tasks = ("clinic/process_cancellation_requests", "realestate/accept_full_price_offers")
    c.eval.seeds = (1000,)
    c.env.max_turns = 3
    c.env.max_response_tokens = 96
  return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variants = {"": default_config, "smoke": smoke, "paradigms": paradigms, "paradigms_fewshot": paradigms_fewshot,
              "paradigms_fewshot_smoke": lambda: paradigms_fewshot(smoke=True), "paradigms_read": paradigms_read,
              "paradigms_read_smoke": lambda: paradigms_read(smoke=True), "errors_fewshot": errors_fewshot,
              "errors_fewshot_smoke": lambda: errors_fewshot(smoke=True)}
  if (arg or "") not in variants:
    raise ValueError(f"unknown config variant {arg!r}; valid: '' (the published setting), 'smoke', 'paradigms', "
                     "'paradigms_fewshot', 'paradigms_fewshot_smoke', 'paradigms_read', 'paradigms_read_smoke', "
                     "'errors_fewshot', 'errors_fewshot_smoke'")
  return variants[arg or ""]()
