"""PlanPO's rollouts: TextWorldExpress workers, the common driver in window mode, batches and accounting.

  pool = make_pool(config)                                     # WorkerPool of TwxToolEnv workers
  trajs = run_rollouts(pool, sampler, chat, task_ids, config=config, group_size=G, seed=s)
  rows, arrays = collate(trajs, config=config)                 # per-turn training rows (numpy)

The environments are common.envs.twx_env.TwxToolEnv, each in its own sandboxed process (EnvSpec, config
key `env.sandboxed` True) or in this process (`WorkerPool.local`, False: smoke runs). The driver
(common.rollout.RolloutDriver, mode 'window', common.windowed) re-renders every turn's prompt with the
last `rollout.window.history_length` (observation, action) pairs and the admissible actions; the reply
is '<think>...</think><action>...</action>'; invalid actions carry `rollout.window.invalid_action_penalty`.
The policy is common.lm.sampler.LMSampler. Outcome reward R = `rl.reward_scale` x the game's score
clipped to [0, 1] (10 on a win, as the paper's reward); success = the game's 'won' flag.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from common import env_pool
from common import rollout as rollout_lib
from common import windowed as win_lib
from common.env_client import EnvSpec
from common.lm import sampling
from common.lm.sampler import LMSampler
from planpo import data

TWX_FACTORY = "common.envs.twx_env:TwxToolEnv"


def env_kwargs(config) -> dict:
  """TwxToolEnv arguments: `env.game_params`, `env.env_step_limit`, `env.jvm_heap_mb`."""
  e = config.env
  return {"game_params": {str(k): str(v) for k, v in dict(e.game_params).items()},
          "env_step_limit": int(e.env_step_limit), "jvm_heap_mb": int(e.jvm_heap_mb)}


def make_pool(config, num_workers: int | None = None) -> env_pool.WorkerPool:
  """`env.workers` TwxToolEnv workers: sandboxed processes (`env.sandboxed`) or local objects."""
  n = int(num_workers or config.env.workers)
  if config.env.sandboxed:
    return env_pool.WorkerPool(EnvSpec(TWX_FACTORY, env_kwargs(config)), n)
  from common.envs import twx_env  # pylint: disable=g-import-not-at-top
  return env_pool.WorkerPool.local(functools.partial(twx_env.TwxToolEnv, **env_kwargs(config)), n)


def task_ids(worker, config, split: str, count: int) -> list[str]:
  """The first `count` task ids of `split` per game of `env.games` (the simulator's own seed splits)."""
  return list(worker.query("task_ids", split=split, games=list(config.env.games), limit=int(count)))


def driver_config(config, *, group_size: int, seed: int) -> rollout_lib.RolloutConfig:
  """Window mode; limits `env.max_turns`, `rollout.max_response_tokens`, `rollout.max_context_tokens`,
  `rollout.max_observation_chars`; the G rollouts of a task play the same game (its seed is in the id)."""
  r = config.rollout
  return rollout_lib.RolloutConfig(group_size=group_size, max_turns=int(config.env.max_turns),
                                   max_context_tokens=int(r.max_context_tokens),
                                   max_response_tokens=int(r.max_response_tokens),
                                   max_observation_chars=int(r.max_observation_chars), seed=seed,
                                   seed_mode="fixed", mode=r.mode, window=data.window_config(config),
                                   on_truncated_response="continue")


def make_sampler(params, policy, *, key, rows: int, temperature: float, config) -> LMSampler:
  """LMSampler for `rows` episodes at `temperature` (0: greedy), stopping at eos and end-of-turn."""
  return LMSampler(params, policy.model, key=key, rows=rows, max_new_tokens=int(config.rollout.max_response_tokens),
                   temperature=float(temperature),
                   stop_tokens=tuple(policy.model.eos_token_ids) + tuple(policy.chat.stop_ids),
                   pad_id=policy.model.pad_token_id or 0)


def run_rollouts(pool, sampler, chat, tasks: Sequence[str], *, config, group_size: int,
                 seed: int) -> list[win_lib.WindowTrajectory]:
  """G rollouts of every task through the common driver; ordered by (task, sample), group = task index."""
  scale = float(config.rl.reward_scale)

  def reward(t) -> float:
    return scale * float(min(max(float(t.final_info.get("score", 0.0)), 0.0), 1.0))

  driver = rollout_lib.RolloutDriver(pool, sampler, chat, config=driver_config(config, group_size=group_size,
                                                                                seed=seed), reward_fn=reward)
  return driver.run(list(tasks))


def collate(trajs: Sequence[win_lib.WindowTrajectory], *, pad_id: int) -> dict[str, np.ndarray]:
  """common.windowed.collate_rows of every turn row, padded to a power-of-two number of rows and length.

  Adds valid bool[R] (real rows of episodes that did not end with 'env_error'), attn bool[R, L] and
  rollout_ids i32[R] (= episode index). Padded rows have valid False and no policy tokens.
  """
  rows = win_lib.turn_rows(trajs)
  n = len(rows)
  length = sampling.bucket_length(max(len(r["prompt_ids"]) + len(r["response_ids"]) for r in rows))
  c = win_lib.collate_rows(rows, max_len=length, pad_id=pad_id)
  target = sampling.bucket_length(n, minimum=8)
  out = {}
  for k, v in c.items():
    pad = np.zeros((target - n,) + v.shape[1:], v.dtype)
    if k == "tokens":
      pad[:] = pad_id
    out[k] = np.concatenate([v, pad])
  out["valid"] = np.zeros(target, bool)
  out["valid"][:n] = [r["termination"] != "env_error" for r in rows]
  out["policy_mask"] &= out["valid"][:, None]
  out["attn"] = np.arange(length)[None, :] < out["lengths"][:, None]
  out["rollout_ids"] = out["episode_ids"]
  return out


def episode_metrics(trajs: Sequence[win_lib.WindowTrajectory]) -> dict[str, float]:
  """Means over rollouts: success, score (the game's final score), turns, response_tokens (policy tokens
  per response), episode_tokens (policy tokens per rollout), invalid (invalid actions per turn)."""
  succ = [float(t.success) for t in trajs]
  score = [float(t.final_info.get("score", 0.0)) for t in trajs]
  turns = [t.num_turns for t in trajs]
  resp = [tn.policy_tokens for t in trajs for tn in t.turns]
  inv = [float(tn.invalid) for t in trajs for tn in t.turns]
  mean = lambda x: float(np.mean(x)) if x else 0.0
  return {"success": mean(succ), "score": mean(score), "turns": mean(turns), "response_tokens": mean(resp),
          "episode_tokens": mean([sum(tn.policy_tokens for tn in t.turns) for t in trajs]), "invalid": mean(inv)}
