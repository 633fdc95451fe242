"""ProgEnv: one ProgAgent task episode behind the ToolEnv interface, for one harness mode.

  env = ProgEnv(mode="ptc", runtime="kernel", scale=0)
  instruction = env.reset("retail/pending_over_500", seed=0)
  env.tools()       # PTC: [programmatic_tool_call]; DTC: the task's tools; Hybrid: both
  r = env.step({"name": "programmatic_tool_call", "arguments": {"code": "print(1)"}})
  r.observation, r.status, r.done, r.info["reward"] (once done)
  env.close()

This is what every ProgAgent consumer steps: the common rollout driver (progagent.rollouts), the harness
and the teacher (progagent.harness, progagent.teacher), the audit and the observation-identity test.

Modes (ProgAgent (2026), "Three harnesses over the same tasks", SPEC.md):
  'ptc'     one tool, `programmatic_tool_call(code)` (named and described as by
            progagent.mcp_runtime_server); a call runs `code` in the episode's persistent runtime, where
            tools["name"](...) calls the task's tools;
  'dtc'     the task's tools, submit_answer included; a call is one ProgTaskEnv step;
  'hybrid'  both.

A program's observation is common.tool_wire.format_exec of its ExecResult, the same text whichever
runtime ran it ('kernel': the sandboxed IPython kernel of progagent.runtime, for RL; 'inprocess':
progagent.inprocess_runtime, trusted programs only: oracles, audits, tests). A direct call's observation
is ProgTaskEnv's (the JSON result, or "Error: ..."). Statuses: 'ok'; 'failed' (the program raised, timed
out or lost its kernel; or the tool refused); 'invalid' (an unknown tool for the mode, a call without a
string `code`, a call holding text that is not valid Unicode (a lone surrogate; info['error'] 'invalid_text',
the observation common.tool_wire.refused_text, as common.env_client.refused_call), or a call after the
episode ended).

The episode is done when an answer was submitted (submit_answer, directly or from a program) or the task
environment's step limit was reached; the StepResult that ends it carries info['reward'] = R in {0, 1}
(the task's verifier). info always has 'task_id', 'scale', 'seed', 'tool', and the episode's task-tool
'tool_calls' / 'tool_errors' so far (calls made inside programs included); a program step adds
'program_error', 'timed_out', 'restarted', 'program_tool_calls' and 'truncated_chars'.

The runtime is started at the episode's first program and stopped at the next reset() or close(); a
runtime that cannot start (progagent.kernel_launch.RuntimeStartError) propagates from step(): an
environment failure, not the agent's.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from common import tool_wire
from common.envs.base import StepResult, ToolEnv
from common.sandbox import SandboxConfig
from common.sandbox_fs import CapError
from progagent import inprocess_runtime
from progagent import mcp_runtime_server
from progagent import tasks as tasks_lib
from progagent.task_env import ProgTaskEnv, split_instance_id

_log = logging.getLogger(__name__)

MODES = ("ptc", "dtc", "hybrid")
PROGRAM_TOOL = mcp_runtime_server.TOOL_NAME
_OVER = ("Error: the episode is over (submit_answer was called or the step limit was reached); no further "
         "tool calls are accepted.")


class ProgEnv(ToolEnv):
  """One ProgAgent task episode for a harness mode (module docstring).

  Args:
    env: a ProgTaskEnv to drive (not closed by close() unless close_env), or any environment with its surface
      (progagent.mcp_task_env.McpTaskEnv: tasks over external MCP servers); None: ProgEnv makes its own
      ProgTaskEnv at reset(), one per domain (a reset to another domain's task replaces it).
    mode: 'ptc', 'dtc' or 'hybrid'.
    runtime: 'kernel' (sandboxed, progagent.runtime) or 'inprocess' (trusted programs only).
    scale, cache_dir, workdir, max_steps: the own ProgTaskEnv's (level 0..3; generated-state cache;
      episode directory root; task-tool calls per episode).
    timeout_s: seconds per program in the kernel (SPEC: 120; the in-process runtime has no limit).
    max_output_chars: characters of program output kept (SPEC: 50,000; common.tool_wire.OutputBuffer).
    sandbox: the kernel's SandboxConfig (default: SandboxConfig()).
    start_timeout_s: the kernel's start-up limit before load scaling (None: kernel_launch's default).
    normalize_errors: the own ProgTaskEnv's error normalisation (progagent.task_env; config
      `env.normalize_errors`).
    max_state_bytes: the own ProgTaskEnv's host-state budget per episode (bytes; config `env.max_state_bytes`).
    close_env: close() closes a given `env` too (e.g. an McpTaskEnv built for this ProgEnv by a pool's factory).
  The program tool's description names the workspace path the environment gives (`env.workspace_inside`,
  default /workspace) and, for an environment whose tools are MCP servers sharing that path
  (`env.shared_workspace`), says so (progagent.mcp_runtime_server.tool_description).
  Raises:
    ValueError: unknown mode or runtime.
  """

  QUERY_METHODS = ("verify", "task_info", "episode_counts", "task_ids")

  def __init__(self, env: ProgTaskEnv | None = None, *, mode: str = "ptc", runtime: str = "kernel",
               scale: int = 0, cache_dir: str | None = None, workdir: str | None = None,
               max_steps: int = 20_000, timeout_s: float = 120.0,
               max_output_chars: int = tool_wire.MAX_OUTPUT_CHARS, sandbox: SandboxConfig | None = None,
               start_timeout_s: float | None = None, normalize_errors: bool = False,
               max_state_bytes: int = tasks_lib.base.DEFAULT_MAX_STATE_BYTES, close_env: bool = False):
    if mode not in MODES:
      raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if runtime not in inprocess_runtime.RUNTIME_KINDS:
      raise ValueError(f"runtime must be one of {inprocess_runtime.RUNTIME_KINDS}, got {runtime!r}")
    self.mode = mode
    self.runtime_kind = runtime
    self.scale = scale
    self.cache_dir = cache_dir
    self.workdir = workdir
    self.max_steps = max_steps
    self.timeout_s = float(timeout_s)
    self.max_output_chars = int(max_output_chars)
    self.sandbox = SandboxConfig() if sandbox is None else sandbox
    self.start_timeout_s = start_timeout_s
    self.normalize_errors = bool(normalize_errors)
    self.max_state_bytes = max_state_bytes
    self._env = env
    self._own_env = env is None
    self._close_env = bool(close_env) and env is not None
    self._runtime: Any = None
    self._started = False
    self._seed = 0
    self._programs = 0
    self._program_errors = 0

  # -- ToolEnv

  def tools(self) -> list[dict[str, Any]]:
    """The mode's tools (MCP entries) for the current task; [] before the first reset() of an own env
    (the task tools depend on the task's domain, so a driver lists them after reset)."""
    if self._env is None:
      return []
    task_tools = self._task_env().tools()
    program = mcp_runtime_server.program_tool(
        task_tools, timeout_s=self.timeout_s, max_output_chars=self.max_output_chars,
        workspace=getattr(self._env, "workspace_inside", mcp_runtime_server.WORKSPACE),
        shared_path=bool(getattr(self._env, "shared_workspace", False)))
    return {"ptc": [program], "dtc": task_tools, "hybrid": task_tools + [program]}[self.mode]

  def reset(self, task_id: str | None = None, seed: int = 0) -> str:
    """Starts an episode of `task_id` ('domain/name', optionally '@vK'); returns the instruction.

    Raises:
      ValueError: no task_id and no environment to take the task from. KeyError: unknown task.
    """
    self._stop_runtime()
    if self._own_env:
      if task_id is None and self._env is None:
        raise ValueError("reset() needs a task_id (this ProgEnv has no task yet)")
      if task_id is not None:
        domain = tasks_lib.get_task(split_instance_id(task_id)[0]).domain
        if self._env is not None and self._env.task.domain is not domain:
          self._env.close()
          self._env = None
        if self._env is None:
          self._env = ProgTaskEnv(task_id, self.scale, self.workdir, self.max_steps, self.cache_dir,
                                  self.normalize_errors, self.max_state_bytes)
    self._seed = int(seed)
    self._programs = self._program_errors = 0
    self._started = True
    return self._env.reset(task_id, seed)

  def step(self, call: Mapping[str, Any]) -> StepResult:
    """One call of the mode's tools (module docstring).

    Raises:
      RuntimeError: step() before reset(). RuntimeStartError: the kernel could not start.
    """
    env = self._task_env()
    if not self._started:
      raise RuntimeError("step() before reset(task_id, seed)")
    name = call.get("name") if isinstance(call, Mapping) else None
    info: dict[str, Any] = {"task_id": env.task.task_id, "scale": env.scale, "seed": self._seed,
                            "tool": name if isinstance(name, str) else None}
    args = call.get("arguments") if isinstance(call, Mapping) else None
    if name == PROGRAM_TOOL and self.mode != "dtc":
      if env.done:
        return self._result(_OVER, "invalid", info)
      code = args.get("code") if isinstance(args, Mapping) else None
      if not isinstance(code, str):
        return self._result(f"Error: {PROGRAM_TOOL} needs a string argument 'code' (the Python program), got "
                            f"{type(code).__name__}.", "invalid", info)
      problem = tool_wire.invalid_text(args, "arguments")
      if problem is not None:  # it could not be sent to the kernel: not run
        info["error"] = "invalid_text"
        return self._result(tool_wire.refused_text(problem), "invalid", info)
      return self._run_program(code, info)
    if self.mode == "ptc" or name == PROGRAM_TOOL:
      names = [t["name"] for t in self.tools()]
      hint = " Call the task's tools from a program: tools[\"name\"](arg=value)." if self.mode == "ptc" else ""
      return self._result(f"Error: unknown tool {name!r}; the tools are {names}.{hint}", "invalid", info)
    r = env.step(call)
    r.info.update(self._counts())
    return r

  def close(self) -> None:
    self._stop_runtime()
    if (self._own_env or self._close_env) and self._env is not None:
      self._env.close()
      self._env = None

  # -- queries

  def verify(self, answer: Any = None) -> int:
    """R in {0, 1} on the current state (ProgTaskEnv.verify)."""
    return self._task_env().verify(answer)

  def episode_counts(self) -> dict:
    """{'tool_calls', 'tool_errors'} (task-tool calls, those inside programs included), 'programs',
    'program_errors'."""
    return self._counts()

  def task_info(self) -> dict:
    return dict(self._task_env().task_info(), mode=self.mode, runtime=self.runtime_kind)

  def task_ids(self) -> list[str]:
    return tasks_lib.task_ids()

  @property
  def task(self):
    return self._task_env().task

  @property
  def task_env(self) -> ProgTaskEnv:
    """The underlying ProgTaskEnv."""
    return self._task_env()

  @property
  def done(self) -> bool:
    return self._env is not None and self._env.done

  @property
  def submitted_answer(self) -> Any:
    return self._task_env().submitted_answer

  # -- internals

  def _task_env(self) -> ProgTaskEnv:
    if self._env is None:
      raise RuntimeError("this ProgEnv has no task yet: call reset(task_id, seed) first")
    return self._env

  def _counts(self) -> dict:
    c = dict(self._env.episode_counts()) if self._env is not None else {"tool_calls": 0, "tool_errors": 0}
    c.update(programs=self._programs, program_errors=self._program_errors)
    return c

  def _result(self, observation: str, status: str, info: dict) -> StepResult:
    done = self.done
    info.update(self._counts())
    if done:
      info["reward"] = float(self._env.verify())
    return StepResult(observation, status, done, info)

  def _run_program(self, code: str, info: dict) -> StepResult:
    if self._runtime is None:
      kwargs: dict[str, Any] = {"max_output_chars": self.max_output_chars}
      if self.runtime_kind == "kernel":
        kwargs.update(timeout_s=self.timeout_s, sandbox=self.sandbox, start_timeout_s=self.start_timeout_s)
      self._runtime = inprocess_runtime.make_runtime(self.runtime_kind, self._env, **kwargs)
    res = self._runtime.run(code)
    self._programs += 1
    self._program_errors += int(res.error is not None)
    info.update(program_error=res.error, timed_out=res.timed_out, restarted=res.restarted,
                program_tool_calls=res.tool_calls, truncated_chars=res.truncated_chars)
    return self._result(tool_wire.format_exec(res), "failed" if res.error else "ok", info)

  def _stop_runtime(self) -> None:
    rt, self._runtime = self._runtime, None
    if rt is not None:
      try:
        rt.close()
      except CapError as e:  # over its budget: the workspace is left as it was before; the next episode goes on
        _log.warning("at the end of an episode: %s", e)
