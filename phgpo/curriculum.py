"""PhGPO's three-stage schedule: supervised warm-up, mixed curriculum, full-pheromone GRPO.

Source: PhGPO, arXiv 2602.13691, "Three-stage schedule" (SPEC.md, PhGPO):
  1. warm-up: L_SL = -log pi(a*_t | s_t) on gold trajectories (run separately, `phgpo.warmup.run_warmup`);
  2. mixed curriculum: the gold action is executed with probability p_tf, else the pheromone-guided
     sample; L = lambda L_SL + (1 - lambda) L_PG - gamma H[pi]; lambda and p_tf anneal down, beta and w
     ramp up linearly (beta to beta_max), and the horizon grows from short to long task lengths;
  3. full-pheromone GRPO: every action sampled with beta = beta_max, w = w_max; evaporation continues.

The paper publishes the shape (linear ramps) but not the start values or stage lengths: they are config keys
(`curriculum.steps`, `curriculum.lambda_start`, `curriculum.p_tf_start`, `curriculum.horizon_start`,
`pheromone.beta_max`, `pheromone.w_max`). The ramps are linear in the RL step k over the curriculum's
`curriculum.steps` steps and constant afterwards. This is host-side control (Python floats fed to the
jit-compiled step as traced scalars, so a changing value never retraces).

Where the paper is silent, two choices are offered (the defaults are ours; `stage_values` gives the formulas):
  - ours: lambda and p_tf anneal to 0 and stay 0 in stage 3; beta and w ramp from 0;
  - the authors' released training script (github.com/ElevenLiy/PhGPO-Pheromone-Guided-Policy-Optimization-
    for-Long-Horizon-Tool-Planning, code/train_grpo_aco_v12_qwen_7b.py, `Config`): the SL weight anneals
    0.7 -> 0.3 and stays there (`sl_weight_final`), stage 3 still teacher-forces with probability 0.05
    (`rl_min_tf`), and beta starts near its maximum (0.7 -> 0.8). Config keys `curriculum.lambda_floor`
    (0.3), `curriculum.p_tf_floor` (0.05) and `curriculum.beta_start_fraction` (1.0) select it.
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
                 horizon_start: int, max_steps: int, beta_max: float, w_max: float, lambda_floor: float = 0.0,
                 p_tf_floor: float = 0.0, beta_start_fraction: float = 0.0) -> StageValues:
  """Schedule values at RL step `step` (0-based).

  With u = step / curriculum_steps in stage 2 (0 <= step < curriculum_steps) and f = beta_start_fraction:
    lambda  = max(lambda_floor, lambda_start (1 - u)),   stage 3: lambda_floor;
    p_tf    = max(p_tf_floor, p_tf_start (1 - u)),       stage 3: p_tf_floor;
    beta    = beta_max (f + (1 - f) u),                  stage 3: beta_max;
    w       = w_max (f + (1 - f) u),                     stage 3: w_max;
    horizon = round(horizon_start + u (max_steps - horizon_start)) in [1, max_steps], stage 3: max_steps.
  Source: PhGPO, arXiv:2602.13691, "Three-stage schedule" (SPEC.md, PhGPO): the paper gives only the shape
  ("lambda and p_tf anneal down; beta and w ramp up linearly"). The defaults (floors 0, f = 0) are our
  choice: pure GRPO in stage 3 and a prior that fades in from nothing. The authors' released script keeps
  lambda >= 0.3 (`sl_weight_final`) and p_tf >= 0.05 (`rl_min_tf`, its stage 3) and starts beta at 0.7 of
  a 0.8 maximum: config keys `curriculum.lambda_floor` = 0.3, `curriculum.p_tf_floor` = 0.05,
  `curriculum.beta_start_fraction` = 1.0 (beta and w at their maxima from the first step).

  Args:
    step: RL step k >= 0, counted from the end of the warm-up.
    curriculum_steps: length of stage 2; 0 skips it (plain stage 3 from the start).
    lambda_start, p_tf_start: values at k = 0, annealed linearly to 0 at k = curriculum_steps (then held at
      their floors).
    horizon_start: task length allowed at k = 0, grown linearly to `max_steps`.
    max_steps: the longest horizon (env.max_steps).
    beta_max, w_max: values reached at k = curriculum_steps, ramped linearly from
      beta_start_fraction * beta_max (resp. * w_max).
    lambda_floor: lower bound on lambda in stages 2 and 3, in [0, 1] (config `curriculum.lambda_floor`).
    p_tf_floor: lower bound on p_tf in stage 2 and its value in stage 3, in [0, 1]
      (config `curriculum.p_tf_floor`).
    beta_start_fraction: f in [0, 1], the fraction of beta_max and w_max at k = 0
      (config `curriculum.beta_start_fraction`).

  Returns:
    StageValues (Python floats and ints).

  Raises:
    ValueError: negative step or curriculum length; a floor or beta_start_fraction outside [0, 1] (or NaN),
      the message naming its config key.
  """
  if step < 0 or curriculum_steps < 0:
    raise ValueError(f"step ({step}) and curriculum_steps ({curriculum_steps}) must be >= 0")
  for key, value in (("curriculum.lambda_floor", lambda_floor), ("curriculum.p_tf_floor", p_tf_floor),
                     ("curriculum.beta_start_fraction", beta_start_fraction)):
    if not 0.0 <= value <= 1.0:
      raise ValueError(f"config key {key} must lie in [0, 1], got {value!r}")
  if curriculum_steps == 0 or step >= curriculum_steps:
    return StageValues(3, float(lambda_floor), float(p_tf_floor), float(beta_max), float(w_max),
                       int(max_steps))
  u = step / curriculum_steps
  ramp = beta_start_fraction + (1 - beta_start_fraction) * u
  horizon = int(round(horizon_start + u * (max_steps - horizon_start)))
  return StageValues(2, max(lambda_floor, lambda_start * (1 - u)), max(p_tf_floor, p_tf_start * (1 - u)),
                     beta_max * ramp, w_max * ramp, max(1, min(horizon, max_steps)))


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
