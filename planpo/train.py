r"""PlanPO beside GRPO and GiGPO: SFT, then RL per run, then held-out evaluation and the paired tables.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx
  (the launcher calls `planpo.train.run(config, workdir)` for config.method == 'planpo'; configs are
  configs/planpo_{twx,household,scienceworld}.py, each with ':ablation' and ':smoke' variants)

Per seed (config `seeds`; the seeds are paired: every run of a seed starts from that seed's SFT policy, draws
the same training tasks at each step, uses the same sampling keys and is evaluated on the same tasks; with
`sft.shared` every seed's RL starts from one SFT policy, trained once with the first seed in
workdir/sft_shared, as the paper's runs start from one pretrained checkpoint): the policy ('tiny:qwen2' resolved by common.lm.checkpoints with a tokenizer trained on the SFT episodes' text,
shapes `model.tiny_sizes`; or a local checkpoint, `model.checkpoint`) is trained by SFT on gold trajectories
with detours (planpo/data.py). Then every run of `runs`:
  random  no training: a uniformly random admissible action each turn (RandomAdmissible);
  depth_first / gold   no training: the observation-only depth-first explorer (planpo.explorers) / the
          expert's path (GoldReplay): reference rows and the regime gate's references;
  sft     the SFT policy itself;
  <name>  an RL run of `variants[name]` ('method' grpo | gigpo | planpo, plus overrides of planpo.* / gigpo.* /
          rl.*; the ablations of configs/planpo_base.py), `rl.steps` steps from the SFT parameters:
          `rl.tasks_per_step` training tasks x G = `rl.rollouts_per_task` rollouts through the common driver in
          window mode (planpo/rollouts.py), one training row per turn, and the advantages
            grpo    common.gigpo.episode_advantages of R over the task's rollouts, broadcast to its turn rows;
            gigpo   common.gigpo.gigpo_advantages (episode + step groups of identical observations), `gigpo.*`;
            planpo  planpo.advantages.planpo_advantages with alpha(k) (planpo/schedule.py), `planpo.*`
                    (`planpo.use_episode` False: the ablation without A_E, A = alpha(k) A_S);
          one loss for all: planpo.objective.policy_loss (clipped surrogate + `planpo.kl_coef` x KL to the
          frozen SFT policy), AdamW at `rl.learning_rate`, `rl.minibatches` updates per step (the first with ratio 1),
          each accumulated over micro-batches of `rl.micro_batch_size` rows. log pi_old: recomputed by a forward
          pass (`rl.old_logprobs` 'recompute', verl's choice, needed when the sampler is another engine) or the
          sampler's own log-probs ('sampler': the same JAX model at the same temperature, equal to the
          recomputed ones to 1e-5, tests/lm_sampling_test.py; saves one forward pass over the batch).
Regime gate (`gate.*`, configs/planpo_twx.py:explore): after SFT and before any RL, the SFT policy must succeed
often but wastefully against a scripted reference (regime_gate); else the run stops (common.lm.stages.
RegimeGateFailed) or, with `gate.on_fail` 'report', the table's header says the RL rows are in the wrong regime.
Returns: one rule for every method (planpo/advantages.py): R - P with the invalid-action penalty and `rl.turn_penalty`.
Evaluation: `rl.eval_samples` rollouts per held-out task of every split of `env.eval_splits` at
`rl.eval_temperature`: success, score, turns, response tokens (the policy's own tokens per response), per
rollout (eval.json) and per task type (the env's `task_type`).

Outputs (workdir/seed_<s>/<run>/): metrics.jsonl (+ TensorBoard), checkpoints/ (Orbax, the whole train
state), eval.json; per table (config key `table`: 'main' or 'ablation') workdir/results_<table>.json (the
code's git commit from common.provenance, every rollout's record, the paired differences against `reference`
with bootstrap intervals from common.stats, task types, SFT data stats, the config), results_<table>.txt
(the printed tables under a line naming the commit and workdir/config.json) and curves_<table>.png
(training success, turns, response tokens per run and seed).
Running again resumes every stage from its latest checkpoint and skips finished ones; runs are folders named
by run, so the ablation table run in the main table's workdir reuses its SFT and PlanPO runs; the tiny policy
(tokenizer and initial weights) is kept in workdir/policy and reloaded from there (load_policy).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from common import config_util
from common import distributed
from common import env_pool
from common import gigpo
from common import io
from common import provenance
from common import rollout as rollout_lib
from common.envs import base as envs_base
from common.lm import model as model_lib
from common.lm import sampler as sampler_lib
from common.lm import sampling
from common.lm import stages
from common.lm import training
from common.lm import updates as kit
from planpo import advantages as adv_lib
from planpo import data
from planpo import objective
from planpo import rollouts
from planpo import schedule
from planpo import tables

_log = logging.getLogger(__name__)

RL_METHODS = ("grpo", "gigpo", "planpo")


# The launcher's registry entry (experiments/train.py). Keys that change where and how fast a run computes, not
# what it computes (a workdir may resume with other values), and keys that only choose and summarise the runs
# a table reports (a workdir is shared by the main and ablation tables: runs are folders named by run).
RESUME_FREE = stages.SCALE_KEYS + env_pool.BACKEND_KEYS + ("rollout.kv_reuse", "rollout.kv_cache_max_gb")
REPORT_ONLY = ("runs", "table", "reference", "stats.", "gate.", "primary", "precheck.")
# keys added later -> the value that does what was done without them
ADDED_KEYS = {"rl.truncated_responses": "keep", "rollout.block_episodes": 0,
              "rollout.sample_keys": "call"}   # 'call': the sampler's random stream before the KV pool


def check_config(config) -> None:
  """Raises ValueError naming the config key of a bad value.

  A comma-separated string in `runs` (the flag --config.runs=grpo,planpo) is split into run names, in place.
  """
  stages.check_model_config(config.model, config.get("mesh", None), model_key="model")
  stages.check_optim_config(config.optim)
  stages.check_sft_config(config.sft)
  env_pool.backend_options(config.env)   # env.backend
  stages.check_rl_config(config.rl, rl_key="rl")
  config.seeds = config_util.seed_list(config.seeds)
  retries = config.sft.get("env_retries", 3)
  if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
    raise ValueError(f"config `sft.env_retries` must be an integer >= 0 (replays of a gold episode the environment "
                     f"failed), got {retries!r}")
  if config.rl.get("old_logprobs", "recompute") not in ("recompute", "sampler"):
    raise ValueError(f"config `rl.old_logprobs` must be 'recompute' or 'sampler', got {config.rl.old_logprobs!r}")
  tp = config.rl.get("turn_penalty", 0.0)
  if isinstance(tp, bool) or not isinstance(tp, (int, float)) or not float(tp) >= 0.0:
    raise ValueError(f"config `rl.turn_penalty` must be a number >= 0 (reward units per turn; 0: off), got {tp!r}")
  if int(config.rl.get("micro_batch_size", 32)) < 1:
    raise ValueError(f"config `rl.micro_batch_size` must be >= 1 (rows per RL micro-batch and per scoring chunk), got "
                     f"{config.rl.micro_batch_size!r}")
  config.runs = config_util.split_commas(config.runs)
  fixed = tables.SCRIPTED_RUNS + ("sft",)
  bad = [r for r in config.runs if r not in fixed and r not in config.variants]
  if bad:
    raise ValueError(f"config `runs` holds unknown runs {bad}; valid: {', '.join(repr(r) for r in fixed)} and the "
                     f"keys of `variants` ({sorted(config.variants)})")
  source = config.sft.get("source", "gold")
  if source not in data.SOURCES:
    raise ValueError(f"config `sft.source` must be one of {data.SOURCES}, got {source!r}")
  if source == "explorers":
    from planpo import explorers  # pylint: disable=g-import-not-at-top
    kinds = config_util.split_commas(config.sft.get("explorers", ("random", "memory_walk")))
    if not kinds or any(k not in explorers.EXPLORERS for k in kinds):
      raise ValueError(f"config `sft.explorers` must name explorers of {explorers.EXPLORERS}, got {kinds!r}")
    config.sft.explorers = kinds   # the flag's comma string (--config.sft.explorers=random,memory_walk) split
    k = config.sft.get("explorer_rollouts", 1)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
      raise ValueError(f"config `sft.explorer_rollouts` must be an integer >= 1 (episodes per task and explorer), "
                       f"got {k!r}")
  check_gate(config)
  check_primary(config)
  for r in config.runs:
    if r not in fixed:
      _, rc = run_config(config, r)
      try:
        schedule.check_alpha(rc.planpo.alpha_init, rc.planpo.alpha_final, _decay_steps(rc))
      except ValueError as e:
        raise ValueError(f"run {r!r} (config `variants.{r}` applied): {e}") from None
  if config.reference and config.reference not in config.runs:
    raise ValueError(f"config `reference` {config.reference!r} is not one of `runs` {list(config.runs)}; name a run "
                     "to take the paired differences against, or '' for none")
  st = config.stats
  if str(st.method).lower() not in ("bca", "basic", "percentile"):
    raise ValueError(f"config `stats.method` must be 'BCa', 'basic' or 'percentile', got {st.method!r}")
  if not 0.0 < float(st.confidence) < 1.0 or int(st.resamples) < 1:
    raise ValueError(f"config `stats.confidence` must be in (0, 1) and `stats.resamples` >= 1, got "
                     f"{st.confidence!r} and {st.resamples!r}")
  if len(set(config.runs)) != len(config.runs):
    raise ValueError(f"config `runs` repeats a run: {list(config.runs)}")
  if not dict(config.env.eval_splits):
    raise ValueError("config `env.eval_splits` is empty; give {label: split}, e.g. {'test': 'test'}")
  sampler_lib.check_sample_keys(config.rollout.get("sample_keys", "request"), "config `rollout.sample_keys`")
  be = config.rollout.get("block_episodes", 0)
  if isinstance(be, bool) or not isinstance(be, int) or be < 0:
    raise ValueError(f"config `rollout.block_episodes` must be an integer >= 0 (episodes per sampling block; 0: one "
                     f"block), got {be!r}")
  if config.rollout.mode != "window":
    raise ValueError(f"config `rollout.mode` must be 'window' for PlanPO, got {config.rollout.mode!r}")
  b = config.rl.tasks_per_step * config.rl.rollouts_per_task
  if config.rl.minibatches < 1:
    raise ValueError(f"config `rl.minibatches` must be >= 1, got {config.rl.minibatches}")
  if b < 1:
    raise ValueError("config `rl.tasks_per_step` and `rl.rollouts_per_task` must be >= 1")
  schedule.check_alpha(config.planpo.alpha_init, config.planpo.alpha_final, _decay_steps(config))
  stages.check_checkpoint(config.model)


def check_primary(config) -> None:
  """Checks config `primary` (planpo.tables.primary): run '' (none) or a run of `runs`, reference a run of `runs`,
  success_margin >= 0.

  Raises:
    ValueError: naming the key.
  """
  p = config.get("primary", None)
  if p is None or not p.get("run", ""):
    return
  for key in ("run", "reference"):
    if p[key] not in config.runs:
      raise ValueError(f"config `primary.{key}` {p[key]!r} is not one of `runs` {list(config.runs)}; name the rows "
                       "of the primary cell, or primary.run='' for none")
  if not float(p.success_margin) >= 0.0:
    raise ValueError(f"config `primary.success_margin` must be >= 0 (success points the run may lose and still be "
                     f"non-inferior), got {p.success_margin!r}")


def check_gate(config) -> None:
  """Checks config `gate` (planpo.train.regime_gate): split '' (no gate) or a split of the env, tasks >= 1,
  min_success in [0, 1], min_turn_ratio >= 0, reference a scripted run ('depth_first').

  Raises:
    ValueError: naming the key.
  """
  g = config.get("gate", None)
  if g is None or not g.get("split", ""):
    return
  if isinstance(g.tasks, bool) or not isinstance(g.tasks, int) or g.tasks < 1:
    raise ValueError(f"config `gate.tasks` must be an integer >= 1 (held-out games of the gate), got {g.tasks!r}")
  if not 0.0 <= float(g.min_success) <= 1.0 or not float(g.min_turn_ratio) >= 0.0:
    raise ValueError(f"config `gate.min_success` must be in [0, 1] and `gate.min_turn_ratio` >= 0, got "
                     f"{g.min_success!r} and {g.min_turn_ratio!r}")
  if g.reference not in tables.SCRIPTED_RUNS:
    raise ValueError(f"config `gate.reference` must be a scripted run of {tables.SCRIPTED_RUNS}, got {g.reference!r}")
  if g.split == config.env.train_split:
    raise ValueError(f"config `gate.split` {g.split!r} is the training split; give held-out games (e.g. 'dev')")
  if g.get("on_fail", "stop") not in ("stop", "report"):
    raise ValueError(f"config `gate.on_fail` must be 'stop' (the run ends before RL) or 'report' (the RL rows run and "
                     f"the table says they are in the wrong regime), got {g.on_fail!r}")


def _decay_steps(config) -> int:
  """alpha(k)'s decay length: `planpo.alpha_decay_steps`, or `rl.steps` when it is 0."""
  return int(config.planpo.alpha_decay_steps) or int(config.rl.steps)


