r"""PlanPO training beside GRPO and GiGPO on TextWorldExpress: SFT, then RL per method, then held-out eval.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx
  (the launcher calls `planpo.train.run(config, workdir)` for config.method == 'planpo')

Per seed (config `seeds`): the tiny policy ('tiny:qwen2' resolved by common.lm.checkpoints with a tokenizer
trained on the SFT episodes' text, shapes `policy.sizes`; or a local checkpoint, `policy.lm_checkpoint`) is
trained by SFT on gold trajectories with detours (planpo/data.py). Then, for each RL method in `runs`
('grpo', 'gigpo', 'planpo'), RL starts from the SFT parameters for `rl.steps` steps: `rl.tasks_per_step`
training tasks x G = `rl.rollouts_per_task` rollouts through the common driver in window mode
(planpo/rollouts.py), one training row per turn, and the advantages
  grpo    common.gigpo.episode_advantages of R over the task's rollouts, broadcast to its turn rows;
  gigpo   common.gigpo.gigpo_advantages (episode + step groups of identical observations), config `gigpo.*`;
  planpo  planpo.advantages.planpo_advantages with alpha(k) (planpo/schedule.py), config `planpo.*`;
and one loss for all three: planpo.objective.policy_loss (clipped surrogate + `planpo.kl_coef` x KL to the
frozen SFT policy), AdamW at `rl.lr`, `rl.minibatches` updates per step (the first with ratio 1).
Evaluation (`env.eval_split` tasks, one greedy rollout each at `rl.eval_temperature`): success, score, mean
turns, mean response tokens (the policy's own tokens per response); 'sft' is the SFT policy itself.

Outputs (workdir/seed_<s>/<stage>/): metrics.jsonl (+ TensorBoard), checkpoints/ (Orbax, the whole train
state), eval.json; workdir/results.json and the printed table (method x metric, mean +- std over seeds).
Running again resumes every stage from its latest checkpoint and skips finished ones.
"""

from __future__ import annotations

import functools
import json
import logging
import os
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
from common.lm import checkpoints as lm_checkpoints
from common.lm import loading
from common.lm import model as model_lib
from common.lm.config import ModelConfig
from common.lm.sampler import commit
from planpo import advantages as adv_lib
from planpo import data
from planpo import objective
from planpo import rollouts
from planpo import schedule

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
  """Raises ValueError naming the config key of a bad value."""
  bad = [r for r in config.runs if r not in ("sft",) + RL_METHODS]
  if bad:
    raise ValueError(f"config `runs` holds unknown methods {bad}; valid: 'sft', {RL_METHODS}")
  if config.rollout.mode != "window":
    raise ValueError(f"config `rollout.mode` must be 'window' for PlanPO, got {config.rollout.mode!r}")
  b = config.rl.tasks_per_step * config.rl.rollouts_per_task
  if config.rl.minibatches < 1:
    raise ValueError(f"config `rl.minibatches` must be >= 1, got {config.rl.minibatches}")
  if b < 1:
    raise ValueError("config `rl.tasks_per_step` and `rl.rollouts_per_task` must be >= 1")
  schedule.check_alpha(config.planpo.alpha_init, config.planpo.alpha_final, config.planpo.alpha_decay_steps)


def load_policy(config, corpus: Sequence[str]) -> Policy:
  """Resolves `policy.lm_checkpoint` ('tiny:<family>': tokenizer trained on `corpus`, vocabulary
  `policy.tiny_vocab`, shapes `policy.sizes`, cache `policy.cache_dir`) and builds the ChatTemplate."""
  p = config.policy
  tiny = p.lm_checkpoint.startswith(lm_checkpoints.TINY_PREFIX)
  path = lm_checkpoints.resolve_checkpoint(p.lm_checkpoint, corpus=list(corpus) if tiny else (),
                                           cache_dir=p.cache_dir or None, vocab_size=p.tiny_vocab,
                                           config_key="config.policy.lm_checkpoint",
                                           sizes=dict(p.sizes) if tiny else None)
  cfg, params, tok = loading.load_pretrained(path, dtype=p.dtype, param_dtype=p.param_dtype)
  return Policy(cfg, params, chat_lib.ChatTemplate(tok), path)


