r"""ProgAgent training: SFT on teacher trajectories, then GSPO on the language-model policy over ProgEnv.

  python -m experiments.train --config=configs/progagent_smoke.py --workdir=/tmp/progagent_smoke
  (the launcher calls `progagent.train.run(config, workdir)` for config.method == 'progagent')

Source: ProgAgent (2026), "Training" (SPEC.md, ProgAgent): SFT cold start on teacher trajectories whose
criterion score is >= 0.7 (3 epochs, batch 64, lr 1e-5), then GSPO for 150 steps, 32 tasks x 16 rollouts
per step, lr 1e-6, temperature 1.0, eps_low 3e-4, eps_high 4e-4, no KL. GSPO: Zheng et al. 2025, "Group
Sequence Policy Optimization", arXiv:2507.18071, sec. 4.1.

This module runs the stages (checkpoints, metrics, resume); the parts are:
  progagent.sft_data   teacher / oracle conversations -> token trajectories (the rollouts' chat format);
  progagent.rollouts   GSPO rollouts through the common driver (common.rollout) over ProgEnv workers;
  progagent.updates    the train state, optimizer, batches, the SFT and GSPO updates.
Token format: the policy tokenizer's own chat template (common.chat.ChatTemplate; `chat.format` 'auto' picks
it from the template, `chat.enable_thinking` switches Qwen3 thinking), one for SFT and RL. Only response
tokens are the policy's (`Trajectory.policy_mask`): SFT's cross-entropy and GSPO's ratio and loss cover
them only.

GSPO per step: `gspo.tasks_per_step` tasks drawn from the pool (config `tasks`, narrowed by
`gspo.task_filter`, a teacher summary JSON whose 'kept' list is the difficulty filter's result), G =
`gspo.rollouts_per_task` rollouts each, all G on the same instance (environment seed `env.seed` + step when
`env.vary_seed`). Reward = the verifier R in {0, 1}. Advantages: grouped (`gspo.advantage.estimator`, GRPO by
default: population std (`gspo.advantage.ddof` 0), eps `gspo.advantage.eps` 1e-6). Importance ratio:
sequence-level; the sampling-time log-probs are recomputed by a teacher-forced pass before the first update
(`gspo.logp_old='recompute'`; 'sampler' uses the sampler's own). The batch is split into `gspo.minibatches`
minibatches for `gspo.epochs` passes: the first update of a step has ratio 1; later ones are clipped at
[1 - `gspo.clip_low`, 1 + `gspo.clip_high`]. The source does not publish the number of updates per step; 4
minibatches and 1 epoch follow the GSPO paper. A rollout ended by an environment failure ('env_error') has
reward 0 and is left out of the groups and of the loss.

Memory knobs: `gspo.generate_batch_size` (rows per generate call; 0 = all rollouts at once),
`gspo.micro_batch_size` / `sft.micro_batch_size` (gradient accumulation inside one update; the log-probs for
logp_old are computed in chunks of the same size; micro-batches are strided, common.lm.training), `lengths.buckets`,
`model.remat` (activation checkpointing per decoder layer: 'none', 'full', 'dots', 'dots_no_batch'),
`model.param_dtype` 'bfloat16' with `optim.master_weights` True (float32 master weights and optimizer state).
Devices: the updates run on the (data, fsdp, tensor) mesh of config `mesh.shape` (default (1, 1, 1): one
device; (-1, 1, 1) = data parallel over all devices) with optional rules (a mesh.rules key added to the config; common.lm.training.
mesh_from_config): parameters and optimizer state are sharded by the logical-axis rules, each update's rows
over (data, fsdp) (an update's rows are padded with masked repeats to a multiple of data x fsdp, so
`sft.batch_size` and the GSPO minibatch, tasks_per_step x rollouts_per_task / minibatches, are best multiples
of it). Sampling and the teacher-forced scoring run on one device
(the sampler gathers the parameters there).

State and outputs (under workdir): sft/ and gspo/ each hold checkpoints/ (one Orbax checkpoint per saved step
of the whole progagent.updates.TrainState; common.checkpoint) and metrics.jsonl (+ TensorBoard);
gspo/rollouts.jsonl holds every rollout's texts and accounting. Running again resumes each stage from its
latest checkpoint (rows written after it are dropped); a finished stage is skipped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from common import chat as chat_lib
from common import checkpoint as ckpt_lib
from common import metric_writer
from common import provenance
from common import trajectory as traj_lib
from common import tool_wire
from common.lm import checkpoints as lm_checkpoints
from common.lm import lora as lora_lib
from common.lm import loading
from common.lm import training
from common.lm.config import ModelConfig
from progagent import harness
from progagent import rollouts
from progagent import sft_data
from progagent import evaluation
from progagent import tasks as tasks_lib
from progagent import teacher
from progagent import teacher_stats
from progagent import updates
from progagent.tasks import base as tasks_base

_log = logging.getLogger(__name__)

RUNTIMES = ("sandboxed", "inprocess")


def default_config() -> ml_collections.ConfigDict:
  """ProgAgent's published setting (SPEC.md, ProgAgent); configs/progagent_smoke.py shrinks it."""
  c = ml_collections.ConfigDict()
  c.method = "progagent"
  c.seed = 0
  c.tasks = ()                    # task ids or domain names; () = every task of progagent.tasks
  c.mode = "ptc"                  # harness: 'ptc' | 'dtc' | 'hybrid'
  c.runtime = "sandboxed"         # PTC program runtime: 'sandboxed' (kernel) | 'inprocess' (trusted only)
  # scales: the levels GSPO draws each task at (weights `scale_weights`, () = uniform): the paper trains over
  # v0..v3 (training on v0 only is its weaker ablation).
  c.env = dict(scales=(0, 1, 2, 3), scale_weights=(), seed=0, vary_seed=True, max_turns=16,
               max_context_tokens=32768, max_response_tokens=4096, max_observation_chars=tool_wire.MAX_OUTPUT_CHARS)
  # remat: activation checkpointing per layer ('none' | 'full' | 'dots' | 'dots_no_batch')
  # attention_impl: 'xla' | 'cudnn' | 'auto' | 'dense' (common.lm.config.ModelConfig); attention_chunk /
  # logits_chunk: queries per attention block / positions per vocabulary-projection block (memory bounds)
  c.model = dict(checkpoint="", dtype="bfloat16", param_dtype="float32", remat="none", lora_rank=0, lora_alpha=128.0,
                 attention_impl="xla", attention_chunk=1024, logits_chunk=1024,
                 lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                 cache_dir="", tiny_vocab=2048,
                 tiny_hidden_size=0, tiny_num_layers=0)   # tiny_*: a tiny checkpoint's shapes, 0 = its defaults
  c.chat = dict(format="auto", enable_thinking=False)   # format: 'auto' | 'qwen' | 'llama3' | 'fallback'
  c.lengths = dict(buckets=())    # padded lengths used for training and sampling; () = powers of two
  # master_weights: float32 master weights + optimizer state when model.param_dtype is 'bfloat16'
  c.optim = dict(grad_clip=1.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, master_weights=False)
  # mesh.shape: (data, fsdp, tensor) sizes, -1 = the remaining devices; (1, 1, 1) = one device.
  # a rules entry (logical-axis pairs) may be added to mesh in a config file; absent = DEFAULT_RULES
  c.mesh = dict(shape=(1, 1, 1))
  # steps: SFT updates in all (0 = `epochs` passes over the data); a fixed number gives several harnesses
  # the same budget whatever their data size. oracle_seeds: the environment seeds of the oracle fallback.
  c.sft = dict(enabled=True, teacher_jsonl="", min_score=0.7, modes=(), oracle_modes=("ptc",),
               oracle_scales=(0, 1, 2, 3), oracle_seeds=(0,), epochs=3, steps=0, batch_size=64, micro_batch_size=0,
               learning_rate=1e-5, max_tokens=32768)
  c.gspo = dict(steps=150, tasks_per_step=32, rollouts_per_task=16, learning_rate=1e-6, temperature=1.0,
                top_k=0, top_p=1.0, clip_low=3e-4, clip_high=4e-4, minibatches=4, epochs=1, micro_batch_size=0,
                logp_old="recompute", task_filter="", generate_batch_size=0, kv_reuse=True, kv_cache_max_gb=32.0,
                advantage=dict(estimator="grpo", eps=1e-6, ddof=0),
                # the difficulty filter computed from the teacher records (sft.teacher_jsonl) when task_filter
                # is empty: keep tasks whose PTC pass@filter_k lies in (filter_low, filter_high)
                filter_from_teacher=True, filter_k=8, filter_stat="pass_at_k", filter_low=0.0, filter_high=0.8)
  # held-out evaluation after training (progagent.evaluation): seeds disjoint from every training seed
  c.eval = dict(enabled=True, seeds=(1000, 1001, 1002), levels=(0, 1, 2, 3), samples=8, k=(1, 8), temperature=1.0,
                tasks=())      # tasks: () = the training tasks
  c.stats = dict(confidence=0.95, resamples=10_000)
  # paradigms: harnesses trained and evaluated one after the other with the same budget (workdir/<mode>/),
  # then the paradigm table (results_paradigms.txt/.json); () = one run of `mode`
  c.paradigms = dict(modes=())
  c.checkpoint = dict(every=10, max_to_keep=2)
  c.logging = dict(every=1, tensorboard=True, save_rollouts=True)
  return c


