"""TRAJECT-Bench replay environment: the recorded outputs of gold calls, served as a `ToolEnv`.

`ToolEnv` mirrors the MCP server surface (tools/list, tools/call) plus an episode reset, (common.envs.base).

`ReplayEnv` answers a call with the output the dataset recorded for that tool in the current task: the
first not-yet-consumed recorded call with that name (arguments are not used to pick it; `info` reports
whether they match). Calls the recording cannot answer get an explicit "not available in this replay"
observation. It is pure Python and picklable (no open files, locks or threads).

Statuses:
  'ok'          a recorded call that succeeded (observation = its recorded output);
  'failed'      a recorded call whose execution failed (observation = the recorded error text);
  'unavailable' a known tool with no unconsumed recorded call in this task;
  'invalid'     a malformed call or an unknown tool name (observation names the problem and the fix).
Every step counts towards the horizon, invalid ones included, so an agent cannot loop forever.

Horizon (config key `env.horizon`, with `env.max_steps`):
  'gold'       the episode ends after min(len(gold calls), max_steps) calls (default);
  'max_steps'  the episode ends after max_steps calls.

Serving it from sandboxed processes (PhGPO's default, phgpo/classifier_rollout.py):

  spec = replay_env_spec(domains=['Finance'], max_steps=20)
  pool = WorkerPool(spec, num_workers=2)             # each worker: its own sandboxed process

`replay_env_spec` resolves the data folder on the host (phgpo.data.find_traject_bench) and mounts it
read-only in the sandbox; `make_replay_env` runs inside the environment process and builds the
`ReplayEnv` from it. The tool list is built over all tasks of the loaded domains (so that every gold
tool is in the action space); `task_ids` restricts which tasks reset() accepts.

Query methods: task_list() -> task ids; gold_calls(task_id) -> [{'name', 'arguments'}] (for tests
and scripted baselines; the agent never sees them).

One process, many trajectories: TrajectReplayEnv supports clone(), so one worker (a sandboxed process, or
an in-process `WorkerPool.local` worker) serves many concurrent episodes in its episode slots:

  client = EnvClient(replay_env_spec(data_root))
  envs = [client.slot(i) for i in range(batch_size)]     # each has reset/step/tools like ReplayEnv

`match_reward` is the driver reward for this environment: the position-wise match ratio of the
called tools against the gold calls (a call at turn k matches when the replay consumed gold call k).
"""
from __future__ import annotations

import copy
import difflib
import os
from typing import Any, Mapping, Sequence

from common.env_client import EnvSpec
from common.envs.base import StepResult, ToolEnv
from phgpo import data as data_lib
from phgpo import long_horizon

HORIZONS = ("gold", "max_steps")


