"""Client side of the environment process: start it in the sandbox, talk MCP to it, with timeouts.

Layers:
  LoopThread    one asyncio event loop on a daemon thread; every MCP connection of a driver lives on
                it, and the synchronous API below hands coroutines to it.
  McpProcess    any MCP server spoken to over stdio (our env_server, or a reference server), with
                start/call timeouts, kill, and exit-status reporting. The stdio transport is our own
                (a line-delimited JSON-RPC bridge over the process pipes) so that the driver owns the
                process: its pid, its process group, how and when it dies.
  EnvClient     an environment worker: McpProcess running `python -m common.env_server` inside a
                `Sandbox`, with the ToolEnv-shaped API (tools, reset, step, query, close). Every
                failure of the process is raised as `EnvError` with a reason:
                  'start'      the process did not come up (stderr tail attached),
                  'crash'      it died (exit code; 'oom' when the memory cgroup killed it),
                  'timeout'    it did not answer within the step timeout; it is killed,
                  'env_exception'  the environment raised; the process lives on.
  InProcessEnv  the same API calling the environment object directly (benchmarks' baseline; no
                isolation, no enforceable timeout).

A `StepResult` is a NamedTuple (observation, status, done, info), field-compatible with
phgpo.env.StepResult.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, NamedTuple

from common.sandbox import Sandbox, SandboxConfig

_log = logging.getLogger(__name__)


class StepResult(NamedTuple):
  """One environment step: observation text, status string, done flag, info dict."""
  observation: str
  status: str
  done: bool
  info: dict


class EnvSpec(NamedTuple):
  """What environment to run, and what it needs from the sandbox.

  Attributes:
    factory: 'package.module:CallableOrClass' building the environment (see common/env_server.py).
    kwargs: JSON-serialisable keyword arguments for the factory.
    ro_paths: extra host paths the environment reads (data sets), mounted read-only.
    env: extra environment variables inside the sandbox, as (name, value) pairs.
    start_timeout_s: seconds allowed for the process to start and list its tools.
  """
  factory: str
  kwargs: dict = {}
  ro_paths: tuple[str, ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  start_timeout_s: float = 120.0


class EnvError(RuntimeError):
  """The environment process failed; `reason` says how (see the module docstring)."""

  def __init__(self, reason: str, detail: str = "", *, exit_code: int | None = None):
    self.reason = reason
    self.detail = detail
    self.exit_code = exit_code
    super().__init__(f"{reason}: {detail}" if detail else reason)


class LoopThread:
  """An asyncio event loop running on its own daemon thread."""

  def __init__(self, name: str = "env-loop"):
    self.loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
    self._thread.start()

  def submit(self, coro) -> concurrent.futures.Future:
    return asyncio.run_coroutine_threadsafe(coro, self.loop)

  def run(self, coro, timeout: float | None = None):
    return self.submit(coro).result(timeout)

  def close(self) -> None:
    if self.loop.is_closed():
      return
    self.loop.call_soon_threadsafe(self.loop.stop)
    self._thread.join(timeout=10)
    if not self.loop.is_running():
      self.loop.close()


def _leaves(e: BaseException) -> list[BaseException]:
  """The innermost exceptions of a (possibly nested) exception group."""
  if isinstance(e, BaseExceptionGroup):
    return [x for sub in e.exceptions for x in _leaves(sub)]
  return [e]


def _tail(path: str | None, n: int = 2000) -> str:
  if not path or not os.path.exists(path):
    return ""
  with open(path, "rb") as f:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - n))
    return f.read().decode("utf-8", "replace").strip()


class McpProcess:
  """An MCP server process over stdio, driven from a LoopThread.

  Args:
    argv: full command line (already wrapped in the sandbox if one is wanted).
    loop: the LoopThread to live on.
    env: environment variables of the process (None: inherit).
    cwd: working directory.
    stderr_path: file receiving the process's stderr (None: discarded).
  """

  def __init__(self, argv: list[str], *, loop: LoopThread, env: dict | None = None,
               cwd: str | None = None, stderr_path: str | None = None):
    self.argv = list(argv)
    self._lt = loop
    self._env = env
    self._cwd = cwd
    self.stderr_path = stderr_path
    self._proc = None
    self._session = None
    self._stop: asyncio.Event | None = None
    self._task: asyncio.Task | None = None
    self.tools: list[dict] = []
    self.server_info: dict = {}

  # --- lifecycle -------------------------------------------------------------------------

  def start(self, timeout_s: float) -> None:
    """Spawns the process, runs the MCP handshake and lists the tools.

    Raises:
      EnvError('start'): it failed or took longer than timeout_s; the process is killed.
    """
    fut = self._lt.submit(self._start())
    try:
      fut.result(timeout_s)
    except BaseException as e:
      fut.cancel()
      code = self.kill()
      if isinstance(e, concurrent.futures.TimeoutError):
        detail = f"no MCP handshake within {timeout_s:.0f} s"
      else:
        detail = "; ".join(f"{type(x).__name__}: {x}" for x in _leaves(e))
      tail = _tail(self.stderr_path)
      raise EnvError("start", f"{detail}; exit code {code}; stderr tail:\n{tail}", exit_code=code) from None

  async def _start(self) -> None:
    import anyio
    errf = open(self.stderr_path, "ab") if self.stderr_path else subprocess.DEVNULL
    try:
      self._proc = await anyio.open_process(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=errf, start_new_session=True, env=self._env,
                                            cwd=self._cwd)
    finally:
      if errf is not subprocess.DEVNULL:
        errf.close()
    self._stop = asyncio.Event()
    ready = asyncio.get_running_loop().create_future()
    self._task = asyncio.create_task(self._lifetime(ready))
    await ready

  async def _lifetime(self, ready: asyncio.Future) -> None:
    import anyio
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.shared.message import SessionMessage

    proc = self._proc
    to_session, session_in = anyio.create_memory_object_stream(0)
    session_out, to_proc = anyio.create_memory_object_stream(0)

    async def reader():
      buf = b""
      async with to_session:
        try:
          async for chunk in proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
              if not line.strip():
                continue
              try:
                msg = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
              except Exception as e:  # not JSON-RPC: hand it to the session, which logs it
                msg = e
              await to_session.send(msg)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
          pass

    async def writer():
      async with to_proc:
        try:
          async for m in to_proc:
            data = m.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            await proc.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
          pass
      try:
        await proc.stdin.aclose()
      except Exception:
        pass

    try:
      async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        async with ClientSession(session_in, session_out) as session:
          init = await session.initialize()
          listed = await session.list_tools()
          self.server_info = {"name": init.server_info.name, "version": init.server_info.version,
                              "protocol": init.protocol_version}
          self.tools = [t.model_dump(by_alias=True, exclude_none=True, mode="json")
                        for t in listed.tools]
          self._session = session
          ready.set_result(None)
          await self._stop.wait()
          self._session = None
        await session_out.aclose()
        tg.cancel_scope.cancel()
    except BaseException as e:
      self._session = None
      if not ready.done():
        ready.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
      if not isinstance(e, Exception):
        raise

  # --- calls -------------------------------------------------------------------------------

  async def call_async(self, name: str, arguments: dict, timeout_s: float | None):
    """Awaits one tools/call; raises EnvError('timeout'|'crash')."""
    import anyio
    from mcp.shared.exceptions import MCPError
    session = self._session
    if session is None:
      raise EnvError("crash", f"not connected; {await self._exit_detail()}", exit_code=self.returncode)
    try:
      with anyio.fail_after(timeout_s):
        return await session.call_tool(name, arguments)
    except TimeoutError:
      raise EnvError("timeout", f"no answer to {name} within {timeout_s} s") from None
    except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
            ConnectionError) as e:
      if self.alive and "closed" not in str(e).lower():
        raise EnvError("protocol", f"{type(e).__name__}: {e}") from None
      raise EnvError("crash", await self._exit_detail(), exit_code=self.returncode) from None

  async def _exit_detail(self) -> str:
    proc = self._proc
    if proc is not None and proc.returncode is None:
      deadline = time.monotonic() + 1.0
      while proc.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    code = None if proc is None else proc.returncode
    return f"environment process exited (exit code {code})"

  def call(self, name: str, arguments: dict, timeout_s: float | None = None):
    """Synchronous tools/call; see call_async."""
    slack = None if timeout_s is None else timeout_s + 5.0
    return self._lt.run(self.call_async(name, arguments, timeout_s), slack)

  # --- status and shutdown -----------------------------------------------------------------

  @property
  def pid(self) -> int | None:
    return None if self._proc is None else self._proc.pid

  @property
  def returncode(self) -> int | None:
    return None if self._proc is None else self._proc.returncode

  @property
  def alive(self) -> bool:
    return self._proc is not None and self._proc.returncode is None

  def kill(self) -> int | None:
    """SIGKILLs the process group and waits for the process; returns its exit code."""
    if self._proc is None:
      return None
    if self._proc.returncode is None:
      try:
        os.killpg(self._proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    try:
      self._lt.run(self._finish(grace_s=0.0), 15)
    except Exception:  # loop gone or wedged: the kill above already happened
      pass
    return self.returncode

  def close(self, grace_s: float = 5.0) -> int | None:
    """Ends the session, closes stdin, waits up to grace_s for exit, then kills."""
    if self._proc is None:
      return None
    try:
      self._lt.run(self._finish(grace_s=grace_s), grace_s + 15)
    except Exception:
      pass
    if self._proc.returncode is None:
      return self.kill()
    return self.returncode

  async def _finish(self, grace_s: float) -> None:
    if self._stop is not None:
      self._stop.set()
    if self._task is not None:
      try:
        await asyncio.wait_for(asyncio.shield(self._task), timeout=max(grace_s, 1.0))
      except BaseException:
        pass
    proc = self._proc
    deadline = time.monotonic() + grace_s
    while proc.returncode is None and time.monotonic() < deadline:
      await asyncio.sleep(0.01)
    if proc.returncode is None:
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    try:
      await asyncio.wait_for(proc.wait(), timeout=10)
    except BaseException:
      pass
    if self._task is not None and not self._task.done():
      self._task.cancel()
      try:
        await self._task
      except BaseException:
        pass


def _result_payload(res) -> tuple[str, dict, bool]:
  text = "".join(getattr(c, "text", "") for c in (res.content or []))
  return text, dict(res.structured_content or {}), bool(res.is_error)


class EnvClient:
  """One environment worker: `python -m common.env_server` in its own sandboxed process.

  Args:
    spec: EnvSpec naming the environment factory and what it needs.
    sandbox: SandboxConfig (resource limits, network); `SandboxConfig(enabled=False)` runs an
      unsandboxed process (benchmarks only).
    loop: LoopThread to share (default: a private one, closed with the client).
    step_timeout_s: default seconds allowed per step/reset/query before the worker counts as hung.
    keep_logs: keep the stderr log file after close (its path is `stderr_path`).
  Raises:
    EnvError('start') when the process does not come up.
  """

  def __init__(self, spec: EnvSpec, *, sandbox: SandboxConfig = SandboxConfig(),
               loop: LoopThread | None = None, step_timeout_s: float = 60.0, keep_logs: bool = False):
    self.spec = spec
    self.step_timeout_s = step_timeout_s
    self.keep_logs = keep_logs
    self._own_loop = loop is None
    self._lt = loop or LoopThread()
    cfg = sandbox._replace(ro_paths=tuple(sandbox.ro_paths) + tuple(spec.ro_paths),
                           env=tuple(sandbox.env) + tuple(spec.env))
    self.sandbox = Sandbox(cfg)
    self.closed = False
    fd, self.stderr_path = tempfile.mkstemp(prefix="agentrl-env-", suffix=".log")
    os.close(fd)
    argv = [sys.executable, "-m", "common.env_server", "--factory", spec.factory,
            "--kwargs", json.dumps(spec.kwargs)]
    # bubblewrap itself (pid 1 inside, readable at /proc/1/environ) gets a minimal environment,
    # so that nothing of the driver's environment (tokens, paths) is visible inside.
    child_env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    if not cfg.enabled:  # unsandboxed: make the project importable and apply spec.env
      child_env = dict(os.environ)
      child_env["PYTHONPATH"] = os.pathsep.join(
          [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
          + ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
      child_env.update(dict(cfg.env))
    self._mcp = McpProcess(self.sandbox.command(argv), loop=self._lt, env=child_env,
                           stderr_path=self.stderr_path)
    try:
      self._mcp.start(spec.start_timeout_s)
    except EnvError as e:
      self._cleanup()
      raise EnvError("start", e.detail + self._limit_note(), exit_code=e.exit_code) from None
    from common.env_server import CONTROL_TOOLS
    self._tools = [t for t in self._mcp.tools if t["name"] not in CONTROL_TOOLS]

  # --- API ---------------------------------------------------------------------------------

  @property
  def pid(self) -> int | None:
    """Host pid of the outermost sandbox process (bubblewrap)."""
    return self._mcp.pid

  @property
  def alive(self) -> bool:
    return not self.closed and self._mcp.alive

  @property
  def limits(self) -> str:
    return self.sandbox.limits

  def server_pid(self) -> int | None:
    """Host pid of the Python env_server process inside the sandbox (for tests that kill it)."""
    import psutil
    if self.pid is None:
      return None
    try:
      for p in psutil.Process(self.pid).children(recursive=True):
        try:
          cmd = p.cmdline()
          if p.name() != "bwrap" and cmd[1:3] == ["-m", "common.env_server"]:
            return p.pid
        except psutil.Error:
          continue
    except psutil.Error:
      return None
    return None

  def tools(self) -> list[dict]:
    """The environment's MCP tool entries {name, description, inputSchema} (no control tools)."""
    return [dict(t) for t in self._tools]

  def submit_reset(self, task_id: str, seed: int = 0, *, timeout_s: float | None = None,
                   slot: int = 0):
    """Future -> first observation (str), or EnvError."""
    return self._submit(self._reset_async(task_id, seed, self._timeout(timeout_s), slot))

  def submit_step(self, call: dict, *, timeout_s: float | None = None, slot: int = 0):
    """Future -> StepResult, or EnvError."""
    return self._submit(self._step_async(call, self._timeout(timeout_s), slot))

  def submit_step_batch(self, items, *, timeout_s: float | None = None):
    """Future -> list of StepResult or EnvError('env_exception'), one per (slot, call) of `items`.

    One message for all slots (`env_step_batch`): the round trip is paid once per batch. A crash or
    hang of the worker fails the whole future with EnvError('crash' / 'timeout').
    """
    return self._submit(self._step_batch_async(list(items), self._timeout(timeout_s)))

  def submit_reset_batch(self, items, *, timeout_s: float | None = None):
    """Future -> list of first observations (str) or EnvError, one per (slot, task_id, seed)."""
    return self._submit(self._reset_batch_async(list(items), self._timeout(timeout_s)))

  def reset(self, task_id: str, seed: int = 0, *, timeout_s: float | None = None,
            slot: int = 0) -> str:
    """Starts an episode (in episode slot `slot`); returns the first observation."""
    return self._wait(self.submit_reset(task_id, seed, timeout_s=timeout_s, slot=slot), timeout_s)

  def step(self, call: dict, *, timeout_s: float | None = None, slot: int = 0) -> StepResult:
    """One tool call {'name', 'arguments'} (in episode slot `slot`)."""
    return self._wait(self.submit_step(call, timeout_s=timeout_s, slot=slot), timeout_s)

  def slot(self, k: int) -> "EnvSlot":
    """A ToolEnv-shaped view of episode slot k of this process (needs the env's clone())."""
    return EnvSlot(self, k)

  def query(self, method: str, *, timeout_s: float | None = None, **kwargs) -> Any:
    """Calls one of the environment's QUERY_METHODS (task lists, gold actions...)."""
    fut = self._submit(self._control_async("env_query", {"method": method, "kwargs": kwargs},
                                           self._timeout(timeout_s)))
    return self._wait(fut, timeout_s)["result"]

  def kill(self) -> None:
    """Kills the process tree at once (the cgroup too) and releases everything."""
    if self.closed:
      return
    self.sandbox.kill()
    self._mcp.kill()
    self._cleanup()

  def close(self, grace_s: float = 5.0) -> None:
    """Asks the environment to close, ends the process (killing it after grace_s), cleans up."""
    if self.closed:
      return
    if self._mcp.alive:
      try:
        self._mcp.call("env_close", {}, timeout_s=grace_s)
      except Exception:
        pass
    self._mcp.close(grace_s=grace_s)
    self._cleanup()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # --- internals ---------------------------------------------------------------------------

  def _timeout(self, t):
    return self.step_timeout_s if t is None else t

  def _submit(self, coro):
    if self.closed:
      coro.close()
      f = concurrent.futures.Future()
      f.set_exception(EnvError("crash", "worker is closed"))
      return f
    return self._lt.submit(coro)

  def _wait(self, fut, timeout_s):
    t = self._timeout(timeout_s)
    try:
      return fut.result(None if t is None else t + 10.0)
    except concurrent.futures.TimeoutError:
      fut.cancel()
      self.kill()
      raise EnvError("timeout", f"no answer within {t} s") from None

  def _limit_note(self) -> str:
    notes = []
    if self.sandbox.oom_killed():
      notes.append("oom: killed at the memory limit")
    if self.sandbox.pids_limit_hit():
      notes.append("the process limit was reached")
    return f"; {', '.join(notes)} ({self.sandbox.limits})" if notes else ""

  async def _control_async(self, name, args, timeout_s):
    try:
      res = await self._mcp.call_async(name, args, timeout_s)
    except EnvError as e:
      if e.reason == "timeout":  # hung: kill it now, from the loop thread, without blocking on it
        await self._kill_async()
        raise EnvError("timeout", e.detail + "; worker killed") from None
      if e.reason == "crash":
        raise EnvError("crash", e.detail + self._limit_note(), exit_code=e.exit_code) from None
      raise
    text, structured, is_error = _result_payload(res)
    if is_error:
      raise EnvError("env_exception", structured.get("exception", text))
    return structured

  async def _kill_async(self):
    self.sandbox.kill()
    if self._mcp.pid is not None:
      try:
        os.killpg(self._mcp.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass

  async def _reset_async(self, task_id, seed, timeout_s, slot=0):
    out = await self._control_async(
        "env_reset", {"task_id": str(task_id), "seed": int(seed), "slot": int(slot)}, timeout_s)
    return out["observation"]

  async def _step_async(self, call, timeout_s, slot=0):
    if not isinstance(call, dict):
      raise TypeError(f"step() takes a dict {{'name', 'arguments'}}, got {type(call).__name__}")
    out = await self._control_async(
        "env_step", {"name": call.get("name"), "arguments": call.get("arguments") or {},
                     "slot": int(slot)}, timeout_s)
    return StepResult(out["observation"], out["status"], bool(out["done"]), dict(out["info"]))

  async def _step_batch_async(self, items, timeout_s):
    steps = []
    for slot, call in items:
      if not isinstance(call, dict):
        raise TypeError(f"step() takes a dict {{'name', 'arguments'}}, got {type(call).__name__}")
      steps.append({"slot": int(slot), "name": call.get("name"), "arguments": call.get("arguments") or {}})
    out = await self._control_async("env_step_batch", {"steps": steps}, timeout_s)
    return [EnvError("env_exception", r["exception"]) if "exception" in r
            else StepResult(r["observation"], r["status"], bool(r["done"]), dict(r["info"]))
            for r in out["results"]]

  async def _reset_batch_async(self, items, timeout_s):
    eps = [{"slot": int(slot), "task_id": str(tid), "seed": int(seed)} for slot, tid, seed in items]
    out = await self._control_async("env_reset_batch", {"episodes": eps}, timeout_s)
    return [EnvError("env_exception", r["exception"]) if "exception" in r else r["observation"]
            for r in out["results"]]

  def _cleanup(self):
    self.closed = True
    try:
      self.sandbox.close()
    finally:
      if not self.keep_logs and self.stderr_path and os.path.exists(self.stderr_path):
        os.unlink(self.stderr_path)
      if self._own_loop:
        self._lt.close()


class EnvSlot:
  """Episode slot k of an EnvClient, with the ToolEnv surface (tools, reset, step, close).

  Lets code written against phgpo.env.ToolEnv (one object per concurrent trajectory) run all its
  trajectories in one sandboxed process: `envs = [client.slot(i) for i in range(batch)]`.
  close() is a no-op; close the client.
  """

  def __init__(self, client: EnvClient, k: int):
    self.client = client
    self.k = int(k)

  def tools(self) -> list[dict]:
    return self.client.tools()

  def reset(self, task_id: str, seed: int = 0) -> str:
    return self.client.reset(task_id, seed, slot=self.k)

  def step(self, call: dict) -> StepResult:
    return self.client.step(dict(call), slot=self.k)

  def close(self) -> None:
    pass

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class InProcessEnv:
  """The EnvClient API over an environment object built in this process (no isolation).

  Calls run on a private single-thread executor so that the driver can overlap W of them; a hung
  step cannot be interrupted (the timeout only abandons it). For benchmarks and debugging only.
  """

  def __init__(self, spec: EnvSpec, **unused):
    from common.env_server import EnvHost, load_factory
    prev = {k: os.environ.get(k) for k, _ in spec.env}
    os.environ.update(dict(spec.env))
    try:
      self._host = EnvHost(load_factory(spec.factory)(**spec.kwargs))
    finally:
      for k, v in prev.items():
        if v is None:
          os.environ.pop(k, None)
        else:
          os.environ[k] = v
    self._pool = concurrent.futures.ThreadPoolExecutor(1)
    self.closed = False
    self.pid = os.getpid()
    self.limits = "in-process (no sandbox)"

  @property
  def alive(self) -> bool:
    return not self.closed

  def tools(self):
    return [dict(t) for t in self._host.env_tools]

  def _run(self, name, args, post: Callable):
    def f():
      try:
        return post(self._host.handle(name, args))
      except Exception as e:
        raise EnvError("env_exception", f"{type(e).__name__}: {e}") from None
    return self._pool.submit(f)

  def submit_reset(self, task_id, seed=0, *, timeout_s=None, slot=0):
    return self._run("env_reset", {"task_id": str(task_id), "seed": int(seed), "slot": slot},
                     lambda o: o["structured"]["observation"])

  def submit_step(self, call, *, timeout_s=None, slot=0):
    def post(o):
      s = o["structured"]
      return StepResult(s["observation"], s["status"], bool(s["done"]), dict(s["info"]))
    return self._run("env_step", {"name": call.get("name"), "arguments": call.get("arguments") or {},
                                  "slot": slot}, post)

  def reset(self, task_id, seed=0, *, timeout_s=None, slot=0):
    return self.submit_reset(task_id, seed, slot=slot).result()

  def step(self, call, *, timeout_s=None, slot=0):
    return self.submit_step(call, slot=slot).result()

  def slot(self, k: int) -> EnvSlot:
    return EnvSlot(self, k)

  def query(self, method, *, timeout_s=None, **kwargs):
    return self._run("env_query", {"method": method, "kwargs": kwargs},
                     lambda o: o["structured"]["result"]).result()

  def kill(self):
    self.close()

  def close(self, grace_s: float = 5.0):
    if self.closed:
      return
    self.closed = True
    try:
      self._host.handle("env_close", {})
    finally:
      self._pool.shutdown(wait=False)