def load_policy(config, corpus: Sequence[str], workdir: str | None = None) -> stages.Policy:
  """The policy of `model.*` (common.lm.stages.load_policy) on the mesh of `mesh.shape`: a 'tiny:<family>'
  checkpoint gets a tokenizer trained on `corpus`; `model.lora_rank` > 0 adds fresh LoRA adapters (key from the
  first seed), which alone then train.

  With `workdir`, a tiny checkpoint is copied to workdir/policy the first time and loaded from there on every
  later run, so a resumed or shared workdir (the ablation beside the main table) always pairs its saved SFT
  and RL checkpoints with the tokenizer and initial weights they were trained with, whatever the corpus
  gives now. A local checkpoint folder is loaded in place.
  """
  mesh, rules = stages.mesh_of(config)
  return stages.load_policy(config.model, mesh=mesh, rules=rules, corpus=corpus, seed=int(config.seeds[0]),
                            keep_dir=os.path.join(workdir, "policy") if workdir else None)


# --- updates -------------------------------------------------------------------------------------
#
# Devices: the updates run on the (data, fsdp, tensor) mesh of config `mesh.shape` (default (1, 1, 1): one
# device; optional mesh.rules; common.lm.training.mesh_from_config). The state is placed on it by init_state
# (parameters by the logical-axis rules, optimizer state beside them), each update's rows are sharded over
# (data, fsdp) (padded with masked copies of a real row to a multiple of that size) and the jitted steps run
# unchanged on the sharded arrays. Sampling and scoring (logp_old, logp_ref) run on one device.
# Micro-batches are strided (common.lm.training.micro_batches). LoRA: `model.lora_rank` > 0 trains the
# adapters only; `optim.master_weights` keeps float32 master weights and optimizer state for bfloat16
# parameters (`model.param_dtype`); `model.remat` checkpoints each decoder layer's activations. The state,
# the optimizer, the SFT step and the micro-batched update are the trainer kit's (common.lm.updates).

