"""The trainer kit's updates: one train state, one optimizer, the SFT step, scoring rows and a policy update.

Every language-model trainer (ProgAgent's SFT and GSPO, PlanPO's SFT and RL, PhGPO's policies) builds its
state and steps from here; a method adds only its loss (e.g. `common.losses.gspo_loss`,
`planpo.objective.policy_loss`). A notebook builds a GRPO update in a few lines (README, "Trainer kit";
tests/trainer_kit_test.py):

    optim = updates.OptimSettings(learning_rate=1e-5)
    state = updates.init_state(policy.params, optim, key=0)
    loss_fn = lambda p, mb: losses.clipped_surrogate_loss(model.token_logprobs(p, mb[0], mb[1], config=cfg),
                                                          mb[3], mb[4], mb[2])   # (mean loss, metrics)
    state, metrics = updates.policy_update(state, loss_fn, (tokens, attn, mask, logp_old, adv), token_counts,
                                           micro=2, optim=optim)

Shapes: token arrays are i32[B, L] (B rows, L padded length), masks bool[B, L], per-row weights f32[B].
Sharding: `init_state(..., mesh=mesh)` places the parameters by the logical-axis rules and the optimizer state
beside them (common.lm.training.place_state); `place_rows` shards a batch's rows over (data, fsdp); the
jitted steps name no PartitionSpec (common.lm.training). Micro-batches are strided
(common.lm.training.micro_batches) so each keeps rows on every data-parallel device.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common import config_util
from common.lm import lora as lora_lib
from common.lm import model as model_lib
from common.lm import sampler as sampler_lib
from common.lm import training
from common.lm.config import ModelConfig

OPTIMIZERS = ("adamw", "adam")


@flax.struct.dataclass
class TrainState:
  """The whole train state of a stage, saved as one Orbax checkpoint (common.checkpoint).

  Attributes:
    params: the model parameters (with LoRA adapters when the model has them).
    opt_state: the optax state of `make_optimizer`, or a common.lm.training.MasterState holding it and float32
      master weights (`OptimSettings.master_weights`).
    key: u32[2] RNG key data (jax.random.key_data; Orbax cannot write typed keys; jax.random.wrap_key_data).
    step: i32[] optimizer steps (SFT) or RL steps done in this stage.
  A method that keeps more state subclasses it (phgpo.steps.TrainState adds the pheromone).
  """
  params: Any
  opt_state: Any
  key: jax.Array
  step: jax.Array


class OptimSettings(NamedTuple):
  """Static optimizer settings (hashable: the optimizer is rebuilt inside the jitted updates).

  Config node `optim` (configs/schema.py): grad_clip, weight_decay, b1, b2, eps, master_weights, name; the
  learning rate is the stage's (e.g. `sft.learning_rate`). adapters_only: train the LoRA adapters only
  (`model.lora_rank` > 0). name: 'adamw' (decoupled weight decay, Loshchilov & Hutter 2019) or 'adam'
  (PhGPO's policies).
  """
  learning_rate: float
  grad_clip: float = 1.0
  weight_decay: float = 0.0
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  adapters_only: bool = False
  master_weights: bool = False
  name: str = "adamw"


def optim_settings(optim: Any, learning_rate: float, *, adapters_only: bool = False) -> OptimSettings:
  """OptimSettings from an `optim` config node (absent keys take OptimSettings' defaults).

  Raises:
    ValueError: `optim.name` is not one of OPTIMIZERS.
  """
  get = lambda k, d: config_util.get(optim, k, d)
  d = OptimSettings(learning_rate=0.0)
  name = str(get("name", d.name))
  if name not in OPTIMIZERS:
    raise ValueError(f"config optim.name={name!r} is not one of {OPTIMIZERS}")
  return OptimSettings(float(learning_rate), float(get("grad_clip", d.grad_clip)),
                       float(get("weight_decay", d.weight_decay)), float(get("b1", d.b1)), float(get("b2", d.b2)),
                       float(get("eps", d.eps)), bool(adapters_only), bool(get("master_weights", d.master_weights)),
                       name)


def make_optimizer(s: OptimSettings, params: Any = None, *, trainable: Any = None) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW (or Adam); frozen leaves get a zero update and no optimizer state.

  Args:
    s: the settings.
    params: the parameters (needed with s.adapters_only: the LoRA adapters are found in them).
    trainable: bool pytree like params (True = trains), or a function params -> such a pytree (when the
      optimizer is built before the parameters exist); None = every leaf, or the LoRA adapters with
      s.adapters_only (common.lm.lora.trainable_mask).
  """
  if s.name == "adam":
    base = optax.adam(s.learning_rate, b1=s.b1, b2=s.b2, eps=s.eps)
  else:
    base = optax.adamw(s.learning_rate, b1=s.b1, b2=s.b2, eps=s.eps, weight_decay=s.weight_decay)
  tx = optax.chain(optax.clip_by_global_norm(s.grad_clip), base)
  if callable(trainable):
    labels = lambda p: jax.tree.map(lambda m: "train" if m else "frozen", trainable(p))
  else:
    mask = trainable_mask(s, params, trainable)
    if mask is None:
      return tx
    labels = jax.tree.map(lambda m: "train" if m else "frozen", mask)
  return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)


def trainable_mask(s: OptimSettings, params: Any, trainable: Any = None) -> Any:
  """The bool pytree of leaves that train: `trainable`, or the LoRA adapters with s.adapters_only, else None
  (all)."""
  if trainable is not None:
    return trainable
  if s.adapters_only:
    return lora_lib.trainable_mask(params, extra=())
  return None


def init_state(params: Any, optim: OptimSettings, *, key: Any = 0, mesh=None, rules=None,
               commit: bool = True) -> TrainState:
  """A fresh TrainState: params, optimizer state, RNG key, step 0.

  Args:
    params: the parameter pytree.
    optim: the optimizer settings.
    key: an int seed or a jax PRNG key (typed or raw u32[2]); stored as key data.
  Every leaf trains, or the LoRA adapters only with optim.adapters_only: the kit's steps rebuild the optimizer
  from `optim` alone, so a state with another mask would not fit them (PhGPO's policies, which name their own
  trainable leaves, build their optimizer state with make_optimizer(trainable=...) and
  common.lm.training.init_opt_state).
    mesh, rules: place the state on this mesh (common.lm.training.place_state: parameters by the rules,
      optimizer state beside them, key and step replicated); restoring a checkpoint into it keeps them.
    commit: without a mesh, commit every leaf to the first device (jit keys its cache on committedness, so a
      restored state would otherwise recompile every step once more).
  """
  mask = trainable_mask(optim, params)
  opt_state = training.init_opt_state(make_optimizer(optim, params, trainable=mask), params,
                                      master_weights=optim.master_weights, trainable=mask)
  state = TrainState(params=params, opt_state=opt_state, key=key_data(key), step=jnp.zeros((), jnp.int32))
  return place(state, mesh, rules, commit=commit)


def key_data(key: Any) -> jax.Array:
  """u32[2] key data of an int seed, a typed key or raw key data."""
  if isinstance(key, (int, np.integer)):
    return jax.random.key_data(jax.random.key(int(key)))
  if jnp.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
    return jax.random.key_data(key)
  return jnp.asarray(key)


def place(state: Any, mesh=None, rules=None, *, commit: bool = True) -> Any:
  """A train state on `mesh` (common.lm.training.place_state), or committed to the first device without one."""
  if mesh is not None:
    return training.place_state(state, state.params, mesh, rules)
  return sampler_lib.commit(state) if commit else state


def apply_gradients(state: TrainState, grads: Any, optim: OptimSettings) -> tuple[TrainState, jax.Array]:
  """One optimizer step on `state` (common.lm.training.apply_gradients; float32 master weights when the state
  holds them). Returns (state with new params and opt_state, f32[] global norm of `grads`)."""
  params, opt_state = training.apply_gradients(make_optimizer(optim, state.params), grads, state.opt_state,
                                               state.params)
  return state.replace(params=params, opt_state=opt_state), optax.tree.norm(grads)


# --- batches ---------------------------------------------------------------------------------------------

def micro_layout(rows: int, micro_rows: int, shards: int = 1) -> tuple[int, int]:
  """(n micro-batches, padded row count) of an update of `rows` rows in micro-batches of about `micro_rows`
  rows (0 = one pass): n = ceil(rows / micro_rows), rows padded to a multiple of lcm(n, shards) (`shards` = the
  mesh's batch shards, common.lm.training.batch_shards). Config keys: `sft.micro_batch_size`, `rl.micro_batch_size`,
  `gspo.micro_batch_size`."""
  n = 1 if not micro_rows else max(1, -(-int(rows) // int(micro_rows)))
  return n, training.pad_rows(rows, training.lcm(n, shards))


def pad_batch(batch: Any, rows: int, *, masked: Sequence[int | str]) -> Any:
  """The batch with copies of row 0 appended up to `rows` rows (numpy).

  Args:
    batch: a tuple, list or NamedTuple of arrays with a common first dimension B.
    rows: the padded row count (<= B: the batch unchanged).
    masked: positions (or NamedTuple field names) of the arrays whose appended rows are zero (False): the masks
      and weights, so the copies count in no loss, gradient or normaliser; the other arrays repeat row 0 (a
      real row keeps the forward pass finite).
  Returns:
    The same container type with [rows, ...] arrays.
  """
  fields = getattr(batch, "_fields", None)
  idx = {fields.index(m) if isinstance(m, str) else m for m in masked} if fields else set(masked)
  out = []
  for k, a in enumerate(batch):
    a = np.asarray(a)
    extra = rows - a.shape[0]
    if extra > 0:
      fill = np.zeros_like(a[:1]) if k in idx else a[:1]
      a = np.concatenate([a, np.repeat(fill, extra, axis=0)])
    out.append(a)
  return type(batch)(*out) if fields else type(batch)(out)


def place_rows(batch: Any, mesh=None, rules=None) -> Any:
  """The batch's arrays as jax arrays, rows sharded over the mesh's (data, fsdp) axes when a mesh is given
  (common.lm.training.place_batch; raises ValueError naming the leaf when its rows do not divide)."""
  if mesh is None:
    return jax.tree.map(jnp.asarray, batch)
  return training.place_batch(batch, mesh, rules)


# --- steps -----------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames=("model", "optim", "micro"))
def sft_update(state: TrainState, tokens, attn, mask, *, model: ModelConfig, optim: OptimSettings,
               micro: int = 1) -> tuple[TrainState, dict]:
  """One SFT step: token-mean cross-entropy on the masked (assistant) tokens.

  loss = -(1/N) sum_{b,t} mask[b,t] log pi(tokens[b,t] | tokens[b,<t]),  N = sum mask, its gradient summed
  over `micro` strided micro-batches (common.lm.training.accumulate_grads; equal to one pass up to float32
  summation order).

  Args:
    state: the TrainState (params, opt_state sharded or not).
    tokens: i32[B, L]; attn: bool[B, L] real tokens; mask: bool[B, L] the tokens trained on. B a multiple of
      micro (and of the mesh's batch shards when sharded).
  Returns:
    (state with step + 1, {'loss' f32[] nats per token, 'tokens' f32[] N, 'grad_norm' f32[]}).
  """
  total = jnp.maximum(jnp.sum(mask), 1).astype(jnp.float32)

  def loss_sum(p, mb):
    lp = model_lib.token_logprobs(p, mb[0], mb[1], config=model)
    return -jnp.sum(jnp.where(mb[2], lp, 0.0))

  loss, g, _ = training.accumulate_grads(loss_sum, state.params, (tokens, attn, mask), micro)
  g = jax.tree.map(lambda x: x / total, g)
  new, gnorm = apply_gradients(state, g, optim)
  return new.replace(step=state.step + 1), {"loss": loss / total, "tokens": total, "grad_norm": gnorm}


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def score(params, tokens, attn, *, model: ModelConfig, temperature: float = 1.0) -> jax.Array:
  """f32[B, L] teacher-forced log-probs of tokens i32[B, L] (attn bool[B, L]) at `temperature`
  (common.lm.model.token_logprobs; 0 at the first real token)."""
  return model_lib.token_logprobs(params, tokens, attn, config=model, temperature=temperature)


def score_rows(params, tokens, attn, *, model: ModelConfig, temperature: float = 1.0, chunk: int = 0) -> jax.Array:
  """`score` in chunks of `chunk` rows (0 = all at once), concatenated: f32[B, L]; bounds the activations of a
  forward pass over a large batch (e.g. log pi_old of an RL step)."""
  chunk = int(chunk) or int(tokens.shape[0])
  outs = [score(params, tokens[i:i + chunk], attn[i:i + chunk], model=model, temperature=temperature)
          for i in range(0, tokens.shape[0], chunk)]
  return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)


def policy_update(state: TrainState, loss_fn: Callable[[Any, Any], tuple[jax.Array, dict]], rows: Any,
                  row_weights: jax.Array, *, micro: int, optim: OptimSettings, max_metrics: Sequence[str] = (),
                  metric_weights: Mapping[str, jax.Array] | None = None) -> tuple[TrainState, dict]:
  """One optimizer step of a loss that is a weighted mean over rows, accumulated over strided micro-batches.

  Micro-batch j's loss L_j = loss_fn(params, rows_j) (a mean over its own rows) counts with its share
  W_j / W of the row weights (W_j = sum of row_weights in micro-batch j, W over all rows; 0 for padding rows),
  so sum_j (W_j / W) L_j is the whole batch's loss and its gradient exactly; metrics are summed with the same
  shares, or with the shares of their own row weights (`metric_weights`, e.g. a per-token mean weighted by
  tokens), and `max_metrics` take the maximum over micro-batches holding weight instead. With micro == 1 every
  share is 1 (when its total is > 0). Call it inside jax.jit with loss_fn, micro and optim static (see
  `planpo.train.rl_step`, `progagent.updates.gspo_update`).

  Args:
    state: the TrainState.
    loss_fn: (params, micro-batch rows) -> (f32[] mean loss, dict of f32[] metrics).
    rows: pytree of [B, ...] arrays; B a multiple of micro.
    row_weights: f32[B], what each row counts in the loss's normaliser (tokens, 1 per sequence, 0 = padding).
    micro: micro-batch count (static).
    optim: the optimizer settings.
    max_metrics: metric names reduced by max (1 when no micro-batch holds weight).
    metric_weights: metric name -> f32[B] row weights of that metric's mean.
  Returns:
    (state with new params and opt_state (step unchanged), metrics incl. 'loss' and 'grad_norm').
  """
  weights = {"": row_weights, **dict(metric_weights or {})}
  totals = {k: jnp.sum(w) for k, w in weights.items()}

  def share(k, w):
    t = totals[k]
    return jnp.where(t > 0, jnp.sum(w) / jnp.where(t > 0, t, 1.0), 0.0)

  def loss_sum(p, mb):
    batch, ws = mb
    loss, met = loss_fn(p, batch)
    met = dict(met, loss=loss)
    scaled = {k: (jnp.where(jnp.sum(ws[""]) > 0, v, -jnp.inf) if k in max_metrics
                  else v * share(k if k in ws else "", ws[k if k in ws else ""])) for k, v in met.items()}
    return loss * share("", ws[""]), scaled

  _, g, met = training.accumulate_grads(loss_sum, state.params, (rows, weights), micro, has_aux=True)
  state, gnorm = apply_gradients(state, g, optim)
  out = {}
  for k, v in met.items():
    if k in max_metrics:
      m = jnp.max(v, axis=0)
      out[k] = jnp.where(jnp.isfinite(m), m, 1.0)
    else:
      out[k] = jnp.sum(v, axis=0)
  return state, dict(out, grad_norm=gnorm)
