r"""ProgAgent training: SFT on teacher trajectories, then GSPO on the language-model policy over ProgEnv.

  python -m experiments.train --config=configs/progagent.py:smoke --workdir=/tmp/progagent_smoke
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
of the whole common.lm.updates.TrainState; common.checkpoint) and metrics.jsonl (+ TensorBoard);
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
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from common import chat as chat_lib
from common import distributed
from common import env_pool
from common import io
from common import provenance
from common import stats
from common import trajectory as traj_lib
from common.lm import checkpoints as lm_checkpoints
from common.lm import sampler as sampler_lib
from common.lm import stages
from common.lm import updates as kit
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

# The launcher's registry entry (experiments/train.py). Keys that change where and how fast a run computes,
# not what it computes: a workdir may resume with other values. Keys that only choose and summarise what is
# reported: a finished workdir is re-evaluated with new values (run_eval reruns when its saved settings differ).
RESUME_FREE = stages.SCALE_KEYS + env_pool.BACKEND_KEYS + ("gspo.kv_reuse", "gspo.kv_cache_max_gb",
                                                            "gspo.generate_batch_size")
REPORT_ONLY = ("eval.", "stats.")
# keys added later -> the value that does what was done before
ADDED_KEYS = {"gspo.truncated_responses": "keep", "paradigms.normalize_errors": (), "gspo.block_tasks": 0,
              "env.mcp": dict(servers=(), tasks_file="", evaluator="", evaluator_timeout_s=600.0, reuse_servers=(),
                              namespace="clash", max_steps=200),   # env.mcp: the task library, as before issue 29
              "gspo.sample_keys": "call"}   # 'call': the sampler's random stream before the KV pool


def check_config(config) -> None:
  """Raises ValueError naming the config key of a bad value."""
  stages.check_model_config(config.model, config.get("mesh", None), model_key="model")
  stages.check_optim_config(config.optim)
  stages.check_sft_config(config.sft)
  stages.check_rl_config(config.gspo, rl_key="gspo")
  env_pool.backend_options(config.env)   # env.backend
  if config.mode not in harness.MODES:
    raise ValueError(f"config.mode must be one of {harness.MODES}, got {config.mode!r}")
  if config.runtime not in RUNTIMES:
    raise ValueError(f"config.runtime must be one of {RUNTIMES}, got {config.runtime!r}")
  if config.chat.format not in chat_lib.FORMATS:
    raise ValueError(f"config.chat.format must be one of {chat_lib.FORMATS}, got {config.chat.format!r}")
  g = config.gspo
  sampler_lib.check_sample_keys(g.get("sample_keys", "request"), "config `gspo.sample_keys`")
  bt = g.get("block_tasks", 0)
  if isinstance(bt, bool) or not isinstance(bt, int) or bt < 0:
    raise ValueError(f"config `gspo.block_tasks` must be an integer >= 0 (tasks per sampling block; 0: one block), "
                     f"got {bt!r}")
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
  tb = config.sft.get("token_budget", 0)
  if isinstance(tb, bool) or not isinstance(tb, int) or tb < 0:
    raise ValueError(f"config `sft.token_budget` must be an integer >= 0 (0 = sft.steps / sft.epochs decide), got {tb!r}")
  if g.filter_stat not in teacher_stats.FILTER_STATS:
    raise ValueError(f"config `gspo.filter_stat` must be one of {teacher_stats.FILTER_STATS}, got {g.filter_stat!r}")
  for m in config.paradigms.modes:
    if m not in harness.MODES:
      raise ValueError(f"config `paradigms.modes` holds {m!r}; harnesses are {harness.MODES}")
  arms = tuple(config.paradigms.get("normalize_errors", ()))
  if arms and (not config.paradigms.modes or any(not isinstance(a, bool) for a in arms) or len(set(arms)) != len(arms)):
    raise ValueError(f"config `paradigms.normalize_errors`={arms} must be distinct booleans (e.g. "
                     "--config.paradigms.normalize_errors=False,True) with `paradigms.modes` set; () = one arm per "
                     "harness with env.normalize_errors")
  fs = config.get("fewshot", None)
  if fs is not None and fs.get("task", ""):
    try:
      tasks_lib.get_task(str(fs.task))
    except KeyError as e:
      raise ValueError(f"config `fewshot.task`: {e.args[0]}") from None
    if fs.level not in tasks_base.LEVELS or isinstance(fs.seed, bool) or not isinstance(fs.seed, int):
      raise ValueError(f"config `fewshot.level` must be one of {tasks_base.LEVELS} and `fewshot.seed` an integer, "
                       f"got {fs.level!r} and {fs.seed!r}")
    eval_tasks = tasks_lib.select_tasks(tuple(config.eval.tasks or config.tasks))
    if str(fs.task) in eval_tasks:
      raise ValueError(f"config `fewshot.task` {fs.task!r} is one of the evaluated tasks; the demonstration must "
                       "come from another task")
  rg = config.paradigms.get("read_gate", None)
  if rg is not None and float(rg.get("min_pass", 0.0)) > 0.0:
    if not 0.0 < float(rg.min_pass) <= 1.0 or rg.level not in tasks_base.LEVELS or int(rg.samples) < 1:
      raise ValueError(f"config `paradigms.read_gate`: min_pass in (0, 1], level in {tasks_base.LEVELS} and samples "
                       f">= 1, got {rg.min_pass!r}, {rg.level!r}, {rg.samples!r}")
    if (not rg.seeds or any(isinstance(x, bool) or not isinstance(x, int) for x in rg.seeds)
        or set(rg.seeds) & (set(training_seeds(config)) | set(config.eval.seeds))):
      raise ValueError(f"config `paradigms.read_gate.seeds`={tuple(rg.seeds)} must be integers held out from "
                       f"training ({training_seeds(config)[:5]}...) and from eval.seeds {tuple(config.eval.seeds)}")
  if int(config.sft.get("eval_rows", 0) or 0) < 0:
    raise ValueError(f"config `sft.eval_rows`={config.sft.eval_rows} must be >= 0 (0 = every SFT row)")
  pc = config.paradigms.get("primary", None)
  if pc is not None and pc.get("arm", "") and config.paradigms.modes:
    labels = tuple(paradigm_arms(config))
    if pc.arm not in labels or pc.baseline not in labels or pc.arm == pc.baseline:
      raise ValueError(f"config `paradigms.primary`: arm {pc.arm!r} and baseline {pc.baseline!r} must be two of the "
                       f"table's rows {labels} (paradigms.modes, paradigms.normalize_errors); arm '' names none")
    lv = tuple(config.eval.levels)
    if pc.level not in lv or (int(pc.from_level) >= 0 and (pc.from_level not in lv or pc.from_level == pc.level)):
      raise ValueError(f"config `paradigms.primary`: level {pc.level!r} must be one of eval.levels {lv}, and "
                       f"from_level {pc.from_level!r} another of them or -1 (no change over levels)")
  if config.eval.get("batch_instances", 0) < 0:
    raise ValueError(f"config `eval.batch_instances` must be >= 0 (0 = every instance in one batch), got "
                     f"{config.eval.batch_instances}")
  ev = config.eval
  if ev.enabled:
    if any(isinstance(x, bool) or not isinstance(x, int) for x in ev.seeds):
      raise ValueError(f"config `eval.seeds`={tuple(ev.seeds)} must be integers, e.g. --config.eval.seeds=1000,1001")
    if ev.tasks:
      try:
        tasks_lib.select_tasks(tuple(ev.tasks))
      except KeyError as e:
        raise ValueError(f"config `eval.tasks`: {e.args[0]}") from None
    if ev.samples < 1 or any(k < 1 or k > ev.samples for k in ev.k):
      raise ValueError(f"config `eval.k`={tuple(ev.k)} must lie in 1..eval.samples={ev.samples}")
    seen = set(training_seeds(config)) & set(ev.seeds)
    if seen or not ev.seeds:
      raise ValueError(f"config `eval.seeds`={tuple(ev.seeds)} must be non-empty and held out, but seeds "
                       f"{sorted(seen)} are training seeds (sft.oracle_seeds, env.seed + GSPO step); choose others")
  stages.check_checkpoint(config.model)


def training_seeds(config) -> list[int]:
  """Every environment seed training sees: the oracle fallback's sft.oracle_seeds (when SFT uses it), the
  'seed' of every record of sft.teacher_jsonl (files that exist), and GSPO's env.seed + step (env.vary_seed) or
  env.seed."""
  seeds = set(config.sft.oracle_seeds) if config.sft.enabled and not config.sft.teacher_jsonl else set()
  fs = config.get("fewshot", None)
  if fs is not None and fs.get("task", ""):
    seeds.add(int(fs.seed))   # the demonstration's instance is shown to the policy
  if config.sft.enabled and config.sft.teacher_jsonl:
    for p in config.sft.teacher_jsonl.split(","):
      if p and os.path.exists(p):
        seeds |= {int(r.get("seed", 0)) for r in teacher.read_records(p)}
  e = config.env
  seeds |= set(range(e.seed, e.seed + max(config.gspo.steps, 1))) if e.vary_seed else {e.seed}
  return sorted(seeds)


def tiny_tool_template(spec: str) -> str:
  """The tool-calling chat template a 'tiny:<family>' checkpoint gets here: Llama-3.1-style for 'llama', else
  Qwen3-style (common.lm.testing), so the smoke run speaks a native tool-call format end to end."""
  from common.lm import testing  # pylint: disable=g-import-not-at-top
  family = spec[len(lm_checkpoints.TINY_PREFIX):]
  return testing.LLAMA31_TOOL_TEMPLATE if family == "llama" else testing.QWEN3_TOOL_TEMPLATE


def load_policy(config, task_ids: Sequence[str]) -> stages.Policy:
  """The policy of `model.*` (common.lm.stages.load_policy) on the mesh of `mesh.shape`; a 'tiny:<family>'
  checkpoint gets a tokenizer trained on the tasks' texts (prompts, tool schemas, oracle replies of the run's
  harnesses) and a tool-calling template (tiny_tool_template). LoRA adapters' key: `seed` + 7.

  Raises:
    ValueError: empty or missing checkpoint (common.lm.checkpoints.resolve_checkpoint).
  """
  mc = config.model
  corpus, template = (), None
  if mc.checkpoint.startswith(lm_checkpoints.TINY_PREFIX):
    seeds = tuple(config.sft.oracle_seeds) or (config.env.seed,)
    corpus = sft_data.tokenizer_corpus(task_ids, sorted({config.mode, *config.sft.oracle_modes}), seed=seeds[0])
    template = tiny_tool_template(mc.checkpoint)
  mesh, rules = stages.mesh_of(config)
  return stages.load_policy(mc, mesh=mesh, rules=rules, corpus=corpus, chat_template=template, seed=config.seed,
                            chat=config.chat)


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


def sft_steps_for_budget(budget: int, sizes: Sequence[int], batch_size: int) -> int:
  """SFT updates that process about `budget` tokens (config `sft.token_budget`): ceil(budget / (rows per update x
  mean tokens per row)), at least 1. Tokens are whole rows (prompt, observations and replies: what each update's
  forward pass reads), so harnesses with long episodes (DTC) get fewer updates than short ones (PTC) for the
  same compute; the choice between these and the policy's own tokens is open in the source (ProgAgent's matched
  budget), and this one is made here.

  Raises:
    ValueError: budget < 1 or no rows.
  """
  if budget < 1 or not sizes:
    raise ValueError(f"sft.token_budget={budget} needs to be >= 1 and the SFT data non-empty ({len(sizes)} rows)")
  per_update = min(int(batch_size), len(sizes)) * float(np.mean(sizes))
  return max(1, int(np.ceil(budget / per_update)))


def run_sft(config, policy: stages.Policy, examples: Sequence[traj_lib.Trajectory], workdir: str) -> kit.TrainState:
  """Stage 1: the SFT stage (common.lm.stages.run_sft) on the policy tokens of `examples`, resumed from
  workdir/sft; returns the final TrainState (the initial one when `sft.enabled` is off or there are no examples).

  `sft.epochs` passes (or `sft.steps` updates) in batches of `sft.batch_size` rows in a fresh order per epoch
  (seed `seed`), each padded to the length bucket (`lengths.buckets`) of its longest row, at
  `sft.learning_rate`. Metrics (workdir/sft/metrics.jsonl): sft/loss, sft/tokens, sft/grad_norm, sft/epoch per
  step; sft/eval_loss (token-mean cross-entropy, progagent.updates.loss_sums, on all examples or on
  `sft.eval_rows` of them: eval_loss_rows) at step 0 and at the last step, with sft/examples, sft/eval_rows and
  sft/length (the bucket of the longest example) at step 0.
  """
  sc = config.sft
  optim = stages.stage_optim(config, sc.learning_rate)
  mesh, rules = stages.mesh_of(config)
  state = kit.init_state(policy.params, optim, key=config.seed, mesh=mesh, rules=rules, commit=False)
  if not sc.enabled or not examples:
    if sc.enabled:
      _log.warning("SFT: no trajectories with score >= %s; the stage is skipped", sc.min_score)
    return state
  sizes = [len(t.token_ids()) for t in examples]
  budget = int(sc.get("token_budget", 0) or 0)
  if budget > 0:   # the same number of trained tokens whatever the harness's episode length (sft_steps_for_budget)
    config = ml_collections.ConfigDict(config.to_dict())
    config.sft.steps = sft_steps_for_budget(budget, sizes, int(sc.batch_size))
    sc = config.sft
    _log.info("SFT: token budget %d -> %d updates of %d rows (mean %.0f tokens per row)", budget, sc.steps,
              min(int(sc.batch_size), len(sizes)), float(np.mean(sizes)))
  bs = stages.sft_schedule(len(examples), sc).batch_size
  length = updates.bucket_length(max(sizes), config.lengths.buckets)
  pad = policy.model.pad_token_id or 0

  def batch_of(idx):   # each batch padded to the bucket of its longest row (one compilation per bucket)
    b = updates.make_batch([examples[r] for r in idx],
                           updates.bucket_length(max(sizes[r] for r in idx), config.lengths.buckets), pad_id=pad)
    return b.tokens, b.attn, b.policy

  held = eval_loss_rows(sizes, int(sc.get("eval_rows", 0) or 0), seed=config.seed)

  def eval_loss(p):   # token-mean over the rows `held`, each batch padded to its own length bucket
    total = count = 0.0
    for j in range(0, len(held), bs):
      t, n = updates.loss_sums(p, [examples[r] for r in held[j:j + bs]], policy.model, pad_id=pad, rows=bs,
                               length=updates.bucket_length(max(sizes[r] for r in held[j:j + bs]),
                                                            config.lengths.buckets))
      total, count = total + t, count + n
    return total / max(count, 1.0)

  return stages.run_sft(os.path.join(workdir, "sft"), state, config, examples=len(examples), batch_of=batch_of,
                        model=policy.model, optim=optim, seed=config.seed,
                        first_metrics={"sft/length": length, "sft/eval_rows": len(held)}, eval_loss=eval_loss)


def eval_loss_rows(sizes: Sequence[int], eval_rows: int, *, seed: int) -> list[int]:
  """The SFT rows whose loss is logged before and after SFT (config `sft.eval_rows`): all of them when eval_rows
  is 0 or at least their number, else eval_rows drawn without replacement (numpy, `seed`), sorted by length so
  that a batch pads little.

  Raises:
    ValueError: eval_rows < 0.
  """
  if eval_rows < 0:
    raise ValueError(f"config `sft.eval_rows`={eval_rows} must be >= 0 (0 = every SFT row)")
  idx = list(range(len(sizes)))
  if 0 < eval_rows < len(sizes):
    idx = [int(i) for i in np.random.default_rng(seed).choice(len(sizes), eval_rows, replace=False)]
  return sorted(idx, key=lambda r: (sizes[r], r))


def gspo_step_batch(trajs: Sequence[traj_lib.Trajectory], *, num_groups: int, config, pad_id: int) -> updates.Batch:
  """progagent.updates.gspo_batch with the config's advantage settings and length buckets."""
  a = config.gspo.advantage
  length = updates.bucket_length(max(len(t.token_ids()) for t in trajs), config.lengths.buckets)
  return updates.gspo_batch(trajs, num_groups=num_groups, length=length, pad_id=pad_id, estimator=a.estimator,
                            eps=a.eps, ddof=a.ddof, truncated_responses=config.gspo.get("truncated_responses", "keep"))


