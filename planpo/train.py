r"""PlanPO beside GRPO and GiGPO: SFT, then RL per run, then held-out evaluation and the paired tables.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx
  (the launcher calls `planpo.train.run(config, workdir)` for config.method == 'planpo'; configs are
  configs/planpo_{twx,household,scienceworld}.py, each with ':ablation' and ':smoke' variants)

Per seed (config `seeds`; the seeds are paired: every run of a seed starts from that seed's SFT policy, draws
the same training tasks at each step, uses the same sampling keys and is evaluated on the same tasks; with
`sft.shared` every seed's RL starts from one SFT policy, trained once with the first seed in
workdir/sft_shared, as the paper's runs start from one pretrained checkpoint): the policy ('tiny:qwen2' resolved by common.lm.checkpoints with a tokenizer trained on the SFT episodes' text,
shapes `policy.sizes`; or a local checkpoint, `policy.lm_checkpoint`) is trained by SFT on gold trajectories
with detours (planpo/data.py). Then every run of `runs`:
  random  no training: a uniformly random admissible action each turn (RandomAdmissible);
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
          frozen SFT policy), AdamW at `rl.lr`, `rl.minibatches` updates per step (the first with ratio 1),
          each accumulated over micro-batches of `rl.micro_rows` rows. log pi_old: recomputed by a forward
          pass (`rl.old_logprobs` 'recompute', verl's choice, needed when the sampler is another engine) or the
          sampler's own log-probs ('sampler': the same JAX model at the same temperature, equal to the
          recomputed ones to 1e-5, tests/lm_sampling_test.py; saves one forward pass over the batch).
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
import shutil
import time
from typing import Any, NamedTuple, Sequence

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from common import chat as chat_lib
from common import checkpoint as ckpt_lib
from common import gigpo
from common import metric_writer
from common import provenance
from common import rollout as rollout_lib
from common import stats
from common.lm import checkpoints as lm_checkpoints
from common.lm import loading
from common.lm import lora as lora_lib
from common.lm import model as model_lib
from common.lm import training
from common.lm.config import ModelConfig
from common.lm import sampling
from common.lm.sampler import commit
from planpo import advantages as adv_lib
from planpo import data
from planpo import objective
from planpo import rollouts
from planpo import schedule
from planpo import tables

_log = logging.getLogger(__name__)

RL_METHODS = ("grpo", "gigpo", "planpo")
METRICS = ("success", "score", "turns", "response_tokens")


class Policy(NamedTuple):
  """The policy of a run: model config, initial params, chat template, checkpoint folder it came from."""
  model: ModelConfig
  params: Any
  chat: chat_lib.ChatTemplate
  checkpoint: str


def check_config(config) -> None:
  """Raises ValueError naming the config key of a bad value.

  A comma-separated string in `runs` (the flag --config.runs=grpo,planpo) is split into run names, in place.
  """
  training.check_scale_config(config.policy, config.get("mesh", None), model_key="policy")
  if isinstance(config.runs, str) or any("," in str(r) for r in config.runs):
    runs = [config.runs] if isinstance(config.runs, str) else list(config.runs)
    config.runs = tuple(x.strip() for r in runs for x in str(r).split(",") if x.strip())
  bad = [r for r in config.runs if r not in ("random", "sft") and r not in config.variants]
  if bad:
    raise ValueError(f"config `runs` holds unknown runs {bad}; valid: 'random', 'sft' and the keys of `variants` "
                     f"({sorted(config.variants)})")
  for r in config.runs:
    if r not in ("random", "sft"):
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
  if config.rollout.mode != "window":
    raise ValueError(f"config `rollout.mode` must be 'window' for PlanPO, got {config.rollout.mode!r}")
  b = config.rl.tasks_per_step * config.rl.rollouts_per_task
  if config.rl.minibatches < 1:
    raise ValueError(f"config `rl.minibatches` must be >= 1, got {config.rl.minibatches}")
  if b < 1:
    raise ValueError("config `rl.tasks_per_step` and `rl.rollouts_per_task` must be >= 1")
  schedule.check_alpha(config.planpo.alpha_init, config.planpo.alpha_final, _decay_steps(config))


def _decay_steps(config) -> int:
  """alpha(k)'s decay length: `planpo.alpha_decay_steps`, or `rl.steps` when it is 0."""
  return int(config.planpo.alpha_decay_steps) or int(config.rl.steps)


