"""PhGPO's three-stage schedule: supervised warm-up, mixed curriculum, full-pheromone GRPO.

Source: PhGPO, arXiv 2602.13691, "Three-stage schedule" (SPEC.md, PhGPO):
  1. warm-up: L_SL = -log pi(a*_t | s_t) on gold trajectories (run separately, `phgpo.train.run_warmup`);
  2. mixed curriculum: the gold action is executed with probability p_tf, else the pheromone-guided
     sample; L = lambda L_SL + (1 - lambda) L_PG - gamma H[pi]; lambda and p_tf anneal down, beta and w
     ramp up linearly (beta to beta_max), and the horizon grows from short to long task lengths;
  3. full-pheromone GRPO: every action sampled with beta = beta_max, w = w_max; evaporation continues.

The paper publishes the shape (linear ramps) but not the start values or stage lengths: they are config keys
(`curriculum.steps`, `curriculum.lambda_start`, `curriculum.p_tf_start`, `curriculum.horizon_start`,
`pheromone.beta_max`, `pheromone.w_max`). The ramps are linear in the RL step k over the curriculum's
`curriculum.steps` steps and constant afterwards. This is host-side control (Python floats fed to the
jit-compiled step as traced scalars, so a changing value never retraces).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class StageValues(NamedTuple):
  """Schedule values at one RL step.

  Attributes:
    stage: 2 (mixed curriculum) or 3 (full pheromone).
    sl_weight: lambda, weight of the supervised loss on teacher-forced decisions.
    p_tf: probability of executing the gold action at a decision.
    beta: weight of log tau in the sampling logits.
    w: weight of the task-dependent pheromone in the fusion.
    horizon: longest gold length of the tasks sampled at this step.
  """
  stage: int
  sl_weight: float
  p_tf: float
  beta: float
  w: float
  horizon: int


def stage_values(step: int, *, curriculum_steps: int, lambda_start: float, p_tf_start: float,
                 horizon_start: int, max_steps: int, beta_max: float, w_max: float) -> StageValues:
  """Schedule values at RL step `step` (0-based).

  Args:
    step: RL step k >= 0, counted from the end of the warm-up.
    curriculum_steps: length of stage 2; 0 skips it (plain stage 3 from the start).
    lambda_start, p_tf_start: values at k = 0, annealed linearly to 0 at k = curriculum_steps.
    horizon_start: task length allowed at k = 0, grown linearly to `max_steps`.
    max_steps: the longest horizon (env.max_steps).
    beta_max, w_max: values reached at k = curriculum_steps, ramped linearly from 0.

  Returns:
    StageValues.

  Raises:
    ValueError: negative step or curriculum length.
  """
  if step < 0 or curriculum_steps < 0:
    raise ValueError(f"step ({step}) and curriculum_steps ({curriculum_steps}) must be >= 0")
  if curriculum_steps == 0 or step >= curriculum_steps:
    return StageValues(3, 0.0, 0.0, float(beta_max), float(w_max), int(max_steps))
  u = step / curriculum_steps
  horizon = int(round(horizon_start + u * (max_steps - horizon_start)))
  return StageValues(2, lambda_start * (1 - u), p_tf_start * (1 - u), beta_max * u, w_max * u,
                     max(1, min(horizon, max_steps)))


def tasks_within_horizon(train_idx: np.ndarray, gold_len: np.ndarray, rng: np.random.Generator, *,
                         horizon: int, count: int) -> np.ndarray:
  """The tasks of one RL step: `count` distinct training tasks whose gold length is <= horizon.

  The growing horizon of stage 2 (short tasks first); when no task is short enough, every training task
  is eligible. Draws with `rng.choice(..., replace=False)`.

  Args:
    train_idx: i64[T] training task rows.
    gold_len: i32[T] gold length of each of them.
    rng: host RNG of this step.
    horizon: the step's horizon (`StageValues.horizon`).
    count: tasks wanted (`rl.tasks_per_step`); fewer when fewer are eligible.
  Returns:
    i64[min(count, eligible)] task rows.
  """
  pool = train_idx[gold_len <= horizon]
  if len(pool) == 0:
    pool = train_idx
  return rng.choice(pool, size=min(count, len(pool)), replace=False)
