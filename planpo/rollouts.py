"""PlanPO's rollouts: environment workers, the common driver in window mode, batches and accounting.

  pool = make_pool(config)                                     # WorkerPool of config.env.factory workers
  trajs = run_rollouts(pool, sampler, chat, task_ids, config=config, group_size=G, seed=s)
  batch = collate(trajs, pad_id=pad)                           # per-turn training rows (numpy)

The environment is any ToolEnv (common/envs/base.py) named by `env.factory` ('module:callable') with
arguments `env.kwargs`: TextWorldExpress (common.envs.twx_env), the offline household tasks
(common.envs.household.env) or ScienceWorld (common.envs.scienceworld_env). Each worker runs in its own
sandboxed process (common.env_client.EnvSpec, read-only extra paths `env.ro_paths`; `env.sandboxed` True)
or in this process (`WorkerPool.local`, False: smoke runs). Before sandboxed workers start, `env.prepare`
('module:callable', optional) runs here: prepare(kwargs, task_requests(config)) -> (kwargs, read-only paths),
e.g. common.envs.household.env.prepare_host, which generates the household games once into a cache the
sandboxes then mount read-only. The trainer asks a worker these queries:
  task_ids(split, games, limit)   the first `limit` tasks per game / task type of `games` (None: the env's own
                                  default) in `split`;
  gold_actions(task_id)           the expert's action sequence (SFT data);
  admissible_actions()            the current state's admissible actions (SFT detours, the random baseline);
  task_type(task_id)              the label of the per-type tables.
The driver (common.rollout.RolloutDriver, mode 'window', common.windowed) re-renders every turn's prompt with
the last `rollout.window.history_length` (observation, action) pairs and the admissible actions; the reply
is '<think>...</think><action>...</action>'; invalid actions carry `rollout.window.invalid_action_penalty`.
The policy is common.lm.sampler.LMSampler. Outcome reward R = `rl.reward_scale` x the env's final
info['reward'] clipped to [0, 1] (10 on a win, as the paper's reward); success = the env's 'won' flag.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any, Sequence

import jax
import numpy as np

from common import distributed
from common import env_pool
from common import provenance
from common import rollout as rollout_lib
from common import windowed as win_lib
from common.env_client import EnvSpec
from common.lm import sampler as sampler_lib
from common.lm import sampling
from common.lm.sampler import LMSampler
from planpo import data

# Padded lengths of prompts (generation) and training rows: steps of 64 tokens up to 1,024 (one compile each),
# then powers of two. Power-of-two buckets alone would pad a 300-token row to 512 (2.9x the attention cost).
LENGTH_BUCKETS = tuple(range(64, 1025, 64))


def _plain(v: Any) -> Any:
  """ConfigDict / tuple values as plain JSON-able Python (the env process receives its kwargs as JSON)."""
  if hasattr(v, "to_dict"):
    v = v.to_dict()
  if isinstance(v, dict):
    return {str(k): _plain(x) for k, x in v.items()}
  if isinstance(v, (list, tuple)):
    return [_plain(x) for x in v]
  return v


def env_kwargs(config) -> dict:
  """The env's constructor arguments: `env.kwargs` as plain Python."""
  return _plain(config.env.kwargs)


def _callable(spec: str, key: str, *, load: bool = True):
  """The callable that spec ('module:callable') names; load False: only checks that its module exists.

  Raises:
    ValueError: naming the config key (argument key) when spec is not 'module:callable' or cannot be imported.
  """
  mod, _, name = spec.partition(":")
  if not mod or not name:
    raise ValueError(f"config `{key}` must be 'module:callable' (e.g. 'common.envs.twx_env:TwxToolEnv'), "
                     f"got {spec!r}")
  try:
    if not load:
      if importlib.util.find_spec(mod) is None:
        raise ImportError(f"no module named {mod!r}")
      return None
    return getattr(importlib.import_module(mod), name)
  except (ImportError, AttributeError) as e:
    raise ValueError(f"config `{key}` {spec!r} cannot be imported: {e}") from e