# --- updates -------------------------------------------------------------------------------------

def _tx(lr: float, grad_clip: float) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(grad_clip), optax.adamw(lr, weight_decay=0.0))


@flax.struct.dataclass
class TrainState:
  """The whole train state of an SFT or RL stage, saved as one Orbax checkpoint (common.checkpoint).

  Attributes:
    params: the model parameters.
    opt_state: the optax state of `_tx` (clip by global norm, then AdamW).
    step: i32[] optimizer steps (SFT) or RL steps done.
  """
  params: Any
  opt_state: Any
  step: jax.Array


def init_state(params, lr: float, grad_clip: float) -> TrainState:
  """A fresh TrainState: params, optimizer state, step 0 (committed to the default device)."""
  return commit(TrainState(params=params, opt_state=_tx(lr, grad_clip).init(params),
                           step=jnp.zeros((), jnp.int32)))


@functools.partial(jax.jit, static_argnames=("model", "lr", "grad_clip"))
def sft_update(state, tokens, attn, mask, *, model, lr, grad_clip):
  """Token-mean cross-entropy on the reply tokens; returns (state, {'loss', 'grad_norm'})."""
  def loss_fn(p):
    lp = model_lib.token_logprobs(p, tokens, attn, config=model)
    return -jnp.sum(jnp.where(mask, lp, 0.0)) / jnp.maximum(jnp.sum(mask), 1)
  loss, g = jax.value_and_grad(loss_fn)(state.params)
  upd, opt = _tx(lr, grad_clip).update(g, state.opt_state, state.params)
  new = TrainState(params=optax.apply_updates(state.params, upd), opt_state=opt, step=state.step + 1)
  return new, {"loss": loss, "grad_norm": optax.tree.norm(g)}


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def score(params, tokens, attn, *, model, temperature):
  """f32[B, L] log-probabilities of tokens i32[B, L] under params (attn bool[B, L]; common.lm.model.token_logprobs)."""
  return model_lib.token_logprobs(params, tokens, attn, config=model, temperature=temperature)


@functools.partial(jax.jit, static_argnames=("model", "lr", "grad_clip", "temperature", "loss_kw"))
def rl_update(state, tokens, attn, mask, logp_old, logp_ref, adv, *, model, lr, grad_clip, temperature, loss_kw):
  """One optimizer step of planpo.objective.policy_loss (loss_kw: its settings as sorted items)."""
  def loss_fn(p):
    lp = model_lib.token_logprobs(p, tokens, attn, config=model, temperature=temperature)
    return objective.policy_loss(lp, logp_old, logp_ref, adv, mask, **dict(loss_kw))
  (loss, m), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  upd, opt = _tx(lr, grad_clip).update(g, state.opt_state, state.params)
  new = TrainState(params=optax.apply_updates(state.params, upd), opt_state=opt, step=state.step)
  return new, dict(m, loss=loss, grad_norm=optax.tree.norm(g))


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
  alpha = schedule.alpha_schedule(step, alpha_init=p.alpha_init, alpha_final=p.alpha_final,
                                  decay_steps=int(p.alpha_decay_steps))
  out = adv_lib.planpo_advantages(rew, jnp.asarray(b["success"]), jnp.asarray(b["policy_tokens"]), g, r, t,
                                  num_groups=num_groups, num_rollouts=num_rollouts, max_turns=max_turns,
                                  alpha=alpha, mask=mask, step_grouping=p.step_grouping, stats_over=p.stats_over,
                                  norm=p.norm, eps=p.eps, ddof=p.ddof, conditional=p.conditional)
  return dict(out._asdict(), alpha=alpha)