def loss_mask(b: dict, truncated_responses: str = "keep") -> np.ndarray:
  """The policy tokens the RL loss reads: b['policy_mask'] bool[R, L] of collated rows, less (with
  `truncated_responses` 'mask', config `rl.truncated_responses`; DAPO's overlong filtering) every row whose reply
  was cut by `rollout.max_response_tokens` (b['response_truncated'] bool[R]). 'keep' (default, as verl) returns
  the mask unchanged. Either way the row's return counts in its group's advantages.

  Raises:
    ValueError: truncated_responses not 'keep' or 'mask'.
  """
  if truncated_responses not in stages.TRUNCATED_RESPONSES:
    raise ValueError(f"config rl.truncated_responses={truncated_responses!r} must be one of "
                     f"{stages.TRUNCATED_RESPONSES}")
  m = np.asarray(b["policy_mask"], bool)
  if truncated_responses == "keep":
    return m
  return m & ~np.asarray(b["response_truncated"], bool)[:, None]


def chunk_weight(mask: np.ndarray, agg_mode: str, ratio: str) -> np.ndarray:
  """What each row counts in the loss's normaliser: policy tokens ('token_mean' with the token ratio), else 1
  per row holding any policy token (the sequence means and GSPO's response ratio). f32[B]."""
  m = np.asarray(mask, bool)
  if agg_mode == "token_mean" and ratio == "token":
    return m.sum(axis=1).astype(np.float32)
  return m.any(axis=1).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("model", "optim", "temperature", "loss_kw", "micro"))
def rl_step(state, tokens, attn, mask, logp_old, logp_ref, adv, weight, *, model, optim, temperature, loss_kw,
            micro: int):
  """One optimizer step of planpo.objective.policy_loss, accumulated over `micro` strided micro-batches
  (common.lm.updates.policy_update: micro-batch j's loss, a mean over its own rows, counts with its share of the
  row weights `weight` (`chunk_weight`: f32[B], 0 for padding rows), so the sum is the minibatch's loss and
  gradient exactly). Arrays [B, L] (adv [B]); B a multiple of micro; `loss_kw`: the loss settings as sorted
  items. Returns (state, metrics incl. 'loss' and 'grad_norm')."""
  def loss_fn(p, mb):
    tok, at, m, lo, lr_, a = mb
    lp = model_lib.token_logprobs(p, tok, at, config=model, temperature=temperature)
    return objective.policy_loss(lp, lo, lr_, a, m, **dict(loss_kw))

  return kit.policy_update(state, loss_fn, (tokens, attn, mask, logp_old, logp_ref, adv), weight, micro=micro,
                           optim=optim)