def load_policy(config, corpus: Sequence[str], workdir: str | None = None) -> Policy:
  """Resolves `policy.lm_checkpoint` ('tiny:<family>': tokenizer trained on `corpus`, vocabulary
  `policy.tiny_vocab`, shapes `policy.sizes`, cache `policy.cache_dir`) and builds the ChatTemplate. The
  weights load onto the mesh of `mesh.shape`, with `policy.remat`; `policy.lora_rank` > 0 adds fresh LoRA
  adapters (`policy.lora_alpha`, `policy.lora_targets`; key from the first seed), which alone then train.

  With `workdir`, a tiny checkpoint is copied to workdir/policy the first time and loaded from there on every
  later run, so a resumed or shared workdir (the ablation beside the main table) always pairs its saved SFT
  and RL checkpoints with the tokenizer and initial weights they were trained with, whatever the corpus
  gives now. A local checkpoint folder is loaded in place.
  """
  p = config.policy
  tiny = p.lm_checkpoint.startswith(lm_checkpoints.TINY_PREFIX)
  kept = os.path.join(workdir, "policy") if workdir and tiny else None
  if kept and os.path.isfile(os.path.join(kept, "config.json")):
    path = kept
  else:
    path = lm_checkpoints.resolve_checkpoint(p.lm_checkpoint, corpus=list(corpus) if tiny else (),
                                             cache_dir=p.cache_dir or None, vocab_size=p.tiny_vocab,
                                             config_key="config.policy.lm_checkpoint",
                                             sizes=dict(p.sizes) if tiny else None)
    if kept:
      tmp = kept + ".tmp"
      shutil.rmtree(tmp, ignore_errors=True)
      shutil.copytree(path, tmp)
      os.replace(tmp, kept)
      path = kept
  mesh, rules = mesh_of(config)
  cfg, params, tok = loading.load_pretrained(path, mesh=mesh, rules=rules, **training.model_overrides(p))
  if p.get("lora_rank", 0):
    cfg = cfg.with_lora(rank=int(p.lora_rank), alpha=float(p.lora_alpha), targets=tuple(p.lora_targets))
    params = lora_lib.add_adapters(jax.random.key(int(config.seeds[0]) + 7), params, cfg)
  return Policy(cfg, params, chat_lib.ChatTemplate(tok), path)


def mesh_of(config):
  """(mesh, rules) of config `mesh.shape` and the optional mesh.rules (common.lm.training.mesh_from_config; absent = one
  device)."""
  return training.mesh_from_config(config.get("mesh", None))


def _state_kw(config) -> dict:
  """init_state's keywords from config: LoRA (`policy.lora_rank`), `optim.master_weights`, the mesh."""
  mesh, rules = mesh_of(config)
  return dict(adapters=bool(config.policy.get("lora_rank", 0)),
              master_weights=bool(config.optim.get("master_weights", False)), mesh=mesh, rules=rules)


# --- updates -------------------------------------------------------------------------------------
#
# Devices: the updates run on the (data, fsdp, tensor) mesh of config `mesh.shape` (default (1, 1, 1): one
# device; optional mesh.rules; common.lm.training.mesh_from_config). The state is placed on it by init_state
# (parameters by the logical-axis rules, optimizer state beside them), each update's rows are sharded over
# (data, fsdp) (padded with masked copies of a real row to a multiple of that size) and the jitted steps run
# unchanged on the sharded arrays. Sampling and scoring (logp_old, logp_ref) run on one device.
# Micro-batches are strided (common.lm.training.micro_batches). LoRA: `policy.lora_rank` > 0 trains the
# adapters only; `optim.master_weights` keeps float32 master weights and optimizer state for bfloat16
# parameters (`policy.param_dtype`); `policy.remat` checkpoints each decoder layer's activations.

def _tx(lr: float, grad_clip: float, params=None, adapters: bool = False) -> optax.GradientTransformation:
  """Clip by global norm, then AdamW (no weight decay); with `adapters` only the LoRA adapters of `params` move
  (common.lm.lora.adapter_optimizer)."""
  tx = optax.chain(optax.clip_by_global_norm(grad_clip), optax.adamw(lr, weight_decay=0.0))
  return lora_lib.adapter_optimizer(tx, params, extra=()) if adapters else tx


@flax.struct.dataclass
class TrainState:
  """The whole train state of an SFT or RL stage, saved as one Orbax checkpoint (common.checkpoint).

  Attributes:
    params: the model parameters (with LoRA adapters when `policy.lora_rank` > 0).
    opt_state: the optax state of `_tx` (clip by global norm, then AdamW), or a common.lm.training.MasterState
      holding it and float32 master weights (`optim.master_weights`).
    step: i32[] optimizer steps (SFT) or RL steps done.
  """
  params: Any
  opt_state: Any
  step: jax.Array


def init_state(params, lr: float, grad_clip: float, *, adapters: bool = False, master_weights: bool = False,
               mesh=None, rules=None) -> TrainState:
  """A fresh TrainState: params, optimizer state, step 0; committed to the default device, or placed on `mesh`
  (common.lm.training.place_state) when given.

  Args:
    adapters: train the LoRA adapters only (`policy.lora_rank` > 0).
    master_weights: float32 master weights in the optimizer state (`optim.master_weights`).
  """
  trainable = lora_lib.trainable_mask(params, extra=()) if adapters else None
  opt = training.init_opt_state(_tx(lr, grad_clip, params, adapters), params, master_weights=master_weights,
                                trainable=trainable)
  state = TrainState(params=params, opt_state=opt, step=jnp.zeros((), jnp.int32))
  return commit(state) if mesh is None else training.place_state(state, params, mesh, rules)