def _factory(config, *, load: bool = True):
  """The callable of `env.factory` (load False: only checks that its module exists)."""
  return _callable(str(config.env.factory), "env.factory", load=load)


def make_pool(config, num_workers: int | None = None) -> env_pool.WorkerPool:
  """`env.workers` workers of `env.factory`: sandboxed processes (`env.sandboxed`) or local objects, on this
  machine or (config key `env.backend` 'ray') hosted by Ray actors on the nodes of `env.ray_address`.

  Raises:
    ValueError: `env.factory` is not 'module:callable' or cannot be imported, or `env.backend` is unknown (names
      the key).
  """
  backend = env_pool.backend_options(config.env)
  n = int(num_workers or config.env.workers)
  factory = _factory(config, load=not config.env.sandboxed)
  if config.env.sandboxed:
    kwargs, ro_paths = env_kwargs(config), tuple(config.env.get("ro_paths", ()) or ())
    prepare = str(config.env.get("prepare", "") or "")
    if prepare:
      kwargs, extra = _callable(prepare, "env.prepare")(kwargs, task_requests(config))
      ro_paths += tuple(p for p in extra if p not in ro_paths)
    return env_pool.WorkerPool(EnvSpec(str(config.env.factory), kwargs, ro_paths=ro_paths), n, **backend)
  return env_pool.WorkerPool.local(functools.partial(factory, **env_kwargs(config)), n, **backend)


def data_provenance(pool: env_pool.WorkerPool) -> dict[str, str]:
  """{folder or file: common.provenance.data_fingerprint} of what the sandboxed workers read: the pool's
  read-only paths (`env.ro_paths` and what `env.prepare` returned, e.g. WebShop's data folder, however it was
  chosen: `env.kwargs.data_dir`, $WEBSHOP_DATA or the shared copy), so a result names the data it came from. {} for
  a pool of local objects (their data is whatever their factory read).

  Raises:
    FileNotFoundError: a read-only path vanished since the pool started.
  """
  spec = getattr(pool, "spec", None)
  return {p: provenance.data_fingerprint([p]) for p in (spec.ro_paths if spec is not None else ())}


def task_requests(config) -> list[tuple[str, list[str] | None, int]]:
  """(split, games, limit) of every task_ids query the trainer makes: the training split, then each held-out
  split of `env.eval_splits`, then the regime gate's split (`gate.split`, when set): what `env.prepare` readies
  before the sandboxed workers start."""
  games = list(config.env.games) if config.env.games else None
  gate = config.get("gate", None)
  extra = [(str(gate.split), games, int(gate.tasks))] if gate is not None and gate.get("split", "") else []
  return ([(str(config.env.train_split), games, int(config.env.train_tasks))]
          + [(str(s), games, int(config.env.eval_tasks)) for s in dict(config.env.eval_splits).values()] + extra)


def task_ids(worker, config, split: str, count: int) -> list[str]:
  """The first `count` task ids of `split` per game / task type of `env.games` (the env's own splits)."""
  games = config.env.games
  return list(worker.query("task_ids", split=split, games=list(games) if games else None, limit=int(count)))