def rl_update(state, tokens, attn, mask, logp_old, logp_ref, adv, *, model, optim, temperature, loss_kw,
              micro_rows: int, mesh=None, rules=None):
  """One optimizer step of planpo.objective.policy_loss on a minibatch, accumulated over strided micro-batches
  of about `micro_rows` rows (config key `rl.micro_batch_size`; common.lm.updates.micro_layout); equal to the step on
  the whole minibatch (tests/planpo_train_test.py). The rows are padded (masked copies of row 0, weight 0) to the
  layout's multiple and, with `mesh`, sharded over its batch axes. Returns (state, metrics incl. 'grad_norm').
  """
  kw = dict(loss_kw)
  w = chunk_weight(np.asarray(mask), kw.get("agg_mode", "token_mean"), kw.get("ratio", "token"))
  shards = 1 if mesh is None else training.batch_shards(mesh, rules)
  n, rows = kit.micro_layout(int(tokens.shape[0]), micro_rows, shards)
  arrays = kit.pad_batch([tokens, attn, mask, logp_old, logp_ref, adv, w], rows, masked=(2, 6))
  arrays = kit.place_rows(arrays, mesh, rules)
  return rl_step(state, *arrays, model=model, optim=optim, temperature=temperature, loss_kw=loss_kw, micro=n)


# --- advantages ----------------------------------------------------------------------------------

def turn_penalties(b: dict, config) -> np.ndarray:
  """p_{i,t} per collated row (f32[R], reward units): the row's invalid-action penalty
  (`rollout.window.invalid_action_penalty`, recorded by the driver) plus `rl.turn_penalty` on every real row."""
  return (np.asarray(b["penalties"], np.float32)
          + np.float32(config.rl.get("turn_penalty", 0.0)) * np.asarray(b["valid"], np.float32))


def compute_advantages(method: str, b: dict, *, config, num_groups: int, num_rollouts: int, step: int) -> dict:
  """Per-row advantages f32[R] (and their parts) of `method` on collated rows `b` (planpo.rollouts.collate).

  Returns, one rule for every method (planpo/advantages.py's module docstring): the episode return is
  R_i - P_i, R = b['episode_rewards'] (`rl.reward_scale` on a win), P_i the rollout's sum of p_{i,t}
  (`turn_penalties`: invalid-action penalty + `rl.turn_penalty`); GiGPO's step rewards = the env's score change
  x `rl.reward_scale` - p_{i,t}; PlanPO's R_E = (1[success] R - P_i) / T_i and R_S = 1[success, valid] R / L - p.
  Rows with valid False get 0.
  """
  mask = jnp.asarray(b["valid"])
  g, r, t = (jnp.asarray(b[k]) for k in ("group_ids", "rollout_ids", "turn"))
  rew = jnp.asarray(b["episode_rewards"])
  pen = jnp.asarray(turn_penalties(b, config))
  ret = adv_lib.return_penalties(rew, pen, r, num_rollouts=num_rollouts, mask=mask)
  max_turns = int(config.env.max_turns)
  if method == "grpo":
    a = gigpo.episode_advantages(ret, g, r, num_groups=num_groups, num_rollouts=num_rollouts, mask=mask,
                                 stats_over="rollouts", norm="std", eps=float(config.planpo.eps),
                                 ddof=int(config.planpo.ddof))
    return {"advantages": a}
  if method == "gigpo":
    c = config.gigpo
    step_r = jnp.asarray(b["env_rewards"] * float(config.rl.reward_scale)) - pen
    out = gigpo.gigpo_advantages(ret, step_r, g, r, t, jnp.asarray(b["step_group_ids"]), num_groups=num_groups,
                                 num_rollouts=num_rollouts, max_turns=max_turns, mask=mask, gamma=c.gamma,
                                 step_weight=c.step_weight, norm=c.norm, stats_over=c.stats_over, eps=c.eps,
                                 ddof=c.ddof)
    return out._asdict()
  p = config.planpo
  if p.get("alpha_constant", False):   # the ablation "constant alpha": alpha(k) = alpha_init
    alpha = jnp.float32(p.alpha_init)
  else:
    alpha = schedule.alpha_schedule(step, alpha_init=p.alpha_init, alpha_final=p.alpha_final,
                                    decay_steps=_decay_steps(config))
  out = adv_lib.planpo_advantages(rew, jnp.asarray(b["success"]), jnp.asarray(b["policy_tokens"]), g, r, t,
                                  num_groups=num_groups, num_rollouts=num_rollouts, max_turns=max_turns,
                                  alpha=alpha, mask=mask, step_grouping=p.step_grouping, stats_over=p.stats_over,
                                  norm=p.norm, eps=p.eps, ddof=p.ddof, conditional=p.conditional,
                                  invalid=jnp.asarray(b["invalid"]), penalties=pen)
  out = out._asdict()
  if not p.get("use_episode", True):   # the ablation "without A_E": A = alpha(k) A_S
    out["advantages"] = alpha * out["step"]
  return dict(out, alpha=alpha)


def _loss_kw(config) -> tuple:
  p = config.planpo
  return tuple(sorted(dict(clip_low=float(p.clip_low), clip_high=float(p.clip_high), kl_coef=float(p.kl_coef),
                           agg_mode=p.agg_mode, ratio=p.ratio).items()))


# --- stages --------------------------------------------------------------------------------------

def _pad_rows(rows: Sequence[tuple[list[int], list[int]]], n: int, pad_id: int):
  length = sampling.bucket_length(max(len(p) + len(r) for p, r in rows), buckets=rollouts.LENGTH_BUCKETS)
  tok = np.full((n, length), pad_id, np.int32)
  attn = np.zeros((n, length), bool)
  mask = np.zeros((n, length), bool)
  for i, (p, r) in enumerate(rows):
    s = (list(p) + list(r))[:length]
    tok[i, :len(s)] = s
    attn[i, :len(s)] = True
    mask[i, len(p):len(s)] = True
  return tok, attn, mask


