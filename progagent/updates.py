"""ProgAgent's updates: the train state, the optimizer, padded batches, the SFT step and the GSPO step.

SFT: token-mean cross-entropy on the policy (assistant) tokens. GSPO: Zheng et al. 2025, "Group Sequence Policy
Optimization", arXiv:2507.18071, sec. 4.1 (common.losses.gspo_loss): sequence-level importance ratio between the
sampling-time parameters and the current ones, clipped at [1 - gspo.clip_low, 1 + gspo.clip_high], no KL, no
entropy bonus. Everything here is pure apart from the host-side batching helpers; the stage loops are in
progagent.train.

Sharding (common.lm.training): `init_state(..., mesh=mesh)` places the parameters by the logical-axis rules and
the optimizer state beside them, `gspo_updates(..., mesh=mesh)` places each minibatch's rows over the (data,
fsdp) axes, and the jitted `sft_update` / `gspo_update` run unchanged on the sharded arrays (XLA propagates
the shardings; config `mesh.shape`, optional mesh.rules). Micro-batches are strided (common.lm.training.micro_batches)
so each keeps rows on every data-parallel device. Sampling runs on one device (common.lm.sampler.LMSampler
gathers the parameters there).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import estimators
from common import losses
from common import trajectory as traj_lib
from common.lm import lora as lora_lib
from common.lm import model as model_lib
from common.lm import sampling
from common.lm import training
from common.lm.sampler import commit  # noqa: F401  (re-exported)
from common.lm.config import ModelConfig


@flax.struct.dataclass
class TrainState:
  """The whole train state of a stage, saved as one Orbax checkpoint (common.checkpoint).

  Attributes:
    params: the model parameters (with LoRA adapters when model.lora_rank > 0).
    opt_state: the optax state of make_optimizer.
    key: u32[2] RNG key data (jax.random.key_data; wrap with jax.random.wrap_key_data).
    step: i32[] optimizer steps (SFT) or GSPO steps done.
  """
  params: Any
  opt_state: Any
  key: jax.Array
  step: jax.Array


class OptimSettings(NamedTuple):
  """Static optimizer settings (hashable: the optimizer is rebuilt inside the jitted update).

  Config keys: the stage's learning rate (`sft.learning_rate`, `gspo.learning_rate`), `optim.grad_clip`,
  `optim.weight_decay`, `optim.b1`, `optim.b2`, `optim.eps`; adapters_only = `model.lora_rank` > 0;
  master_weights = `optim.master_weights` (float32 master weights and optimizer state for low-precision
  parameters, `model.param_dtype` 'bfloat16'; common.lm.training.apply_gradients).
  """
  learning_rate: float
  grad_clip: float
  weight_decay: float
  b1: float
  b2: float
  eps: float
  adapters_only: bool
  master_weights: bool = False


def optim_settings(config, learning_rate: float) -> OptimSettings:
  """OptimSettings from config keys optim.* (grad_clip, weight_decay, b1, b2, eps, master_weights) and
  model.lora_rank."""
  o = config.optim
  return OptimSettings(float(learning_rate), float(o.grad_clip), float(o.weight_decay), float(o.b1), float(o.b2),
                       float(o.eps), bool(config.model.lora_rank), bool(o.get("master_weights", False)))


def make_optimizer(s: OptimSettings, params: Any) -> optax.GradientTransformation:
  """AdamW (+ global-norm clipping); with LoRA only the adapters train (common.lm.lora.adapter_optimizer)."""
  tx = optax.chain(optax.clip_by_global_norm(s.grad_clip),
                   optax.adamw(s.learning_rate, b1=s.b1, b2=s.b2, eps=s.eps, weight_decay=s.weight_decay))
  return lora_lib.adapter_optimizer(tx, params, extra=()) if s.adapters_only else tx




def init_state(params, optim: OptimSettings, seed: int, *, mesh=None, rules=None) -> TrainState:
  """A fresh TrainState: params, optimizer state, RNG key data of `seed`, step 0.

  The optimizer state is common.lm.training.init_opt_state's (a MasterState with float32 master weights of the
  trainable leaves when optim.master_weights). With `mesh` (common.lm.training.mesh_from_config) the state is
  placed on it (common.lm.training.place_state: parameters by `rules`, optimizer state beside them, key and
  step replicated); restoring a checkpoint into it keeps those shardings.
  """
  trainable = lora_lib.trainable_mask(params, extra=()) if optim.adapters_only else None
  opt_state = training.init_opt_state(make_optimizer(optim, params), params, master_weights=optim.master_weights,
                                      trainable=trainable)
  state = TrainState(params=params, opt_state=opt_state, key=jax.random.key_data(jax.random.key(seed)),
                     step=jnp.zeros((), jnp.int32))
  return state if mesh is None else training.place_state(state, params, mesh, rules)


class Batch(NamedTuple):
  """A padded training batch (numpy or jax).

  tokens i32[B, L]; attn bool[B, L] (real tokens); policy bool[B, L] (the policy's own tokens);
  logp_old f32[B, L] (GSPO; the sampler's log-probs until recomputed); adv f32[B] (GSPO).
  """
  tokens: Any
  attn: Any
  policy: Any
  logp_old: Any
  adv: Any


def make_batch(trajs: Sequence[traj_lib.Trajectory], length: int, *, pad_id: int,
               advantages: np.ndarray | None = None) -> Batch:
  """Collates trajectories (common.trajectory.collate) into a Batch of length `length` (longer ones are cut)."""
  c = traj_lib.collate(trajs, max_len=length, pad_id=pad_id)
  attn = np.arange(length)[None, :] < c["lengths"][:, None]
  adv = np.zeros(len(trajs), np.float32) if advantages is None else np.asarray(advantages, np.float32)
  return Batch(c["tokens"], attn, c["policy_mask"] & attn, c["logprobs"], adv)


def take(batch: Batch, rows: np.ndarray) -> Batch:
  """The rows `rows` (i64[R]) of every array of the batch."""
  return Batch(*(np.asarray(x)[rows] for x in batch))


def bucket_length(n: int, buckets: Sequence[int]) -> int:
  """The padded length for n tokens (`lengths.buckets`; () = powers of two)."""
  return sampling.bucket_length(n, buckets=tuple(buckets))


def micro_count(batch_rows: int, micro_batch_size: int) -> int:
  """Micro-batches per update (`sft.micro_batch_size` / `gspo.micro_batch_size`; 0 = one pass)."""
  return 1 if not micro_batch_size else batch_rows // micro_batch_size


def padded_rows(rows: int, micro_batch_size: int, shards: int) -> int:
  """Rows of an update of `rows` rows on a mesh of `shards` batch shards: the smallest multiple of lcm(shards,
  micro_batch_size) (0 = no split) >= rows; the extra rows are masked repeats (pad_batch)."""
  return training.pad_rows(rows, training.lcm(shards, micro_batch_size or 1))


def pad_batch(batch: Batch, rows: int) -> Batch:
  """The batch with copies of row 0 appended up to `rows` rows, without policy tokens and with advantage 0, so
  they count in no loss, gradient or normaliser (numpy)."""
  n = batch.tokens.shape[0]
  if rows <= n:
    return batch
  idx = np.concatenate([np.arange(n), np.zeros(rows - n, np.int64)])
  b = take(batch, idx)
  pol = np.asarray(b.policy).copy()
  pol[n:] = False
  adv = np.asarray(b.adv).copy()
  adv[n:] = 0.0
  return b._replace(policy=pol, adv=adv)


def _apply(grads, params, opt_state, optim: OptimSettings):
  params, opt_state = training.apply_gradients(make_optimizer(optim, params), grads, opt_state, params)
  return params, opt_state, optax.tree.norm(grads)


@functools.partial(jax.jit, static_argnames=("model", "optim", "micro"))
def sft_update(params, opt_state, batch: Batch, *, model: ModelConfig, optim: OptimSettings, micro: int):
  """One SFT step: token-mean cross-entropy on the policy (assistant) tokens of the batch.

  loss = -(1/N) sum_{b,t} policy[b,t] log pi(tokens[b,t] | tokens[b,<t]),  N = sum policy.
  Gradients are accumulated over `micro` strided micro-batches (common.lm.training.accumulate_grads; the same
  result as one pass). Params, opt_state and batch may be sharded on a mesh (module docstring).
  Returns (params, opt_state, {'loss' (nats/token), 'tokens', 'grad_norm'}).
  """
  total = jnp.maximum(jnp.sum(batch.policy), 1).astype(jnp.float32)

  def loss_sum(p, mb):
    logp = model_lib.token_logprobs(p, mb.tokens, mb.attn, config=model)
    return -jnp.sum(jnp.where(mb.policy, logp, 0.0))

  l, g, _ = training.accumulate_grads(loss_sum, params, batch, micro)
  g = jax.tree.map(lambda x: x / total, g)
  params, opt_state, gnorm = _apply(g, params, opt_state, optim)
  return params, opt_state, {"loss": l / total, "tokens": total, "grad_norm": gnorm}


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def score(params, tokens, attn, *, model: ModelConfig, temperature: float = 1.0):
  """f32[B, L] teacher-forced log-probs (common.lm.model.token_logprobs) at `temperature`."""
  return model_lib.token_logprobs(params, tokens, attn, config=model, temperature=temperature)


def mean_loss(params, trajs: Sequence[traj_lib.Trajectory], model: ModelConfig, *, pad_id: int, rows: int,
              length: int) -> float:
  """Token-mean cross-entropy of the policy tokens of `trajs` (nats), in batches of `rows`."""
  total, count = 0.0, 0.0
  for i in range(0, len(trajs), rows):
    chunk = list(trajs[i:i + rows])
    b = make_batch(chunk + [chunk[0]] * (rows - len(chunk)), length, pad_id=pad_id)
    pol = b.policy.copy()
    pol[len(chunk):] = False
    lp = np.asarray(score(params, jnp.asarray(b.tokens), jnp.asarray(b.attn), model=model, temperature=1.0))
    total += float(-np.sum(np.where(pol, lp, 0.0)))
    count += float(pol.sum())
  return total / max(count, 1.0)


@functools.partial(jax.jit, static_argnames=("model", "optim", "micro", "temperature", "clip_low", "clip_high"))
def gspo_update(params, opt_state, batch: Batch, *, model: ModelConfig, optim: OptimSettings, micro: int,
                temperature: float, clip_low: float, clip_high: float):
  """One GSPO optimizer step on a minibatch (common.losses.gspo_loss, sequence-level ratio, no KL).

  The loss is the mean over sequences with at least one policy token; with micro-batches (strided,
  common.lm.training.accumulate_grads) each micro-batch's mean is weighted by its number of such sequences,
  which gives the same value and gradient. Params, opt_state and batch may be sharded (module docstring).
  Returns (params, opt_state, metrics: loss, ratio_mean, ratio_max, clip_fraction, approx_kl, grad_norm).
  """
  has = jnp.any(batch.policy, axis=-1)
  n_seq = jnp.maximum(jnp.sum(has), 1).astype(jnp.float32)
  n_tok = jnp.maximum(jnp.sum(batch.policy), 1).astype(jnp.float32)

  def loss_sum(p, mb):
    logp = model_lib.token_logprobs(p, mb.tokens, mb.attn, config=model, temperature=temperature)
    loss, m = losses.gspo_loss(logp, mb.logp_old, mb.adv, mb.policy, clip_low=clip_low, clip_high=clip_high)
    n = jnp.sum(jnp.any(mb.policy, axis=-1)).astype(jnp.float32)
    t = jnp.sum(mb.policy).astype(jnp.float32)
    aux = {"ratio_mean": m["ratio_mean"] * n, "clip_fraction": m["clip_fraction"] * n,
           "approx_kl": m["approx_kl"] * t, "ratio_max": jnp.where(n > 0, m["ratio_max"], -jnp.inf)}
    return loss * n, aux

  l, g, aux = training.accumulate_grads(loss_sum, params, batch, micro, has_aux=True)
  s = {k: (jnp.max(v) if k == "ratio_max" else jnp.sum(v)) for k, v in aux.items()}
  g = jax.tree.map(lambda x: x / n_seq, g)
  params, opt_state, gnorm = _apply(g, params, opt_state, optim)
  ratio_max = jnp.where(jnp.isfinite(s["ratio_max"]), s["ratio_max"], 1.0)   # 1 when no sequence has tokens
  return params, opt_state, {"loss": l / n_seq, "ratio_mean": s["ratio_mean"] / n_seq, "ratio_max": ratio_max,
                             "clip_fraction": s["clip_fraction"] / n_seq, "approx_kl": s["approx_kl"] / n_tok,
                             "grad_norm": gnorm}


def gspo_batch(trajs: Sequence[traj_lib.Trajectory], *, num_groups: int, length: int, pad_id: int,
               estimator: str = "grpo", eps: float = 1e-6, ddof: int = 0) -> Batch:
  """Rewards -> grouped advantages -> a padded Batch over the rollouts (numpy).

  Advantages: common.estimators.compute_advantages(estimator) over groups = Trajectory.group (config
  `gspo.advantage.estimator`, `.eps`, `.ddof`), one per rollout, shared by its tokens. Rollouts ended by an
  environment failure ('env_error') are left out of the group statistics and get no policy tokens (so they
  count in neither the loss nor its normalisation). A response cut by the token budget (a 'length_limit'
  rollout, or a turn whose response lacks its end-of-turn token) keeps its sampled tokens as policy tokens;
  the end-of-turn token the driver appends after it is a prompt token.
  """
  rewards = np.asarray([t.reward for t in trajs], np.float32)
  groups = np.asarray([t.group for t in trajs], np.int32)
  valid = np.asarray([t.termination != "env_error" for t in trajs])
  adv = estimators.compute_advantages(estimator, jnp.asarray(rewards), jnp.asarray(groups), num_groups=num_groups,
                                      mask=jnp.asarray(valid), eps=eps, ddof=ddof)
  b = make_batch(trajs, length, pad_id=pad_id, advantages=np.asarray(adv))
  return b._replace(policy=b.policy & valid[:, None])


def gspo_updates(state: TrainState, batch: Batch, *, model: ModelConfig, optim: OptimSettings, minibatches: int,
                 epochs: int, micro_batch_size: int, temperature: float, clip_low: float, clip_high: float,
                 logp_old: str, perm_seed: Sequence[int], mesh=None, rules=None) -> tuple[TrainState, list[dict]]:
  """The optimizer steps of one GSPO step: logp_old, then `epochs` passes of `minibatches` minibatches.

  Args:
    state: the GSPO TrainState before the step (its params sampled the batch).
    batch: gspo_batch's Batch (numpy), B rows, B divisible by minibatches.
    logp_old: 'recompute' (teacher-forced pass with state.params, in chunks of a micro-batch, else a
      minibatch) or 'sampler' (the sampler's own log-probs in batch.logp_old); config `gspo.logp_old`.
    perm_seed: numpy seed sequence of the minibatch order; epoch e uses perm_seed + [e].
    mesh, rules: when given, each minibatch is padded with masked repeats (pad_batch) to a multiple of the
      mesh's batch shards (and of micro_batch_size), its rows sharded over the batch axes
      (common.lm.training.place_batch), and the update runs on the state's shardings (init_state(mesh=...)).
    minibatches, epochs, micro_batch_size, temperature, clip_low, clip_high: config `gspo.*`.
  Returns:
    (state with new params / opt_state (step unchanged), one metrics dict per update in order).
  """
  b = batch.tokens.shape[0]
  mb = b // minibatches
  if logp_old == "recompute":
    ch = micro_batch_size or mb
    lp = np.concatenate([
        np.asarray(score(state.params, jnp.asarray(batch.tokens[i:i + ch]), jnp.asarray(batch.attn[i:i + ch]),
                         model=model, temperature=float(temperature))) for i in range(0, b, ch)])
    batch = batch._replace(logp_old=np.where(batch.policy, lp, 0.0).astype(np.float32))
  params, opt_state = state.params, state.opt_state
  rows = mb if mesh is None else padded_rows(mb, micro_batch_size, training.batch_shards(mesh, rules))
  out = []
  for epoch in range(epochs):
    perm = np.random.default_rng([*perm_seed, epoch]).permutation(b)
    for i in range(minibatches):
      sub = take(batch, perm[i * mb:(i + 1) * mb])
      if mesh is not None:
        sub = training.place_batch(pad_batch(sub, rows), mesh, rules)
      else:
        sub = jax.tree.map(jnp.asarray, sub)
      params, opt_state, m = gspo_update(params, opt_state, sub, model=model, optim=optim,
                                         micro=micro_count(rows, micro_batch_size), temperature=float(temperature),
                                         clip_low=float(clip_low), clip_high=float(clip_high))
      out.append({k: float(v) for k, v in jax.device_get(m).items()})
  return state.replace(params=params, opt_state=opt_state), out
