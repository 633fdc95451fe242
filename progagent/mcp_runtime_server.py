"""ProgAgent's runtime as an MCP server (stdio): one tool, `programmatic_tool_call(code)`.

  python -m progagent.mcp_runtime_server --task TASK_ID [--level K] [--seed S] [--direct-tools]
      [--verdict-file PATH] [--workdir DIR] [--timeout-s 120] [--max-output-chars 50000] [--no-sandbox]
  python -m progagent.mcp_runtime_server --tools-factory MODULE:CALLABLE [--kwargs JSON] [--direct-tools]
      [--workspace DIR] [--timeout-s 120] [--max-output-chars 50000] [--no-sandbox]
  python -m progagent.mcp_runtime_server --mcp-server NAME=COMMAND [--mcp-server NAME=COMMAND ...]
      [--workspace DIR] [--evaluator COMMAND [--groundtruth DIR]] [--verdict-file PATH]
      [--instruction-file PATH] [--namespace clash|always] [--direct-tools] [--timeout-s 120] [--no-sandbox]
  python -m progagent.mcp_runtime_server --list-tasks

`--task` serves one episode of a task of the ProgAgent library (progagent.tasks.task_ids(), e.g.
'retail/pending_over_500'; `--list-tasks` prints them) at scale level K in 0..3 (default 0) with seed S
(default 0): the server builds progagent.task_env.ProgTaskEnv(TASK_ID, K), resets it to seed S before serving,
and the kernel sees the episode's workspace W as /workspace (ProgramRuntime(env, workspace_dir=
env.workspace_dir), as progagent.ptc_env does). The database and the task's verifier stay in this process.
An unknown task id or level is refused before serving (exit status 2, the valid values on stderr).

`--tools-factory MODULE:CALLABLE` builds the tool backend the programs call as `tools["name"](...)`: an
object with `tools()` and `call_tool(name, arguments)`, or a ToolEnv-shaped object with `tools()` and
`step(call)` (progagent/tool_proxy.py; e.g. `progagent.tool_proxy:demo_backend`). A factory that returns a
ProgTaskEnv is served like `--task` (reset to `--seed` if it was not reset yet). Any other backend must come
ready to use: the server does not reset it (a "step() before reset" error then names `--task` as the fix).
The backend is built in this server process, which is not sandboxed (it starts the sandbox); only the
programs run inside it. To keep the environment's own code sandboxed too, let the factory return a
common.env_client.EnvClient.

`--mcp-server NAME=COMMAND` (repeatable) puts any stdio MCP servers behind the runtime: e.g.
  --mcp-server 'fs=npx -y @modelcontextprotocol/server-filesystem {workspace}' --workspace ./ws
Each server runs in its own sandbox with only the workspace (at /workspace, read-write) and the paths its command
names (read-only); the programs' `tools` are the servers' tools, namespaced `<server>__<tool>` when two servers
offer the same name (`--namespace always`: every tool). The workspace (`--workspace DIR`, default a fresh
temporary folder removed at exit) is one tmpfs shared by the kernel and every server, seen by all at /workspace:
`{workspace}` and DIR itself in a command are translated to it, and the program tool's description tells the
model that path (tool_description). It is written back to DIR at exit. The servers and the kernel start at the
same time (the servers on a thread; the kernel reads their tool list right before its prelude), so the runtime
adds about a kernel's start to the servers' own (benchmarks/mcp_cold_start.py). Command resolution, sandbox and
naming rules: progagent/mcp_servers.py. A command that cannot run (no '=', a bad name, an unknown program, an npm
package not installed) is refused before anything starts, naming --mcp-server (exit status 2); a server that
starts but dies before listing its tools ends the run with one line naming it, with its stderr's tail (exit status 2).
`--evaluator COMMAND` runs once the episode is over (stdin closed, or SIGTERM), after the kernel and the servers
have stopped, in a sandbox of its own with the workspace read-only at {workspace} and `--groundtruth DIR` at
{groundtruth} (progagent/evaluator.py); its verdict {passed, reward, exit_code, timed_out, seconds, output, ...}
goes to the verdict file only, under `evaluator` (reward = 1 when it exits 0): never to a tool result or a
description. Without --evaluator the record says done: true, reward: null. The end of an episode (kernel and
servers stopped, the evaluator run, the workspace written back) takes well under a second plus the evaluator's
own time; a SIGTERM that arrives meanwhile does not cut it short (the MCP SDK's stdio client sends one 2 s after
closing stdin, and SIGKILL 2 s later: an evaluator that needs longer needs a host that waits).
`--instruction-file` serves a task text as the resource and prompt below.

Tools offered: `programmatic_tool_call`; with `--direct-tools` also the backend's own tools (DTC / Hybrid
over MCP: for a task, each call is one env.step({'name', 'arguments'}), answered with its observation text,
`isError` for statuses 'failed' and 'invalid'), listed first as in progagent.ptc_env's 'hybrid' mode.

The instruction (a task only): resource `task://instruction` (text/plain) and prompt `task` (no
arguments; one user message), the text ProgTaskEnv.reset() returns, so a generic MCP client can start the
episode.

Verdict (a task only). The episode ends when submit_answer is called (from a program or directly) or the
task's step limit is reached. The verifier's verdict R in {0, 1} (env.verify() once the call that ended the
episode has returned, as progagent.ptc_env computes it) goes to the HOST only: the structured content of
every answer of a task episode carries `episode: {done, reward, task_id, level, seed, tool_calls,
tool_errors}` (reward 0 until done; fixed once done), never the text content. With `--verdict-file PATH`
the same JSON object is written to PATH (atomically: a temporary file renamed) when the episode ends, and
{done: false, reward: 0, ...} at exit if it never ended. Hosts that put a model in front of this server
must not forward structured content to the model (MCP clients commonly show it instead of the text): it
holds the reward. After the end, programs and task tools are refused (`isError`).

One server process serves one episode: one persistent kernel, variables kept across calls, the workspace
(`--tools-factory`: default a fresh temporary directory, removed at exit; `--task`: the episode's, under
`--workdir` or a fresh temporary directory removed at exit) seen as /workspace. The process exits when its
stdin closes (or on SIGTERM), and every process of the episode dies with it. A SIGKILLed server's episode
(processes, even frozen between turns; cgroups; its default workspace, the runtime's folder, their tmpfs
mounts) is removed within about a second by the server's reaper (common.sandbox_cgroup.start_reaper); a
given `--workspace` is then left as it was before the episode (what programs wrote there is lost), with
its files' owners and modes. If the reaper was killed too, the next server (or any process) that starts
a sandbox removes it (common.sandbox_cgroup.sweep_stale).

`programmatic_tool_call` answers with text content (common.tool_wire.format_exec: the same observation
text the in-process runtime and progagent.ptc_env give for the program) and structured
content {output, error, timed_out, restarted, tool_calls, truncated_chars} (runtime.ExecResult; plus
`episode` for a task); `isError` is true when the program ended with an exception, a timeout or a kernel
restart.

Built on the low-level `mcp.server.lowlevel.Server` like common/env_server.py (mcp==2.3.0; see there
for why), whose `stdio_server` diverts fd 1 to stderr while serving.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from typing import Any, Callable

from common import io, sandbox_guard, tool_wire
from common.env_server import load_factory
from common.sandbox import SandboxConfig

TOOL_NAME = "programmatic_tool_call"
INSTRUCTION_URI = "task://instruction"
PROMPT_NAME = "task"
EPISODE_OVER = ("Error: the episode is over (submit_answer was called or the step limit was reached); no "
                "further tool calls are accepted.")
NOT_RESET_HINT = ("The tool backend built by --tools-factory was never reset. Serve a ProgAgent task with "
                  "--task TASK_ID --level K --seed S (the server resets it), or let the factory return a "
                  "backend that is ready to use.")

_log = logging.getLogger("progagent.mcp_runtime_server")


WORKSPACE = "/workspace"
SHARED_PATH_NOTE = (" The tools' servers see the same files at the same path: pass them paths under {workspace}. "
                    "A tool listed with '-> {{...}}' returns a dict of that shape.")


def tool_description(tool_list: list[dict], *, timeout_s: float, max_output_chars: int,
                     workspace: str = WORKSPACE, shared_path: bool = False) -> str:
  """The description of `programmatic_tool_call`, listing the tools a program can call.

  Args:
    tool_list: the tools' MCP entries; each is one line of common.tool_wire.describe_tools (with
      `-> output` for a tool that declares an outputSchema: what its call returns in a program).
    timeout_s, max_output_chars: the runtime's limits, as announced.
    workspace: the workspace path programs use (/workspace in the sandbox; the host folder without one).
    shared_path: add SHARED_PATH_NOTE (tools served by MCP servers that share the workspace,
      progagent.mcp_servers): the model is told that servers take the same paths.
  """
  note = SHARED_PATH_NOTE.format(workspace=workspace) if shared_path else ""
  return (
      "Run a Python program in a persistent sandboxed interpreter (variables, imports and functions "
      "survive between calls). Call tools as tools[\"name\"](arg=value, ...); they return Python "
      "objects (dicts, lists, numbers, strings) and raise ToolError on failure. Loops, branches "
      "and try/except are allowed. Only what the program prints (and the value of a final "
      f"expression) is returned, cut to {max_output_chars} characters. Each call may run "
      f"{timeout_s:g} s. input() is not available; there is no network. Files live in "
      f"{workspace}.{note}\nAvailable tools:\n" + tool_wire.describe_tools(tool_list))


CODE_SCHEMA = {"type": "object", "properties": {"code": {
    "type": "string", "description": "Python source to run"}}, "required": ["code"]}


def program_tool(tool_list: list[dict], *, timeout_s: float, max_output_chars: int, workspace: str = WORKSPACE,
                 shared_path: bool = False) -> dict:
  """The MCP tools/list entry of `programmatic_tool_call` {name, description, inputSchema} (tool_description)."""
  return {"name": TOOL_NAME, "inputSchema": CODE_SCHEMA,
          "description": tool_description(tool_list, timeout_s=timeout_s, max_output_chars=max_output_chars,
                                          workspace=workspace, shared_path=shared_path)}


def result_payload(res: Any) -> tuple[str, dict, bool]:
  """ExecResult -> (text, structured, is_error) of the MCP answer; text is tool_wire.format_exec(res)."""
  is_error = res.error is not None or res.timed_out or res.restarted
  return tool_wire.format_exec(res), res._asdict(), is_error


def check_task(task_id: str, level: int | None) -> tuple[str, int]:
  """Validates --task / --level; returns (task id without a level suffix, level).

  Raises:
    ValueError: unknown task id (all valid ids named) or level (the valid levels named).
  """
  from progagent import tasks as tasks_lib
  from progagent.task_env import split_instance_id
  from progagent.tasks import base
  tid, suffix = split_instance_id(task_id)
  ids = tasks_lib.task_ids()
  if tid not in ids:
    raise ValueError(f"unknown task id {task_id!r}; the {len(ids)} valid ids (--list-tasks prints them) are: "
                     + ", ".join(ids))
  if suffix is not None and level is not None and suffix != level:
    raise ValueError(f"task id {task_id!r} names level {suffix} but --level is {level}")
  lvl = suffix if suffix is not None else (0 if level is None else level)
  if isinstance(lvl, bool) or lvl not in base.LEVELS:
    raise ValueError(f"level must be one of {list(base.LEVELS)} (v0..v3), got {lvl!r}")
  return tid, lvl


class Verdict:
  """The host-side record of a task episode: {done, reward, task_id, level, seed, tool_calls, tool_errors}.

  end() fixes it once (the first call wins) and writes it to `path` if given; at_exit() writes the
  not-ended record if nothing was written.
  """

  def __init__(self, task_id: str | None, level: int | None, seed: int, path: str | None = None):
    self.task_id, self.level, self.seed, self.path = task_id, level, int(seed), path
    self.done = False
    self.reward: float | None = 0.0
    self.counts: dict = {"tool_calls": 0, "tool_errors": 0}
    self.extra: dict = {}
    self.written = False

  def as_dict(self) -> dict:
    return dict({"done": self.done, "reward": self.reward, "task_id": self.task_id, "level": self.level,
                 "seed": self.seed}, **self.counts, **self.extra)

  def update(self, counts: dict) -> None:
    if not self.done:
      self.counts = dict(counts)

  def end(self, reward: float | None, counts: dict, **extra: Any) -> None:
    """Fixes the record: done, `reward` (None: no verdict, e.g. MCP servers without --evaluator), the counts,
    and `extra` entries (e.g. evaluator=...); writes the file."""
    if self.done:
      return
    self.counts = dict(counts)
    self.extra.update(extra)
    self.done, self.reward = True, None if reward is None else float(reward)
    self._write()

  def at_exit(self) -> None:
    if not self.written:
      self._write()

  def _write(self) -> None:
    if self.path is None:
      return
    try:
      io.write_json(self.path, self.as_dict(), indent=None, fsync=True, newline=True, permissions=0o600)
      self.written = True
    except OSError:
      _log.exception("could not write the verdict file %s", self.path)


class _ResetHint:
  """Wraps a backend so that a "step() before reset" failure names the fix (NOT_RESET_HINT)."""

  def __init__(self, backend: Any):
    from progagent import tool_proxy
    self._backend = tool_proxy.as_backend(backend)

  def tools(self) -> list[dict]:
    return self._backend.tools()

  def call_tool(self, name: str, arguments: dict) -> Any:
    try:
      return self._backend.call_tool(name, arguments)
    except RuntimeError as e:
      if "before reset" not in str(e):
        raise
      _log.error("tool %s: %s; %s", name, e, NOT_RESET_HINT)
      raise RuntimeError(f"{e}. {NOT_RESET_HINT}") from None


class Session:
  """One served episode: the tool backend, its runtime and, for a task, the ProgTaskEnv and the Verdict.

  call(name, arguments) -> (text, structured or None, is_error) is the whole tools/call logic (sync).
  """

  def __init__(self, backend: Any, runtime: Any, *, direct_tools: bool = False, task_env: Any = None,
               instruction: str | None = None, verdict: Verdict | None = None, workspace: str = WORKSPACE,
               shared_path: bool = False):
    from progagent import tool_proxy
    self.backend = tool_proxy.as_backend(backend)
    self.runtime = runtime
    self.task_env = task_env
    self.instruction = instruction
    self.verdict = verdict
    program = program_tool(runtime.tool_list, timeout_s=runtime.timeout_s,
                           max_output_chars=runtime.max_output_chars, workspace=workspace,
                           shared_path=shared_path)
    self.direct = [_entry(t) for t in self.backend.tools()] if direct_tools else []
    if any(t["name"] == TOOL_NAME for t in self.direct):
      raise ValueError(f"the backend has a tool named {TOOL_NAME!r}, which --direct-tools cannot offer too")
    self.direct_names = {t["name"] for t in self.direct}
    self.tool_specs = self.direct + [program]

  def call(self, name: str, arguments: dict) -> tuple[str, dict | None, bool]:
    if name == TOOL_NAME:
      return self._program(arguments)
    if self.direct and (name in self.direct_names or self.task_env is not None):
      return self._direct(name, arguments)
    offered = [t["name"] for t in self.tool_specs]
    hint = "" if self.direct else " Call the backend's tools from a program: tools[\"name\"](arg=value)."
    return f"Error: unknown tool {name!r}; this server offers {offered}.{hint}", self._host({}), True

  def _program(self, arguments: dict) -> tuple[str, dict | None, bool]:
    code = arguments.get("code")
    if not isinstance(code, str):
      return (f"Error: {TOOL_NAME} needs a string argument 'code' (the Python program), got "
              f"{type(code).__name__}.", self._host({}), True)
    if self.task_env is not None and self.task_env.done:
      return EPISODE_OVER, self._host({}), True
    try:
      res = self.runtime.run(code)
    except Exception as e:  # the runtime itself failed (kernel would not restart)
      _log.exception("programmatic_tool_call failed")
      return f"runtime failure: {type(e).__name__}: {e}", self._host({}), True
    text, structured, is_error = result_payload(res)
    self._settle(None)
    return text, self._host(structured), is_error

  def _direct(self, name: str, arguments: dict) -> tuple[str, dict | None, bool]:
    if self.task_env is not None:
      try:
        r = self.task_env.step({"name": name, "arguments": arguments})
      except Exception as e:  # a bug in the task's code: reported, the server lives on
        _log.exception("tool %s failed", name)
        self._settle(None)
        return f"Error: {type(e).__name__}: {e}", self._host({"status": "error"}), True
      self._settle(r.info.get("reward") if r.done else None)
      return str(r.observation), self._host({"status": r.status}), r.status != "ok"
    try:
      wire = tool_wire.to_wire(self.backend.call_tool(name, arguments))
    except Exception as e:  # the backend raised: reported, the server lives on
      _log.exception("tool %s failed", name)
      return f"Error: {type(e).__name__}: {e}", None, True
    return direct_answer(wire)

  def _settle(self, reward: float | None) -> None:
    """Records the verdict once the episode is over (R = env.verify() unless the step reported it)."""
    env = self.task_env
    if env is None or self.verdict is None:
      return
    if env.done and not self.verdict.done:
      self.verdict.end(float(env.verify()) if reward is None else float(reward), env.episode_counts())
    else:
      self.verdict.update(env.episode_counts())

  def _host(self, structured: dict) -> dict | None:
    """Structured content for the host: `structured` plus, for a task, the episode record."""
    if self.verdict is not None:
      return dict(structured, episode=self.verdict.as_dict())
    return structured or None


def direct_answer(wire: dict) -> tuple[str, dict | None, bool]:
  """A backend's result (wire form) -> (text, structured, is_error) of a direct tool's MCP answer.

  The text is progagent.mcp_servers.result_text (the result's text content, what MCP hosts show a model; the
  structured content as JSON when there is no text). The structured content is forwarded as it came (it
  matches the tool's outputSchema, which the tool is listed with).
  """
  from progagent import mcp_servers
  text = mcp_servers.result_text(wire)
  structured = wire.get("structuredContent")
  is_error = bool(wire.get("isError")) or tool_wire.error_message(wire) is not None
  return text, structured if isinstance(structured, dict) else None, is_error


def _entry(t: dict) -> dict:
  """A backend's tool as a direct tool of this server: name, description, inputSchema and, when the tool has
  one, outputSchema."""
  schema = t.get("inputSchema", t.get("input_schema")) or {"type": "object"}
  out = {"name": t["name"], "description": t.get("description", ""), "inputSchema": schema}
  if isinstance(t.get("outputSchema"), dict):
    out["outputSchema"] = t["outputSchema"]
  return out


def task_builder(task_id: str, level: int, seed: int, *, workdir: str, direct_tools: bool, verdict: Verdict,
                 holder: list, **runtime_kwargs: Any) -> Callable[[], Session]:
  """The Session factory of --task: ProgTaskEnv(task_id, level) reset to `seed`, its kernel in its workspace."""
  def build() -> Session:
    from progagent.task_env import ProgTaskEnv
    env = ProgTaskEnv(task_id, level, workdir=workdir)
    holder.append(env)
    return _task_session(env, seed, direct_tools=direct_tools, verdict=verdict, holder=holder,
                         already_reset=False, **runtime_kwargs)
  return build


def _task_session(env: Any, seed: int, *, direct_tools: bool, verdict: Verdict, holder: list,
                  already_reset: bool, **runtime_kwargs: Any) -> Session:
  from progagent.runtime import ProgramRuntime
  instruction = env.task.prompt if already_reset else env.reset(None, seed)
  verdict.task_id, verdict.level = env.task.task_id, env.scale
  if already_reset:  # reset by the factory: its seed (ProgTaskEnv keeps it privately), not --seed
    verdict.seed = int(getattr(env, "_seed", seed))
  rt = ProgramRuntime(env, workspace_dir=str(env.workspace_dir), **runtime_kwargs)
  holder.append(rt)
  return Session(env, rt, direct_tools=direct_tools, task_env=env, instruction=instruction, verdict=verdict)


def factory_builder(factory: str, kwargs: dict, seed: int, *, workspace: str, workspace_given: bool,
                    direct_tools: bool, verdict: Verdict, holder: list,
                    **runtime_kwargs: Any) -> Callable[[], Session]:
  """The Session factory of --tools-factory (a ProgTaskEnv it returns is served like --task)."""
  def build() -> Session:
    from progagent.runtime import ProgramRuntime
    from progagent.task_env import ProgTaskEnv
    backend = load_factory(factory)(**kwargs)
    holder.append(backend)
    if isinstance(backend, ProgTaskEnv):
      try:
        backend.workspace_dir
        already_reset = True
      except RuntimeError:
        already_reset = False
      if workspace_given:
        _log.warning("--workspace is ignored: the ProgTaskEnv's episode workspace is used")
      return _task_session(backend, seed, direct_tools=direct_tools, verdict=verdict, holder=holder,
                           already_reset=already_reset, **runtime_kwargs)
    if verdict.path is not None:
      _log.warning("--verdict-file: %s is not a ProgAgent task (progagent.task_env.ProgTaskEnv), so there is "
                   "no verdict; the file will say done: false", type(backend).__name__)
    wrapped = _ResetHint(backend) if hasattr(backend, "reset") else backend
    rt = ProgramRuntime(wrapped, workspace_dir=workspace, **runtime_kwargs)
    holder.append(rt)
    inside = WORKSPACE if runtime_kwargs["sandbox"].enabled else os.path.abspath(workspace)
    return Session(wrapped, rt, direct_tools=direct_tools, workspace=inside)
  return build


class ServersEpisode:
  """The end of an --mcp-server episode (closed after the runtime and the servers): runs the evaluator on the
  workspace (still mounted), fixes the verdict, then writes the workspace back (to --workspace) and unmounts it.

  The evaluator's verdict (progagent.evaluator) goes to the verdict file only, under `evaluator`; reward is its
  reward (None without an evaluator); tool_calls / tool_errors count the calls routed to the servers (programs'
  and direct ones).
  """

  def __init__(self, verdict: Verdict, *, cap: Any = None, evaluator: Any = None, groundtruth: str | None = None,
               workspace: str):
    self.verdict, self.cap, self.evaluator, self.groundtruth = verdict, cap, evaluator, groundtruth
    self.workspace = workspace
    self.group: Any = None
    self.served = False  # set once the session is built: a server that never started ends no episode

  def close(self) -> None:
    try:
      if not self.served:
        return
      counts = self.group.counts() if self.group is not None else {"tool_calls": 0, "tool_errors": 0}
      if self.evaluator is None:
        self.verdict.end(None, counts)
        return
      try:
        result = self.evaluator.run(self.cap if self.cap is not None else self.workspace, self.groundtruth)
      except Exception as e:  # the evaluator could not run: a failed verdict that says why
        _log.exception("the evaluator could not run")
        result = {"passed": False, "reward": 0.0, "error": f"{type(e).__name__}: {e}"}
      _log.info("evaluator: passed %s (exit code %s, %.1f s)", result.get("passed"), result.get("exit_code"),
                result.get("seconds", 0.0))
      self.verdict.end(result["reward"], counts, evaluator=result)
    finally:
      if self.cap is not None:
        self.cap.close()


def servers_builder(specs: list, *, workspace: str, direct_tools: bool, namespace: str, verdict: Verdict,
                    holder: list, evaluator: Any = None, groundtruth: str | None = None,
                    instruction: str | None = None,
                    **runtime_kwargs: Any) -> tuple[Callable[[], Session], Callable[[], None]]:
  """(build, start_servers) of --mcp-server. build() makes the servers' group
  (progagent.mcp_servers.McpServerGroup, each server sandboxed; not started) and the kernel, sharing one capped
  workspace folder, and returns the Session once the kernel has the servers' tools (namespaced on a clash);
  start_servers() starts the servers on a thread, once build() has made the group. main() runs build() on a
  thread of its own and calls start_servers() at once, so that the kernel's start, the servers' and the import
  of the SDK's client (on the servers' loop thread) overlap."""
  import threading
  made = threading.Event()
  box: dict = {}

  def start_servers(abort: bool = False) -> None:
    """Starts the group's servers once build() has made it; abort=True closes a group not started yet instead
    (so that a build() waiting for the servers' tools returns, with an error)."""
    made.wait()
    group = box.pop("group", None)
    if group is not None:
      group.close() if abort else group.start(background=True)

  def build() -> Session:
    try:
      return _build()
    finally:
      made.set()

  def _build() -> Session:
    from common import sandbox_fs
    from progagent import mcp_servers
    from progagent.runtime import ProgramRuntime
    sandbox = runtime_kwargs["sandbox"]
    cap = None
    if sandbox.enabled:  # one tmpfs for the kernel and every server; written back to the folder at exit
      cap = sandbox_fs.CappedDir(
          workspace, "ws", max_bytes=sandbox.workspace_max_bytes, max_files=sandbox.workspace_max_files,
          uid=sandbox.uid, gid=sandbox.gid, keep=True,
          limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
    episode = ServersEpisode(verdict, cap=cap, evaluator=evaluator, groundtruth=groundtruth, workspace=workspace)
    holder.append(episode)
    group = mcp_servers.McpServerGroup(specs, workspace=cap if cap is not None else workspace, sandbox=sandbox,
                                       namespace=namespace, start=False)
    holder.append(group)
    episode.group = group
    box["group"] = group
    made.set()
    rt = ProgramRuntime(group, workspace_dir=workspace, workspace_cap=cap, **runtime_kwargs)
    holder.append(rt)
    session = Session(group, rt, direct_tools=direct_tools, instruction=instruction,
                      workspace=group.workspace_inside, shared_path=True)
    episode.served = True
    return session
  return build, start_servers


async def serve(build: Callable[[], Session]) -> None:
  """Builds the session (in a worker thread, with fd 1 diverted) and serves it on stdin/stdout until stdin
  closes."""
  import anyio
  import anyio.to_thread
  import mcp_types as types
  from mcp.server.lowlevel import Server
  from mcp.server.stdio import stdio_server
  from mcp.shared.exceptions import MCPError

  lock = anyio.Lock()
  async with stdio_server() as (read_stream, write_stream):
    session = await anyio.to_thread.run_sync(build)
    tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"],
                        output_schema=t.get("outputSchema"))
             for t in session.tool_specs]

    async def list_tools(ctx, params):
      return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
      async with lock:
        text, structured, is_error = await anyio.to_thread.run_sync(
            session.call, params.name, dict(params.arguments or {}))
      return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                  structured_content=structured, is_error=is_error)

    handlers: dict[str, Any] = {}
    if session.instruction is not None:
      instruction = session.instruction
      resource = types.Resource(name="instruction", uri=INSTRUCTION_URI, mime_type="text/plain",
                                description="The task's instruction (start the episode with it)")
      prompt = types.Prompt(name=PROMPT_NAME, description="The task's instruction as a user message")

      async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[resource])

      async def read_resource(ctx, params):
        if str(params.uri) != INSTRUCTION_URI:
          raise MCPError(types.INVALID_PARAMS, f"unknown resource {str(params.uri)!r}; this server offers "
                         f"{INSTRUCTION_URI!r}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=INSTRUCTION_URI, mime_type="text/plain", text=instruction)])

      async def list_prompts(ctx, params):
        return types.ListPromptsResult(prompts=[prompt])

      async def get_prompt(ctx, params):
        if params.name != PROMPT_NAME:
          raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}; this server offers "
                         f"{PROMPT_NAME!r}")
        return types.GetPromptResult(description="The task's instruction", messages=[types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=instruction))])

      handlers = dict(on_list_resources=list_resources, on_read_resource=read_resource,
                      on_list_prompts=list_prompts, on_get_prompt=get_prompt)

    server = Server("progagent-runtime", version="0.1.0", on_list_tools=list_tools,
                    on_call_tool=call_tool, **handlers)
    await server.run(read_stream, write_stream, server.create_initialization_options())