class ReplayEnv(ToolEnv):
  """Replays the recorded outputs of TRAJECT-Bench's gold calls.

  Args:
    tasks: the tasks that reset() accepts (unique task_ids).
    tool_specs: the tool list; must contain every tool the tasks' gold calls use.
    max_steps: hard cap on calls per episode (>= 1). Config key: `env.max_steps`.
    horizon: 'gold' or 'max_steps' (see the module docstring). Config key: `env.horizon`.
  Raises:
    ValueError: bad max_steps/horizon, duplicate task ids or tool names, or gold tools missing from
      tool_specs (the message lists them and says how to build a complete tool list).
  """

  def __init__(self, tasks: Sequence[data_lib.Task], tool_specs: Sequence[data_lib.ToolSpec], *,
               max_steps: int = 20, horizon: str = "gold"):
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
      raise ValueError(f"max_steps must be an int >= 1 (config key env.max_steps), got {max_steps!r}")
    if horizon not in HORIZONS:
      raise ValueError(f"horizon must be one of {HORIZONS} (config key env.horizon), got {horizon!r}")
    self.max_steps = max_steps
    self.horizon = horizon
    self._tasks = {t.task_id: t for t in tasks}
    if len(self._tasks) != len(tasks):
      raise ValueError("duplicate task ids in tasks")
    self._specs = {s.name: s for s in tool_specs}
    if len(self._specs) != len(tool_specs):
      raise ValueError("duplicate tool names in tool_specs")
    missing = sorted({c.name for t in tasks for c in t.calls} - set(self._specs))
    if missing:
      raise ValueError(f"{len(missing)} tools used by gold calls are not in tool_specs, e.g. {missing[:3]}; "
                       "build the tool list with data.load_tool_catalogue(root, all_tasks) over the train and "
                       "held-out tasks together")
    self._tool_list = [s.mcp() for s in tool_specs]
    self._task: data_lib.Task | None = None
    self._consumed: list[bool] = []
    self._steps = 0
    self._horizon_len = 0
    self._seed = 0

  # -- interface

  def tools(self) -> list[dict[str, Any]]:
    return copy.deepcopy(self._tool_list)

  def reset(self, task_id: str, seed: int) -> str:
    """Starts task `task_id`. The replay is deterministic: `seed` is recorded in info only.

    Raises:
      KeyError: an unknown task id (ids look like 'Finance/0').
    """
    task = self._tasks.get(task_id)
    if task is None:
      example = next(iter(self._tasks), "<none>")
      raise KeyError(f"unknown task id {task_id!r}: this ReplayEnv holds {len(self._tasks)} tasks "
                     f"with ids like {example!r}")
    self._task = task
    self._consumed = [False] * len(task.calls)
    self._steps = 0
    self._seed = int(seed)
    self._horizon_len = min(len(task.calls), self.max_steps) if self.horizon == "gold" else self.max_steps
    return task.query

  def step(self, call: Mapping[str, Any]) -> StepResult:
    """Answers one call from the recording.

    Raises:
      RuntimeError: step() before reset() or after the episode is done (a driver bug, not agent input).
    """
    if self._task is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    if self._steps >= self._horizon_len:
      raise RuntimeError(f"episode of task {self._task.task_id!r} is done ({self._steps} steps); call reset()")
    self._steps += 1
    done = self._steps >= self._horizon_len
    info: dict[str, Any] = {"task_id": self._task.task_id, "step": self._steps, "horizon": self._horizon_len,
                            "seed": self._seed, "tool": None, "gold_index": None,
                            "arg_keys_match": None, "arguments_match": None}

    problem = _malformed(call)
    if problem:
      info["error"] = problem
      return StepResult(f"Error: invalid tool call: {problem}. A call is {{'name': <tool name>, "
                        "'arguments': {<parameter>: <value>}}.", "invalid", done, info)
    name, arguments = call["name"], call.get("arguments") or {}
    info["tool"] = name
    if name not in self._specs:
      info["error"] = "unknown tool"
      close = difflib.get_close_matches(name, list(self._specs), n=3, cutoff=0.6)
      hint = f" Did you mean {close}?" if close else ""
      return StepResult(f"Error: unknown tool {name!r}.{hint} This environment has {len(self._specs)} tools; "
                        "see the tool list (tools(), MCP tools/list) for their names and parameters.",
                        "invalid", done, info)

    for i, recorded in enumerate(self._task.calls):
      if recorded.name == name and not self._consumed[i]:
        self._consumed[i] = True
        info["gold_index"] = i
        info["arg_keys_match"] = tuple(sorted(arguments)) == recorded.arg_keys
        info["arguments_match"] = dict(arguments) == dict(recorded.arguments)
        status = "ok" if recorded.status == "success" else "failed"
        return StepResult(recorded.output, status, done, info)
    return StepResult(f"Tool {name!r} is not available in this replay: the dataset recorded no unused call to "
                      "it for this task, so there is no output to return. Only recorded calls can be answered.",
                      "unavailable", done, info)

  # -- helpers for drivers and tests

  @property
  def task_ids(self) -> list[str]:
    return list(self._tasks)

  @property
  def steps_taken(self) -> int:
    return self._steps

  @property
  def episode_horizon(self) -> int:
    """Calls allowed in the current episode (0 before the first reset)."""
    return self._horizon_len


def _malformed(call: Any) -> str | None:
  """What is wrong with a call, or None."""
  if not isinstance(call, Mapping):
    return f"the call must be a dict, got {type(call).__name__}"
  if "name" not in call:
    return "missing 'name'"
  if not isinstance(call["name"], str) or not call["name"].strip():
    return f"'name' must be a non-empty string, got {call['name']!r:.60}"
  args = call.get("arguments")
  if args is not None and not isinstance(args, Mapping):
    return f"'arguments' must be a dict of parameter name -> value, got {type(args).__name__}"
  if args is not None and not all(isinstance(k, str) for k in args):
    return "'arguments' keys must be parameter names (strings)"
  return None