def task_types(worker, tasks: Sequence[str]) -> dict[str, str]:
  """task id -> the env's task type (its `task_type` query): the rows of the per-type tables."""
  return {t: str(worker.query("task_type", task_id=t)) for t in tasks}


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
  """LMSampler for `rows` episodes at `temperature` (0: greedy), stopping at eos and end-of-turn; KV reuse across
  turns per `rollout.kv_reuse` (default on) in a cache pool within `rollout.kv_cache_max_gb` GiB (0 = no limit;
  rows of `rollout.max_context_tokens` slots; episodes beyond it re-prefilled each turn until a row frees, first
  come, first kept: common.lm.sampler) and the sampling keys of `rollout.sample_keys` ('request', the default: the
  tokens do not depend on the budget or on reuse; 'call': the stream before the pool, for the tables made with it).
  Its batch (and KV cache) has min(rows, `env.workers`) rows: the driver never runs more episodes at once than the
  pool has workers, and every generate call runs the whole batch, so more rows would only compute padding (128
  evaluation episodes on 8 workers: 16x the work)."""
  rows = max(1, min(int(rows), int(config.env.workers)))
  return LMSampler(params, policy.model, key=key, rows=rows, max_new_tokens=int(config.rollout.max_response_tokens),
                   temperature=float(temperature),
                   stop_tokens=tuple(policy.model.eos_token_ids) + tuple(policy.chat.stop_ids),
                   pad_id=policy.model.pad_token_id or 0, buckets=LENGTH_BUCKETS,
                   sample_keys=sampler_lib.check_sample_keys(config.rollout.get("sample_keys", "request"),
                                                             "rollout.sample_keys"),
                   **sampler_lib.reuse_options(policy.model, enabled=config.rollout.get("kv_reuse", True), rows=rows,
                                               context_tokens=int(config.rollout.max_context_tokens),
                                               max_gib=float(config.rollout.get("kv_cache_max_gb", 32.0)),
                                               key="rollout"))


def run_rollouts(pool, sampler, chat, tasks: Sequence[str], *, config, group_size: int,
                 seed: int) -> list[win_lib.WindowTrajectory]:
  """G rollouts of every task through the common driver; ordered by (task, sample), group = task index."""
  scale = float(config.rl.reward_scale)

  def reward(t) -> float:
    return scale * float(min(max(float(t.final_info.get("reward", 0.0)), 0.0), 1.0))

  driver = rollout_lib.RolloutDriver(pool, sampler, chat, config=driver_config(config, group_size=group_size,
                                                                                seed=seed), reward_fn=reward)
  if hasattr(sampler, "attach"):   # a scripted policy that reads the env (planpo.train.RandomAdmissible)
    sampler.attach(driver)
  return driver.run(list(tasks))


