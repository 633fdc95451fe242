"""The trainer kit's furniture around the updates: loading a policy, opening a stage, the SFT stage.

`load_policy(model, ...)` is the one resolver for every checkpoint kind a config names in `model.checkpoint`
('tiny:<family>' written here, a local Hugging Face folder); `open_stage(dir, state, config)` gives a stage
(an SFT or RL phase of one run) its checkpointer, the restored state, the first step to run and its metric
writer, with every JSON-lines log of the stage cut back to the restored step; `stage_optim(config, lr)` is a
stage's optimizer and `run_sft(dir, state, config, ...)` the whole SFT stage of every method (PlanPO's and
ProgAgent's; its `sft` keys come from configs/schema.py `sft_config`).

The `model` config node (configs/schema.py `model_config`) has the same keys in every method:
  checkpoint   'tiny:<family>' (a tiny random checkpoint written into `cache_dir`, tokenizer trained on the
               corpus the method gives), a local Hugging Face checkpoint folder, or 'gguf:PATH' / 'gguf:smollm2'
               (a GGUF file converted once into `cache_dir`, common.lm.gguf_checkpoints)
  cache_dir    where tiny checkpoints are written ('' = $AGENTIC_RL_CACHE, else ~/.cache/agentic-rl-jax)
  tiny_vocab, tiny_sizes   a tiny checkpoint's vocabulary and shapes (common.lm.testing.make_tiny_checkpoint)
  dtype, param_dtype, remat, attention_impl, attention_chunk, logits_chunk   common.lm.config.ModelConfig
  lora_rank, lora_alpha, lora_targets   LoRA adapters (rank 0 = full fine-tuning)
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from common import chat as chat_lib
from common import checkpoint as ckpt_lib
from common import config_util
from common import io
from common import metric_writer
from common.lm import checkpoints as lm_checkpoints
from common.lm import config as config_lib
from common.lm import loading
from common.lm import lora as lora_lib
from common.lm import training
from common.lm import updates as kit
from common.lm.config import ModelConfig

# ModelConfig fields a trainer's `model` node may set on a loaded checkpoint.
OVERRIDE_FIELDS = ("dtype", "param_dtype", "remat", "attention_impl", "attention_chunk", "logits_chunk",
                   "decode_attention")


class RegimeGateFailed(RuntimeError):
  """An experiment's regime gate failed before any RL ran (e.g. planpo.train.regime_gate): the RL rows would be
  read in a regime where the method cannot show its effect. The message names the measured values, the
  thresholds and the fix; the launcher (experiments/train.py) prints it as one line and exits 3. Everything
  already written (SFT checkpoints, evaluations, gate.json) is kept, so a rerun resumes."""


def model_overrides(model: Any) -> dict:
  """The ModelConfig fields of OVERRIDE_FIELDS that the `model` node sets, ModelConfig's own defaults for the
  rest (read from the dataclass, so they cannot drift apart)."""
  defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name in OVERRIDE_FIELDS}
  out = {k: config_util.get(model, k, defaults[k]) for k in OVERRIDE_FIELDS}
  for k in ("attention_chunk", "logits_chunk"):
    out[k] = int(out[k])
  return out


def mesh_of(config: Any):
  """(mesh, rules) of config `mesh.shape` and the optional mesh.rules (common.lm.training.mesh_from_config;
  no `mesh` node = one device)."""
  return training.mesh_from_config(config_util.get(config, "mesh", None))


class Policy(NamedTuple):
  """A loaded policy: model config, initial params, the chat template on its tokenizer, checkpoint folder."""
  model: ModelConfig
  params: Any
  chat: chat_lib.ChatTemplate
  checkpoint: str


def load_policy(model: Any, *, mesh=None, rules=None, corpus: Sequence[str] = (), chat_template: str | None = None,
                seed: int = 0, keep_dir: str | None = None, chat: Any = None,
                config_key: str = "config.model.checkpoint") -> Policy:
  """Resolves `model.checkpoint`, loads it onto `mesh` (+ fresh LoRA adapters when `model.lora_rank` > 0) and
  builds the ChatTemplate.

  Args:
    model: the `model` config node (module docstring).
    mesh, rules: the parameters are created sharded over this mesh (common.lm.training.mesh_from_config).
    corpus: a tiny checkpoint's tokenizer training texts (the method's prompts, tool schemas, replies).
    chat_template: a tiny checkpoint's chat template (e.g. common.lm.testing.QWEN3_TOOL_TEMPLATE); None = the
      family's plain one.
    seed: the LoRA adapters' initialisation key is seed + 7.
    keep_dir: a tiny checkpoint is copied here the first time and loaded from here on every later call, so a
      resumed workdir pairs its saved checkpoints with the tokenizer and initial weights they were trained
      with, whatever the corpus gives now (PlanPO keeps it in <workdir>/policy). A local folder is loaded in
      place.
    chat: the `chat` config node (format, enable_thinking), or None for the template's defaults.
    config_key: the key named in error messages.
  Returns:
    Policy(model config, params, chat template, checkpoint folder).
  Raises:
    ValueError: an empty or missing checkpoint (common.lm.checkpoints.resolve_checkpoint), an unknown tiny
      family.
  """
  path = resolve_checkpoint(model, corpus=corpus, chat_template=chat_template, keep_dir=keep_dir,
                            config_key=config_key)
  cfg, params, tok = loading.load_pretrained(path, mesh=mesh, rules=rules, **model_overrides(model))
  rank = int(config_util.get(model, "lora_rank", 0) or 0)
  if rank:
    cfg = cfg.with_lora(rank=rank, alpha=float(config_util.get(model, "lora_alpha", 128.0)),
                        targets=tuple(config_util.get(model, "lora_targets", config_lib.LORA_TARGETS)))
    params = lora_lib.add_adapters(jax.random.key(int(seed) + 7), params, cfg)
  kw = {} if chat is None else dict(enable_thinking=bool(config_util.get(chat, "enable_thinking", False)),
                                    format=str(config_util.get(chat, "format", "auto")))
  return Policy(cfg, params, chat_lib.ChatTemplate(tok, **kw), path)


def resolve_checkpoint(model: Any, *, corpus: Sequence[str] = (), chat_template: str | None = None,
                       keep_dir: str | None = None, config_key: str = "config.model.checkpoint",
                       cache_dir: str | None = None) -> str:
  """The checkpoint folder of `model.checkpoint` (load_policy's arguments): a local Hugging Face folder as it is,
  or a 'tiny:<family>' checkpoint written into `model.cache_dir` (else `cache_dir`, e.g. PhGPO's
  `encoder.cache_dir`; vocabulary `model.tiny_vocab`, shapes `model.tiny_sizes`, tokenizer trained on `corpus`),
  kept in `keep_dir` when given.

  Several processes: the primary resolves (writes the tiny checkpoint and `keep_dir`) first, the others after
  it, so the files are written once (a barrier, jax.experimental.multihost_utils.sync_global_devices).

  Raises:
    ValueError: an empty or missing checkpoint, an unknown tiny family (the message names `config_key`).
  """
  if jax.process_count() == 1:
    return _resolve_checkpoint(model, corpus=corpus, chat_template=chat_template, keep_dir=keep_dir,
                               config_key=config_key, cache_dir=cache_dir)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  primary = jax.process_index() == 0
  if not primary:
    multihost_utils.sync_global_devices("resolve_checkpoint")
  path = _resolve_checkpoint(model, corpus=corpus, chat_template=chat_template, keep_dir=keep_dir,
                             config_key=config_key, cache_dir=cache_dir)
  if primary:
    multihost_utils.sync_global_devices("resolve_checkpoint")
  return path


def _resolve_checkpoint(model: Any, *, corpus: Sequence[str], chat_template: str | None, keep_dir: str | None,
                        config_key: str, cache_dir: str | None) -> str:
  spec = str(config_util.get(model, "checkpoint", ""))
  tiny = spec.startswith(lm_checkpoints.TINY_PREFIX)
  kept = keep_dir if keep_dir and tiny else None
  if kept and os.path.isfile(os.path.join(kept, "config.json")):
    return kept
  sizes = dict(config_util.get(model, "tiny_sizes", None) or {}) or None
  path = lm_checkpoints.resolve_checkpoint(spec, corpus=list(corpus) if tiny else (),
                                           cache_dir=config_util.get(model, "cache_dir", "") or cache_dir or None,
                                           vocab_size=int(config_util.get(model, "tiny_vocab", 2048)),
                                           chat_template=chat_template, sizes=sizes if tiny else None,
                                           config_key=config_key)
  if kept:
    tmp = kept + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(path, tmp)
    os.replace(tmp, kept)
    path = kept
  return path


# Keys of the shared schema that change where and how fast a run computes, not what it computes: a workdir may
# resume with other values (each trainer's RESUME_FREE starts from these; experiments/train.py).
SCALE_KEYS = ("mesh.", "model.attention_impl", "model.attention_chunk", "model.logits_chunk", "model.remat",
              "model.decode_attention")


def check_optim_config(optim: Any, *, optim_key: str = "optim") -> None:
  """The `optim` node's values checked before anything is written: name (common.lm.updates.OPTIMIZERS),
  grad_clip > 0, 0 <= b1, b2 < 1, eps > 0, weight_decay >= 0.

  Raises:
    ValueError naming the key and the allowed values.
  """
  from common.lm import updates  # pylint: disable=g-import-not-at-top
  try:
    s = updates.optim_settings(optim, 0.0)
  except (TypeError, ValueError) as e:
    raise ValueError(f"config {optim_key}: {e}") from None
  for key, ok, want in (("grad_clip", s.grad_clip > 0, "> 0"), ("b1", 0 <= s.b1 < 1, "in [0, 1)"),
                        ("b2", 0 <= s.b2 < 1, "in [0, 1)"), ("eps", s.eps > 0, "> 0"),
                        ("weight_decay", s.weight_decay >= 0, ">= 0")):
    if not ok:
      raise ValueError(f"config {optim_key}.{key}={getattr(s, key)!r} must be {want}")


def check_sft_config(sft: Any, *, sft_key: str = "sft") -> None:
  """The `sft` node's kit keys (configs/schema.py sft_config) checked before anything is written: batch_size >= 1,
  epochs >= 1 or steps >= 1 (steps >= 0, epochs >= 0), learning_rate > 0, micro_batch_size >= 0 (0 = one pass).
  A method that can skip its SFT stage says so with its own key (ProgAgent `sft.enabled`), not with 0 epochs.

  Raises:
    ValueError naming the key, the value and the allowed values.
  """
  get = lambda k, d=0: config_util.get(sft, k, d)
  for key, ok, want in (
      ("batch_size", _is_int(get("batch_size")) and get("batch_size") >= 1, "an integer >= 1"),
      ("epochs", _is_int(get("epochs")) and get("epochs") >= 0, "an integer >= 0"),
      ("steps", _is_int(get("steps")) and get("steps") >= 0, "an integer >= 0 (0 = sft.epochs passes)"),
      ("micro_batch_size", _is_int(get("micro_batch_size")) and get("micro_batch_size") >= 0,
       "an integer >= 0 (0 = one pass)"),
      ("learning_rate", isinstance(get("learning_rate"), (int, float)) and get("learning_rate") > 0, "> 0")):
    if not ok:
      raise ValueError(f"config {sft_key}.{key}={get(key)!r} must be {want}")
  if get("epochs") == 0 and get("steps") == 0:
    raise ValueError(f"config {sft_key}.epochs and {sft_key}.steps are both 0: the SFT stage would make no update; "
                     f"give {sft_key}.epochs >= 1 or {sft_key}.steps >= 1")


def check_checkpoint(model: Any, *, model_key: str = "model") -> None:
  """`model.checkpoint` checked before anything is written, without loading it
  (common.lm.checkpoints.check_checkpoint_spec: a folder holding config.json, or a known 'tiny:' family). The
  trainers call it last in check_config: the published configs leave it empty for the user to give.

  Raises:
    ValueError naming the key and the fix.
  """
  lm_checkpoints.check_checkpoint_spec(str(config_util.get(model, "checkpoint", "")),
                                       config_key=f"config {model_key}.checkpoint")


TRUNCATED_RESPONSES = ("keep", "mask")


def check_rl_config(rl: Any, *, rl_key: str) -> None:
  """A method's RL node (PhGPO and PlanPO `rl`, ProgAgent `gspo`) checked before anything is written: steps an
  integer >= 0, learning_rate > 0, and `truncated_responses` (where the node has it) one of TRUNCATED_RESPONSES:
  'keep' (a response cut by its token budget is trained on like any other: verl's default) or 'mask' (its tokens
  leave the policy loss: DAPO's overlong filtering, Yu et al. 2025, arXiv:2503.14476, sec. 3.4; TRL's
  mask_truncated_completions).

  Raises:
    ValueError naming the key, the value and the allowed values.
  """
  get = lambda k: config_util.get(rl, k, None)
  for key, ok, want in (("steps", _is_int(get("steps")) and get("steps") >= 0, "an integer >= 0"),
                        ("learning_rate", isinstance(get("learning_rate"), (int, float))
                         and not isinstance(get("learning_rate"), bool) and get("learning_rate") > 0, "> 0")):
    if not ok:
      raise ValueError(f"config {rl_key}.{key}={get(key)!r} must be {want}")
  if get("truncated_responses") is not None and get("truncated_responses") not in TRUNCATED_RESPONSES:
    raise ValueError(f"config {rl_key}.truncated_responses={get('truncated_responses')!r} must be 'keep' (cut "
                     "responses are trained on) or 'mask' (their tokens leave the policy loss)")


def _is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def check_model_config(model: Any, mesh: Any, *, model_key: str = "model") -> None:
  """The `model` and `mesh` nodes' values checked before anything is written (common.lm.training.
  check_scale_config), plus lora_rank >= 0. The checkpoint is `check_checkpoint`'s.

  Raises:
    ValueError naming the key, the allowed values and the fix.
  """
  training.check_scale_config(model, mesh, model_key=model_key)
  rank = config_util.get(model, "lora_rank", 0)
  if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
    raise ValueError(f"config {model_key}.lora_rank={rank!r} must be an integer >= 0 (0 = full fine-tuning)")


class Stage(NamedTuple):
  """An opened stage: `state` (restored, or the initial one), `start` (steps done), the Orbax `checkpointer`
  and the metric `writer`. Close it (or use it as a context manager) to flush both."""
  checkpointer: ckpt_lib.Checkpointer
  state: Any
  start: int
  writer: metric_writer.MetricWriter

  def close(self) -> None:
    self.writer.close()
    self.checkpointer.close()

  def save(self, step: int, state: Any, *, force: bool = False) -> bool:
    """Saves `state` as step `step` every `checkpoint.every` steps (or when forced)."""
    return self.checkpointer.maybe_save(step, state, force=force)

  def __enter__(self) -> "Stage":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def open_stage(directory: str, state: Any, config: Any, *, place=None, jsonl: Sequence[str] = ()) -> Stage:
  """Opens a stage in `directory` (created): checkpointer in directory/checkpoints, the latest saved state
  restored into `state`'s structure and shardings (else `state`), and a metric writer whose metrics.jsonl
  keeps only the rows up to the restored step; every file of `jsonl` (names in `directory`, e.g.
  'rollouts.jsonl') is cut back to that step too, so a run killed after its last checkpoint ends with the same
  files as an uninterrupted one.

  Args:
    directory: the stage's folder.
    state: the initial train state (already placed on its mesh).
    config: the run's config: `checkpoint.every`, `checkpoint.max_to_keep`, `logging.tensorboard`.
    place: optional function applied to the state before the restore and to the restored one (e.g. PhGPO's
      placement on the policy's mesh).
  Raises:
    common.checkpoint.CheckpointMismatchError: the saved state has another structure (a different config).
  """
  os.makedirs(directory, exist_ok=True)
  ck = ckpt_lib.Checkpointer(os.path.join(directory, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                             save_every=config.checkpoint.every)
  place = place or (lambda s: s)
  state, start = ck.restore_or_init(place(state))
  start = int(start or 0)
  if jax.process_index() == 0:   # several processes: only the primary writes (common/distributed.py)
    for name in jsonl:
      io.truncate_jsonl(os.path.join(directory, name), start)
  writer = metric_writer.MetricWriter(directory, resume_step=start, tensorboard=config.logging.tensorboard)
  return Stage(ck, place(state), start, writer)


# --- the SFT stage ---------------------------------------------------------------------------------------

def stage_optim(config: Any, learning_rate: float) -> kit.OptimSettings:
  """A stage's optimizer: `optim.*` (common.lm.updates.optim_settings) at the stage's `learning_rate`
  (`sft.learning_rate`, `rl.learning_rate`, `gspo.learning_rate`), training the LoRA adapters only when
  `model.lora_rank` > 0."""
  rank = config_util.get(config_util.get(config, "model", None), "lora_rank", 0)
  return kit.optim_settings(config.optim, learning_rate, adapters_only=bool(rank))


class SFTSchedule(NamedTuple):
  """batch_size rows per update (<= the examples), updates per epoch, updates in all, micro-batches per update
  and the padded row count of an update (common.lm.updates.micro_layout)."""
  batch_size: int
  per_epoch: int
  total: int
  micro: int
  padded: int


def sft_schedule(examples: int, sft: Any, shards: int = 1) -> SFTSchedule:
  """The SFT stage's schedule over `examples` rows from the `sft` node: `sft.batch_size` rows per update (at most
  the examples), `sft.steps` updates (0 = `sft.epochs` passes, the last batch of a pass short) in micro-batches
  of about `sft.micro_batch_size` rows (0 = one pass), padded for `shards` batch shards."""
  bs = min(int(sft.batch_size), int(examples))
  per_epoch = -(-int(examples) // bs)
  micro, padded = kit.micro_layout(bs, int(config_util.get(sft, "micro_batch_size", 0)), shards)
  return SFTSchedule(bs, per_epoch, int(config_util.get(sft, "steps", 0)) or int(sft.epochs) * per_epoch,
                     micro, padded)


def run_sft(directory: str, state: kit.TrainState, config: Any, *, examples: int,
            batch_of: Callable[[list[int]], tuple], model: ModelConfig, optim: kit.OptimSettings, seed: int,
            eval_loss: Callable[[Any], float] | None = None, first_metrics: dict | None = None) -> kit.TrainState:
  """The SFT stage: token-mean cross-entropy on the masked tokens of `examples` rows (common.lm.updates.
  sft_update), resumed from `directory` (open_stage); returns the final TrainState.

  Each epoch visits the rows in a fresh order (numpy Generator [seed, 11, epoch]), in batches of
  `sft_schedule`; a short batch (the last of a pass, or the mesh's padding) is filled with masked copies of its
  first row (common.lm.updates.pad_batch), so the copies count in no loss or normaliser. The batch's rows are
  sharded over the state's mesh when `config.mesh` names one (mesh_of).

  Args:
    directory: the stage's folder (checkpoints/, metrics.jsonl).
    state: the initial TrainState (common.lm.updates.init_state), restored from the latest checkpoint.
    config: the run's config: `sft.*` (sft_schedule), `mesh.*`, `checkpoint.*`, `logging.every`,
      `logging.tensorboard`.
    examples: the number of rows.
    batch_of: row indices -> (tokens i32[b, L], attn bool[b, L], mask bool[b, L]) numpy arrays of those rows
      (the method's padding to its length buckets; b = len(indices)).
    model, optim: the model config and the optimizer settings (stage_optim).
    seed: the order's seed.
    eval_loss: params -> token-mean loss (nats) on all rows, logged as sft/eval_loss at step 0 and at the last
      step; None = not logged.
    first_metrics: more metrics of the step-0 row (written with eval_loss).
  Metrics (directory/metrics.jsonl, every `logging.every` updates and the last): sft/loss (nats per token),
  sft/tokens, sft/grad_norm, sft/epoch.
  Raises:
    ValueError: no rows.
  """
  if examples < 1:
    raise ValueError("SFT has no rows; give the stage at least one example (or disable it)")
  mesh, rules = mesh_of(config)
  plan = sft_schedule(examples, config.sft, training.batch_shards(mesh, rules))
  with open_stage(directory, state, config) as stage:
    state = stage.state
    if stage.start == 0 and eval_loss is not None:
      stage.writer.write(0, {"sft/eval_loss": eval_loss(state.params), "sft/examples": examples,
                             **(first_metrics or {})})
    for k in range(stage.start, plan.total):
      epoch, i = divmod(k, plan.per_epoch)
      order = np.random.default_rng([seed, 11, epoch]).permutation(examples)
      idx = [int(j) for j in order[i * plan.batch_size:(i + 1) * plan.batch_size]]
      batch = kit.pad_batch(tuple(batch_of(idx)), plan.padded, masked=(2,))
      state, m = kit.sft_update(state, *kit.place_rows(batch, mesh, rules), model=model, optim=optim,
                                micro=plan.micro)
      last = k + 1 == plan.total
      row = {f"sft/{n}": v for n, v in jax.device_get(m).items()} | {"sft/epoch": epoch}
      if last and eval_loss is not None:
        row["sft/eval_loss"] = eval_loss(state.params)
      if (k + 1) % config.logging.every == 0 or last:
        stage.writer.write(k + 1, row)
      stage.save(k + 1, state, force=last)
  return state