def check_config(config) -> None:
  """Raises ValueError naming the config key of a bad value."""
  training.check_scale_config(config.model, config.get("mesh", None), model_key="model")
  if config.mode not in harness.MODES:
    raise ValueError(f"config.mode must be one of {harness.MODES}, got {config.mode!r}")
  if config.runtime not in RUNTIMES:
    raise ValueError(f"config.runtime must be one of {RUNTIMES}, got {config.runtime!r}")
  if config.chat.format not in chat_lib.FORMATS:
    raise ValueError(f"config.chat.format must be one of {chat_lib.FORMATS}, got {config.chat.format!r}")
  g = config.gspo
  b = g.tasks_per_step * g.rollouts_per_task
  if g.minibatches < 1 or b % g.minibatches:
    raise ValueError(f"gspo.minibatches={g.minibatches} must divide the batch of tasks_per_step x rollouts_per_task "
                     f"= {b} rollouts")
  for name, mb, total in (("gspo", g.micro_batch_size, b // g.minibatches),
                          ("sft", config.sft.micro_batch_size, config.sft.batch_size)):
    if mb and (total % mb):
      raise ValueError(f"{name}.micro_batch_size={mb} must divide the update batch ({total} rows); 0 = no split")
  if g.logp_old not in ("recompute", "sampler"):
    raise ValueError(f"gspo.logp_old must be 'recompute' or 'sampler', got {g.logp_old!r}")
  e = config.env
  for key, levels in (("env.scales", e.scales), ("sft.oracle_scales", config.sft.oracle_scales),
                      ("eval.levels", config.eval.levels)):
    if not levels or any(isinstance(x, bool) or x not in tasks_base.LEVELS for x in levels):
      raise ValueError(f"config `{key}`={tuple(levels)} must be a non-empty list of levels from {tasks_base.LEVELS}")
  if e.scale_weights and (len(e.scale_weights) != len(e.scales) or min(e.scale_weights) < 0
                          or sum(e.scale_weights) <= 0):
    raise ValueError(f"config `env.scale_weights`={tuple(e.scale_weights)} must give one non-negative weight per "
                     f"level of env.scales={tuple(e.scales)} (sum > 0), or be empty for uniform")
  if config.sft.steps < 0:
    raise ValueError(f"config `sft.steps` must be >= 0 (0 = sft.epochs passes), got {config.sft.steps}")
  if g.filter_stat not in teacher_stats.FILTER_STATS:
    raise ValueError(f"config `gspo.filter_stat` must be one of {teacher_stats.FILTER_STATS}, got {g.filter_stat!r}")
  for m in config.paradigms.modes:
    if m not in harness.MODES:
      raise ValueError(f"config `paradigms.modes` holds {m!r}; harnesses are {harness.MODES}")
  ev = config.eval
  if ev.enabled:
    if any(isinstance(x, bool) or not isinstance(x, int) for x in ev.seeds):
      raise ValueError(f"config `eval.seeds`={tuple(ev.seeds)} must be integers, e.g. --config.eval.seeds=1000,1001")
    if ev.tasks:
      try:
        select_tasks(tuple(ev.tasks))
      except KeyError as e:
        raise ValueError(f"config `eval.tasks`: {e.args[0]}") from None
    if ev.samples < 1 or any(k < 1 or k > ev.samples for k in ev.k):
      raise ValueError(f"config `eval.k`={tuple(ev.k)} must lie in 1..eval.samples={ev.samples}")
    seen = set(training_seeds(config)) & set(ev.seeds)
    if seen or not ev.seeds:
      raise ValueError(f"config `eval.seeds`={tuple(ev.seeds)} must be non-empty and held out, but seeds "
                       f"{sorted(seen)} are training seeds (sft.oracle_seeds, env.seed + GSPO step); choose others")


def training_seeds(config) -> list[int]:
  """Every environment seed training sees: the oracle fallback's sft.oracle_seeds (when SFT uses it), the
  'seed' of every record of sft.teacher_jsonl (files that exist), and GSPO's env.seed + step (env.vary_seed) or
  env.seed."""
  seeds = set(config.sft.oracle_seeds) if config.sft.enabled and not config.sft.teacher_jsonl else set()
  if config.sft.enabled and config.sft.teacher_jsonl:
    for p in config.sft.teacher_jsonl.split(","):
      if p and os.path.exists(p):
        seeds |= {int(r.get("seed", 0)) for r in teacher.read_records(p)}
  e = config.env
  seeds |= set(range(e.seed, e.seed + max(config.gspo.steps, 1))) if e.vary_seed else {e.seed}
  return sorted(seeds)


def select_tasks(spec: Sequence[str]) -> list[str]:
  """Task ids from a list of task ids and domain names; empty = every task."""
  if not spec:
    return tasks_lib.task_ids()
  out: list[str] = []
  for part in spec:
    ids = tasks_lib.task_ids(part) if part in tasks_lib.DOMAINS else [tasks_lib.get_task(part).task_id]
    out += [t for t in ids if t not in out]
  return out


class Policy(NamedTuple):
  """The loaded policy: model config, initial params, the chat template on its tokenizer, checkpoint folder."""
  model: ModelConfig
  params: Any
  chat: chat_lib.ChatTemplate
  checkpoint: str


def tiny_tool_template(spec: str) -> str:
  """The tool-calling chat template a 'tiny:<family>' checkpoint gets here: Llama-3.1-style for 'llama', else
  Qwen3-style (common.lm.testing), so the smoke run speaks a native tool-call format end to end."""
  from common.lm import testing  # pylint: disable=g-import-not-at-top
  family = spec[len(lm_checkpoints.TINY_PREFIX):]
  return testing.LLAMA31_TOOL_TEMPLATE if family == "llama" else testing.QWEN3_TOOL_TEMPLATE


def tiny_sizes(config) -> dict | None:
  """The shapes of a 'tiny:<family>' checkpoint from `model.tiny_hidden_size` / `model.tiny_num_layers` (0 =
  common.lm.testing.make_tiny_checkpoint's defaults); None when both are 0. Heads: hidden_size // 32 query heads
  (head width 32) and one key/value head, so that long contexts stay cheap on a CPU."""
  mc = config.model
  sizes = {}
  if mc.tiny_hidden_size:
    sizes.update(hidden_size=int(mc.tiny_hidden_size), num_heads=max(1, int(mc.tiny_hidden_size) // 32),
                 num_kv_heads=1, intermediate_size=4 * int(mc.tiny_hidden_size))
  if mc.tiny_num_layers:
    sizes["num_layers"] = int(mc.tiny_num_layers)
  return sizes or None


def load_policy(config, task_ids: Sequence[str]) -> Policy:
  """Resolves `model.checkpoint` (common.lm.checkpoints; 'tiny:<family>' gets a tokenizer trained on the tasks'
  texts, vocabulary `model.tiny_vocab`, and a tool-calling template (tiny_tool_template), in `model.cache_dir`),
  loads it (+ fresh LoRA adapters when
  `model.lora_rank` > 0) and builds the ChatTemplate (`chat.format`, `chat.enable_thinking`).

  Raises:
    ValueError: empty or missing checkpoint (common.lm.checkpoints.resolve_checkpoint).
  """
  mc = config.model
  corpus, template = (), None
  if mc.checkpoint.startswith(lm_checkpoints.TINY_PREFIX):
    seeds = tuple(config.sft.oracle_seeds) or (config.env.seed,)
    corpus = sft_data.tokenizer_corpus(task_ids, sorted({config.mode, *config.sft.oracle_modes}), seed=seeds[0])
    template = tiny_tool_template(mc.checkpoint)
  path = lm_checkpoints.resolve_checkpoint(mc.checkpoint, corpus=corpus, cache_dir=mc.cache_dir or None,
                                           vocab_size=mc.tiny_vocab, chat_template=template,
                                           sizes=tiny_sizes(config),
                                           config_key="config.model.checkpoint")
  mesh, rules = mesh_of(config)
  cfg, params, tok = loading.load_pretrained(path, mesh=mesh, rules=rules, **training.model_overrides(mc))
  if mc.lora_rank:
    cfg = cfg.with_lora(rank=mc.lora_rank, alpha=mc.lora_alpha, targets=tuple(mc.lora_targets))
    params = lora_lib.add_adapters(jax.random.key(config.seed + 7), params, cfg)
  chat = chat_lib.ChatTemplate(tok, enable_thinking=bool(config.chat.enable_thinking), format=config.chat.format)
  return Policy(cfg, params, chat, path)


def mesh_of(config):
  """(mesh, rules) of config `mesh.shape` and the optional mesh.rules (common.lm.training.mesh_from_config; absent = one
  device)."""
  return training.mesh_from_config(config.get("mesh", None))


def task_pool(config, task_ids: Sequence[str]) -> list[str]:
  """The GSPO task pool: task_ids narrowed by the difficulty filter.

  The filter (SPEC.md, ProgAgent: keep tasks whose teacher pass@8 under PTC lies in (0, 0.8)) is the 'kept'
  list of the teacher summary JSON `gspo.task_filter` when given; else, with teacher records in
  `sft.teacher_jsonl` and `gspo.filter_from_teacher`, it is computed here from their PTC records
  (progagent.teacher_stats: `gspo.filter_stat` of pass@`gspo.filter_k`, open interval (`gspo.filter_low`,
  `gspo.filter_high`)); tasks without teacher records are left out. Otherwise every task is kept.

  Raises:
    ValueError: the filter keeps none of the configured tasks.
  """
  g = config.gspo
  if g.task_filter:
    with open(g.task_filter) as f:
      kept = set(json.load(f)["kept"])
    where = f"gspo.task_filter {g.task_filter}"
  elif config.sft.teacher_jsonl and g.filter_from_teacher:
    records = [r for p in config.sft.teacher_jsonl.split(",") if p for r in teacher.read_records(p)
               if r.get("mode", "ptc") == "ptc"]
    summary = teacher_stats.summarize(records, ks=(1,), filter_stat=g.filter_stat, filter_k=g.filter_k,
                                      low=g.filter_low, high=g.filter_high)
    kept = set(summary["kept"])
    where = (f"the difficulty filter on sft.teacher_jsonl ({len(records)} PTC records; gspo.filter_from_teacher="
             "False turns it off)")
  else:
    return list(task_ids)
  pool = [t for t in task_ids if t in kept]
  if not pool:
    raise ValueError(f"{where} keeps none of the {len(task_ids)} configured tasks")
  return pool


def draw_levels(config, rng: np.random.Generator, n: int) -> list[int]:
  """n levels drawn from env.scales with env.scale_weights (uniform when empty)."""
  e = config.env
  w = np.asarray(e.scale_weights, np.float64) if e.scale_weights else np.ones(len(e.scales))
  return [int(e.scales[i]) for i in rng.choice(len(e.scales), size=n, p=w / w.sum())]


def _stage_dir(workdir: str, name: str) -> str:
  d = os.path.join(workdir, name)
  os.makedirs(d, exist_ok=True)
  return d


def _checkpointer(config, d: str) -> ckpt_lib.Checkpointer:
  return ckpt_lib.Checkpointer(os.path.join(d, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                               save_every=config.checkpoint.every)


def run_sft(config, policy: Policy, examples: Sequence[traj_lib.Trajectory], workdir: str) -> updates.TrainState:
  """Stage 1: SFT for sft.epochs over `examples`; resumes from workdir/sft; returns the final TrainState.

  Batches of `sft.batch_size` rows in a fresh order per epoch (seed `seed`), each padded to the length bucket
  (`lengths.buckets`) of its longest row; a short last batch repeats rows, masked out. `sft.steps` > 0 sets
  the number of updates (else `sft.epochs` passes). Metrics (workdir/sft/metrics.jsonl): sft/loss, sft/tokens, sft/grad_norm, sft/epoch per step;
  sft/eval_loss (token-mean cross-entropy on all examples) at step 0 and at the last step.
  """
  sc = config.sft
  d = _stage_dir(workdir, "sft")
  optim = updates.optim_settings(config, sc.learning_rate)
  mesh, rules = mesh_of(config)
  state = updates.init_state(policy.params, optim, config.seed, mesh=mesh, rules=rules)
  if not sc.enabled or not examples:
    if sc.enabled:
      _log.warning("SFT: no trajectories with score >= %s; the stage is skipped", sc.min_score)
    return state
  bs = min(sc.batch_size, len(examples))
  if sc.micro_batch_size and bs % sc.micro_batch_size:
    raise ValueError(f"sft.micro_batch_size={sc.micro_batch_size} must divide the batch of {bs} rows")
  # rows per update: bs padded (repeated rows, masked out) to a multiple of the mesh's batch shards
  padded = updates.padded_rows(bs, sc.micro_batch_size, training.batch_shards(mesh, rules))
  per_epoch = -(-len(examples) // bs)
  total = sc.steps or sc.epochs * per_epoch
  length = updates.bucket_length(max(len(t.token_ids()) for t in examples), config.lengths.buckets)
  sizes = [len(t.token_ids()) for t in examples]
  pad = policy.model.pad_token_id or 0
  ck = _checkpointer(config, d)
  state, start = ck.restore_or_init(state)   # restored into the placed state's shardings
  start = int(start or 0)
  writer = metric_writer.MetricWriter(d, resume_step=start, tensorboard=config.logging.tensorboard)
  eval_loss = lambda p: updates.mean_loss(p, examples, policy.model, pad_id=pad, rows=bs, length=length)
  try:
    if start == 0:
      writer.write(0, {"sft/eval_loss": eval_loss(state.params), "sft/examples": len(examples), "sft/length": length})
    for step in range(start, total):
      epoch, i = divmod(step, per_epoch)
      order = np.random.default_rng([config.seed, 11, epoch]).permutation(len(examples))
      rows = list(order[i * bs:(i + 1) * bs])
      n_real = len(rows)
      rows += [rows[0]] * (padded - n_real)      # a short last batch (and mesh padding): repeated rows, masked out
      # each batch is padded to the bucket of its longest row (one compilation per bucket)
      b = updates.make_batch([examples[r] for r in rows], updates.bucket_length(max(sizes[r] for r in rows),
                                                                                 config.lengths.buckets), pad_id=pad)
      pol = b.policy.copy()
      pol[n_real:] = False
      b = training.place_batch(b._replace(policy=pol), mesh, rules)
      params, opt_state, m = updates.sft_update(state.params, state.opt_state, b, model=policy.model, optim=optim,
                                                micro=updates.micro_count(padded, sc.micro_batch_size))
      state = state.replace(params=params, opt_state=opt_state, step=jnp.asarray(step + 1, jnp.int32))
      row = {f"sft/{k}": v for k, v in jax.device_get(m).items()}
      row["sft/epoch"] = epoch
      if step + 1 == total:
        row["sft/eval_loss"] = eval_loss(state.params)
      if (step + 1) % config.logging.every == 0 or step + 1 == total:
        writer.write(step + 1, row)
      ck.maybe_save(step + 1, state, force=step + 1 == total)
  finally:
    writer.close()
    ck.close()
  return state


def _truncate_jsonl(path: str, last_step: int) -> None:
  """Drops rows of `path` written after step `last_step` (a run killed after its last checkpoint)."""
  if not os.path.exists(path):
    return
  rows = [r for r in metric_writer.read_jsonl(path) if int(r.get("step", -1)) <= last_step]
  with open(path + ".tmp", "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")
  os.replace(path + ".tmp", path)


def gspo_step_batch(trajs: Sequence[traj_lib.Trajectory], *, num_groups: int, config, pad_id: int) -> updates.Batch:
  """progagent.updates.gspo_batch with the config's advantage settings and length buckets."""
  a = config.gspo.advantage
  length = updates.bucket_length(max(len(t.token_ids()) for t in trajs), config.lengths.buckets)
  return updates.gspo_batch(trajs, num_groups=num_groups, length=length, pad_id=pad_id, estimator=a.estimator,
                            eps=a.eps, ddof=a.ddof)


def gspo_updates(state: updates.TrainState, batch: updates.Batch, *, policy: Policy, config,
                 step: int) -> tuple[updates.TrainState, list[dict]]:
  """progagent.updates.gspo_updates with the config's `gspo.*` settings (minibatch order seeded by seed, step)."""
  g = config.gspo
  mesh, rules = mesh_of(config)
  return updates.gspo_updates(state, batch, model=policy.model, optim=updates.optim_settings(config, g.learning_rate),
                              minibatches=g.minibatches, epochs=g.epochs, micro_batch_size=g.micro_batch_size,
                              temperature=g.temperature, clip_low=g.clip_low, clip_high=g.clip_high,
                              logp_old=g.logp_old, perm_seed=(config.seed, 13, step), mesh=mesh, rules=rules)


def _update_metrics(batch: updates.Batch, ms: Sequence[dict]) -> dict:
  return {"gspo/adv_abs_mean": float(np.mean(np.abs(batch.adv))), "gspo/ratio_first": ms[0]["ratio_mean"],
          "gspo/loss": float(np.mean([m["loss"] for m in ms])),
          "gspo/ratio_mean": float(np.mean([m["ratio_mean"] for m in ms])),
          "gspo/ratio_max": max(m["ratio_max"] for m in ms),
          "gspo/clip_fraction": float(np.mean([m["clip_fraction"] for m in ms])),
          "gspo/approx_kl": float(np.mean([m["approx_kl"] for m in ms])),
          "gspo/grad_norm": ms[-1]["grad_norm"], "gspo/updates": len(ms), "gspo/length": batch.tokens.shape[1]}


def run_gspo(config, policy: Policy, init_params, task_ids: Sequence[str], workdir: str, *,
             stop_after: int | None = None, cache_dir: str | None = None) -> updates.TrainState:
  """Stage 2: GSPO for gspo.steps steps from `init_params`; resumes from workdir/gspo; returns the TrainState.

  Args:
    stop_after: stop (after saving) once this many steps are done (tests of resume).
    cache_dir: generated-state cache of the environments (one sub-folder per step, removed after it).
  Metrics per step (workdir/gspo/metrics.jsonl): gspo/reward, gspo/adv_abs_mean, gspo/loss, gspo/ratio_first
  (sequence ratio of the first update: 1), gspo/ratio_mean, gspo/ratio_max, gspo/clip_fraction,
  gspo/approx_kl, gspo/grad_norm (last update), rollout accounting (progagent.rollouts.rollout_metrics:
  turns, tool calls, errors, response and context tokens, cut responses, terminations) and timings.
  """
  g, e = config.gspo, config.env
  d = _stage_dir(workdir, "gspo")
  mesh, rules = mesh_of(config)
  state = updates.init_state(init_params, updates.optim_settings(config, g.learning_rate), config.seed + 1,
                             mesh=mesh, rules=rules)
  ck = _checkpointer(config, d)
  state, start = ck.restore_or_init(state)   # restored into the placed state's shardings
  start = int(start or 0)
  writer = metric_writer.MetricWriter(d, resume_step=start, tensorboard=config.logging.tensorboard)
  roll_path = os.path.join(d, "rollouts.jsonl")
  _truncate_jsonl(roll_path, start)
  pool = task_pool(config, task_ids)
  pad = policy.model.pad_token_id or 0
  rows = g.tasks_per_step * g.rollouts_per_task
  try:
    for step in range(start, g.steps):
      rng = np.random.default_rng([config.seed, 17, step])
      tasks = [pool[i] for i in rng.choice(len(pool), size=g.tasks_per_step, replace=g.tasks_per_step > len(pool))]
      tasks = [evaluation.instance_id(t, lvl) for t, lvl in zip(tasks, draw_levels(config, rng, len(tasks)))]
      key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
      sampler = rollouts.LMSampler(state.params, policy.model, key=key, rows=rows,
                                   max_new_tokens=e.max_response_tokens, temperature=float(g.temperature),
                                   top_k=g.top_k, top_p=g.top_p,
                                   stop_tokens=tuple(policy.model.eos_token_ids) + tuple(policy.chat.stop_ids),
                                   pad_id=pad, buckets=tuple(config.lengths.buckets), chunk_rows=g.generate_batch_size,
                                   **rollouts.sampler_options(config, policy.model, rows))
      t0 = time.monotonic()
      step_cache = None if cache_dir is None else os.path.join(cache_dir, f"step-{step}")
      workers = rollouts.make_pool(config, rows, cache_dir=step_cache)
      try:
        trajs = rollouts.run_rollouts(workers, sampler, policy.chat, tasks, config=config,
                                      seed=e.seed + (step if e.vary_seed else 0))
      finally:   # no kernel outlives the step; its generated states are not used again (the seed changes)
        workers.close()
        if step_cache is not None:
          shutil.rmtree(step_cache, ignore_errors=True)
      t1 = time.monotonic()
      batch = gspo_step_batch(trajs, num_groups=len(tasks), config=config, pad_id=pad)
      state, ms = gspo_updates(state, batch, policy=policy, config=config, step=step)
      state = state.replace(step=jnp.asarray(step + 1, jnp.int32))
      t2 = time.monotonic()
      row = rollouts.rollout_metrics(trajs)
      row.update(_update_metrics(batch, ms))
      row.update({"time/rollout_s": t1 - t0, "time/update_s": t2 - t1})
      if (step + 1) % config.logging.every == 0 or step + 1 == g.steps:
        writer.write(step + 1, row)
      if config.logging.save_rollouts:
        with open(roll_path, "a") as f:
          for r in rollouts.rollout_rows(step + 1, trajs):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
      _log.info("gspo step %d: reward %.3f loss %.4g ratio_first %.6f", step + 1, row["gspo/reward"],
                row["gspo/loss"], row["gspo/ratio_first"])
      stopping = stop_after is not None and step + 1 >= stop_after
      ck.maybe_save(step + 1, state, force=step + 1 == g.steps or stopping)
      if stopping:
        break
  finally:
    writer.close()
    ck.close()
  return state


def run_eval(config, policy: Policy, params, task_ids: Sequence[str], workdir: str, *,
             cache_dir: str | None = None) -> dict:
  """Stage 3: the held-out evaluation (progagent.evaluation) of `params` under harness `mode`.

  Writes workdir/eval/results.json ({'mode', 'levels': {level: metrics}, 'seeds', 'tasks'}), episodes.jsonl
  (every rollout) and table.txt; a finished stage (results.json present) is read back, not rerun.
  """
  d = _stage_dir(workdir, "eval")
  path = os.path.join(d, "results.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  ev = config.eval
  eval_tasks = select_tasks(tuple(ev.tasks)) if ev.tasks else list(task_ids)
  t0 = time.monotonic()
  trajs = evaluation.run_eval_rollouts(config, policy, params, eval_tasks, mode=config.mode,
                                       key=jax.random.key(config.seed + 23), cache_dir=cache_dir)
  levels = evaluation.summarize(trajs, ks=tuple(ev.k), confidence=config.stats.confidence,
                                resamples=config.stats.resamples)
  with open(os.path.join(d, "episodes.jsonl.tmp"), "w") as f:
    for r in evaluation.episode_rows(trajs):
      f.write(json.dumps(r, ensure_ascii=False) + "\n")
  os.replace(os.path.join(d, "episodes.jsonl.tmp"), os.path.join(d, "episodes.jsonl"))
  res = {"mode": config.mode, "seeds": list(ev.seeds), "tasks": eval_tasks, "samples": ev.samples,
         "levels": {str(k): v for k, v in levels.items()}, "eval_s": round(time.monotonic() - t0, 2)}
  with open(os.path.join(d, "table.txt"), "w") as f:
    f.write(evaluation.format_level_table({config.mode: levels}, sorted(levels), tuple(ev.k)) + "\n")
  evaluation.write_json(path, res)
  return res


def run(config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None) -> dict:
  """SFT, GSPO and the held-out evaluation (module docstring); the entry point of `experiments/train.py` for
  config.method 'progagent'. With `paradigms.modes` set, runs each harness in workdir/<mode> with the same
  budget and prints the paradigm table (run_paradigms).

  Args:
    config: default_config() or a configs/progagent*.py config.
    workdir: output folder (created); running again resumes.
    stop_after: stop GSPO after this many steps (tests of resume; no evaluation then).
  Returns:
    {'sft': final SFT TrainState, 'gspo': final GSPO TrainState, 'examples': number of SFT trajectories,
     'metrics': the last GSPO metrics row (or None), 'eval': the evaluation's results (or None)}; with
     paradigms, {'paradigms': {mode: that dict}, 'table': the table text}.
  Raises:
    ValueError: a bad config value (the message names the key).
  """
  check_config(config)
  if config.paradigms.modes:
    return run_paradigms(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  task_ids = select_tasks(tuple(config.tasks))
  policy = load_policy(config, task_ids)
  cache = tempfile.mkdtemp(prefix="progagent-states-")
  ev = None
  try:
    t0 = time.monotonic()
    examples = sft_data.sft_examples(config, policy.chat, task_ids, cache_dir=cache)
    sft_state = run_sft(config, policy, examples, workdir)
    t1 = time.monotonic()
    gspo_state = run_gspo(config, policy, sft_state.params, task_ids, workdir, stop_after=stop_after,
                          cache_dir=cache)
    t2 = time.monotonic()
    done = stop_after is None or stop_after >= config.gspo.steps
    if config.eval.enabled and done:
      ev = run_eval(config, policy, gspo_state.params, task_ids, workdir, cache_dir=cache)
    t3 = time.monotonic()
  finally:
    shutil.rmtree(cache, ignore_errors=True)
  gspo_metrics = os.path.join(workdir, "gspo", "metrics.jsonl")
  rows = metric_writer.read_jsonl(gspo_metrics) if os.path.exists(gspo_metrics) else []   # none with gspo.steps 0
  summary = {"checkpoint": policy.checkpoint, "mode": config.mode, "tasks": len(task_ids),
             "sft_examples": len(examples), "sft_s": round(t1 - t0, 2), "gspo_s": round(t2 - t1, 2),
             "eval_s": round(t3 - t2, 2), "last": rows[-1] if rows else None}
  evaluation.write_json(os.path.join(workdir, "summary.json"), summary)
  return {"sft": sft_state, "gspo": gspo_state, "examples": len(examples), "metrics": summary["last"], "eval": ev}


def run_paradigms(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """The paradigm comparison (SPEC.md, ProgAgent, "Three harnesses over the same tasks"): for each harness of
  `paradigms.modes`, the same policy (checkpoint, seed), the same tasks and the same budget (SFT updates
  `sft.steps`, GSPO steps) are trained and evaluated on the held-out seeds in workdir/<mode>/ (SFT data: the
  harness's own oracle or teacher episodes: `sft.oracle_modes` and `sft.modes` are set to the harness). Then
  workdir/results_paradigms.txt and .json: pass@1 per level with 95% bootstrap intervals over (task, seed)
  instances, pass@k, context tokens, tool calls, errors and program structure, with the commit and config.
  A finished harness is not rerun (its eval/results.json is read back).
  """
  os.makedirs(workdir, exist_ok=True)
  out: dict[str, dict] = {}
  for mode in config.paradigms.modes:
    c = ml_collections.ConfigDict(config.to_dict())
    c.paradigms.modes = ()
    c.mode = mode
    c.sft.oracle_modes = (mode,)
    if c.sft.teacher_jsonl:
      c.sft.modes = (mode,)
    t0 = time.monotonic()
    res = run(c, os.path.join(workdir, mode))
    _log.info("paradigms: %s done in %.0f s", mode, time.monotonic() - t0)
    out[mode] = res
  results = {m: {int(k): v for k, v in r["eval"]["levels"].items()} for m, r in out.items() if r["eval"]}
  levels = sorted({lvl for r in results.values() for lvl in r})
  version = provenance.code_version()
  commit = version["commit"] + (" (uncommitted changes)" if version["dirty"] else "")
  head = (f"paradigm table: {len(select_tasks(tuple(config.tasks)))} tasks x levels {levels} x held-out seeds "
          f"{tuple(config.eval.seeds)}, {config.eval.samples} samples each at temperature {config.eval.temperature}; "
          f"checkpoint {config.model.checkpoint!r}; commit {commit}\n"
          f"pass@1: mean over (task, seed) instances of the success rate [95% BCa bootstrap interval over "
          f"instances], percent; pass@k unbiased; ctx_tok/obs_tok/calls/errors/turns: means per episode "
          f"(policy tokenizer); loop/branch/try: share of programs with that construct\n")
  table = head + evaluation.format_level_table(results, levels, tuple(config.eval.k))
  with open(os.path.join(workdir, "results_paradigms.txt"), "w") as f:
    f.write(table + "\n")
  evaluation.write_json(os.path.join(workdir, "results_paradigms.json"),
                        {"commit": version["commit"], "dirty": version["dirty"], "config": config.to_dict(),
                         "levels": levels,
                         "results": {m: {str(k): v for k, v in r.items()} for m, r in results.items()},
                         "summaries": {m: _read_summary(os.path.join(workdir, m)) for m in out}})
  print(table, flush=True)
  return {"paradigms": out, "table": table}


def _read_summary(d: str) -> dict | None:
  p = os.path.join(d, "summary.json")
  if not os.path.exists(p):
    return None
  with open(p) as f:
    return json.load(f)