def rollout_blocks(num_tasks: int, group_size: int, block_episodes: int) -> list[range]:
  """Task index ranges of the sampling blocks (config `rollout.block_episodes`): whole groups, about
  `block_episodes` episodes each (max(1, block_episodes // G) tasks; the last block may be short); 0 = one block
  of every task (the single-process layout before issue 28)."""
  per = int(num_tasks) if int(block_episodes) <= 0 else max(1, int(block_episodes) // max(int(group_size), 1))
  per = max(per, 1)
  return [range(i, min(i + per, int(num_tasks))) for i in range(0, int(num_tasks), per)]


def run_blocks(pool, policy_of, chat, tasks: Sequence[str], *, config, group_size: int,
               seed: int) -> list[win_lib.WindowTrajectory]:
  """`run_rollouts` of every task, block by block, each process its own slice of blocks; every process returns
  the same global list, ordered by (task, sample), as one process would.

  The tasks are cut into sampling blocks (`rollout_blocks`, config `rollout.block_episodes`); block b (global
  index, whatever the process count) runs on this process's own worker pool with the policy `policy_of(b,
  episodes)` (e.g. an LMSampler keyed fold_in(key, b): sample keys fold in the global block index, never the
  process id). Process p runs the blocks of common.distributed.process_slice; the trajectories are renumbered
  to their global episode and group indices and all-gathered (common.distributed.allgather_objects: pickled
  records, the same objects on every process), so a run's samples do not depend on the process count.

  Args:
    pool: this process's WorkerPool.
    policy_of: (global block index, episodes in the block) -> a common.rollout policy.
    chat, tasks, config, group_size, seed: as `run_rollouts`.
  Returns:
    len(tasks) * group_size trajectories; trajectory i has episode i and group i // group_size.
  """
  blocks = rollout_blocks(len(tasks), group_size, int(config.rollout.get("block_episodes", 0)))
  local = []
  for b in distributed.process_slice(len(blocks)):
    r = blocks[b]
    trajs = run_rollouts(pool, policy_of(b, len(r) * group_size), chat, [tasks[i] for i in r], config=config,
                         group_size=group_size, seed=seed)
    for t in trajs:
      t.episode += r.start * group_size
      t.group += r.start
    local += trajs
  return [t for part in distributed.allgather_objects(local) for t in part]


def block_key(key, block: int, config):
  """The sampling key of block `block`: `key` itself when `rollout.block_episodes` is 0 (one block), else
  jax.random.fold_in(key, block)."""
  if int(config.rollout.get("block_episodes", 0)) <= 0:
    return key
  return jax.random.fold_in(key, int(block))


def collate(trajs: Sequence[win_lib.WindowTrajectory], *, pad_id: int) -> dict[str, np.ndarray]:
  """common.windowed.collate_rows of every turn row, padded to a power-of-two number of rows and length.

  Adds valid bool[R] (real rows of episodes that did not end with 'env_error'), attn bool[R, L] and
  rollout_ids i32[R] (= episode index). Padded rows have valid False and no policy tokens.
  """
  rows = win_lib.turn_rows(trajs)
  if not rows:
    raise RuntimeError("collate: the rollouts have no turns (every episode ended before its first reply, e.g. "
                       "env_error at reset); see the workers' logs named in the trajectories' termination info")
  n = len(rows)
  length = sampling.bucket_length(max(len(r["prompt_ids"]) + len(r["response_ids"]) for r in rows),
                                  buckets=LENGTH_BUCKETS)
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


def episode_record(t: win_lib.WindowTrajectory) -> dict[str, Any]:
  """One rollout's outcome: task_id, sample, success (0/1), score (final info['reward'] in [0, 1]), turns,
  response_tokens (mean policy tokens per response), episode_tokens, invalid (invalid turns), termination,
  actions (the action read from each reply; 'INVALID: <action or None>' for an invalid one)."""
  resp = [tn.policy_tokens for tn in t.turns]
  return {"task_id": t.task_id, "sample": int(t.sample), "success": float(t.success),
          "score": float(min(max(float(t.final_info.get("reward", 0.0)), 0.0), 1.0)), "turns": int(t.num_turns),
          "response_tokens": float(np.mean(resp)) if resp else 0.0, "episode_tokens": int(sum(resp)),
          "invalid": int(sum(tn.invalid for tn in t.turns)), "termination": str(t.termination),
          "actions": [tn.action if not tn.invalid else f"INVALID: {tn.action}" for tn in t.turns]}


def episode_metrics(trajs: Sequence[win_lib.WindowTrajectory]) -> dict[str, float]:
  """Means over rollouts: success, score (final info['reward'] in [0, 1]), turns, response_tokens (policy
  tokens per response, over all responses), episode_tokens (policy tokens per rollout), invalid (invalid
  actions per turn), turns_success (turns among the successful rollouts; NaN when none succeeded)."""
  succ = [float(t.success) for t in trajs]
  score = [float(min(max(float(t.final_info.get("reward", 0.0)), 0.0), 1.0)) for t in trajs]
  turns = [t.num_turns for t in trajs]
  resp = [tn.policy_tokens for t in trajs for tn in t.turns]
  inv = [float(tn.invalid) for t in trajs for tn in t.turns]
  mean = lambda x: float(np.mean(x)) if x else 0.0
  won = [t.num_turns for t in trajs if t.success]
  return {"success": mean(succ), "score": mean(score), "turns": mean(turns), "response_tokens": mean(resp),
          "episode_tokens": mean([sum(tn.policy_tokens for tn in t.turns) for t in trajs]), "invalid": mean(inv),
          "turns_success": float(np.mean(won)) if won else float("nan")}
