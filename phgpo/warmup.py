"""PhGPO stage 1: the supervised warm-up on gold trajectories, and which of its checkpoints RL starts from.

L_SL = -log pi(a*_t | s_t) over every gold decision (task, step) of the training split, teacher-forced (the
state holds the gold calls before step t), `warmup.steps` Adam updates of `warmup.batch_size` decisions
(PhGPO, SPEC.md stage 1).

Which state the warm-up hands to RL is a choice the paper leaves open (config `warmup.select`):
- 'last' (default, the main table): the state after the last step.
- 'validation': a slice of the training tasks (`warmup.validation_fraction`, whole leakage groups drawn with
  the seed: single tasks on the random split, whole gold chains on the chain split) is held out of the
  warm-up's updates; every `warmup.eval_every` steps, and at step 0, the policy decodes those tasks
  greedily on its own (no teacher forcing, `phgpo.evaluation.evaluate` with beta = w = 0) and the state with
  the highest match ratio is kept (ties: the earlier step). Teacher forcing trains every decision on a gold
  history, so a policy that fits the training decisions better can still decode worse once its own errors
  enter the history (issue 24: the retrieval policy's warm-up is ahead at step 1 of a chain and behind from
  step 3); the free-running score on tasks it was not fitted on sees that, and step 0 is a candidate, so with
  `policy.kind = 'retrieval_mlp'` (whose untrained greedy decode is the 3-neighbour vote) the kept state is
  never worse than the vote on that slice. The slice's tasks stay neighbours of the others and are used by RL.

Files in the stage's folder: checkpoints/ (the last steps, for resume), and with 'validation' best/ (the kept
state) and validation.json ({'tasks', 'match_ratio': {step: value}, 'best_step'}).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import tqdm

from common import checkpoint as ckpt_lib
from common import io
from common.lm import stages
from phgpo import classifier_rollout as rollout_lib
from phgpo import evaluation
from phgpo import steps
from phgpo.problem import Problem
from phgpo.steps import Compiled, TrainState

SELECT_CHOICES = ("last", "validation")   # config warmup.select


def check_warmup_config(wc) -> None:
  """Raises ValueError naming the `warmup.*` key of a bad value (steps, batch_size, learning_rate, select,
  validation_fraction, eval_every)."""
  if int(wc.steps) < 0 or int(wc.batch_size) < 1 or not float(wc.learning_rate) > 0:
    raise ValueError(f"config warmup.steps must be >= 0, warmup.batch_size >= 1 and warmup.learning_rate > 0; "
                     f"got {wc.steps}, {wc.batch_size}, {wc.learning_rate}")
  select = wc.get("select", "last")
  if select not in SELECT_CHOICES:
    raise ValueError(f"config warmup.select={select!r} is not one of {list(SELECT_CHOICES)}")
  if select == "validation":
    if not 0.0 < float(wc.validation_fraction) < 1.0 or int(wc.eval_every) < 1:
      raise ValueError(f"config warmup.validation_fraction must lie in (0, 1) and warmup.eval_every be >= 1 "
                       f"with warmup.select='validation'; got {wc.validation_fraction}, {wc.eval_every}")


def validation_split(train_idx: np.ndarray, fraction: float, seed: int,
                     groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """(fit i64[T - V], validation i64[V]) task rows, both sorted: about `fraction` of the T training tasks, drawn
  as whole leakage groups, so the validation tasks stand to the fitted ones as the held-out split does.

  Args:
    train_idx: i64[T] training task rows.
    fraction: the validation share (config `warmup.validation_fraction`), in (0, 1).
    seed: the run seed; the groups are permuted by numpy's default_rng([seed, 3]) and taken in that order
      until V >= max(1, round(fraction * T)).
    groups: i32[num_tasks] leakage group of every task row (`phgpo.retrieval.leakage_groups`: one per task on
      the random split, one per gold chain on the chain split), or None (one group per task).
  Raises:
    ValueError: fewer than 2 groups among the training tasks, or a fraction outside (0, 1).
  """
  train_idx = np.asarray(train_idx, np.int64)
  g = train_idx if groups is None else np.asarray(groups)[train_idx]
  uniq = np.unique(g)
  if len(uniq) < 2 or not 0.0 < fraction < 1.0:
    raise ValueError(f"a validation slice needs >= 2 training tasks (groups) and warmup.validation_fraction in "
                     f"(0, 1); got {len(uniq)} groups, fraction {fraction}")
  target = max(1, int(round(fraction * len(train_idx))))
  order = np.random.default_rng([seed, 3]).permutation(uniq)
  sizes = np.array([np.sum(g == u) for u in order])
  take = order[:max(1, min(len(order) - 1, int(np.searchsorted(np.cumsum(sizes), target)) + 1))]
  is_val = np.isin(g, take)
  return np.sort(train_idx[~is_val]), np.sort(train_idx[is_val])


def progress_bar(total: int, initial: int, desc: str, enabled: bool) -> tqdm.tqdm:
  """The stage's tqdm bar (absent with `enabled` False, the launcher's --noprogress)."""
  return tqdm.tqdm(total=total, initial=initial, desc=desc, disable=not enabled, dynamic_ncols=True,
                   leave=False)


def log_now(config, step: int, total: int) -> bool:
  """Whether step `step` (0-based) writes its metrics: every `logging.every` steps and the last."""
  return (step + 1) % config.logging.every == 0 or step + 1 == total


def open_run(config, workdir: str, init: TrainState, policy=None) -> stages.Stage:
  """Checkpointer, train state (latest saved, else `init`), first step and metric writer of one run
  (common.lm.stages.open_stage). The state is placed first (`phgpo.steps.place`: on the LM policy's mesh, else
  on the default device), so a checkpoint restores into the same shardings."""
  return stages.open_stage(workdir, init, config, place=lambda s: steps.place(s, policy))


def run_warmup(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int,
               progress: bool = True) -> TrainState:
  """Stage 1 (module docstring): supervised next-tool learning on the gold trajectories of the training split.

  Saves the whole train state every `checkpoint.every` steps, at every validation point and at the end;
  resumes from the latest step when called again with the same workdir (validation scores already in
  validation.json are kept: each step's batch is drawn from (seed, step) alone, so a replayed step is the same).

  Returns:
    The train state RL starts from: the last one (`warmup.select` 'last') or the kept one ('validation').
  Raises:
    ValueError: a bad `warmup.*` value (`check_warmup_config`).
  """
  wc = config.warmup
  check_warmup_config(wc)
  select = wc.get("select", "last")
  os.makedirs(workdir, exist_ok=True)
  init = steps.place(steps.init_state(config, compiled.policy, problem, seed=seed,
                                      learning_rate=wc.learning_rate), compiled.policy)
  if len(problem.train_idx) == 0:   # no gold trajectory to fit (phgpo.problem printed so): the initial policy
    return init
  stage = open_run(config, workdir, init, compiled.policy)
  state, start = stage.state, stage.start
  if select == "validation":
    fit, val = validation_split(problem.train_idx, float(wc.validation_fraction), seed,
                                getattr(compiled.policy, "groups", None))
    chooser = _Selection(config, problem, compiled, workdir, val, seed=seed, init=init)
  else:
    fit, chooser = problem.train_idx, None
  pairs = steps.gold_decisions(problem, fit)
  bs = min(wc.batch_size, len(pairs))
  bar = progress_bar(wc.steps, start, f"warm-up seed {seed}", progress)
  try:
    for step in range(start, wc.steps):
      rng = np.random.default_rng([seed, 1, step])
      sel = pairs[rng.choice(len(pairs), size=bs, replace=False)]
      state, aux = steps.warmup_step(compiled, state, problem, sel, step)
      row = {}
      if log_now(config, step, wc.steps):
        aux = jax.device_get(aux)
        row = {"warmup/" + k: v for k, v in aux.items()}
        bar.set_postfix(loss=f"{float(aux['loss']):.3f}", acc=f"{float(aux['accuracy']):.3f}")
      point = chooser is not None and ((step + 1) % int(wc.eval_every) == 0 or step + 1 == wc.steps)
      if point:
        known = chooser.scores.get(step + 1)   # scored before a kill: the replayed state is the same
        row["warmup/validation_match_ratio"] = chooser.score(step + 1, state) if known is None else known
      if row:
        stage.writer.write(step + 1, row)
      stage.save(step + 1, state, force=point or step + 1 == wc.steps)
      bar.update(1)
    bar.close()
    if stage.checkpointer.latest_step() != wc.steps:
      stage.checkpointer.save(wc.steps, state)
    if chooser is not None:
      state = chooser.best(state)
  finally:
    stage.close()
    if chooser is not None:
      chooser.close()
  return state


class _Selection:
  """The 'validation' choice of `run_warmup`: scores states on the validation tasks, keeps the best in best/."""

  def __init__(self, config, problem: Problem, compiled: Compiled, workdir: str, val: np.ndarray, *, seed: int,
               init: TrainState):
    self.config, self.problem, self.compiled, self.val, self.seed = config, problem, compiled, val, seed
    self.path = os.path.join(workdir, "validation.json")
    self.ck = ckpt_lib.Checkpointer(os.path.join(workdir, "best"), max_to_keep=1)
    self.envs = None
    self.template = init
    self.scores: dict[int, float] = {}
    if os.path.exists(self.path):
      # A resumed warm-up replays the steps after its checkpoint exactly (batches from (seed, step), a greedy
      # decode), so the scores already written stand and their points are not scored again.
      with open(self.path) as f:
        self.scores = {int(s): float(v) for s, v in json.load(f)["match_ratio"].items()}
    if 0 not in self.scores:
      self.score(0, init)

  def _best_step(self) -> int:
    return max(sorted(self.scores), key=lambda s: self.scores[s])   # ties: the earliest step

  def score(self, step: int, state: TrainState) -> float:
    """Free-running match ratio of `state` on the validation tasks (recorded; best/ updated when it is the
    best so far)."""
    if self.envs is None:
      self.envs = rollout_lib.make_envs(self.config, self.problem, len(self.val))
    res = evaluation.evaluate(self.config, self.compiled, state.params, state.pheromone, self.problem, beta=0.0,
                              w=0.0, envs=self.envs, task_idx=self.val, seed=self.seed)
    self.scores[int(step)] = float(res["match_ratio"])
    best = self._best_step()
    if best == step and self.ck.latest_step() != step:   # (saved already when a kill came before the json)
      self.ck.save(step, state)
    io.write_json(self.path, {"tasks": len(self.val), "match_ratio": {str(s): v for s, v in sorted(
        self.scores.items())}, "best_step": best}, sort_keys=True)
    return self.scores[int(step)]

  def best(self, last: TrainState) -> TrainState:
    """The kept state (the last one when it is the best)."""
    best = self._best_step()
    if best == int(last.step):
      return last
    return self.ck.restore(best, self.template)

  def close(self) -> None:
    if self.envs is not None:
      self.envs.close()
    self.ck.close()