def run_sft(config, policy: stages.Policy, rows, d: str, seed: int) -> kit.TrainState:
  """The SFT stage (common.lm.stages.run_sft) on (prompt ids, response ids) rows, the response tokens trained
  on: `sft.epochs` passes in batches of `sft.batch_size` (fresh order per epoch), micro-batches of about
  `sft.micro_batch_size` rows (0 = one pass), at `sft.learning_rate`; resumes from `d`.

  Raises:
    ValueError: no rows (no gold episode was won).
  """
  if not rows:
    raise ValueError("SFT has no data: no gold episode of the training tasks was won within `env.max_turns` "
                     "(the replays' warnings name each dropped task), or `env.train_tasks` is 0, or the games "
                     "folder holds no games; raise env.max_turns / env.train_tasks or check the games folder")
  mesh, rules = stages.mesh_of(config)
  optim = stages.stage_optim(config, float(config.sft.learning_rate))
  state = kit.init_state(policy.params, optim, key=seed, mesh=mesh, rules=rules)
  pad = policy.model.pad_token_id or 0
  return stages.run_sft(d, state, config, examples=len(rows), model=policy.model, optim=optim, seed=seed,
                        batch_of=lambda idx: _pad_rows([rows[j] for j in idx], len(idx), pad))


def _rows(x: np.ndarray, n: int) -> np.ndarray:
  """The first n rows of x, padded with zero rows when x has fewer."""
  x = np.asarray(x)
  if x.shape[0] >= n:
    return x[:n]
  return np.concatenate([x, np.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])


class StopRequested(Exception):
  """Raised after saving when `stop_after` RL steps are done (tests of resume)."""


