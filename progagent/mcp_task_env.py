"""McpTaskEnv: tasks over external MCP servers, for the trainer's PTC / DTC / Hybrid harnesses.

  env = McpTaskEnv(["fs=npx -y @modelcontextprotocol/server-filesystem {workspace}"],
                   [McpTask("copy", "Copy a.txt to b.txt.", workspace="/bench/copy/ws",
                            groundtruth="/bench/copy/gt")],
                   evaluator="python /bench/check.py {workspace} {groundtruth}")
  prog = ptc_env.ProgEnv(env, mode="ptc", close_env=True)     # or 'dtc', 'hybrid'
  harness.run_episode(prog, policy, mode="ptc", task_id="copy")   # reward: the evaluator's verdict
  prog.close()

The same surface as progagent.task_env.ProgTaskEnv where ProgEnv, the harnesses, the rollout driver and the
evaluation stage read it (tools, reset, step, call_tool, verify, episode_counts, task, scale, done,
workspace_dir), so `ProgEnv(McpTaskEnv(...), mode=...)` runs any of the three harnesses over real servers.
Config (progagent.rollouts.make_pool, the GSPO rollouts and the evaluation stage): config `env.mcp.servers` (a
tuple of 'NAME=COMMAND'; non-empty switches the trainer's environments to this class), `env.mcp.tasks_file`
(load_tasks), `env.mcp.evaluator`, `env.mcp.evaluator_timeout_s`, `env.mcp.namespace`, `env.mcp.reuse_servers`,
`env.mcp.max_steps`.

Episode. The servers (progagent.mcp_servers.McpServerGroup, each in its own sandbox) are started once, at
construction; the workspace is one capped folder (common.sandbox_fs) they and the programs' kernel share at
/workspace for the environment's whole life. reset(task_id) empties it and copies the task's `workspace`
folder in (CappedDir.restage), gives every server not in `reuse_servers` a fresh process (state reset;
config `env.mcp.reuse_servers` names servers whose whole state is the workspace, which keep theirs), resets
the counts and returns the task's instruction followed by WORKSPACE_NOTE (the path the model can use).
A step is one tools/call of a server: the observation is the result's text (mcp_servers.result_text), status
'ok', 'failed' (isError, or the error rule of common.tool_wire; a crashed or hung server) or 'invalid' (an
unknown tool, text that is not valid Unicode, or a call after the episode ended). Every tool call counts as a
step, those of programs (call_tool) included; the episode is done after `max_steps` (config
`env.mcp.max_steps`) or when the policy stops calling (the harness's 'no_action').

Reward (verify): the evaluator (progagent.evaluator.Evaluator: the task's own `evaluator` or the environment's,
with {workspace} and the task's {groundtruth}) run on the workspace as it is now, in a sandbox of its own; 1.0
when it exits 0. Its verdict is kept in `last_verdict` (host side only: never in an observation). It is run
again only when the workspace changed (a fingerprint of names, sizes and modification times). A task without
an evaluator scores 0.

Runtimes: programs need the 'kernel' runtime (the sandboxed kernel sees the workspace at /workspace); the
'inprocess' runtime runs them in the trainer's process, where /workspace does not exist (tool calls work,
file access does not).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from typing import Any, Mapping, NamedTuple, Sequence

from common import sandbox_fs
from common import sandbox_guard
from common import tool_wire
from common.envs.base import StepResult, ToolEnv
from common.mcp_process import EnvError
from common.sandbox import SandboxConfig
from progagent import mcp_servers
from progagent.evaluator import Evaluator

_log = logging.getLogger(__name__)

WORKSPACE_NOTE = "\n\nThe task's files are in {workspace}: programs and every tool use that path."
_OVER = "Error: the episode is over (the step limit was reached); no further tool calls are accepted."


class McpTask(NamedTuple):
  """One task over the servers.

  Attributes:
    task_id: its id (what reset() takes; a level suffix '@vK' is accepted and ignored).
    instruction: the text the episode starts with.
    workspace: host folder copied into the workspace at reset (None: an empty workspace).
    groundtruth: host folder the evaluator reads as {groundtruth} (None: none).
    evaluator: this task's evaluator command (None: the environment's).
  """
  task_id: str
  instruction: str
  workspace: str | None = None
  groundtruth: str | None = None
  evaluator: str | None = None


def load_tasks(path: str) -> list[McpTask]:
  """Tasks from a file (config `env.mcp.tasks_file`): JSON lines, or one JSON list, of objects with the fields
  of McpTask (task_id and instruction required); relative folders are relative to the file's folder.

  Raises:
    ValueError: a record without task_id or instruction, with an unknown field, or an id given twice (each
      names the line).
  """
  base = os.path.dirname(os.path.abspath(path))
  with open(path, encoding="utf-8") as f:
    text = f.read()
  stripped = text.lstrip()
  records = json.loads(text) if stripped.startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
  out, seen = [], set()
  for i, r in enumerate(records, 1):
    if not isinstance(r, Mapping) or not r.get("task_id") or not isinstance(r.get("instruction"), str):
      raise ValueError(f"{path}, record {i}: needs 'task_id' and 'instruction' (got {str(r)[:200]})")
    extra = set(r) - set(McpTask._fields)
    if extra:
      raise ValueError(f"{path}, record {i}: unknown fields {sorted(extra)}; the fields are {McpTask._fields}")
    if r["task_id"] in seen:
      raise ValueError(f"{path}, record {i}: task id {r['task_id']!r} is given twice")
    seen.add(r["task_id"])
    fix = {k: (os.path.join(base, r[k]) if r.get(k) and not os.path.isabs(r[k]) else r.get(k))
           for k in ("workspace", "groundtruth")}
    out.append(McpTask(**dict(r, **fix)))
  return out


class McpTaskEnv(ToolEnv):
  """Tasks over external MCP servers as a ToolEnv and a PTC tool backend (module docstring).

  Args:
    servers: 'NAME=COMMAND' strings or progagent.mcp_servers.McpServerSpec (config `env.mcp.servers`).
    tasks: McpTask records, or the path of a tasks file (load_tasks).
    evaluator: the default evaluator command (config `env.mcp.evaluator`); None/'': tasks without their own
      score 0.
    reuse_servers: names of servers kept across episodes (config `env.mcp.reuse_servers`); the others are
      restarted at each reset after the first.
    namespace: 'clash' | 'always' (config `env.mcp.namespace`; progagent.mcp_servers).
    sandbox: SandboxConfig of the servers and the evaluator (and the workspace's budget).
    max_steps: tool calls per episode before it is done (config `env.mcp.max_steps`).
    evaluator_timeout_s: the evaluator's time limit (config `env.mcp.evaluator_timeout_s`).
    start_timeout_s, call_timeout_s: the servers' (progagent.mcp_servers.McpServerGroup).
  Raises:
    progagent.mcp_servers.McpServerError: a server command that cannot run or a server that did not start.
    ValueError: no task, a bad tasks file, a task folder that does not exist, an unknown server in
      reuse_servers, or an evaluator command that cannot run.
  """

  QUERY_METHODS = ("verify", "task_info", "episode_counts", "task_ids")
  shared_workspace = True  # the program tool's description tells the model the servers share the path

  def __init__(self, servers: Sequence[str | mcp_servers.McpServerSpec], tasks: "Sequence[McpTask] | str", *,
               evaluator: str | None = None, reuse_servers: Sequence[str] = (), namespace: str = "clash",
               sandbox: SandboxConfig = SandboxConfig(), max_steps: int = 200, evaluator_timeout_s: float = 600.0,
               start_timeout_s: float = 60.0, call_timeout_s: float = 120.0):
    task_list = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
    if not task_list:
      raise ValueError("McpTaskEnv needs at least one task (config `env.mcp.tasks_file`)")
    self.tasks = {t.task_id: t for t in task_list}
    for t in task_list:
      for k in ("workspace", "groundtruth"):
        if getattr(t, k) is not None and not os.path.isdir(getattr(t, k)):
          raise ValueError(f"task {t.task_id!r}: its {k} folder {getattr(t, k)!r} does not exist")
    specs = [s if isinstance(s, mcp_servers.McpServerSpec) else
             mcp_servers.parse_server(s, flag=f"config env.mcp.servers[{i}]") for i, s in enumerate(servers)]
    names = {s.name for s in specs}
    unknown = set(reuse_servers) - names
    if unknown:
      raise ValueError(f"config `env.mcp.reuse_servers` names {sorted(unknown)}, which are not servers "
                       f"({sorted(names)})")
    self.sandbox = sandbox
    self.max_steps = int(max_steps)
    self.reuse_servers = tuple(reuse_servers)
    self._restart = [s.name for s in specs if s.name not in self.reuse_servers]
    self._evaluators: dict[str, Evaluator] = {}
    self._eval_kwargs = dict(sandbox=sandbox, timeout_s=float(evaluator_timeout_s))
    self._default_evaluator = evaluator or None
    for t in task_list:  # every evaluator command checked now, before any episode
      self._evaluator_for(t)
    self.scale = 0
    self.episodes = 0
    self.last_verdict: dict | None = None
    self._task: McpTask | None = None
    self._steps = 0
    self._done = False
    self._verdict_key: Any = None
    self._cap: sandbox_fs.CappedDir | None = None
    self._group: mcp_servers.McpServerGroup | None = None
    self.workspace_dir = sandbox_guard.owned_tempdir("mws")
    try:
      if sandbox.enabled:
        self._cap = sandbox_fs.CappedDir(
            self.workspace_dir, "mws", max_bytes=sandbox.workspace_max_bytes, max_files=sandbox.workspace_max_files,
            uid=sandbox.uid, gid=sandbox.gid, mode=0o755,
            limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
      self._group = mcp_servers.McpServerGroup(specs, workspace=self._cap or self.workspace_dir, sandbox=sandbox,
                                               namespace=namespace, start_timeout_s=start_timeout_s,
                                               call_timeout_s=call_timeout_s)
    except BaseException:
      self.close()
      raise
    self.workspace_inside = self._group.workspace_inside
    self._names = {t["name"] for t in self._group.tools()}

  # -- ToolEnv

  def tools(self) -> list[dict[str, Any]]:
    """The servers' tools (MCP entries; inputSchema and outputSchema kept; namespaced on a clash)."""
    return self._group.tools()

  def reset(self, task_id: str | None = None, seed: int = 0) -> str:
    """Starts an episode of `task_id` (module docstring); returns its instruction and WORKSPACE_NOTE.

    Raises:
      KeyError: unknown task (the ids named). ValueError: no task_id and no task yet.
    """
    if task_id is None:
      if self._task is None:
        raise ValueError("reset() needs a task_id (this McpTaskEnv has no task yet)")
      task_id = self._task.task_id
    tid = str(task_id).split("@v")[0] if "@v" in str(task_id) else str(task_id)
    if tid not in self.tasks:
      raise KeyError(f"unknown task {task_id!r}; the tasks are {sorted(self.tasks)}")
    task = self.tasks[tid]
    if self.episodes > 0 and self._restart:
      self._group.restart(self._restart)
    self._stage(task.workspace)
    self._task = task
    self._steps = 0
    self._done = False
    self._verdict_key = None
    self.last_verdict = None
    self._group.reset_counts()
    self.episodes += 1
    return task.instruction + WORKSPACE_NOTE.format(workspace=self.workspace_inside)

  def step(self, call: Mapping[str, Any]) -> StepResult:
    """One tool call {'name', 'arguments'} (module docstring).

    Raises:
      RuntimeError: step() before reset().
    """
    task = self._current()
    name = call.get("name") if isinstance(call, Mapping) else None
    args = call.get("arguments") if isinstance(call, Mapping) else None
    info: dict[str, Any] = {"task_id": task.task_id, "tool": name if isinstance(name, str) else None}
    if self._done:
      return self._result(_OVER, "invalid", info)
    problem = tool_wire.call_text_problem(name, args)
    if problem is not None:
      info["error"] = "invalid_text"
      self._count_step()
      return self._result(tool_wire.refused_text(problem), "invalid", info)
    if name not in self._names:
      self._count_step()
      return self._result(f"Error: unknown tool {name!r}; the tools are {sorted(self._names)}.", "invalid", info)
    if args is None:
      args = {}
    if not isinstance(args, Mapping):
      self._count_step()
      return self._result(f"Error: the arguments of {name!r} must be an object, got {type(args).__name__}.",
                          "invalid", info)
    try:
      wire = self.call_tool(name, dict(args))
    except EnvError as e:
      return self._result(f"Error: {e}", "failed", info)
    failed = bool(wire.get("isError")) or tool_wire.error_message(wire) is not None
    return self._result(mcp_servers.result_text(wire), "failed" if failed else "ok", info)

  def call_tool(self, name: str, arguments: dict) -> dict:
    """One server call as an MCP result (wire form): the PTC runtime's backend; counts as a step.

    Raises:
      RuntimeError: the episode is over (the program gets a ToolError) or never started.
      EnvError: the server crashed or hung (progagent.mcp_servers.McpServerGroup.call_tool).
    """
    self._current()
    if self._done:
      raise RuntimeError(_OVER.removeprefix("Error: "))
    self._count_step()
    return self._group.call_tool(name, arguments)

  def close(self) -> None:
    """Stops the servers, unmounts the workspace and removes its folder. Idempotent."""
    try:
      if self._group is not None:
        self._group.close()
        self._group = None
    finally:
      try:
        if self._cap is not None:
          self._cap.close()
          self._cap = None
      finally:
        if getattr(self, "workspace_dir", None) and os.path.isdir(self.workspace_dir):
          shutil.rmtree(self.workspace_dir, ignore_errors=True)

  # -- queries (ProgTaskEnv's surface)

  def verify(self, answer: Any = None) -> int:
    """1 when the task's evaluator passes on the workspace as it is now, else 0 (module docstring)."""
    task = self._current()
    ev = self._evaluator_for(task)
    if ev is None:
      return 0
    key = (task.task_id, self._fingerprint())
    if key != self._verdict_key or self.last_verdict is None:
      try:
        self.last_verdict = ev.run(self._cap or self.workspace_dir, task.groundtruth)
      except Exception as e:  # the evaluator could not run: scored 0, the reason kept for the host
        _log.exception("the evaluator of %s could not run", task.task_id)
        self.last_verdict = {"passed": False, "reward": 0.0, "error": f"{type(e).__name__}: {e}"}
      self._verdict_key = key
    return int(bool(self.last_verdict.get("passed")))

  def episode_counts(self) -> dict:
    """{'tool_calls', 'tool_errors'} of the episode (programs' calls included)."""
    return self._group.counts() if self._group is not None else {"tool_calls": 0, "tool_errors": 0}

  def task_info(self) -> dict:
    task = self._current()
    return {"task_id": task.task_id, "servers": sorted(self._group.start_seconds), "workspace": self.workspace_inside,
            "evaluator": (self._evaluator_for(task).command if self._evaluator_for(task) else None)}

  def task_ids(self) -> list[str]:
    return sorted(self.tasks)

  @property
  def task(self) -> McpTask:
    return self._current()

  @property
  def done(self) -> bool:
    return self._done

  @property
  def submitted_answer(self) -> Any:
    return None

  @property
  def workspace_cap(self) -> sandbox_fs.CappedDir | None:
    """The workspace's capped folder, shared with the kernel (progagent.inprocess_runtime.make_runtime)."""
    return self._cap

  @property
  def group(self) -> mcp_servers.McpServerGroup:
    return self._group

  # -- internals

  def _current(self) -> McpTask:
    if self._task is None:
      raise RuntimeError("step() before reset(task_id, seed)")
    return self._task

  def _count_step(self) -> None:
    self._steps += 1
    if self._steps >= self.max_steps:
      self._done = True

  def _result(self, observation: str, status: str, info: dict) -> StepResult:
    info.update(self.episode_counts())
    if self._done:
      info["reward"] = float(self.verify())
    return StepResult(observation, status, self._done, info)

  def _evaluator_for(self, task: McpTask) -> Evaluator | None:
    command = task.evaluator or self._default_evaluator
    if not command:
      return None
    if command not in self._evaluators:
      self._evaluators[command] = Evaluator(command, flag="config env.mcp.evaluator", **self._eval_kwargs)
    ev = self._evaluators[command]
    if ev.needs_groundtruth and task.groundtruth is None:
      raise ValueError(f"task {task.task_id!r}: its evaluator {command!r} names {{groundtruth}}, but the task has "
                       "no groundtruth folder")
    return ev

  def _stage(self, src: str | None) -> None:
    if self._cap is not None:
      self._cap.restage(src)
      return
    for name in os.listdir(self.workspace_dir):  # without a sandbox (debugging): a plain folder
      p = os.path.join(self.workspace_dir, name)
      shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    if src is not None:
      shutil.copytree(src, self.workspace_dir, symlinks=True, dirs_exist_ok=True)

  def _fingerprint(self, limit: int = 50_000) -> tuple:
    """(relative path, kind, size, mtime) of every entry of the workspace, no link followed (at most `limit`)."""
    out = []
    root = self.workspace_dir
    for dirpath, dirnames, filenames in os.walk(root):
      for n in sorted(dirnames) + sorted(filenames):
        try:
          st = os.lstat(os.path.join(dirpath, n))
        except OSError:
          continue
        out.append((os.path.relpath(os.path.join(dirpath, n), root), stat.S_IFMT(st.st_mode), st.st_size,
                    st.st_mtime_ns))
        if len(out) >= limit:
          return tuple(out)
    return tuple(out)


def config_task_ids(mcp_config: Any) -> list[str]:
  """The task ids of config `env.mcp.tasks_file`, in file order: what the trainer's rollouts and its evaluation
  stage take with `env.mcp.servers` set (progagent.train.run_eval(config, policy, params, config_task_ids(
  config.env.mcp), workdir): make_pool then builds McpTaskEnv workers, the reward is the evaluator's verdict)."""
  return [t.task_id for t in load_tasks(str(mcp_config.tasks_file))]


def from_config(mcp_config: Any, *, sandbox: SandboxConfig | None = None) -> McpTaskEnv:
  """An McpTaskEnv from a trainer's config `env.mcp` node (module docstring).

  Raises:
    ValueError: `env.mcp.servers` is empty or `env.mcp.tasks_file` is not set.
  """
  servers = tuple(mcp_config.servers)
  if not servers:
    raise ValueError("config `env.mcp.servers` is empty: nothing to serve")
  if not mcp_config.get("tasks_file", ""):
    raise ValueError("config `env.mcp.tasks_file` is not set: the MCP tasks come from that file (load_tasks)")
  return McpTaskEnv(servers, str(mcp_config.tasks_file), evaluator=str(mcp_config.get("evaluator", "")) or None,
                    reuse_servers=tuple(mcp_config.get("reuse_servers", ())),
                    namespace=str(mcp_config.get("namespace", "clash")),
                    sandbox=SandboxConfig() if sandbox is None else sandbox,
                    max_steps=int(mcp_config.get("max_steps", 200)),
                    evaluator_timeout_s=float(mcp_config.get("evaluator_timeout_s", 600.0)))