class TrajectReplayEnv(ReplayEnv):
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



def make_replay_env(*, data_root: str | None = None, domains: Sequence[str] | None = None,
                    task_ids: Sequence[str] | None = None, max_steps: int = 20,
                    horizon: str = "gold", tool_scope: str = "used", data_format: str = "traject_bench",
                    graph_file: str | None = None):
  """Builds the replay environment (runs inside the environment process).

  Args:
    data_root: the TRAJECT-Bench folder of the queries (None: phgpo.data.find_traject_bench()).
    domains: domains to load (None: all 9).
    task_ids: tasks reset() accepts (None: all loaded); composed ids '<domain>/long/<i>+<j>' (the 'long'
      split, phgpo.long_horizon.compose_pair) are built from their two source tasks.
    max_steps, horizon: ReplayEnv's (config keys env.max_steps, env.horizon).
    tool_scope: the catalogue's tool scope ('used' or 'all', config data.tool_scope).
    data_format: the catalogue reader (config data.format, `phgpo.catalogue`): 'traject_bench' (tools from
      TRAJECT-Bench's catalogue files) or 'authors_graph' (tools from the authors' graph file `graph_file`).
    graph_file: the authors' graph file (data_format 'authors_graph'; None: the shared copy).
  """
  from phgpo import catalogue as catalogue_lib  # pylint: disable=g-import-not-at-top
  root = data_lib.find_traject_bench(data_root)
  if data_format == "authors_graph":
    cat = catalogue_lib.read_authors_graph(catalogue_lib.find_graph_file(graph_file), root, domains=domains,
                                           tool_scope=tool_scope)
    tasks, tools = list(cat.tasks), list(cat.tools)
  else:
    tasks = data_lib.load_tasks(root, domains=domains)
    tools = data_lib.load_tool_catalogue(root, tasks, scope=tool_scope)
  if task_ids is not None:
    wanted = set(task_ids)
    by_id = {t.task_id: t for t in tasks}
    # the 'long' split's SYNTHETIC composed tasks are rebuilt here from their two source tasks
    parts = {i: long_horizon.long_task_parts(i) for i in wanted}
    tasks = tasks + [long_horizon.compose_pair(by_id[p[0]], by_id[p[1]]) for i, p in sorted(parts.items())
                     if p is not None and p[0] in by_id and p[1] in by_id]
    missing = wanted - {t.task_id for t in tasks}
    if missing:
      raise ValueError(f"unknown task ids {sorted(missing)[:5]}; ids look like 'Finance/0'")
    tasks = [t for t in tasks if t.task_id in wanted]
  return TrajectReplayEnv(tasks, tools, max_steps=max_steps, horizon=horizon)


def replay_env_spec(data_root: str | None = None, *, domains: Sequence[str] | None = None,
                    task_ids: Sequence[str] | None = None, max_steps: int = 20,
                    horizon: str = "gold", tool_scope: str = "used", data_format: str = "traject_bench",
                    graph_file: str | None = None) -> EnvSpec:
  """EnvSpec for the replay environment, with the data folder (and the graph file) mounted read-only.

  Args: as `make_replay_env`'s; data_root is resolved here, on the host (`phgpo.data.find_traject_bench`: the
    given folder, else $TRAJECT_BENCH_DIR, else the shared copy), so the workers read the same folder.
  Raises:
    FileNotFoundError: the data is not found (phgpo.data's message says where to put it).
  """
  root = str(data_lib.find_traject_bench(data_root))
  kwargs = {"data_root": root, "domains": list(domains) if domains else None,
            "task_ids": list(task_ids) if task_ids is not None else None,
            "max_steps": max_steps, "horizon": horizon, "tool_scope": tool_scope}
  ro = (root,)
  if data_format != "traject_bench":   # the default keeps the spec of before issue 30
    from phgpo import catalogue as catalogue_lib  # pylint: disable=g-import-not-at-top
    graph = str(catalogue_lib.find_graph_file(graph_file))
    kwargs.update(data_format=data_format, graph_file=graph)
    ro = (root, os.path.dirname(graph))
  return EnvSpec("phgpo.replay_env:make_replay_env", kwargs, ro_paths=ro)


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