def _import_sdk() -> None:
  """Imports the MCP SDK modules the server (serve) and the servers' client (common.mcp_process) use."""
  import anyio  # noqa: F401
  import anyio.to_thread  # noqa: F401
  import mcp_types  # noqa: F401
  from mcp.client.session import ClientSession  # noqa: F401
  from mcp.server.lowlevel import Server  # noqa: F401
  from mcp.server.stdio import stdio_server  # noqa: F401
  from mcp.shared.exceptions import MCPError  # noqa: F401
  from mcp.shared.message import SessionMessage  # noqa: F401


def _close_all(holder: list) -> None:
  for obj in reversed(holder):
    try:
      obj.close()
    except Exception:  # best effort at shutdown
      _log.exception("close() failed for %s", type(obj).__name__)
  holder.clear()


def _server_start_error(e: BaseException) -> BaseException | None:
  """The progagent.mcp_servers.McpServerError inside `e` (an exception group of the serving task group, or the
  cause or context chain), or None."""
  from progagent import mcp_servers
  seen, todo = set(), [e]
  while todo:
    x = todo.pop()
    if x is None or id(x) in seen:
      continue
    seen.add(id(x))
    if isinstance(x, mcp_servers.McpServerError):
      return x
    todo += list(getattr(x, "exceptions", ()) or ()) + [x.__cause__, x.__context__]
  return None


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  what = p.add_mutually_exclusive_group(required=True)
  what.add_argument("--task", help="ProgAgent task id to serve (progagent.tasks.task_ids(), e.g. "
                    "'retail/pending_over_500')")
  what.add_argument("--tools-factory", help="MODULE:CALLABLE returning the tool backend")
  what.add_argument("--list-tasks", action="store_true", help="print the task ids and exit")
  what.add_argument("--mcp-server", action="append", metavar="NAME=COMMAND",
                    help="an MCP server (stdio command) whose tools the programs call; repeatable. E.g. "
                    "'fs=npx -y @modelcontextprotocol/server-filesystem {workspace}' (progagent.mcp_servers)")
  p.add_argument("--level", type=int, default=None, help="--task's scale level 0..3 (default 0)")
  p.add_argument("--seed", type=int, default=0, help="episode seed (--task, or a ProgTaskEnv factory)")
  p.add_argument("--direct-tools", action="store_true",
                 help="also offer the backend's own tools (DTC / Hybrid over MCP)")
  p.add_argument("--verdict-file", default=None,
                 help="write the episode record {done, reward, ...} to this path when the episode ends "
                 "(and {done: false} at exit if it never did)")
  p.add_argument("--workdir", default=None, help="--task: root of the episode directory (default: a fresh "
                 "temporary one, removed at exit)")
  p.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
  p.add_argument("--workspace", default=None,
                 help="--tools-factory and --mcp-server: the episode's host folder, seen by the kernel (and every "
                 "--mcp-server) at /workspace and written back when the episode ends (default: a fresh temporary "
                 "one, removed at exit); --task uses its own episode workspace")
  p.add_argument("--namespace", choices=("clash", "always"), default="clash",
                 help="--mcp-server: prefix tool names with '<server>__' on a clash only (default) or always")
  p.add_argument("--evaluator", default=None, metavar="COMMAND",
                 help="--mcp-server: run COMMAND in a sandbox once the episode is over ({workspace}, {groundtruth} "
                 "placeholders); its exit status (0 = pass) and output go to --verdict-file only")
  p.add_argument("--groundtruth", default=None, metavar="DIR",
                 help="--evaluator: the ground-truth folder ({groundtruth}, read-only at /groundtruth)")
  p.add_argument("--instruction-file", default=None, metavar="PATH",
                 help="--mcp-server: the task's instruction, served as resource task://instruction and prompt "
                 "'task'")
  p.add_argument("--timeout-s", type=float, default=120.0, help="seconds per program")
  p.add_argument("--max-output-chars", type=int, default=50_000)
  p.add_argument("--no-sandbox", action="store_true",
                 help="run the kernel without bubblewrap/cgroups (debugging only)")
  p.add_argument("--log-level", default="WARNING")
  a = p.parse_args(argv)
  if a.list_tasks:
    from progagent import tasks as tasks_lib
    print("\n".join(tasks_lib.task_ids()))
    return
  logging.basicConfig(stream=sys.stderr, level=a.log_level,
                      format="%(asctime)s mcp_runtime_server %(levelname)s %(message)s")
  specs = None
  if a.mcp_server is None and (a.evaluator is not None or a.groundtruth is not None or a.instruction_file is not None
                               or a.namespace != "clash"):
    p.error("--evaluator, --groundtruth, --instruction-file and --namespace go with --mcp-server")
  if a.mcp_server is not None:
    from progagent import mcp_servers
    if a.level is not None or a.workdir is not None or a.kwargs != "{}":
      p.error("--level, --workdir and --kwargs go with --task / --tools-factory; with --mcp-server the workspace "
              "is --workspace")
    try:
      specs = mcp_servers.parse_servers(a.mcp_server)
    except mcp_servers.McpServerError as e:
      p.error(str(e))
    if a.workspace is not None and not os.path.isdir(a.workspace):
      p.error(f"--workspace {a.workspace!r} is not a folder")
    try:
      for spec in specs:  # resolved now, so that a command that cannot run is named before anything starts
        mcp_servers.resolve_command(spec, workspace=a.workspace or "/nonexistent-workspace",
                                    sandboxed=not a.no_sandbox)
    except mcp_servers.McpServerError as e:
      p.error(str(e))
    evaluator = None
    if a.evaluator is not None:
      from progagent.evaluator import Evaluator
      try:
        evaluator = Evaluator(a.evaluator, sandbox=SandboxConfig(enabled=not a.no_sandbox))
      except ValueError as e:
        p.error(str(e))
      if evaluator.needs_groundtruth and a.groundtruth is None:
        p.error(f"--evaluator {a.evaluator!r} names {{groundtruth}}: give the folder with --groundtruth DIR")
    if a.groundtruth is not None and not os.path.isdir(a.groundtruth):
      p.error(f"--groundtruth {a.groundtruth!r} is not a folder")
    instruction = None
    if a.instruction_file is not None:
      try:
        with open(a.instruction_file, encoding="utf-8") as f:
          instruction = f.read()
      except OSError as e:
        p.error(f"--instruction-file {a.instruction_file!r}: {e.strerror}")
    task_id, level, kwargs = None, None, {}
  elif a.task is not None:
    if a.workspace is not None or a.kwargs != "{}":
      p.error("--workspace and --kwargs go with --tools-factory; with --task the workspace is the episode's "
              "(see --workdir)")
    try:
      task_id, level = check_task(a.task, a.level)
    except ValueError as e:
      p.error(str(e))
    kwargs: dict = {}
  else:
    if a.level is not None or a.workdir is not None:
      p.error("--level and --workdir go with --task")
    task_id, level = None, None
    try:
      kwargs = json.loads(a.kwargs)
    except json.JSONDecodeError as e:
      p.error(f"--kwargs is not JSON ({e}): {a.kwargs!r}")
    if not isinstance(kwargs, dict):
      p.error(f"--kwargs must be a JSON object, got {a.kwargs!r}")
  if a.verdict_file is not None and not os.path.isdir(os.path.dirname(os.path.abspath(a.verdict_file))):
    p.error(f"--verdict-file {a.verdict_file!r}: its directory does not exist")
  # <tmp>/agentrl-pws-<pid>-*: like the runtime's folder (agentrl-pa-<pid>-*) and the sandbox's cgroups
  # (agentrl-<pid>-*), removed by this process's reaper if it is SIGKILLed (common.sandbox_cgroup).
  given = a.workdir if a.task is not None else (os.path.abspath(a.workspace) if a.workspace else None)
  own_dir = given or sandbox_guard.owned_tempdir("pws")
  holder: list = []
  verdict = Verdict(task_id, level, a.seed, a.verdict_file)
  runtime_kwargs = dict(timeout_s=a.timeout_s, max_output_chars=a.max_output_chars,
                        sandbox=SandboxConfig(enabled=not a.no_sandbox))
  start_servers = None
  if specs is not None:
    build, start_servers = servers_builder(specs, workspace=own_dir, direct_tools=a.direct_tools, namespace=a.namespace,
                            verdict=verdict, holder=holder, evaluator=evaluator,
                            groundtruth=os.path.abspath(a.groundtruth) if a.groundtruth else None,
                            instruction=instruction, **runtime_kwargs)
  elif a.task is not None:
    build = task_builder(task_id, level, a.seed, workdir=own_dir, direct_tools=a.direct_tools, verdict=verdict,
                         holder=holder, **runtime_kwargs)
  else:
    build = factory_builder(a.tools_factory, kwargs, a.seed, workspace=own_dir, workspace_given=given is not None,
                            direct_tools=a.direct_tools, verdict=verdict, holder=holder, **runtime_kwargs)

  terminated: list[int] = []
  closing: list[bool] = []

  def on_term(signum, frame):
    terminated.append(signum)
    if not closing:  # while serving: end it; once the episode is being closed (evaluator, write-back): finish
      raise SystemExit(128 + signum)

  signal.signal(signal.SIGTERM, on_term)
  early = None
  try:
    if start_servers is not None:
      # Everything starts at once: build() (on a thread of its own) launches the kernel; the servers' processes
      # are spawned by the group's loop thread, which then imports the MCP SDK's client (0.5-1 s of the cold
      # start) while they boot. This thread imports the SDK only once build() is done: two threads must not
      # import it at once (its modules import each other). Nothing of ours writes to fd 1 meanwhile (the
      # servers' and the kernel's output go to pipes and logs), so the MCP stream stays clean.
      import concurrent.futures
      early = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mcp-runtime-build").submit(build)
      build = early.result
      start_servers()
      concurrent.futures.wait([early])
      _import_sdk()
    import anyio
    anyio.run(serve, build)
  except BaseException as e:  # a backend server that would not start: its message, not the task group's traceback
    start_error = _server_start_error(e) if specs is not None else None
    if start_error is None:
      raise
    print(f"error: {start_error}", file=sys.stderr)
    failed = True
  else:
    failed = False
  finally:
    closing.append(True)
    t_close = time.monotonic()
    if early is not None:  # a start still under way (stdin closed, SIGTERM, an error): end it before closing
      start_servers(abort=True)
      concurrent.futures.wait([early])
    _close_all(holder)
    _log.info("episode closed in %.2f s", time.monotonic() - t_close)
    verdict.at_exit()
    if given is None:
      shutil.rmtree(own_dir, ignore_errors=True)
    if terminated:  # stdio_server's stdin reader thread, blocked in read(), would hold interpreter shutdown
      logging.shutdown()
      sys.stderr.flush()
      os._exit(128 + terminated[0])
  if failed:
    sys.exit(2)


if __name__ == "__main__":
  main()