def gspo_updates(state: kit.TrainState, batch: updates.Batch, *, policy: stages.Policy, config,
                 step: int) -> tuple[kit.TrainState, list[dict]]:
  """progagent.updates.gspo_updates with the config's `gspo.*` settings (minibatch order seeded by seed, step)."""
  g = config.gspo
  mesh, rules = stages.mesh_of(config)
  return updates.gspo_updates(state, batch, model=policy.model, optim=stages.stage_optim(config, config.gspo.learning_rate),
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


def run_gspo(config, policy: stages.Policy, init_params, task_ids: Sequence[str], workdir: str, *,
             stop_after: int | None = None, cache_dir: str | None = None) -> kit.TrainState:
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
  d = os.path.join(workdir, "gspo")
  mesh, rules = stages.mesh_of(config)
  state = kit.init_state(init_params, stages.stage_optim(config, config.gspo.learning_rate), key=config.seed + 1, mesh=mesh, rules=rules, commit=False)
  stage = stages.open_stage(d, state, config, jsonl=("rollouts.jsonl",))
  state, start, writer = stage.state, stage.start, stage.writer
  roll_path = os.path.join(d, "rollouts.jsonl")
  pool = task_pool(config, task_ids)
  pad = policy.model.pad_token_id or 0
  with stage:
    for step in range(start, g.steps):
      rng = np.random.default_rng([config.seed, 17, step])
      tasks = [pool[i] for i in rng.choice(len(pool), size=g.tasks_per_step, replace=g.tasks_per_step > len(pool))]
      tasks = [evaluation.instance_id(t, lvl) for t, lvl in zip(tasks, draw_levels(config, rng, len(tasks)))]
      key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
      t0 = time.monotonic()
      per = int(g.get("block_tasks", 0) or 0) or len(tasks)   # sampling blocks of whole groups
      blocks = [range(i, min(i + per, len(tasks))) for i in range(0, len(tasks), per)]

      def run_block(b: int, step=step, key=key, tasks=tasks, blocks=blocks) -> list[traj_lib.Trajectory]:
        r = blocks[b]
        n = len(r) * g.rollouts_per_task
        sampler = sampler_lib.LMSampler(state.params, policy.model, rows=n,
                                        key=jax.random.fold_in(key, b) if g.get("block_tasks", 0) else key,
                                        max_new_tokens=e.max_response_tokens, temperature=float(g.temperature),
                                        top_k=g.top_k, top_p=g.top_p,
                                        stop_tokens=tuple(policy.model.eos_token_ids) + tuple(policy.chat.stop_ids),
                                        pad_id=pad, buckets=tuple(config.lengths.buckets),
                                        chunk_rows=g.generate_batch_size,
                                        **rollouts.sampler_options(config, policy.model, n))
        step_cache = None if cache_dir is None else os.path.join(cache_dir, f"step-{step}-{b}")
        workers = rollouts.make_pool(config, n, cache_dir=step_cache)
        try:
          out = rollouts.run_rollouts(workers, sampler, policy.chat, [tasks[i] for i in r], config=config,
                                      seed=e.seed + (step if e.vary_seed else 0))
        finally:   # no kernel outlives the step; its generated states are not used again (the seed changes)
          workers.close()
          if step_cache is not None:
            shutil.rmtree(step_cache, ignore_errors=True)
        for t in out:   # global episode and group indices
          t.episode += r.start * g.rollouts_per_task
          t.group += r.start
        return out

      # each process samples its slice of blocks; every process holds all the trajectories (global order)
      trajs = distributed.run_sliced(len(blocks), run_block)
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
      if config.logging.save_rollouts and distributed.is_primary():
        io.append_jsonl(roll_path, rollouts.rollout_rows(step + 1, trajs), ensure_ascii=False)
      _log.info("gspo step %d: reward %.3f loss %.4g ratio_first %.6f", step + 1, row["gspo/reward"],
                row["gspo/loss"], row["gspo/ratio_first"])
      stopping = stop_after is not None and step + 1 >= stop_after
      stage.save(step + 1, state, force=step + 1 == g.steps or stopping)
      if stopping:
        break
  return state


def run_eval(config, policy: stages.Policy, params, task_ids: Sequence[str], workdir: str, *,
             cache_dir: str | None = None) -> dict:
  """Stage 3: the held-out evaluation (progagent.evaluation) of `params` under harness `mode`.

  Writes workdir/eval/results.json ({'settings', 'mode', 'normalize_errors', 'levels': {level: metrics}, 'seeds',
  'tasks'}),
  episodes.jsonl (every rollout) and table.txt; a finished stage (results.json present, written with the same
  `eval.*` and `stats.*` settings) is read back, not rerun. An unfinished one resumes from the (seed, batch)
  units it finished (workdir/eval/units/, progagent.evaluation.run_eval_rollouts's resume_dir; removed once
  results.json is written).
  """
  d = os.path.join(workdir, "eval")
  if distributed.is_primary():
    os.makedirs(d, exist_ok=True)
  path = os.path.join(d, "results.json")
  settings = {"eval": config.eval.to_dict(), "stats": config.stats.to_dict()}
  if os.path.exists(path):
    saved = io.read_json(path)
    if saved.get("settings", settings) == json.loads(json.dumps(settings)):
      return saved
    _log.info("eval: the eval.* / stats.* settings changed since %s was written; evaluating again", path)
  ev = config.eval
  eval_tasks = tasks_lib.select_tasks(tuple(ev.tasks)) if ev.tasks else list(task_ids)
  t0 = time.monotonic()
  trajs = evaluation.run_eval_rollouts(config, policy, params, eval_tasks, mode=config.mode,
                                       key=jax.random.key(config.seed + 23), cache_dir=cache_dir,
                                       resume_dir=os.path.join(d, "units"))
  levels = evaluation.summarize(trajs, ks=tuple(ev.k), confidence=config.stats.confidence,
                                resamples=config.stats.resamples)
  res = {"settings": settings, "mode": config.mode, "normalize_errors": bool(config.env.normalize_errors),
         "seeds": list(ev.seeds), "tasks": eval_tasks, "samples": ev.samples,
         "levels": {str(k): v for k, v in levels.items()}, "eval_s": round(time.monotonic() - t0, 2)}
  if distributed.is_primary():   # several processes: only the primary writes (common/distributed.py)
    io.write_jsonl(os.path.join(d, "episodes.jsonl"), evaluation.episode_rows(trajs), ensure_ascii=False)
    with open(os.path.join(d, "table.txt"), "w") as f:
      f.write(evaluation.format_level_table({config.mode: levels}, sorted(levels), tuple(ev.k)) + "\n")
    io.write_json(path, res, default=float)
    shutil.rmtree(os.path.join(d, "units"), ignore_errors=True)   # the finished units (resume only)
  return res


def gate_failures(trajs: Sequence[traj_lib.Trajectory]) -> dict:
  """How the reading gate's episodes ended: {'episodes', 'passed_episodes', 'no_result_read' (failed, and no tool
  call ran without error: nothing was read), 'read_and_failed' (failed after at least one call returned a
  result)}; calls counted by progagent.rollouts.episode_stats."""
  st = [(t.reward >= 1.0, rollouts.episode_stats(t)) for t in trajs]
  read = [s["tool_calls"] - s["tool_errors"] > 0 for _, s in st]
  return {"episodes": len(st), "passed_episodes": sum(p for p, _ in st),
          "no_result_read": sum(not p and not r for (p, _), r in zip(st, read)),
          "read_and_failed": sum(not p and r for (p, _), r in zip(st, read))}


def read_gate(config, policy: stages.Policy, params, task_ids: Sequence[str], workdir: str, *,
              cache_dir: str | None = None) -> dict | None:
  """The reading gate (config `paradigms.read_gate`; issue 26's C1 and C2): before GSPO, the policy under DTC (after
  SFT; the untrained one-shot policy when `sft.enabled` is off) must
  pass at least `min_pass` of the tasks at level `level` on the held-out gate seeds `seeds` (`samples` rollouts
  each; seeds disjoint from training and from eval.seeds), i.e. read the answer out of a tool result. A DTC arm
  that cannot read makes every paradigm comparison a comparison with a broken arm, so a failed gate stops the
  run (common.lm.stages.RegimeGateFailed: the launcher prints the line and exits 3; PTC is not trained).
  Writes workdir/read_gate.json (read back on a rerun with the same settings); a run killed during the gate
  resumes from the (seed, batch) units it finished (workdir/read_gate_units/, removed once read_gate.json is
  written). Other harnesses and
  `read_gate.min_pass` <= 0: no gate (None).

  Returns:
    {'pass@1', 'pass@1_low', 'pass@1_high', 'interval' (with `samples` 1 the exact binomial interval over the
    instances, else the bootstrap one), 'units', gate_failures' counts, 'min_pass', 'passed', 'line'} or None.
  Raises:
    common.lm.stages.RegimeGateFailed: the gate failed.
  """
  g = config.paradigms.get("read_gate", None)
  if config.mode != "dtc" or g is None or float(g.get("min_pass", 0.0)) <= 0.0:
    return None
  path = os.path.join(workdir, "read_gate.json")
  settings = json.loads(json.dumps(g.to_dict()))
  saved = io.read_json(path) if os.path.exists(path) else None
  if saved is None or saved.get("settings") != settings:
    c = ml_collections.ConfigDict(config.to_dict())
    c.eval.levels, c.eval.seeds, c.eval.samples = (int(g.level),), tuple(int(x) for x in g.seeds), int(g.samples)
    c.eval.k = (1,)
    trajs = evaluation.run_eval_rollouts(c, policy, params, list(task_ids), mode="dtc",
                                         key=jax.random.key(config.seed + 29), cache_dir=cache_dir,
                                         resume_dir=os.path.join(workdir, "read_gate_units"))
    lvl = evaluation.summarize(trajs, ks=(1,), confidence=config.stats.confidence,
                               resamples=config.stats.resamples)[int(g.level)]
    saved = {"settings": settings, "pass@1": lvl["pass@1"], "pass@1_low": lvl["pass@1_low"],
             "pass@1_high": lvl["pass@1_high"], "units": lvl["units"], "interval": "bootstrap",
             **gate_failures(trajs)}
    if int(g.samples) == 1:   # one 0/1 outcome per instance: the exact binomial interval (never [0, 0])
      ci = stats.binomial_interval(saved["passed_episodes"], saved["episodes"], confidence=config.stats.confidence)
      saved.update({"pass@1_low": ci.low, "pass@1_high": ci.high, "interval": "exact binomial"})
  saved["min_pass"] = float(g.min_pass)
  saved["passed"] = bool(saved["pass@1"] >= float(g.min_pass))
  trained = bool(config.sft.enabled)
  why = ""
  if "episodes" in saved:
    why = (f"; of {saved['episodes']} episodes, {saved['passed_episodes']} passed, {saved['no_result_read']} failed "
           f"without reading a tool result (no call ran without error), {saved['read_and_failed']} read one and "
           "failed")
  saved["line"] = (f"reading gate (DTC {'after SFT' if trained else 'one-shot, no training'}, v{g.level}, held-out "
                   f"seeds {tuple(g.seeds)}, {saved['units']} instances): pass@1 {100 * saved['pass@1']:.1f}% "
                   f"[{100 * saved['pass@1_low']:.1f}, {100 * saved['pass@1_high']:.1f}] "
                   f"({saved.get('interval', 'bootstrap')} {100 * config.stats.confidence:.0f}% interval; need >= "
                   f"{100 * float(g.min_pass):.0f}%){why}: "
                   + ("PASS" if saved["passed"] else
                      f"FAIL: DTC {'did not learn to read' if trained else 'cannot read'}; no paradigm result"))
  if distributed.is_primary():
    io.write_json(path, saved, default=float)
    shutil.rmtree(os.path.join(workdir, "read_gate_units"), ignore_errors=True)   # the finished units (resume only)
  print(saved["line"], flush=True)
  if not saved["passed"]:
    fix = ("give SFT more data or budget (sft.oracle_seeds, sft.token_budget) or a stronger model (model.checkpoint)"
           if trained else "train the reader first (configs/progagent.py:paradigms_read) or use a stronger model "
           "(model.checkpoint); --config.paradigms.read_gate.min_pass=0 runs the table anyway")
    raise stages.RegimeGateFailed(saved["line"] + ". The comparison would pit PTC against a DTC arm that cannot read "
                                  f"a tool result; {fix}, and say so in the results")
  return saved


def run(config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None) -> dict:
  """SFT, GSPO and the held-out evaluation (module docstring); the entry point of `experiments/train.py` for
  config.method 'progagent'. With `paradigms.modes` set, runs each harness in workdir/<mode> with the same
  budget and prints the paradigm table (run_paradigms).

  Args:
    config: a configs/progagent.py config (get_config('' | 'smoke' | 'paradigms')).
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
  task_ids = tasks_lib.select_tasks(tuple(config.tasks))
  policy = load_policy(config, task_ids)
  cache = tempfile.mkdtemp(prefix="progagent-states-")
  ev = None
  try:
    t0 = time.monotonic()
    examples = sft_data.sft_examples(config, policy.chat, task_ids, cache_dir=cache) if config.sft.enabled else []
    sft_state = run_sft(config, policy, examples, workdir)
    read_gate(config, policy, sft_state.params, task_ids, workdir, cache_dir=cache)   # DTC only; may stop the run
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
  rows = io.read_jsonl(gspo_metrics) if os.path.exists(gspo_metrics) else []   # none with gspo.steps 0
  summary = {"checkpoint": policy.checkpoint, "mode": config.mode, "tasks": len(task_ids),
             "sft_examples": len(examples), "sft_s": round(t1 - t0, 2), "gspo_s": round(t2 - t1, 2),
             "eval_s": round(t3 - t2, 2), "last": rows[-1] if rows else None}
  if distributed.is_primary():
    io.write_json(os.path.join(workdir, "summary.json"), summary, default=float)
  if ev is not None:   # on every process: the same table (the same gathered rollouts)
    print(evaluation.format_level_table({config.mode: {int(k): v for k, v in ev["levels"].items()}},
                                        sorted(int(k) for k in ev["levels"]), tuple(config.eval.k)), flush=True)
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
  arms = paradigm_arms(config)
  primary_text = describe_primary(config)
  if primary_text:
    print(primary_text, flush=True)
  for label, (mode, normalize, sub) in arms.items():
    c = ml_collections.ConfigDict(config.to_dict())
    c.paradigms.modes = ()
    c.paradigms.normalize_errors = ()
    c.mode = mode
    c.env.normalize_errors = normalize
    c.sft.oracle_modes = (mode,)
    if c.sft.teacher_jsonl:
      c.sft.modes = (mode,)
    t0 = time.monotonic()
    res = run(c, os.path.join(workdir, sub))
    _log.info("paradigms: %s done in %.0f s", label, time.monotonic() - t0)
    out[label] = res
  distributed.sync("progagent_paradigms")   # the primary's eval/episodes.jsonl and summary.json are read below
  results = {m: {int(k): v for k, v in r["eval"]["levels"].items()} for m, r in out.items() if r["eval"]}
  levels = sorted({lvl for r in results.values() for lvl in r})
  version = provenance.code_version()
  commit = version["commit"] + (" (uncommitted changes)" if version["dirty"] else "")
  head = (f"paradigm table: {len(tasks_lib.select_tasks(tuple(config.tasks)))} tasks x levels {levels} x held-out seeds "
          f"{tuple(config.eval.seeds)}, {config.eval.samples} samples each at temperature {config.eval.temperature}; "
          f"checkpoint {config.model.checkpoint!r}; commit {commit}\n"
          f"pass@1: mean over (task, seed) instances of the success rate [95% BCa bootstrap interval over "
          f"instances], percent; pass@k unbiased; ctx_tok/obs_tok/calls/errors/turns: means per episode "
          f"(policy tokenizer); loop/branch/try: share of programs with that construct\n")
  fs = config.get("fewshot", None)
  if fs is not None and fs.get("task", ""):
    head += (f"few-shot, no training: every first prompt holds one demonstration, the {fs.task!r} oracle episode "
             f"(level {fs.level}, seed {fs.seed}) in the harness's own tool-call format; context window "
             f"{config.env.max_context_tokens} tokens (overflow%: episodes ended by it)\n")
  if config.paradigms.get("normalize_errors", ()):
    head += ("error normalisation (env.normalize_errors; progagent.task_env): '+norm' rows turn tool error records "
             "into failed calls, the others return them as data\n")
  else:
    head += f"error normalisation: {'on' if config.env.normalize_errors else 'off'} (env.normalize_errors)\n"
  primary = primary_cell(config, workdir, arms)
  if primary_text:
    head += primary_text + "\n" + (format_primary(primary) if primary else "primary cell: no shared instances") + "\n"
  table = head + evaluation.format_level_table(results, levels, tuple(config.eval.k))
  norm_diff = normalisation_differences(config, workdir, arms)
  if norm_diff:
    table += "\n\n" + format_normalisation_differences(norm_diff, config.stats.confidence)
  zero = None
  if config.paradigms.get("zero_rows", False):
    zero = evaluation.zero_rows(tasks_lib.select_tasks(tuple(config.eval.tasks or config.tasks)), levels,
                                tuple(config.eval.seeds))
    table += ("\n\nrows that must score 0 (the verifier on the same held-out instances; pass@1, percent):\n"
              + evaluation.format_zero_rows(zero, levels))
  if distributed.is_primary():   # several processes: only the primary writes (common/distributed.py)
    with open(os.path.join(workdir, "results_paradigms.txt"), "w") as f:
      f.write(table + "\n")
    io.write_json(os.path.join(workdir, "results_paradigms.json"),
                  {"commit": version["commit"], "dirty": version["dirty"], "config": config.to_dict(),
                   "levels": levels, "results": {m: {str(k): v for k, v in r.items()} for m, r in results.items()},
                   "zero_rows": None if zero is None else {n: {str(k): v for k, v in r.items()} for n, r in zero.items()},
                   "normalisation_differences": {m: {str(k): v for k, v in r.items()} for m, r in norm_diff.items()},
                   "primary": primary,
                   "summaries": {m: _read_summary(os.path.join(workdir, arms[m][2])) for m in out}}, default=float)
  print(table, flush=True)
  return {"paradigms": out, "table": table}


def paradigm_arms(config) -> dict[str, tuple[str, bool, str]]:
  """The runs of a paradigm table: {row label: (harness, error normalisation on, subfolder of the workdir)}.

  One per harness of `paradigms.modes` with `env.normalize_errors` (label and folder: the harness), or, with
  `paradigms.normalize_errors` set (e.g. (False, True); issue 26's error-recovery table), one per harness and
  value: label and folder the harness when off, '<harness>+norm' and '<harness>_norm' when on.
  """
  arms: dict[str, tuple[str, bool, str]] = {}
  values = tuple(config.paradigms.get("normalize_errors", ()))
  for mode in config.paradigms.modes:
    if not values:
      arms[mode] = (mode, bool(config.env.normalize_errors), mode)
    for v in values:
      arms[f"{mode}+norm" if v else mode] = (mode, bool(v), f"{mode}_norm" if v else mode)
  return arms


def instance_rates(arm_dir: str) -> dict[tuple[int, str, int], float]:
  """{(level, task, seed): success rate over the instance's evaluation rollouts} read from one arm's
  eval/episodes.jsonl ({} when it is missing): the units every paired comparison of the table uses."""
  path = os.path.join(arm_dir, "eval", "episodes.jsonl")
  units: dict[tuple, list[float]] = {}
  for r in (io.read_jsonl(path) if os.path.exists(path) else []):
    units.setdefault((int(r["level"]), r["task_id"], int(r["seed"])), []).append(float(r["reward"] >= 1.0))
  return {u: float(np.mean(v)) for u, v in units.items()}


def describe_primary(config) -> str | None:
  """The primary cell's definition (config `paradigms.primary`), printed before any run; None when none is named."""
  pc = config.paradigms.get("primary", None)
  if pc is None or not pc.get("arm", ""):
    return None
  cell = f"pass@1({pc.arm}) - pass@1({pc.baseline}) at v{pc.level}"
  if int(pc.from_level) >= 0:
    cell = f"[{cell}] - [the same at v{pc.from_level}]"
  return (f"primary cell (named before the run, config paradigms.primary): {cell}, percent points, paired by "
          f"(task, seed) instance; {100 * config.stats.confidence:.0f}% interval resampling tasks "
          "(common.stats.clustered_difference)")


def primary_cell(config, workdir: str, arms: Mapping[str, tuple[str, bool, str]]) -> dict | None:
  """The primary cell's value (config `paradigms.primary`: arm, baseline, level, from_level) from the arms'
  evaluation episodes.

  Per (task, seed) instance held by both rows at the levels used: d = (arm - baseline) at `level`, minus (arm -
  baseline) at `from_level` when that is >= 0 (does the gap grow with the state?). The value is the mean over
  tasks of each task's mean over its instances (the mean over instances when every task has as many), with the
  interval of common.stats.clustered_difference (tasks resampled, a task's seeds averaged first).

  Returns:
    {'cell', 'mean', 'low', 'high', 'instances', 'tasks'} (fractions), or None when no cell is named or the two
    rows share no instance (e.g. a failed reading gate stopped the run).
  """
  pc = config.paradigms.get("primary", None)
  if pc is None or not pc.get("arm", ""):
    return None
  arm, base = instance_rates(os.path.join(workdir, arms[pc.arm][2])), instance_rates(
      os.path.join(workdir, arms[pc.baseline][2]))
  levels = (int(pc.level),) + ((int(pc.from_level),) if int(pc.from_level) >= 0 else ())
  shared = sorted({(t, sd) for (_, t, sd) in arm
                   if all((lvl, t, sd) in arm and (lvl, t, sd) in base for lvl in levels)})
  if not shared:
    return None
  gap = lambda lvl: [arm[(lvl, *u)] - base[(lvl, *u)] for u in shared]   # pylint: disable=unnecessary-lambda-assignment
  x = gap(levels[0])
  y = gap(levels[1]) if len(levels) > 1 else [0.0] * len(shared)
  d = stats.clustered_difference(x, y, [u[0] for u in shared], confidence=config.stats.confidence,
                                 resamples=config.stats.resamples)
  return {"cell": describe_primary(config), "mean": d.mean, "low": stats.finite_or_none(d.low),
          "high": stats.finite_or_none(d.high), "instances": len(shared), "tasks": d.n}


def format_primary(cell: Mapping) -> str:
  """One line: the primary cell's value and interval in percent points."""
  ci = ("no interval (one task)" if cell["low"] is None else
        f"[{100 * cell['low']:+.1f}, {100 * cell['high']:+.1f}]")
  return (f"primary cell: {100 * cell['mean']:+.1f} points {ci} over {cell['instances']} instances of "
          f"{cell['tasks']} tasks")


def normalisation_differences(config, workdir: str, arms: Mapping[str, tuple[str, bool, str]]) -> dict:
  """Pass@1 with error normalisation on minus off, per harness and level, paired by held-out instance.

  Units: (task, seed) instances, each the mean success over its `eval.samples` rollouts, read from each arm's
  eval/episodes.jsonl; the interval resamples tasks (common.stats.clustered_difference: a task's seeds averaged
  first), at `stats.confidence`. Harnesses without both arms are left out.

  Returns:
    {harness: {level: {'mean', 'low', 'high', 'tasks', 'on', 'off'}}} (fractions, not percent); {} when
    `paradigms.normalize_errors` is not set.
  """
  by_mode: dict[str, dict[bool, str]] = {}
  for _, (mode, normalize, sub) in arms.items():
    by_mode.setdefault(mode, {})[normalize] = sub
  out: dict[str, dict[int, dict]] = {}
  for mode, subs in by_mode.items():
    if set(subs) != {False, True}:
      continue
    rates = {normalize: instance_rates(os.path.join(workdir, sub)) for normalize, sub in subs.items()}
    shared = sorted(set(rates[False]) & set(rates[True]))
    for lvl in sorted({u[0] for u in shared}):
      us = [u for u in shared if u[0] == lvl]
      on, off = [rates[True][u] for u in us], [rates[False][u] for u in us]
      d = stats.clustered_difference(on, off, [u[1] for u in us], confidence=config.stats.confidence,
                                     resamples=config.stats.resamples)
      out.setdefault(mode, {})[lvl] = {"mean": d.mean, "low": d.low, "high": d.high, "tasks": d.n,
                                       "on": float(np.mean(on)), "off": float(np.mean(off))}
  return out


def format_normalisation_differences(diff: Mapping[str, Mapping[int, dict]], confidence: float) -> str:
  """The block under the table: per harness and level, pass@1 off, on, and on - off with its interval."""
  lines = [f"error normalisation on - off, pass@1 (percent), paired by (task, seed) instance; "
           f"{100 * confidence:.0f}% interval resampling tasks:",
           f"{'harness':8} {'level':5} {'off':>6} {'on':>6} {'on - off [interval]':>24} {'tasks':>5}"]
  for mode, res in diff.items():
    for lvl, r in sorted(res.items()):
      ci = f"{100 * r['mean']:+.1f} [{100 * r['low']:+.1f}, {100 * r['high']:+.1f}]"
      lines.append(f"{mode:8} v{lvl:<4} {100 * r['off']:6.1f} {100 * r['on']:6.1f} {ci:>24} {r['tasks']:5d}")
  return "\n".join(lines)


def _read_summary(d: str) -> dict | None:
  p = os.path.join(d, "summary.json")
  return io.read_json(p) if os.path.exists(p) else None