def run_rl(config, policy: stages.Policy, method: str, init_params, ref_params, pool, train_tasks, d: str,
           seed: int, budget: list) -> kit.TrainState:
  """`rl.steps` RL steps of `method` from `init_params`; the KL reference is `ref_params`; resumes."""
  rl = config.rl
  mesh, rules = stages.mesh_of(config)
  optim = stages.stage_optim(config, float(rl.learning_rate))
  stage = stages.open_stage(d, kit.init_state(init_params, optim, key=seed, mesh=mesh, rules=rules), config)
  state, start, writer = stage.state, stage.start, stage.writer
  pad = policy.model.pad_token_id or 0
  temp = float(rl.temperature)
  n_tasks, G = int(rl.tasks_per_step), int(rl.rollouts_per_task)
  with stage:
    for step in range(start, int(rl.steps)):
      rng = np.random.default_rng([seed, 17, step])
      tasks = [train_tasks[i] for i in rng.choice(len(train_tasks), n_tasks, replace=n_tasks > len(train_tasks))]
      key = jax.random.fold_in(jax.random.key(seed * 1000), step)   # common random numbers across runs
      t0 = time.monotonic()
      trajs = rollouts.run_blocks(
          pool, lambda blk, rows: rollouts.make_sampler(state.params, policy, key=rollouts.block_key(key, blk, config),
                                                        rows=rows, temperature=temp, config=config),
          policy.chat, tasks, config=config, group_size=G, seed=step)
      t1 = time.monotonic()
      b = rollouts.collate(trajs, pad_id=pad)
      adv = compute_advantages(method, b, config=config, num_groups=n_tasks, num_rollouts=n_tasks * G, step=step)
      b["advantages"] = np.asarray(adv["advantages"])
      b["policy_mask"] = loss_mask(b, rl.get("truncated_responses", "keep"))
      micro = int(rl.get("micro_batch_size", 32))
      # rows to train on: the real rows (first) padded to a multiple of `rl.micro_batch_size` with empty rows
      real = np.flatnonzero(b["valid"])
      keep = -(-(int(real[-1]) + 1 if real.size else 1) // micro) * micro
      tok, attn, mask, a_rows = (_rows(b[k], keep) for k in ("tokens", "attn", "policy_mask", "advantages"))
      tok, attn, mask, a_rows = jnp.asarray(tok), jnp.asarray(attn), jnp.asarray(mask), jnp.asarray(a_rows)
      if rl.get("old_logprobs", "recompute") == "sampler":   # the rollout's own log-probs (same model, same T)
        logp_old = jnp.asarray(_rows(b["logprobs"], keep))
      else:
        logp_old = kit.score_rows(state.params, tok, attn, model=policy.model, temperature=temp, chunk=micro)
      logp_ref = kit.score_rows(ref_params, tok, attn, model=policy.model, temperature=temp, chunk=micro)
      rows = tok.shape[0]
      has = np.asarray(mask).any(axis=1)
      used = np.flatnonzero(has)                    # rows holding policy tokens: each in exactly one minibatch
      empty = np.flatnonzero(~has)                  # a row without policy tokens pads a minibatch to micro-batches
      perm = np.random.default_rng([seed, 19, step]).permutation(used)
      ms = []
      for part in np.array_split(perm, max(1, min(int(rl.minibatches), used.size))):
        if part.size == 0:
          continue
        if empty.size and part.size % micro:
          part = np.concatenate([part, np.full(micro - part.size % micro, empty[0])])
        sel = jnp.asarray(part)
        state, m = rl_update(state, tok[sel], attn[sel], mask[sel], logp_old[sel], logp_ref[sel],
                             a_rows[sel], model=policy.model, optim=optim, temperature=temp,
                             loss_kw=_loss_kw(config), micro_rows=micro, mesh=mesh, rules=rules)
        ms.append(jax.device_get(m))
      state = state.replace(step=jnp.asarray(step + 1, jnp.int32))
      t2 = time.monotonic()
      valid = b["valid"]
      row = {f"rollout/{k}": v for k, v in rollouts.episode_metrics(trajs).items()}
      row.update({f"{method}/{k}": float(np.mean(np.abs(np.asarray(v)[valid]))) if np.ndim(v) else float(v)
                  for k, v in adv.items()})
      row.update({f"loss/{k}": float(np.mean([m[k] for m in ms])) for k in (ms[0] if ms else {})})
      row.update({"time/rollout_s": t1 - t0, "time/update_s": t2 - t1, "batch/rows": rows,
                  "batch/length": int(tok.shape[1])})
      writer.write(step + 1, row)
      budget[0] -= 1
      stage.save(step + 1, state, force=step + 1 == int(rl.steps) or budget[0] == 0)
      if budget[0] == 0:
        raise StopRequested()
  return state


# --- evaluation ----------------------------------------------------------------------------------

class RandomAdmissible:
  """The no-training baseline: a uniformly random admissible action every turn (numpy seed [seed, 23], or
  [seed, 23, block] for the sampling block `block` of config `rollout.block_episodes`). A template entry drawn
  (common.envs.base.is_template: WebShop's 'search[<your query>]') is played with the episode's instruction as its
  argument (the env's episode_info query).

  A common.rollout policy (list[PolicyRequest] -> list[PolicyOutput]); reads the admissible actions of each
  episode's current state from the worker the driver runs it on (its 'admissible_actions' query). The reply
  is '<think>I pick an admissible action.</think><action>A</action>' in the policy's chat format.
  """

  REASON = "I pick an admissible action."

  def __init__(self, chat, seed: int, *, block: int | None = None):
    self.rng = np.random.default_rng([int(seed), 23] if block is None else [int(seed), 23, int(block)])
    self.driver = None
    self._scripted = rollout_lib.ScriptedPolicy(self._reply, chat)

  def attach(self, driver) -> None:
    """Called by planpo.rollouts.run_rollouts with the driver that runs the episodes."""
    self.driver = driver

  def _reply(self, request) -> str:
    worker = self.driver.worker_for(request.episode) if self.driver else None
    acts = list(worker.query("admissible_actions")) if worker is not None else []
    action = acts[int(self.rng.integers(len(acts)))] if acts else "look"
    if envs_base.is_template(action):   # WebShop's 'search[<your query>]': search the task's instruction
      action = envs_base.fill_template(action, str(worker.query("episode_info").get("instruction", "")))
    return f"<think>{self.REASON}</think><action>{action}</action>"

  def __call__(self, requests):
    return self._scripted(requests)


class GoldReplay:
  """The expert's path as a policy: each task's gold actions (the env's `gold_actions` query, read before the
  episodes start: it reloads the game), one a turn, then 'look' (the privileged shortest path: the regime gate's
  reference where no observation-only explorer exists, e.g. household tasks and ScienceWorld)."""

  def __init__(self, chat, gold: dict[str, list[str]]):
    self.gold = gold
    self._scripted = rollout_lib.ScriptedPolicy(self._reply, chat)

  def _reply(self, request) -> str:
    plan = self.gold.get(request.task_id, [])
    action = plan[request.turn] if request.turn < len(plan) else "look"
    return f"<think>I follow the plan.</think><action>{action}</action>"

  def __call__(self, requests):
    return self._scripted(requests)


def scripted_policy(name: str, chat, seed: int, *, pool=None, tasks: Sequence[str] = (), block: int | None = None):
  """The policy of a no-training row (planpo.tables.SCRIPTED_RUNS): 'random' (RandomAdmissible), 'depth_first'
  (planpo.explorers.Explorer, the observation-only depth-first explorer) or 'gold' (GoldReplay of `tasks`, read
  from `pool`'s first worker). `block`: the global index of the sampling block it plays (config
  `rollout.block_episodes` > 0), folded into its random seeds; None: one block (numpy seeds as before).

  Raises:
    ValueError: another name.
  """
  if name == "random":
    return RandomAdmissible(chat, seed, block=block)
  if name == "depth_first":
    from planpo import explorers  # pylint: disable=g-import-not-at-top
    return explorers.Explorer("depth_first", chat, seed if block is None else seed * 100_003 + 7 * (block + 1))
  if name == "gold":
    return GoldReplay(chat, {t: list(pool.workers[0].query("gold_actions", task_id=t)) for t in tasks})
  raise ValueError(f"{name!r} is not a scripted run; valid: {tables.SCRIPTED_RUNS}")


def evaluate(config, policy: stages.Policy, params, pool, eval_sets: dict[str, list[str]], d: str, seed: int,
             *, scripted: str | None = None) -> dict:
  """`rl.eval_samples` rollouts per held-out task of every split of `env.eval_splits`, at `rl.eval_temperature`
  (the scripted policy `scripted_policy(scripted)` instead when given); writes and returns eval.json:
  {split label: {'metrics': planpo.rollouts.episode_metrics, 'episodes': [planpo.rollouts.episode_record]}}.
  An existing eval.json is returned as is (resume)."""
  path = os.path.join(d, "eval.json")
  if os.path.exists(path):
    return io.read_json(path)
  k = int(config.rl.get("eval_samples", 1))
  out = {}
  for label, tasks in eval_sets.items():
    def policy_of(blk, rows, tasks=tasks):
      if scripted:
        return scripted_policy(scripted, policy.chat, seed, pool=pool, tasks=tasks,
                               block=blk if int(config.rollout.get("block_episodes", 0)) > 0 else None)
      return rollouts.make_sampler(params, policy, key=rollouts.block_key(jax.random.key(seed + 99), blk, config),
                                   rows=rows, temperature=float(config.rl.eval_temperature), config=config)
    trajs = rollouts.run_blocks(pool, policy_of, policy.chat, tasks, config=config, group_size=k, seed=0)
    out[label] = {"metrics": rollouts.episode_metrics(trajs),
                  "episodes": [rollouts.episode_record(t) for t in trajs]}
  if distributed.is_primary():
    os.makedirs(d, exist_ok=True)
    io.write_json(path, out)
  return out


def _gate_dir(config, workdir: str, seed: int) -> str:
  """The regime gate's folder of seed `seed`'s SFT policy: workdir/gate with `sft.shared`, else
  workdir/seed_<seed>/gate."""
  return os.path.join(workdir, "gate") if config.sft.get("shared", False) else os.path.join(workdir, f"seed_{seed}",
                                                                                              "gate")


def _saved_gates(config, workdir: str) -> dict[int, dict]:
  """SFT seed -> gate.json of the regime gates this workdir holds (`_gate_dir`)."""
  out = {}
  shared = bool(config.sft.get("shared", False))
  for s in ([int(config.seeds[0])] if shared else [int(s) for s in config.seeds]):
    p = os.path.join(_gate_dir(config, workdir, s), "gate.json")
    if os.path.exists(p):
      out[s] = io.read_json(p)
  return out


def regime_gate(config, policy: stages.Policy, sft_params, pool, tasks: Sequence[str], d: str, seed: int) -> dict:
  """The regime check printed before any RL (config `gate`; issue 25, item 2): on `gate.tasks` held-out games of
  split `gate.split` (not the table's test games), `rl.eval_samples` rollouts each at `rl.eval_temperature`,
  the SFT policy must succeed often (success >= `gate.min_success`) but wastefully (turns among its successes
  >= `gate.min_turn_ratio` x those of the scripted `gate.reference`, the depth-first explorer). Writes
  d/gate.json (and each row's eval.json under d/<split>_<games>: a rerun with the same games reads them; new
  thresholds are judged on them, a new split or number of games is evaluated afresh) and prints one line.

  Returns:
    {'sft_success', 'sft_turns', 'reference_success', 'reference_turns', 'ratio', 'passed', 'line'}.
  With `gate.on_fail` 'report' a failed gate is printed (with the fix, `gate.fix` or the default "grow the
  policy") and returned, and the run goes on; the table's header then carries it (planpo.tables.report).

  Raises:
    common.lm.stages.RegimeGateFailed: the gate failed and `gate.on_fail` is 'stop' (the default); the message has
      the values and the fix.
  """
  g = config.gate
  sets = {"gate": list(tasks)}
  games = os.path.join(d, f"{g.split}_{len(tasks)}")   # evaluations per game set: a new split or count re-evaluates
  sft_eps = evaluate(config, policy, sft_params, pool, sets, os.path.join(games, "sft"), seed)["gate"]["episodes"]
  ref_eps = evaluate(config, policy, None, pool, sets, os.path.join(games, str(g.reference)), seed,
                     scripted=str(g.reference))["gate"]["episodes"]
  out = {"sft_success": float(np.mean([e["success"] for e in sft_eps])), "sft_turns": tables.turns_among_successes(sft_eps),
         "reference_success": float(np.mean([e["success"] for e in ref_eps])),
         "reference_turns": tables.turns_among_successes(ref_eps)}
  out["ratio"] = out["sft_turns"] / out["reference_turns"] if out["reference_turns"] > 0 else float("nan")
  ok_success = out["sft_success"] >= float(g.min_success)
  ok_waste = bool(float(g.min_turn_ratio) <= 0.0 or (np.isfinite(out["ratio"])
                                                    and out["ratio"] >= float(g.min_turn_ratio)))
  out["passed"] = bool(ok_success and ok_waste)
  n = len(sft_eps)
  out["line"] = (f"regime gate (SFT seed {seed}, {len(tasks)} '{g.split}' games x {n // max(len(tasks), 1)}): SFT "
                 f"success {out['sft_success']:.3f} (need >= {float(g.min_success):.2f}: "
                 f"{'ok' if ok_success else 'FAIL'}), turns among successes {out['sft_turns']:.2f} vs "
                 f"{g.reference} {out['reference_turns']:.2f} (its success {out['reference_success']:.3f}) = "
                 f"{out['ratio']:.2f}x (need >= "
                 f"{float(g.min_turn_ratio):.2f}x: {'ok' if ok_waste else 'FAIL'}): "
                 f"{'PASS' if out['passed'] else 'FAIL'}")
  if not out["passed"]:
    if not ok_success:
      why = "it rarely succeeds, so success-conditioned advantages have nothing to condition on"
    elif not np.isfinite(out["reference_turns"]):
      why = f"the reference {g.reference} won no gate game, so the waste cannot be measured"
    elif not np.isfinite(out["sft_turns"]):
      why = "the SFT policy won no gate game, so the waste cannot be measured"
    else:
      why = "its successes are already short, so there is nothing to shorten"
    fix = str(g.get("fix", "") or "") or (
        "grow the policy (--config.model.tiny_sizes.num_layers=4 --config.model.tiny_sizes.hidden_size=256 "
        "--config.model.tiny_sizes.intermediate_size=512) or train SFT longer (sft.epochs), and say so in the results")
    out["why"] = f"The RL rows would be read in the wrong regime: {why}. Fix: {fix}"
  if distributed.is_primary():
    io.write_json(os.path.join(d, "gate.json"), out)
  print(out["line"], flush=True)
  if not out["passed"]:
    if g.get("on_fail", "stop") == "stop":
      raise stages.RegimeGateFailed(f"{out['line']}. {out['why']}; the SFT checkpoint and gate.json stay in the "
                                    "workdir")
    print(f"WARNING {out['why']} (gate.on_fail 'report': the RL rows run, and the table says so)", flush=True)
  return out


# --- runs and reports ----------------------------------------------------------------------------

def run_config(config, name: str) -> tuple[str, ml_collections.ConfigDict]:
  """(method, config) of the RL run `name`: `config.variants[name]`'s 'method' and its overrides of
  `planpo.*` / `gigpo.*` applied to a copy of config.

  Raises:
    ValueError: unknown run name, method, section or key (names the config key).
  """
  if name not in config.variants:
    raise ValueError(f"config `runs` names {name!r}, which is neither 'random', 'sft' nor a key of `variants` "
                     f"({sorted(config.variants)})")
  v = dict(config.variants[name])
  method = v.pop("method", None)
  if method not in RL_METHODS:
    raise ValueError(f"config `variants.{name}.method` must be one of {RL_METHODS}, got {method!r}")
  c = ml_collections.ConfigDict(config.to_dict())
  for section, overrides in v.items():
    if section not in ("planpo", "gigpo", "rl"):
      raise ValueError(f"config `variants.{name}` overrides section {section!r}; allowed: planpo, gigpo, rl")
    for key, value in dict(overrides).items():
      if key not in c[section]:
        raise ValueError(f"config `variants.{name}.{section}.{key}`: `{section}` has no key {key!r}")
      c[section][key] = value
  return method, c


def run(config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None) -> dict | None:
  """SFT, then each run of `runs` per seed, evaluation and the tables (module docstring).

  Args:
    config: a configs/planpo_<env>.py config.
    workdir: output folder (created); running again resumes.
    stop_after: stop (after saving) once this many RL steps ran in this call (tests of resume); returns None.
  Returns:
    {run: {seed: eval.json dict}} (workdir/results_<table>.json also holds the paired differences), or None when
    stopped early.
  """
  check_config(config)
  os.makedirs(workdir, exist_ok=True)
  p = config.get("primary", None)
  if p and p.get("run", ""):
    print(f"primary cell (named before the run): d turns among successes, {p.run} - {p.reference}, on each held-out "
          f"split, with success non-inferior by a margin of {float(p.success_margin):.2f}", flush=True)
  pool = rollouts.make_pool(config)
  data_read = rollouts.data_provenance(pool)
  for path, digest in data_read.items():
    logging.info("data: %s sha256 %s", path, digest)
  budget = [-1 if stop_after is None else int(stop_after)]
  results: dict[str, dict[int, dict]] = {r: {} for r in config.runs}
  sft_data: dict[int, dict] = {}
  try:
    w0 = pool.workers[0]
    train_tasks = rollouts.task_ids(w0, config, config.env.train_split, config.env.train_tasks)
    eval_sets = {str(label): rollouts.task_ids(w0, config, split, config.env.eval_tasks)
                 for label, split in dict(config.env.eval_splits).items()}
    types = rollouts.task_types(w0, sorted({t for v in eval_sets.values() for t in v}))
    gate = config.get("gate", None)
    gate_tasks = []
    if gate is not None and gate.get("split", ""):
      try:
        gate_tasks = rollouts.task_ids(w0, config, str(gate.split), int(gate.tasks))
      except Exception as e:  # pylint: disable=broad-except  (the env's own error, remote or local)
        raise stages.RegimeGateFailed(f"config `gate.split` {gate.split!r}: the environment has no such split or "
                                      f"cannot list its games ({str(e).splitlines()[0] if str(e) else e!r}); give a "
                                      "held-out split of the env (TextWorldExpress: 'dev')") from None
      if not gate_tasks:
        raise stages.RegimeGateFailed(f"config `gate.split` {gate.split!r} holds no games of `env.games`; give a "
                                      "held-out split with games")
    # the tokenizer corpus is replayed only when no tiny policy is kept in the workdir yet (load_policy)
    kept = os.path.isfile(os.path.join(workdir, "policy", "config.json"))
    corpus = [] if kept else data.tokenizer_corpus(data.sft_episodes(pool, train_tasks, config=config, seed=0))
    policy = load_policy(config, corpus, workdir)   # one tokenizer and initial model for every seed and run
    shared = bool(config.sft.get("shared", False))
    shared_params = None
    replays: dict[int, list] = {}   # SFT seed -> gold episodes: replayed once, when a seed first needs them

    def gold(sft_seed: int) -> list:
      if sft_seed not in replays:
        replays[sft_seed] = data.sft_episodes(pool, train_tasks, config=config, seed=sft_seed, chat=policy.chat)
      return replays[sft_seed]

    for seed in config.seeds:
      seed = int(seed)
      sft_seed = int(config.seeds[0]) if shared else seed
      sd = os.path.join(workdir, f"seed_{seed}")
      sft_dir = os.path.join(sd, "sft")
      sft_params = None
      if any(r not in tables.SCRIPTED_RUNS and not os.path.exists(os.path.join(sd, r, "eval.json"))
             for r in config.runs):
        if shared:
          if shared_params is None:
            shared_params = run_sft(config, policy, data.sft_rows(gold(sft_seed)),
                                    os.path.join(workdir, "sft_shared"), sft_seed).params
          sft_params = shared_params
        else:
          sft_params = run_sft(config, policy, data.sft_rows(gold(sft_seed)), sft_dir, seed).params
        pending_rl = [r for r in config.runs if r not in tables.SCRIPTED_RUNS + ("sft",)
                      and not os.path.exists(os.path.join(sd, r, "eval.json"))]
        if gate_tasks and pending_rl:   # printed before any RL of this SFT policy; stops the run if it fails
          regime_gate(config, policy, sft_params, pool, gate_tasks, _gate_dir(config, workdir, sft_seed), sft_seed)
      for name in config.runs:
        rd = os.path.join(sd, name)
        if name in tables.SCRIPTED_RUNS:
          results[name][seed] = evaluate(config, policy, None, pool, eval_sets, rd, seed, scripted=name)
          continue
        if name == "sft":
          results[name][seed] = evaluate(config, policy, sft_params, pool, eval_sets, sft_dir, seed)
          stats_path = os.path.join(sft_dir, "sft_data.json")   # the SFT data's statistics, kept for reruns
          if os.path.exists(stats_path):
            sft_data[seed] = io.read_json(stats_path)
          else:
            sft_data[seed] = json.loads(json.dumps(data.episode_stats(gold(sft_seed))))   # as read back
            if distributed.is_primary():
              io.write_json(stats_path, sft_data[seed], indent=None)
          continue
        params = None
        if not os.path.exists(os.path.join(rd, "eval.json")):
          method, rc = run_config(config, name)
          params = run_rl(rc, policy, method, sft_params, sft_params, pool, train_tasks, rd, seed, budget).params
        results[name][seed] = evaluate(config, policy, params, pool, eval_sets, rd, seed)
  except StopRequested:
    return None
  finally:
    pool.close()
  table = tables.report(config, results, types)
  tag = tables.table_tag(config)
  version = provenance.code_version()
  stamp = f"code: commit {version['commit']}{' with uncommitted changes' if version['dirty'] else ''}"
  gates = _saved_gates(config, workdir)
  head = "".join(f"{g['line']}\n" + (f"  {g['why']}\n" if not g["passed"] else "") for g in gates.values())
  table = f"{stamp}; config: {os.path.join(workdir, 'config.json')}\n{head}{table}"
  diffs = tables.differences(config, results)
  print(table, flush=True)   # on every process: the same table (the same gathered records)
  if distributed.is_primary():   # several processes: only the primary writes (common/distributed.py)
    io.write_json(os.path.join(workdir, f"results_{tag}.json"),
                  {"code": version, "runs": {r: {str(s): v for s, v in by_seed.items()} for r, by_seed in results.items()},
                   "task_types": types, "differences": diffs, "sft_data": sft_data, "data": data_read,
                   "gate": {str(k): v for k, v in gates.items()}, "config": config.to_dict()}, default=str)
    with open(os.path.join(workdir, f"results_{tag}.txt"), "w") as f:
      f.write(table + "\n")
    tables.plot(workdir, config, tag)
  return results
