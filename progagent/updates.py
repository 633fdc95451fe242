"""ProgAgent's GSPO update: the padded batch of rollouts, the GSPO step and the optimizer steps of one GSPO step.

GSPO: Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071, sec. 4.1
(common.losses.gspo_loss): sequence-level importance ratio between the sampling-time parameters and the
current ones, clipped at [1 - gspo.clip_low, 1 + gspo.clip_high], no KL, no entropy bonus. The train state,
the optimizer, the SFT step, scoring and the micro-batched policy update are the trainer kit's
(common.lm.updates); the stage loops are in progagent.train.

Sharding: `gspo_updates(..., mesh=mesh)` pads each minibatch with masked repeats to a multiple of the mesh's
batch shards and places its rows over the (data, fsdp) axes (common.lm.updates.place_rows); the jitted
`gspo_update` runs unchanged on the sharded arrays (config `mesh.shape`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common import estimators
from common import losses
from common import trajectory as traj_lib
from common.lm import model as model_lib
from common.lm import sampling
from common.lm import training
from common.lm import updates as kit
from common.lm.config import ModelConfig


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


def loss_sums(params, trajs: Sequence[traj_lib.Trajectory], model: ModelConfig, *, pad_id: int, rows: int,
              length: int) -> tuple[float, float]:
  """(summed cross-entropy in nats, number of policy tokens) of the policy tokens of `trajs`, scored in batches of
  `rows` rows padded to `length` tokens (a short last batch filled with masked copies, common.lm.updates.pad_batch);
  total / count is the token-mean loss (progagent.train.run_sft's sft/eval_loss)."""
  total, count = 0.0, 0.0
  for i in range(0, len(trajs), rows):
    b = make_batch(list(trajs[i:i + rows]), length, pad_id=pad_id)
    tok, attn, pol = kit.pad_batch((b.tokens, b.attn, b.policy), rows, masked=(2,))
    lp = np.asarray(kit.score_rows(params, jnp.asarray(tok), jnp.asarray(attn), model=model))
    total += float(-np.sum(np.where(pol, lp, 0.0)))
    count += float(pol.sum())
  return total, count


@functools.partial(jax.jit, static_argnames=("model", "optim", "micro", "temperature", "clip_low", "clip_high"))
def gspo_update(state: kit.TrainState, batch: Batch, *, model: ModelConfig, optim: kit.OptimSettings, micro: int,
                temperature: float, clip_low: float, clip_high: float) -> tuple[kit.TrainState, dict]:
  """One GSPO optimizer step on a minibatch (common.losses.gspo_loss, sequence-level ratio, no KL).

  The loss is the mean over sequences with at least one policy token; with micro-batches (strided,
  common.lm.updates.policy_update) each micro-batch's mean counts with its share of those sequences, which
  gives the same value and gradient. Arrays of `batch` are [B, L] (adv [B]); B a multiple of micro.
  Returns (state with new params / opt_state, metrics: loss, ratio_mean, ratio_max, clip_fraction, approx_kl
  (a per-token mean, weighted by tokens across micro-batches), grad_norm).
  """
  def loss_fn(p, mb):
    logp = model_lib.token_logprobs(p, mb.tokens, mb.attn, config=model, temperature=temperature)
    loss, m = losses.gspo_loss(logp, mb.logp_old, mb.adv, mb.policy, clip_low=clip_low, clip_high=clip_high)
    return loss, {k: m[k] for k in ("ratio_mean", "ratio_max", "clip_fraction", "approx_kl")}

  sequences = jnp.any(batch.policy, axis=-1).astype(jnp.float32)
  tokens = jnp.sum(batch.policy, axis=-1).astype(jnp.float32)
  return kit.policy_update(state, loss_fn, batch, sequences, micro=micro, optim=optim, max_metrics=("ratio_max",),
                           metric_weights={"approx_kl": tokens})


def gspo_batch(trajs: Sequence[traj_lib.Trajectory], *, num_groups: int, length: int, pad_id: int,
               estimator: str = "grpo", eps: float = 1e-6, ddof: int = 0, truncated_responses: str = "keep") -> Batch:
  """Rewards -> grouped advantages -> a padded Batch over the rollouts (numpy).

  Advantages: common.estimators.compute_advantages(estimator) over groups = Trajectory.group (config
  `gspo.advantage.estimator`, `.eps`, `.ddof`), one per rollout, shared by its tokens. Rollouts ended by an
  environment failure ('env_error') are left out of the group statistics and get no policy tokens (so they
  count in neither the loss nor its normalisation). A response cut by the token budget (a 'length_limit'
  rollout, or a turn whose response lacks its end-of-turn token): with `truncated_responses` 'keep' (config
  `gspo.truncated_responses`, the default, as verl) its sampled tokens stay policy tokens, the end-of-turn token
  the driver appends after it being a prompt token; with 'mask' (DAPO's overlong filtering) the whole rollout
  leaves the loss, its reward still counting in its group's statistics.
  Raises:
    ValueError: truncated_responses not 'keep' or 'mask'.
  """
  if truncated_responses not in ("keep", "mask"):
    raise ValueError(f"truncated_responses must be 'keep' or 'mask' (config gspo.truncated_responses), got "
                     f"{truncated_responses!r}")
  rewards = np.asarray([t.reward for t in trajs], np.float32)
  groups = np.asarray([t.group for t in trajs], np.int32)
  valid = np.asarray([t.termination != "env_error" for t in trajs])
  adv = estimators.compute_advantages(estimator, jnp.asarray(rewards), jnp.asarray(groups), num_groups=num_groups,
                                      mask=jnp.asarray(valid), eps=eps, ddof=ddof)
  b = make_batch(trajs, length, pad_id=pad_id, advantages=np.asarray(adv))
  train = valid & ~(np.asarray([t.response_truncated for t in trajs], bool) if truncated_responses == "mask"
                    else np.zeros(len(trajs), bool))
  return b._replace(policy=b.policy & train[:, None])


def gspo_updates(state: kit.TrainState, batch: Batch, *, model: ModelConfig, optim: kit.OptimSettings,
                 minibatches: int,
                 epochs: int, micro_batch_size: int, temperature: float, clip_low: float, clip_high: float,
                 logp_old: str, perm_seed: Sequence[int], mesh=None, rules=None) -> tuple[kit.TrainState, list[dict]]:
  """The optimizer steps of one GSPO step: logp_old, then `epochs` passes of `minibatches` minibatches.

  Args:
    state: the GSPO TrainState before the step (its params sampled the batch).
    batch: gspo_batch's Batch (numpy), B rows, B divisible by minibatches.
    logp_old: 'recompute' (teacher-forced pass with state.params, in chunks of a micro-batch, else a
      minibatch) or 'sampler' (the sampler's own log-probs in batch.logp_old); config `gspo.logp_old`.
    perm_seed: numpy seed sequence of the minibatch order; epoch e uses perm_seed + [e].
    mesh, rules: when given, each minibatch is padded with masked repeats (common.lm.updates.pad_batch) to the
      micro-batch layout's multiple of the mesh's batch shards (common.lm.updates.micro_layout), its rows
      sharded over the batch axes, and the update runs on the state's shardings (init_state(mesh=...)).
    minibatches, epochs, micro_batch_size, temperature, clip_low, clip_high: config `gspo.*`.
  Returns:
    (state with new params / opt_state (step unchanged), one metrics dict per update in order).
  """
  b = batch.tokens.shape[0]
  mb = b // minibatches
  if logp_old == "recompute":
    ch = micro_batch_size or mb
    lp = np.asarray(kit.score_rows(state.params, jnp.asarray(batch.tokens), jnp.asarray(batch.attn), model=model,
                                   temperature=float(temperature), chunk=ch))
    batch = batch._replace(logp_old=np.where(batch.policy, lp, 0.0).astype(np.float32))
  shards = 1 if mesh is None else training.batch_shards(mesh, rules)
  micro, rows = kit.micro_layout(mb, micro_batch_size, shards)
  out = []
  for epoch in range(epochs):
    perm = np.random.default_rng([*perm_seed, epoch]).permutation(b)
    for i in range(minibatches):
      sub = kit.pad_batch(take(batch, perm[i * mb:(i + 1) * mb]), rows, masked=("policy", "adv"))
      state, m = gspo_update(state, kit.place_rows(sub, mesh, rules), model=model, optim=optim, micro=micro,
                             temperature=float(temperature), clip_low=float(clip_low), clip_high=float(clip_high))
      out.append({k: float(v) for k, v in jax.device_get(m).items()})
  return state, out
