"""TRAJECT-Bench replay environment (phgpo.env.ReplayEnv) packaged for the sandboxed env process.

  spec = replay_env_spec(domains=['Finance'], max_steps=20)
  pool = WorkerPool(spec, num_workers=2)             # each worker: its own sandboxed process

`replay_env_spec` resolves the data folder on the host (phgpo.data.find_traject_bench) and mounts it
read-only in the sandbox; `make_replay_env` runs inside the environment process and builds the
`ReplayEnv` from it. The tool list is built over all tasks of the loaded domains (so that every gold
tool is in the action space); `task_ids` restricts which tasks reset() accepts.

Query methods: task_list() -> task ids; gold_calls(task_id) -> [{'name', 'arguments'}] (for tests
and scripted baselines; the agent never sees them).

One process, many trajectories: the environment supports clone(), so phgpo/train.py's one-env-per-
trajectory loop can run against a single sandboxed process:

  client = EnvClient(replay_env_spec(data_root))
  envs = [client.slot(i) for i in range(batch_size)]     # each has reset/step/tools like ReplayEnv

`match_reward` is the driver reward for this environment: the position-wise match ratio of the
called tools against the gold calls (a call at turn k matches when the replay consumed gold call k).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from common.env_client import EnvSpec


def _replay_class():
  from phgpo import env as env_lib

  class TrajectReplayEnv(env_lib.ReplayEnv):
    """ReplayEnv plus the query methods the env server exposes."""

    QUERY_METHODS = ("task_list", "gold_calls")

    def clone(self):
      """Independent episode state sharing the (read-only) tasks and tool specs: one env server
      process then serves many concurrent trajectories (episode slots)."""
      c = copy.copy(self)
      c._task, c._consumed, c._steps, c._horizon_len, c._seed = None, [], 0, 0, 0
      return c

    def task_list(self) -> list[str]:
      return list(self.task_ids)

    def gold_calls(self, task_id: str) -> list[dict[str, Any]]:
      task = self._tasks[task_id]
      return [{"name": c.name, "arguments": dict(c.arguments)} for c in task.calls]

  return TrajectReplayEnv


def make_replay_env(*, data_root: str | None = None, domains: Sequence[str] | None = None,
                    task_ids: Sequence[str] | None = None, max_steps: int = 20,
                    horizon: str = "gold", tool_scope: str = "used"):
  """Builds the replay environment (runs inside the environment process).

  Args:
    data_root: the TRAJECT-Bench folder (None: phgpo.data.find_traject_bench()).
    domains: domains to load (None: all 9).
    task_ids: tasks reset() accepts (None: all loaded).
    max_steps, horizon: ReplayEnv's (config keys env.max_steps, env.horizon).
    tool_scope: phgpo.data.load_tool_catalogue's scope ('used' or 'all').
  """
  from phgpo import data as data_lib
  root = data_lib.find_traject_bench(data_root)
  tasks = data_lib.load_tasks(root, domains=domains)
  tools = data_lib.load_tool_catalogue(root, tasks, scope=tool_scope)
  if task_ids is not None:
    wanted = set(task_ids)
    missing = wanted - {t.task_id for t in tasks}
    if missing:
      raise ValueError(f"unknown task ids {sorted(missing)[:5]}; ids look like 'Finance/0'")
    tasks = [t for t in tasks if t.task_id in wanted]
  return _replay_class()(tasks, tools, max_steps=max_steps, horizon=horizon)


def replay_env_spec(data_root: str | None = None, *, domains: Sequence[str] | None = None,
                    task_ids: Sequence[str] | None = None, max_steps: int = 20,
                    horizon: str = "gold", tool_scope: str = "used") -> EnvSpec:
  """EnvSpec for the replay environment, with the data folder mounted read-only.

  Raises:
    FileNotFoundError: the data is not found (phgpo.data's message says where to put it).
  """
  from phgpo import data as data_lib
  root = str(data_lib.find_traject_bench(data_root))
  kwargs = {"data_root": root, "domains": list(domains) if domains else None,
            "task_ids": list(task_ids) if task_ids is not None else None,
            "max_steps": max_steps, "horizon": horizon, "tool_scope": tool_scope}
  return EnvSpec("common.envs.replay_env:make_replay_env", kwargs, ro_paths=(root,))


def match_reward(traj) -> float:
  """Position-wise match ratio for RolloutDriver(reward_fn=...): matches / horizon.

  Turn k matches when the replay answered it with gold call k (info['gold_index'] == k); the
  denominator is the episode's horizon (info['horizon'], min(gold length, max_steps)).
  Source: PhGPO's match ratio as SPEC.md defines it (phgpo/metrics.py is the trainer's version).
  """
  if not traj.turns:
    return 0.0
  horizon = next((t.info.get("horizon") for t in traj.turns if t.info.get("horizon")), None)
  if not horizon:
    return 0.0
  hits = sum(1 for k, t in enumerate(traj.turns[:horizon]) if t.info.get("gold_index") == k)
  return hits / horizon