def _loss_kw(config) -> tuple:
  p = config.planpo
  return tuple(sorted(dict(clip_low=float(p.clip_low), clip_high=float(p.clip_high), kl_coef=float(p.kl_coef),
                           agg_mode=p.agg_mode, ratio=p.ratio).items()))


# --- stages --------------------------------------------------------------------------------------

def _ckpt(config, d: str) -> ckpt_lib.Checkpointer:
  return ckpt_lib.Checkpointer(os.path.join(d, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                               save_every=config.checkpoint.every)


def _pad_rows(rows: Sequence[tuple[list[int], list[int]]], n: int, pad_id: int):
  length = max(len(p) + len(r) for p, r in rows)
  length = 1 << max(4, (length - 1).bit_length())
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
  """SFT for `sft.epochs` over the rows in batches of `sft.batch_size` (fresh order per epoch); resumes."""
  s = config.sft
  state = init_state(policy.params, s.lr, config.optim.grad_clip)
  bs = min(int(s.batch_size), len(rows))
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
      tok, attn, mask = _pad_rows([rows[j] for j in idx], bs, pad)
      state, m = sft_update(state, tok, attn, mask, model=policy.model, lr=float(s.lr),
                            grad_clip=float(config.optim.grad_clip))
      if (k + 1) % config.logging.every == 0 or k + 1 == total:
        writer.write(k + 1, {f"sft/{n}": v for n, v in jax.device_get(m).items()} | {"sft/epoch": epoch})
      ck.maybe_save(k + 1, state, force=k + 1 == total)
  finally:
    writer.close()
    ck.close()
  return state


class StopRequested(Exception):
  """Raised after saving when `stop_after` RL steps are done (tests of resume)."""


def run_rl(config, policy: Policy, method: str, init_params, ref_params, pool, train_tasks, d: str, seed: int,
           budget: list) -> TrainState:
  """`rl.steps` RL steps of `method` from `init_params`; the KL reference is `ref_params`; resumes."""
  rl = config.rl
  state = init_state(init_params, rl.lr, config.optim.grad_clip)
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
      key = jax.random.fold_in(jax.random.key(seed * 1000 + RL_METHODS.index(method)), step)
      sampler = rollouts.make_sampler(state.params, policy, key=key, rows=n_tasks * G, temperature=temp,
                                      config=config)
      t0 = time.monotonic()
      trajs = rollouts.run_rollouts(pool, sampler, policy.chat, tasks, config=config, group_size=G, seed=step)
      t1 = time.monotonic()
      b = rollouts.collate(trajs, pad_id=pad)
      adv = compute_advantages(method, b, config=config, num_groups=n_tasks, num_rollouts=n_tasks * G, step=step)
      tok, attn, mask = jnp.asarray(b["tokens"]), jnp.asarray(b["attn"]), jnp.asarray(b["policy_mask"])
      logp_old = score(state.params, tok, attn, model=policy.model, temperature=temp)
      logp_ref = score(ref_params, tok, attn, model=policy.model, temperature=temp)
      rows = tok.shape[0]
      mb = max(1, rows // int(rl.minibatches))
      perm = np.random.default_rng([seed, 19, step]).permutation(rows)
      ms = []
      for i in range(0, rows - mb + 1, mb):
        sel = jnp.asarray(perm[i:i + mb])
        state, m = rl_update(state, tok[sel], attn[sel], mask[sel], logp_old[sel], logp_ref[sel],
                             adv["advantages"][sel], model=policy.model, lr=float(rl.lr),
                             grad_clip=float(config.optim.grad_clip), temperature=temp, loss_kw=_loss_kw(config))
        ms.append(jax.device_get(m))
      state = state.replace(step=jnp.asarray(step + 1, jnp.int32))
      t2 = time.monotonic()
      valid = b["valid"]
      row = {f"rollout/{k}": v for k, v in rollouts.episode_metrics(trajs).items()}
      row.update({f"{method}/{k}": float(np.mean(np.abs(np.asarray(v)[valid]))) if np.ndim(v) else float(v)
                  for k, v in adv.items()})
      row.update({f"loss/{k}": float(np.mean([m[k] for m in ms])) for k in ms[0]})
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


def evaluate(config, policy: Policy, params, pool, eval_tasks, d: str, seed: int) -> dict:
  """One rollout per held-out task at `rl.eval_temperature`; writes and returns eval.json's metrics."""
  path = os.path.join(d, "eval.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  sampler = rollouts.make_sampler(params, policy, key=jax.random.key(seed + 99), rows=len(eval_tasks),
                                  temperature=float(config.rl.eval_temperature), config=config)
  trajs = rollouts.run_rollouts(pool, sampler, policy.chat, eval_tasks, config=config, group_size=1, seed=0)
  m = rollouts.episode_metrics(trajs)
  os.makedirs(d, exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(m, f, indent=1)
  os.replace(path + ".tmp", path)
  return m


def results_table(results: dict[str, list[dict]]) -> str:
  """Method x metric table, 'mean +- std' over seeds (sample std; 0 for one seed)."""
  head = f"{'method':<8}" + "".join(f"{m:>22}" for m in METRICS)
  lines = [head, "-" * len(head)]
  for method, runs in results.items():
    cells = []
    for m in METRICS:
      x = np.asarray([r[m] for r in runs], float)
      sd = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
      cells.append(f"{np.mean(x):.3f} +- {sd:.3f}")
    lines.append(f"{method:<8}" + "".join(f"{c:>22}" for c in cells))
  return "\n".join(lines)


def run(config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None) -> dict | None:
  """SFT, then each RL method per seed, evaluation and the results table (module docstring).

  Args:
    config: a configs/planpo_twx.py config.
    workdir: output folder (created); running again resumes.
    stop_after: stop (after saving) once this many RL steps ran in this call (tests of resume); returns None.
  Returns:
    {method: [eval metrics per seed]} (also workdir/results.json), or None when stopped early.
  """
  check_config(config)
  os.makedirs(workdir, exist_ok=True)
  pool = rollouts.make_pool(config)
  budget = [-1 if stop_after is None else int(stop_after)]
  results: dict[str, list[dict]] = {m: [] for m in config.runs}
  try:
    w0 = pool.workers[0]
    train_tasks = rollouts.task_ids(w0, config, config.env.train_split, config.env.train_tasks)
    eval_tasks = rollouts.task_ids(w0, config, config.env.eval_split, config.env.eval_tasks)
    corpus = data.tokenizer_corpus(data.gold_episodes(pool, train_tasks, config=config, seed=0))
    policy = load_policy(config, corpus)   # one tokenizer and initial model for every seed
    for seed in config.seeds:
      episodes = data.gold_episodes(pool, train_tasks, config=config, seed=int(seed), chat=policy.chat)
      sd = os.path.join(workdir, f"seed_{seed}")
      sft_dir = os.path.join(sd, "sft")
      rows = data.sft_rows(episodes)
      sft_state = run_sft(config, policy, rows, sft_dir, int(seed))
      sft_params = sft_state.params
      if "sft" in results:
        results["sft"].append(evaluate(config, policy, sft_params, pool, eval_tasks, sft_dir, int(seed))
                              | data.episode_stats(episodes))
      for method in RL_METHODS:
        if method not in results:
          continue
        md = os.path.join(sd, method)
        if not os.path.exists(os.path.join(md, "eval.json")):
          st = run_rl(config, policy, method, sft_params, sft_params, pool, train_tasks, md, int(seed), budget)
          params = st.params
        else:
          params = None
        results[method].append(evaluate(config, policy, params, pool, eval_tasks, md, int(seed)))
  except StopRequested:
    return None
  finally:
    pool.close()
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
  table = results_table(results)
  print(table, flush=True)
  with open(os.path.join(workdir, "results.txt"), "w") as f:
    f.write(table + "\n")
  return results