def _step(state, grads, lr, grad_clip, adapters):
  params, opt = training.apply_gradients(_tx(lr, grad_clip, state.params, adapters), grads, state.opt_state,
                                         state.params)
  return state.replace(params=params, opt_state=opt), optax.tree.norm(grads)


def micro_layout(rows: int, micro_rows: int, shards: int = 1) -> tuple[int, int]:
  """(n micro-batches, padded row count) for `rows` rows in micro-batches of about `micro_rows` rows
  (0 = one pass): n = ceil(rows / micro_rows), rows padded to a multiple of lcm(n, shards) (shards = the
  mesh's batch shards, common.lm.training.batch_shards)."""
  n = 1 if not micro_rows else max(1, -(-int(rows) // int(micro_rows)))
  return n, training.pad_rows(rows, training.lcm(n, shards))


def pad_batch(arrays: Sequence[np.ndarray], rows: int, *, mask_index: Sequence[int]) -> list[np.ndarray]:
  """Pads every array to `rows` rows with copies of row 0; in the arrays at `mask_index` the copies are zero
  (False), so they count in no loss or normaliser (copies of a real row keep the forward pass finite)."""
  out = []
  for k, a in enumerate(arrays):
    a = np.asarray(a)
    extra = rows - a.shape[0]
    if extra > 0:
      fill = np.zeros_like(a[:1]) if k in mask_index else a[:1]
      a = np.concatenate([a, np.repeat(fill, extra, axis=0)])
    out.append(a)
  return out


@functools.partial(jax.jit, static_argnames=("model", "lr", "grad_clip", "micro", "adapters"))
def sft_update(state, tokens, attn, mask, *, model, lr, grad_clip, micro: int = 1, adapters: bool = False):
  """Token-mean cross-entropy on the reply tokens; returns (state, {'loss', 'grad_norm'}).

  loss = -(1/N) sum_{b,t} mask[b,t] log pi(tokens[b,t] | tokens[b,<t]), N = sum mask, its gradient summed over
  `micro` strided micro-batches (common.lm.training.accumulate_grads; config `sft.micro_rows`), equal to one
  pass. tokens i32[B, L], attn bool[B, L], mask bool[B, L]; B a multiple of micro (and of the mesh's batch
  shards when sharded).
  """
  total = jnp.maximum(jnp.sum(mask), 1).astype(jnp.float32)

  def loss_sum(p, mb):
    lp = model_lib.token_logprobs(p, mb[0], mb[1], config=model)
    return -jnp.sum(jnp.where(mb[2], lp, 0.0))
  loss, g, _ = training.accumulate_grads(loss_sum, state.params, (tokens, attn, mask), micro)
  g = jax.tree.map(lambda x: x / total, g)
  new, gnorm = _step(state, g, lr, grad_clip, adapters)
  return new.replace(step=state.step + 1), {"loss": loss / total, "grad_norm": gnorm}


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def score(params, tokens, attn, *, model, temperature):
  """f32[B, L] log-probabilities of tokens i32[B, L] under params (attn bool[B, L]; common.lm.model.token_logprobs)."""
  return model_lib.token_logprobs(params, tokens, attn, config=model, temperature=temperature)


def score_rows(params, tokens, attn, *, model, temperature, chunk: int) -> jax.Array:
  """`score` in chunks of `chunk` rows (config key `rl.micro_rows`): f32[B, L]; B a multiple of chunk or not."""
  outs = [score(params, tokens[i:i + chunk], attn[i:i + chunk], model=model, temperature=temperature)
          for i in range(0, tokens.shape[0], chunk)]
  return jnp.concatenate(outs, axis=0)


def chunk_weight(mask: np.ndarray, agg_mode: str, ratio: str) -> np.ndarray:
  """What each row counts in the loss's normaliser: policy tokens ('token_mean' with the token ratio), else 1
  per row holding any policy token (the sequence means and GSPO's response ratio). f32[B]."""
  m = np.asarray(mask, bool)
  if agg_mode == "token_mean" and ratio == "token":
    return m.sum(axis=1).astype(np.float32)
  return m.any(axis=1).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("model", "lr", "grad_clip", "temperature", "loss_kw", "micro",
                                             "adapters"))
def rl_step(state, tokens, attn, mask, logp_old, logp_ref, adv, weight, *, model, lr, grad_clip, temperature,
            loss_kw, micro: int, adapters: bool = False):
  """One optimizer step of planpo.objective.policy_loss, accumulated over `micro` strided micro-batches.

  Micro-batch j's loss (a mean over its own rows, `loss_kw`: the loss settings as sorted items) is weighted by
  its share W_j / W of the rows' weights (`chunk_weight`: f32[B], 0 for padding rows), so the sum over
  micro-batches is the minibatch's loss and gradient exactly; metrics are summed with the same shares.
  Arrays [B, L] (adv [B]); B a multiple of micro. Returns (state, metrics incl. 'grad_norm').
  """
  total = jnp.sum(weight)

  def loss_sum(p, mb):
    tok, at, m, lo, lr_, a, w = mb
    share = jnp.where(total > 0, jnp.sum(w) / jnp.where(total > 0, total, 1.0), 0.0)
    lp = model_lib.token_logprobs(p, tok, at, config=model, temperature=temperature)
    loss, met = objective.policy_loss(lp, lo, lr_, a, m, **dict(loss_kw))
    return loss * share, jax.tree.map(lambda x: x * share, dict(met, loss=loss))

  _, g, met = training.accumulate_grads(loss_sum, state.params,
                                        (tokens, attn, mask, logp_old, logp_ref, adv, weight), micro, has_aux=True)
  state, gnorm = _step(state, g, lr, grad_clip, adapters)
  return state, dict(jax.tree.map(lambda x: jnp.sum(x, axis=0), met), grad_norm=gnorm)


def rl_update(state, tokens, attn, mask, logp_old, logp_ref, adv, *, model, lr, grad_clip, temperature, loss_kw,
              micro_rows: int, adapters: bool = False, mesh=None, rules=None):
  """One optimizer step of planpo.objective.policy_loss on a minibatch, accumulated over strided micro-batches
  of about `micro_rows` rows (config key `rl.micro_rows`; `micro_layout`); equal to the step on the whole
  minibatch (tests/planpo_train_test.py). The rows are padded (masked copies of row 0, weight 0) to the
  layout's multiple and, with `mesh`, sharded over its batch axes. Returns (state, metrics incl. 'grad_norm').
  """
  kw = dict(loss_kw)
  w = chunk_weight(np.asarray(mask), kw.get("agg_mode", "token_mean"), kw.get("ratio", "token"))
  shards = 1 if mesh is None else training.batch_shards(mesh, rules)
  n, rows = micro_layout(int(tokens.shape[0]), micro_rows, shards)
  arrays = pad_batch([tokens, attn, mask, logp_old, logp_ref, adv, w], rows, mask_index=(2, 6))
  arrays = [jnp.asarray(a) for a in arrays] if mesh is None else training.place_batch(arrays, mesh, rules)
  return rl_step(state, *arrays, model=model, lr=lr, grad_clip=grad_clip, temperature=temperature, loss_kw=loss_kw,
                 micro=n, adapters=adapters)


# --- advantages ----------------------------------------------------------------------------------

def compute_advantages(method: str, b: dict, *, config, num_groups: int, num_rollouts: int, step: int) -> dict:
  """Per-row advantages f32[R] (and their parts) of `method` on collated rows `b` (planpo.rollouts.collate).

  Rewards: R = b['episode_rewards'] (`rl.reward_scale` on a win); GiGPO's step rewards = the env's score
  change x `rl.reward_scale` minus the invalid-action penalty. Rows with valid False get 0.
  """
  mask = jnp.asarray(b["valid"])
  g, r, t = (jnp.asarray(b[k]) for k in ("group_ids", "rollout_ids", "turn"))
  rew = jnp.asarray(b["episode_rewards"])
  max_turns = int(config.env.max_turns)
  if method == "grpo":
    a = gigpo.episode_advantages(rew, g, r, num_groups=num_groups, num_rollouts=num_rollouts, mask=mask,
                                 stats_over="rollouts", norm="std", eps=float(config.planpo.eps),
                                 ddof=int(config.planpo.ddof))
    return {"advantages": a}
  if method == "gigpo":
    c = config.gigpo
    step_r = jnp.asarray(b["env_rewards"] * float(config.rl.reward_scale) - b["penalties"])
    out = gigpo.gigpo_advantages(rew, step_r, g, r, t, jnp.asarray(b["step_group_ids"]), num_groups=num_groups,
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
                                  norm=p.norm, eps=p.eps, ddof=p.ddof, conditional=p.conditional)
  out = out._asdict()
  if not p.get("use_episode", True):   # the ablation "without A_E": A = alpha(k) A_S
    out["advantages"] = alpha * out["step"]
  return dict(out, alpha=alpha)


def _loss_kw(config) -> tuple:
  p = config.planpo
  return tuple(sorted(dict(clip_low=float(p.clip_low), clip_high=float(p.clip_high), kl_coef=float(p.kl_coef),
                           agg_mode=p.agg_mode, ratio=p.ratio).items()))


# --- stages --------------------------------------------------------------------------------------

def _ckpt(config, d: str) -> ckpt_lib.Checkpointer:
  return ckpt_lib.Checkpointer(os.path.join(d, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                               save_every=config.checkpoint.every)


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


def run_sft(config, policy: Policy, rows, d: str, seed: int) -> TrainState:
  """SFT for `sft.epochs` over the rows in batches of `sft.batch_size` (fresh order per epoch), accumulated over
  micro-batches of about `sft.micro_rows` rows (0 = one pass); resumes (the checkpoint restores into the
  state's mesh shardings)."""
  s = config.sft
  if not rows:
    raise ValueError("SFT has no data: no gold episode of the training tasks was won within `env.max_turns` "
                     "(the replays' warnings name each dropped task), or `env.train_tasks` is 0, or the games "
                     "folder holds no games; raise env.max_turns / env.train_tasks or check the games folder")
  kw = _state_kw(config)
  state = init_state(policy.params, s.lr, config.optim.grad_clip, **kw)
  bs = min(int(s.batch_size), len(rows))
  micro, padded = micro_layout(bs, int(s.get("micro_rows", 0)), training.batch_shards(kw["mesh"], kw["rules"]))
  per_epoch = -(-len(rows) // bs)
  total = int(s.epochs) * per_epoch
  ck = _ckpt(config, d)
  state, start = ck.restore_or_init(state)
  start = int(start or 0)
  writer = metric_writer.MetricWriter(d, resume_step=start, tensorboard=config.logging.tensorboard)
  pad = policy.model.pad_token_id or 0
  try:
    for k in range(start, total):
      epoch, i = divmod(k, per_epoch)
      order = np.random.default_rng([seed, 11, epoch]).permutation(len(rows))
      idx = list(order[i * bs:(i + 1) * bs])
      tok, attn, mask = pad_batch(_pad_rows([rows[j] for j in idx], len(idx), pad), padded, mask_index=(2,))
      tok, attn, mask = training.place_batch((tok, attn, mask), kw["mesh"], kw["rules"])
      state, m = sft_update(state, tok, attn, mask, model=policy.model, lr=float(s.lr),
                            grad_clip=float(config.optim.grad_clip), micro=micro, adapters=kw["adapters"])
      if (k + 1) % config.logging.every == 0 or k + 1 == total:
        writer.write(k + 1, {f"sft/{n}": v for n, v in jax.device_get(m).items()} | {"sft/epoch": epoch})
      ck.maybe_save(k + 1, state, force=k + 1 == total)
  finally:
    writer.close()
    ck.close()
  return state


def _rows(x: np.ndarray, n: int) -> np.ndarray:
  """The first n rows of x, padded with zero rows when x has fewer."""
  x = np.asarray(x)
  if x.shape[0] >= n:
    return x[:n]
  return np.concatenate([x, np.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])


class StopRequested(Exception):
  """Raised after saving when `stop_after` RL steps are done (tests of resume)."""


def run_rl(config, policy: Policy, method: str, init_params, ref_params, pool, train_tasks, d: str, seed: int,
           budget: list) -> TrainState:
  """`rl.steps` RL steps of `method` from `init_params`; the KL reference is `ref_params`; resumes."""
  rl = config.rl
  kw = _state_kw(config)
  state = init_state(init_params, rl.lr, config.optim.grad_clip, **kw)
  ck = _ckpt(config, d)
  state, start = ck.restore_or_init(state)
  start = int(start or 0)
  writer = metric_writer.MetricWriter(d, resume_step=start, tensorboard=config.logging.tensorboard)
  pad = policy.model.pad_token_id or 0
  temp = float(rl.temperature)
  n_tasks, G = int(rl.tasks_per_step), int(rl.rollouts_per_task)
  try:
    for step in range(start, int(rl.steps)):
      rng = np.random.default_rng([seed, 17, step])
      tasks = [train_tasks[i] for i in rng.choice(len(train_tasks), n_tasks, replace=n_tasks > len(train_tasks))]
      key = jax.random.fold_in(jax.random.key(seed * 1000), step)   # common random numbers across runs
      sampler = rollouts.make_sampler(state.params, policy, key=key, rows=n_tasks * G, temperature=temp,
                                      config=config)
      t0 = time.monotonic()
      trajs = rollouts.run_rollouts(pool, sampler, policy.chat, tasks, config=config, group_size=G, seed=step)
      t1 = time.monotonic()
      b = rollouts.collate(trajs, pad_id=pad)
      adv = compute_advantages(method, b, config=config, num_groups=n_tasks, num_rollouts=n_tasks * G, step=step)
      b["advantages"] = np.asarray(adv["advantages"])
      micro = int(rl.get("micro_rows", 32))
      # rows to train on: the real rows (first) padded to a multiple of `rl.micro_rows` with empty rows
      real = np.flatnonzero(b["valid"])
      keep = -(-(int(real[-1]) + 1 if real.size else 1) // micro) * micro
      tok, attn, mask, a_rows = (_rows(b[k], keep) for k in ("tokens", "attn", "policy_mask", "advantages"))
      tok, attn, mask, a_rows = jnp.asarray(tok), jnp.asarray(attn), jnp.asarray(mask), jnp.asarray(a_rows)
      if rl.get("old_logprobs", "recompute") == "sampler":   # the rollout's own log-probs (same model, same T)
        logp_old = jnp.asarray(_rows(b["logprobs"], keep))
      else:
        logp_old = score_rows(state.params, tok, attn, model=policy.model, temperature=temp, chunk=micro)
      logp_ref = score_rows(ref_params, tok, attn, model=policy.model, temperature=temp, chunk=micro)
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
                             a_rows[sel], model=policy.model, lr=float(rl.lr),
                             grad_clip=float(config.optim.grad_clip), temperature=temp, loss_kw=_loss_kw(config),
                             micro_rows=micro, adapters=kw["adapters"], mesh=kw["mesh"], rules=kw["rules"])
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
      ck.maybe_save(step + 1, state, force=step + 1 == int(rl.steps) or budget[0] == 0)
      if budget[0] == 0:
        raise StopRequested()
  finally:
    writer.close()
    ck.close()
  return state


# --- evaluation ----------------------------------------------------------------------------------

class RandomAdmissible:
  """The no-training baseline: a uniformly random admissible action every turn (numpy seed [seed, 23]).

  A common.rollout policy (list[PolicyRequest] -> list[PolicyOutput]); reads the admissible actions of each
  episode's current state from the worker the driver runs it on (its 'admissible_actions' query). The reply
  is '<think>I pick an admissible action.</think><action>A</action>' in the policy's chat format.
  """

  REASON = "I pick an admissible action."

  def __init__(self, chat, seed: int):
    self.rng = np.random.default_rng([int(seed), 23])
    self.driver = None
    self._scripted = rollout_lib.ScriptedPolicy(self._reply, chat)

  def attach(self, driver) -> None:
    """Called by planpo.rollouts.run_rollouts with the driver that runs the episodes."""
    self.driver = driver

  def _reply(self, request) -> str:
    acts = list(self.driver.worker_for(request.episode).query("admissible_actions")) if self.driver else []
    action = acts[int(self.rng.integers(len(acts)))] if acts else "look"
    return f"<think>{self.REASON}</think><action>{action}</action>"

  def __call__(self, requests):
    return self._scripted(requests)


def evaluate(config, policy: Policy, params, pool, eval_sets: dict[str, list[str]], d: str, seed: int,
             *, random_baseline: bool = False) -> dict:
  """`rl.eval_samples` rollouts per held-out task of every split of `env.eval_splits`, at `rl.eval_temperature`
  (the RandomAdmissible policy with random_baseline); writes and returns eval.json:
  {split label: {'metrics': planpo.rollouts.episode_metrics, 'episodes': [planpo.rollouts.episode_record]}}.
  An existing eval.json is returned as is (resume)."""
  path = os.path.join(d, "eval.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  k = int(config.rl.get("eval_samples", 1))
  out = {}
  for label, tasks in eval_sets.items():
    if random_baseline:
      sampler = RandomAdmissible(policy.chat, seed)
    else:
      sampler = rollouts.make_sampler(params, policy, key=jax.random.key(seed + 99), rows=len(tasks) * k,
                                      temperature=float(config.rl.eval_temperature), config=config)
    trajs = rollouts.run_rollouts(pool, sampler, policy.chat, tasks, config=config, group_size=k, seed=0)
    out[label] = {"metrics": rollouts.episode_metrics(trajs),
                  "episodes": [rollouts.episode_record(t) for t in trajs]}
  os.makedirs(d, exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(out, f, indent=1)
  os.replace(path + ".tmp", path)
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


def _seed_means(results, run, label, metric) -> list[float]:
  return [float(np.mean([e[metric] for e in results[run][s][label]["episodes"]])) for s in sorted(results[run])]


def paired(config, results: dict, run: str, ref: str, label: str, metric: str) -> stats.PairedDifference:
  """run - ref on split `label`: the mean over held-out tasks of each task's mean difference (over seeds and
  rollouts), with common.stats.paired_difference's bootstrap interval over tasks (`stats.*`). A task is one
  resampling unit: its rollouts under every seed move together. The interval covers the choice of held-out
  tasks for these trained policies, not the variance of training under other seeds (3 seeds are too few to
  resample; the per-seed means are in the JSON).

  Raises:
    ValueError: the two runs did not evaluate the same (seed, task, rollout) units in the same order.
  """
  per_task: dict[str, list[float]] = {}
  for s in sorted(results[ref]):
    a, b = results[run][s][label]["episodes"], results[ref][s][label]["episodes"]
    ka, kb = [(e["task_id"], e["sample"]) for e in a], [(e["task_id"], e["sample"]) for e in b]
    if ka != kb:
      raise ValueError(f"runs {run!r} and {ref!r} evaluated different rollouts on split {label!r}, seed {s} "
                       f"(eval.json of an older config?); delete the stale eval.json and rerun")
    for ea, eb in zip(a, b):
      per_task.setdefault(ea["task_id"], []).append(float(ea[metric]) - float(eb[metric]))
  d = np.asarray([np.mean(v) for v in per_task.values()])
  st = config.stats
  return stats.paired_difference(d, np.zeros_like(d), confidence=float(st.confidence), resamples=int(st.resamples),
                                 method=str(st.method))


def report(config, results: dict, types: dict[str, str]) -> str:
  """The printed tables: per split, the runs' metrics (mean +- std over seeds), the paired differences
  against `reference` (`paired`: tasks are the resampling units, `stats.*`), and success / turns per task type.

  results: {run: {seed: eval.json dict}}.
  """
  runs = list(results)
  seeds = sorted(next(iter(results.values())))
  ref = config.reference if config.reference in results else None
  out = []
  for label in next(iter(next(iter(results.values())).values())):
    eps0 = results[runs[0]][seeds[0]][label]["episodes"]
    n_tasks = len({e["task_id"] for e in eps0})
    out.append(f"\n== held-out split '{label}' ({dict(config.env.eval_splits)[label]}): {n_tasks} tasks x "
               f"{len(eps0) // max(n_tasks, 1)} rollout(s), seeds {seeds}; mean +- std over seeds ==")
    head = f"{'run':<22}" + "".join(f"{m:>20}" for m in METRICS)
    out += [head, "-" * len(head)]
    for run in runs:
      cells = []
      for m in METRICS:
        x = np.asarray(_seed_means(results, run, label, m))
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
        cells.append(f"{np.mean(x):.3f} +- {sd:.3f}")
      out.append(f"{run:<22}" + "".join(f"{c:>20}" for c in cells))
    if ref is not None:
      st = config.stats
      out.append(f"\npaired difference, run - {ref} (mean [{int(st.confidence * 100)}% {st.method} bootstrap "
                 f"interval over held-out tasks, each task's rollouts under every seed paired and kept together; "
                 f"training-seed variance is not in it: per-seed means in the JSON)")
      head = f"{'run':<22}" + "".join(f"{'d ' + m:>28}" for m in METRICS)
      out += [head, "-" * len(head)]
      for run in runs:
        if run == ref:
          continue
        cells = []
        for m in METRICS:
          if run == "random" and m == "response_tokens":   # a fixed scripted reply: not comparable
            cells.append("n/a")
            continue
          d = paired(config, results, run, ref, label, m)
          cells.append(f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
        out.append(f"{run:<22}" + "".join(f"{c:>28}" for c in cells))
    kinds = sorted({types.get(e["task_id"], "?") for e in eps0})
    if kinds:
      out.append("\nper task type: success / turns (mean over seeds and tasks)")
      head = f"{'run':<22}" + "".join(f"{k[:24]:>26}" for k in kinds)
      out += [head, "-" * len(head)]
      for run in runs:
        cells = []
        for k in kinds:
          es = [e for s in seeds for e in results[run][s][label]["episodes"] if types.get(e["task_id"], "?") == k]
          cells.append(f"{np.mean([e['success'] for e in es]):.3f} / {np.mean([e['turns'] for e in es]):5.2f}")
        out.append(f"{run:<22}" + "".join(f"{c:>26}" for c in cells))
  return "\n".join(out).lstrip("\n")


def differences(config, results: dict) -> dict:
  """{split: {run: {metric: {'mean', 'low', 'high', 'n', 'per_seed'}}}} against `reference` (report())."""
  ref = config.reference or None
  if ref not in results:
    return {}
  seeds = sorted(results[ref])
  out: dict = {}
  for label in results[ref][seeds[0]]:
    for run in results:
      if run == ref:
        continue
      for m in METRICS:
        d = paired(config, results, run, ref, label, m)
        per_seed = [a - b for a, b in zip(_seed_means(results, run, label, m), _seed_means(results, ref, label, m))]
        out.setdefault(label, {}).setdefault(run, {})[m] = dict(d._asdict(), per_seed=per_seed)
  return out


def table_tag(config) -> str:
  """The outputs' name: `table` ('main' / 'ablation'), followed by the run names when `runs` is not that
  table's default rows (planpo.tables.TABLE_RUNS), so a subset run (--config.runs=grpo,planpo) never
  overwrites the full table's results_<table>.{txt,json} and curves_<table>.png: it writes
  results_<table>_grpo-planpo.* instead."""
  tag = str(config.get("table", "main"))
  default = tables.TABLE_RUNS.get(tag)
  if default is not None and tuple(config.runs) != tuple(default):
    tag += "_" + "-".join(config.runs)
  return tag


def plot(workdir: str, config, tag: str = "main") -> str | None:
  """curves_<tag>.png: training success, turns and response tokens per RL run and seed (common.metric_writer)."""
  series = {}
  for seed in config.seeds:
    for run in config.runs:
      p = os.path.join(workdir, f"seed_{seed}", run, "metrics.jsonl")
      if run not in ("random", "sft") and os.path.exists(p):
        series[f"{run} s{seed}"] = p
  if not series:
    return None
  return metric_writer.plot_curves(series, ["rollout/success", "rollout/turns", "rollout/response_tokens"],
                                   os.path.join(workdir, f"curves_{tag}.png"),
                                   title=f"{tag}: training rollouts per run and seed")


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
  pool = rollouts.make_pool(config)
  budget = [-1 if stop_after is None else int(stop_after)]
  results: dict[str, dict[int, dict]] = {r: {} for r in config.runs}
  sft_data: dict[int, dict] = {}
  try:
    w0 = pool.workers[0]
    train_tasks = rollouts.task_ids(w0, config, config.env.train_split, config.env.train_tasks)
    eval_sets = {str(label): rollouts.task_ids(w0, config, split, config.env.eval_tasks)
                 for label, split in dict(config.env.eval_splits).items()}
    types = rollouts.task_types(w0, sorted({t for v in eval_sets.values() for t in v}))
    # the tokenizer corpus is replayed only when no tiny policy is kept in the workdir yet (load_policy)
    kept = os.path.isfile(os.path.join(workdir, "policy", "config.json"))
    corpus = [] if kept else data.tokenizer_corpus(data.gold_episodes(pool, train_tasks, config=config, seed=0))
    policy = load_policy(config, corpus, workdir)   # one tokenizer and initial model for every seed and run
    shared = bool(config.sft.get("shared", False))
    shared_params = None
    replays: dict[int, list] = {}   # SFT seed -> gold episodes: replayed once, when a seed first needs them

    def gold(sft_seed: int) -> list:
      if sft_seed not in replays:
        replays[sft_seed] = data.gold_episodes(pool, train_tasks, config=config, seed=sft_seed, chat=policy.chat)
      return replays[sft_seed]

    for seed in config.seeds:
      seed = int(seed)
      sft_seed = int(config.seeds[0]) if shared else seed
      sd = os.path.join(workdir, f"seed_{seed}")
      sft_dir = os.path.join(sd, "sft")
      sft_params = None
      if any(r != "random" and not os.path.exists(os.path.join(sd, r, "eval.json")) for r in config.runs):
        if shared:
          if shared_params is None:
            shared_params = run_sft(config, policy, data.sft_rows(gold(sft_seed)),
                                    os.path.join(workdir, "sft_shared"), sft_seed).params
          sft_params = shared_params
        else:
          sft_params = run_sft(config, policy, data.sft_rows(gold(sft_seed)), sft_dir, seed).params
      for name in config.runs:
        rd = os.path.join(sd, name)
        if name == "random":
          results[name][seed] = evaluate(config, policy, None, pool, eval_sets, rd, seed, random_baseline=True)
          continue
        if name == "sft":
          results[name][seed] = evaluate(config, policy, sft_params, pool, eval_sets, sft_dir, seed)
          stats_path = os.path.join(sft_dir, "sft_data.json")   # the SFT data's statistics, kept for reruns
          if not os.path.exists(stats_path):
            with open(stats_path + ".tmp", "w") as f:
              json.dump(data.episode_stats(gold(sft_seed)), f)
            os.replace(stats_path + ".tmp", stats_path)
          with open(stats_path) as f:
            sft_data[seed] = json.load(f)
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
  table = report(config, results, types)
  tag = table_tag(config)
  version = provenance.code_version()
  stamp = f"code: commit {version['commit']}{' with uncommitted changes' if version['dirty'] else ''}"
  table = f"{stamp}; config: {os.path.join(workdir, 'config.json')}\n{table}"
  with open(os.path.join(workdir, f"results_{tag}.json"), "w") as f:
    json.dump({"code": version,
               "runs": {r: {str(s): v for s, v in by_seed.items()} for r, by_seed in results.items()},
               "task_types": types, "differences": differences(config, results), "sft_data": sft_data,
               "config": config.to_dict()}, f, indent=1, default=str)
  print(table, flush=True)
  with open(os.path.join(workdir, f"results_{tag}.txt"), "w") as f:
    f.write(table + "\n")
  plot(workdir, config, tag)
  return results
