"""PhGPO's tool-classifier rollout against the TRAJECT-Bench replay environment, on the shared worker pool.

The PhGPO policy is a classifier over tools, not a text policy, so its rollout is its own loop (the text
driver is common.rollout): B episodes advance in lock step, one batched decision per turn
(`phgpo.objective.decide`), and every call of a turn is stepped on `common.env_pool.WorkerPool` at once.
The environment is `phgpo.replay_env.ReplayEnv` behind the common interface (`common.envs.base.ToolEnv`):
sandboxed worker processes by default (`env.sandboxed = True`, `env.num_workers` of them), or
in-process environment objects (`env.sandboxed = False`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from common import distributed
from common import env_pool
from phgpo import memory_bank
from phgpo import metrics as metrics_lib
from phgpo import problem as problem_lib
from phgpo import replay_env
from phgpo.problem import Problem


@dataclasses.dataclass
class RolloutBatch:
  """Host-side record of B trajectories (all i32/f32/bool [B, H] unless noted).

  tools/templates: executed calls (-1 after the end); status: STATUS_CODES of each observation;
  logp_old: log pi_theta(tool) at sampling time (temperature 1, all tools); logp_behaviour: log of the
  sampling distribution's probability of the tool (0 for teacher-forced and argmax decisions); pg_mask: decisions sampled
  from the policy; sl_mask: teacher-forced decisions; length: i32[B] calls made; task: i64[B] task
  index; reward: f32[B]; end_reason: list[str] ('horizon', 'done', 'no_candidate', 'env_error');
  observations: B lists of observation texts (recorded only for policies that read them).
  """
  tools: np.ndarray
  templates: np.ndarray
  status: np.ndarray
  logp_old: np.ndarray
  logp_behaviour: np.ndarray
  pg_mask: np.ndarray
  sl_mask: np.ndarray
  length: np.ndarray
  task: np.ndarray
  reward: np.ndarray
  end_reason: list
  observations: list


def decision_batch(policy, task_idx: np.ndarray, tools: np.ndarray, status: np.ndarray,
                   observations: list | None):
  """All H decisions of B trajectories as one flat batch of B * H states (row b * H + t = step t of b)."""
  b, h = tools.shape
  rep = lambda x: np.repeat(x, h, axis=0)
  obs = None
  if observations is not None:
    obs = [o for o in observations for _ in range(h)]
  return policy.featurize(rep(task_idx), rep(tools), rep(status), np.tile(np.arange(h, dtype=np.int32), b),
                          obs)


def rollout(compiled, params, pher, problem: Problem, envs: "ReplayEpisodes",
            task_idx: np.ndarray, key: jax.Array, *, beta: float, w: float, temperature: float,
            p_tf: float, tf_rng: np.random.Generator, reward_kind: str,
            success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> RolloutBatch:
  """Runs one trajectory per entry of `task_idx` against `envs` (one episode slot per trajectory).

  Each turn: featurize the B decision states, one jit-compiled `compiled.decide` call (the decision rule,
  `phgpo.objective.decide`), teacher forcing with probability p_tf (the gold call is executed instead),
  then all calls of the turn are stepped together. The episode of task x lasts gold_len(x) calls, or
  stops early when the policy has no valid candidate or the environment reports done or an error.

  Args:
    compiled: `phgpo.steps.Compiled` (its `decide`, `task_similarity`, `policy`, `start`).
    params, pher: the policy parameters and `PheromoneState` to sample with.
    envs: `ReplayEpisodes` with at least len(task_idx) episodes.
    task_idx: i64[B] task rows.
    key: PRNG key, split once per turn.
    beta, w, temperature: the decision rule's (see `phgpo.objective.decide`).
    p_tf: teacher-forcing probability.
    tf_rng: host RNG of the episode seeds and the teacher-forcing coin flips.
    reward_kind, success_threshold: see `score_trajectories`.
  """
  policy = compiled.policy
  b = len(task_idx)
  h = problem.gold_tools.shape[1]
  names = problem.graph.tool_names
  tools = np.full((b, h), -1, np.int32)
  templates = np.full((b, h), -1, np.int32)
  status = np.zeros((b, h), np.int32)
  logp_old = np.zeros((b, h), np.float32)
  logp_behaviour = np.zeros((b, h), np.float32)
  pg_mask = np.zeros((b, h), bool)
  sl_mask = np.zeros((b, h), bool)
  length = np.zeros((b,), np.int32)
  active = np.ones((b,), bool)
  end_reason = ["horizon"] * b
  observations = [[] for _ in range(b)] if policy.uses_observations else None
  horizon = problem.gold_len[task_idx]
  task_sim = compiled.task_similarity(task_idx)   # the task is fixed for the whole episode
  # The bank is fixed for the whole rollout too: how many of its edges leaving each tool may need a ranking
  # (phgpo.memory_bank.dependent_pheromone's hot_edges; None ranks every edge, or the bank has no surplus).
  hot = None
  if pher.bank_task.shape[-1] > compiled.config.pheromone.top_k_similar:
    hot = np.asarray(jax.device_get(compiled.hot_edge_counts(pher.bank_task)))
  seeds = [int(x) for x in tf_rng.integers(1 << 30, size=b)]
  for i, r in enumerate(envs.reset_all([problem.tasks[j].task_id for j in task_idx], seeds)):
    if isinstance(r, Exception):
      logging.warning("environment reset failed for task %s: %s", problem.tasks[task_idx[i]].task_id, r)
      active[i] = False
      end_reason[i] = "env_error"
  for t in range(int(horizon.max())):
    active &= t < horizon
    if not active.any():
      break
    key, sub = jax.random.split(key)
    step = np.full((b,), t, np.int32)
    batch = policy.featurize(task_idx, tools, status, step, observations)
    prev = tools[:, t - 1] if t > 0 else np.full((b,), compiled.start, np.int32)
    prev = np.where(prev < 0, compiled.start, prev).astype(np.int32)
    bound = None if hot is None else memory_bank.hot_edge_bucket(int(hot[prev].max()), pher.tau.shape[1])
    a, tm, lp, has, lpb = jax.device_get(compiled.decide(params, pher, batch, jnp.asarray(prev), task_sim, sub,
                                                         beta, w, temperature, hot_edges=bound))
    forced = tf_rng.random(b) < p_tf
    chosen = []
    for i in np.nonzero(active)[0]:
      gold = problem.gold_tools[task_idx[i], t]
      if forced[i] and gold >= 0:
        chosen.append((i, int(gold), int(problem.gold_templates[task_idx[i], t]), True))
      elif has[i]:
        chosen.append((i, int(a[i]), int(tm[i]), False))
      else:
        active[i] = False
        end_reason[i] = "no_candidate"
    calls = []
    for i, tool, tmpl, _ in chosen:
      keys = problem.graph.templates[tool][tmpl] if tmpl >= 0 else ()
      calls.append((i, {"name": names[tool], "arguments": {k: "" for k in keys}}))
    for (i, tool, tmpl, teacher), res in zip(chosen, envs.step_many(calls)):
      if isinstance(res, Exception):
        logging.warning("environment error in task %s: %s", problem.tasks[task_idx[i]].task_id, res)
        active[i] = False
        end_reason[i] = "env_error"
        continue
      sl_mask[i, t], pg_mask[i, t] = teacher, not teacher
      tools[i, t], templates[i, t], logp_old[i, t] = tool, tmpl, lp[i]
      logp_behaviour[i, t] = 0.0 if teacher else lpb[i]
      status[i, t] = problem_lib.status_code(res.status)
      if observations is not None:
        observations[i].append(res.observation)
      length[i] = t + 1
      if res.done and t + 1 < horizon[i]:
        active[i] = False
        end_reason[i] = "done"
  reward = score_trajectories(tools, length, problem.gold_tools[task_idx], problem.gold_len[task_idx],
                              kind=reward_kind, horizon=h, success_threshold=success_threshold)
  return RolloutBatch(tools, templates, status, logp_old, logp_behaviour, pg_mask, sl_mask, length,
                      np.asarray(task_idx), reward, end_reason, observations)


def task_blocks(num_groups: int, block_tasks: int) -> list[range]:
  """Group (task) index ranges of the sampling blocks: `block_tasks` whole groups each (the last may be short);
  `block_tasks` <= 0 = one block of every group (the layout before issue 28). Config keys `rl.block_tasks`
  (RL steps) and `eval.block_tasks` (held-out evaluation)."""
  n = int(num_groups)
  per = n if int(block_tasks) <= 0 else int(block_tasks)
  per = max(per, 1)
  return [range(i, min(i + per, n)) for i in range(0, n, per)]


def concat(batches: Sequence[RolloutBatch]) -> RolloutBatch:
  """One RolloutBatch of the rows of `batches`, in order (arrays concatenated on axis 0, lists joined).

  Raises:
    ValueError: no batches.
  """
  if not batches:
    raise ValueError("concat needs at least one RolloutBatch")
  if len(batches) == 1:
    return batches[0]
  out = {}
  for f in dataclasses.fields(RolloutBatch):
    parts = [getattr(b, f.name) for b in batches]
    if isinstance(parts[0], np.ndarray):
      out[f.name] = np.concatenate(parts, axis=0)
    elif parts[0] is None:
      out[f.name] = None
    else:
      out[f.name] = [x for p in parts for x in p]
  return RolloutBatch(**out)


def rollout_blocks(compiled, params, pher, problem: Problem, envs: "ReplayEpisodes", groups: np.ndarray,
                   key: jax.Array, *, group_size: int, block_tasks: int, tf_rng: np.random.Generator,
                   tf_seed: Sequence[int], **kwargs) -> RolloutBatch:
  """`rollout` of `group_size` trajectories per task of `groups`, block by block, each process its own slice of
  blocks; every process returns the same global RolloutBatch, rows ordered (task, sample), as one process would.

  The groups are cut into sampling blocks of `block_tasks` whole groups (`task_blocks`). With one block
  (`block_tasks` 0) the block samples with `key` and `tf_rng` as given (the single-process stream before issue
  28). With several, block b (global index, whatever the process count) samples with jax.random.fold_in(key, b)
  and numpy's default_rng([*tf_seed, b]) for its episode seeds and teacher-forcing coin flips: the keys fold in
  the block index, never the process id, so a run's samples do not depend on the process count (they do depend
  on `block_tasks`). Process p runs the blocks of common.distributed.process_slice on its own `envs`; the
  batches are all-gathered (common.distributed.allgather_objects), so the host-side state built from them
  (pheromone, memory bank, curriculum counters, first successes) is the same on every process.

  Args:
    compiled, params, pher, problem, kwargs: as `rollout` (beta, w, temperature, p_tf, reward_kind, ...).
    envs: this process's ReplayEpisodes, with at least len(largest block) * group_size episode slots.
    groups: i64[G] task rows, one per group.
    key: the step's PRNG key.
    group_size: M trajectories per task.
    block_tasks: groups per sampling block (<= 0: one block).
    tf_rng: host RNG of the one-block case; tf_seed: the integers seeding each block's host RNG otherwise.
  Returns:
    RolloutBatch of G * M rows; row i is sample i % M of task groups[i // M].
  Collective: with several processes every process must call it (the all-gather).
  """
  groups = np.asarray(groups)
  blocks = task_blocks(len(groups), block_tasks)
  local = []
  for b in distributed.process_slice(len(blocks)):
    rows = np.repeat(groups[blocks[b].start:blocks[b].stop], group_size)
    if len(blocks) == 1:
      bkey, brng = key, tf_rng
    else:
      bkey, brng = jax.random.fold_in(key, b), np.random.default_rng([*map(int, tf_seed), b])
    local.append(rollout(compiled, params, pher, problem, envs, rows, bkey, tf_rng=brng, **kwargs))
  return concat([rb for part in distributed.allgather_objects(local) for rb in part])


def block_slots(num_groups: int, group_size: int, block_tasks: int) -> int:
  """Episode slots one process needs for `rollout_blocks`: the largest block's trajectories."""
  return max(len(r) for r in task_blocks(max(int(num_groups), 1), block_tasks)) * int(group_size)


def score_trajectories(tools, length, gold, gold_len, *, kind: str, horizon: int,
                       success_threshold: float = metrics_lib.SUCCESS_THRESHOLD) -> np.ndarray:
  """Outcome reward in [0, 1] per trajectory (config `rl.reward`): 'match_ratio' (default), 'success'
  (match ratio >= success_threshold, config `eval.success_threshold`) or 'exact'.

  Raises:
    ValueError: unknown reward kind.
  """
  mr = np.asarray(metrics_lib.match_ratio_batch(tools, length, gold, gold_len, horizon=horizon))
  if kind == "match_ratio":
    return mr.astype(np.float32)
  if kind == "success":
    return (mr >= success_threshold).astype(np.float32)
  if kind == "exact":
    return np.asarray(metrics_lib.exact_match_batch(tools, length, gold, gold_len)).astype(np.float32)
  raise ValueError(f"unknown rl.reward {kind!r}; valid: 'match_ratio', 'success', 'exact'")


class ReplayEpisodes:
  """B concurrent replay episodes on a `common.env_pool.WorkerPool`.

  Episode i runs in episode slot i // W of worker i % W (W = len(pool)); the steps of one turn are sent
  per worker together (one `submit_step_batch` round trip per worker when the worker has it, else one
  `submit_step` future per slot), so their round trips overlap. A worker that crashes or hangs ends the
  episodes it was serving with reason 'env_error' and is replaced before the next reset.

  Args:
    pool: the worker pool (closed by `close`).
    count: B, the number of episodes.
  """

  def __init__(self, pool: env_pool.WorkerPool, count: int):
    self.pool = pool
    self.count = count
    self.num_workers = len(pool)

  def _heal(self) -> None:
    """Replaces workers that died in the last batch (waits for them)."""
    dead = [w for w, c in enumerate(self.pool.workers) if c is None or not c.alive]
    for w in dead:
      logging.warning("replacing environment worker %d (%s)", w,
                      getattr(self.pool.workers[w], "pid", None))
      self.pool.start_replacement(w)
    if dead:
      self.pool.wait_until_whole()

  def _submit(self, w: int, kind: str, items: list):
    """Sends one worker's resets or steps; returns a callable giving one result or exception per item."""
    worker = self.pool.workers[w]
    if worker is None:
      return lambda: [RuntimeError(f"environment worker {w} could not be restarted")] * len(items)
    batch = getattr(worker, f"submit_{kind}_batch", None)
    if batch is not None:
      fut = batch(items)
      return lambda: _expand(_guard(fut.result), len(items))
    if kind == "reset":
      futs = [worker.submit_reset(tid, seed, slot=k) for k, tid, seed in items]
    else:
      futs = [worker.submit_step(call, slot=k) for k, call in items]
    return lambda: [_guard(f.result) for f in futs]

  def reset_all(self, task_ids: Sequence[str], seeds: Sequence[int]) -> list:
    """Starts episode i on task_ids[i]; returns per episode the first observation or the exception."""
    self._heal()
    return self._run("reset", [(i, (tid, seed)) for i, (tid, seed) in enumerate(zip(task_ids, seeds))])

  def step_many(self, items: Sequence[tuple[int, dict]]) -> list:
    """Steps episode i with call for each (i, call); returns StepResults or exceptions, in order."""
    return self._run("step", [(i, (call,)) for i, call in items])

  def _run(self, kind: str, items: list) -> list:
    w_count = self.num_workers
    per_worker = [[] for _ in range(w_count)]
    order = [[] for _ in range(w_count)]
    for j, (i, args) in enumerate(items):
      i = int(i)
      per_worker[i % w_count].append((i // w_count, *args))
      order[i % w_count].append(j)
    results = [self._submit(w, kind, per_worker[w]) if per_worker[w] else None for w in range(w_count)]
    out = [None] * len(items)
    for w, get in enumerate(results):
      if get is not None:
        for j, r in zip(order[w], get()):
          out[j] = r
    return out

  def close(self) -> None:
    self.pool.close()


def _guard(fn):
  try:
    return fn()
  except Exception as e:  # pylint: disable=broad-except
    return e


def _expand(res, n: int) -> list:
  """A batch future's result as n per-item results (a failed batch fails every item)."""
  return list(res) if isinstance(res, list) else [res] * n


def make_envs(config: ml_collections.ConfigDict, problem: Problem, count: int) -> ReplayEpisodes:
  """`count` concurrent replay episodes over all tasks of the problem.

  `env.sandboxed = True` (default): `env.num_workers` sandboxed processes serving
  `phgpo.replay_env:make_replay_env` (bubblewrap, cgroup memory and pids limits, no network, MCP over
  stdio). `env.sandboxed = False`: `env.num_workers` in-process `ReplayEnv` workers
  (`WorkerPool.local`; fastest, no isolation: debugging and benchmarks). Both with `env.max_steps`,
  `env.horizon` and the per-call timeout `env.step_timeout_s`; one episode slot per trajectory. Config key
  `env.backend` 'ray': either kind of worker is hosted by a Ray actor on a node of the cluster at
  `env.ray_address` (common.env_pool_ray; the data file must exist at the same path on every node).
  """
  ec = config.env
  num_workers = max(1, min(int(ec.num_workers), count))
  backend = env_pool.backend_options(ec)
  if ec.sandboxed:
    # the problem's own folders (resolved once, on the host), so the workers replay the data it was built from
    spec = replay_env.replay_env_spec(
        problem.data_paths.get("queries") or config.data.path or None, task_ids=[t.task_id for t in problem.tasks],
        max_steps=ec.max_steps, horizon=ec.horizon, tool_scope=config.data.tool_scope,
        data_format=problem.data_format, graph_file=problem.data_paths.get("graph"))
    pool = env_pool.WorkerPool(spec, num_workers, step_timeout_s=ec.step_timeout_s, **backend)
  else:
    factory = functools.partial(replay_env.TrajectReplayEnv, problem.tasks, problem.tool_specs,
                                max_steps=ec.max_steps, horizon=ec.horizon)
    pool = env_pool.WorkerPool.local(factory, num_workers, step_timeout_s=ec.step_timeout_s, **backend)
  return ReplayEpisodes(pool, count)
