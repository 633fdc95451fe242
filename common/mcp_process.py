"""MCP over stdio with the process owned by the caller: `LoopThread`, `McpProcess`, `EnvError`.

  LoopThread    one asyncio event loop on a daemon thread; every MCP connection of a driver lives on
                it, and the synchronous API hands coroutines to it.
  McpProcess    any MCP server spoken to over stdio (our env_server, or a reference server), with
                start/call timeouts, kill, and exit-status reporting. The stdio transport is our own
                (a line-delimited JSON-RPC bridge over the process pipes) so that the driver owns the
                process: its pid, its process group, how and when it dies, and what of its output the
                driver parses: each line is counted by size and structure first (LINE_LIMITS; past
                them the process is killed), and long lines are parsed off the shared loop.
  EnvError      how an environment process failed ('start', 'crash', 'timeout', 'env_exception',
                'protocol'; see common.env_client).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import subprocess
import threading
import time

from common import json_limits

_log = logging.getLogger(__name__)

# What one JSON-RPC line from an environment process may be: its length, the JSON values in it and their
# nesting (common.json_limits: counted before the line is parsed). A line past any of them kills the process,
# so that a program inside cannot grow the trainer's memory through the pipe (README, "Security": the trainer's
# memory per environment process). Observations are cut far shorter before the policy sees them
# (RolloutConfig.max_observation_chars).
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_LINE_ITEMS = 100_000
MAX_LINE_DEPTH = 64
LINE_LIMITS = json_limits.Limits(MAX_LINE_BYTES, max_items=MAX_LINE_ITEMS, max_depth=MAX_LINE_DEPTH)
# Lines longer than this are checked and parsed on a worker thread, so that the loop every environment
# process of the driver shares goes on serving the others meanwhile.
INLINE_PARSE_BYTES = 64 * 1024


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


def _settled(path: str | None, wait_s: float = 2.0, poll_s: float = 0.1) -> str | None:
  """`path` once its size has stopped changing for `poll_s` (at most `wait_s`): a sandboxed process's stderr
  reaches the file through the sandbox's log capper (common.sandbox_guard), which may still be writing the
  last lines of a traceback when the process has exited; read on error paths only."""
  if not path:
    return path
  last, deadline = -1, time.monotonic() + wait_s
  while time.monotonic() < deadline:
    size = os.path.getsize(path) if os.path.exists(path) else 0
    if size == last:
      break
    last = size
    time.sleep(poll_s)
  return path


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
    self._overflow: str | None = None  # set when the process wrote a line over MAX_LINE_BYTES
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
      tail = _tail(_settled(self.stderr_path))
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
    import anyio.to_thread
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.shared.message import SessionMessage

    proc = self._proc
    to_session, session_in = anyio.create_memory_object_stream(0)
    session_out, to_proc = anyio.create_memory_object_stream(0)

    def parse(line: bytes):
      """The line's message, its exception if it is not JSON-RPC, or json_limits.LimitError (unparsed)."""
      try:
        json_limits.check(line, LINE_LIMITS, what="a line the environment process wrote on the MCP pipe",
                          where="common.mcp_process.MAX_LINE_")
      except json_limits.LimitError as e:
        return e
      try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
      except Exception as e:  # not JSON-RPC: hand it to the session, which logs it
        return e

    async def reader():
      buf = bytearray()  # the current, unfinished line (amortised O(1) appends)

      async def deliver(line: bytes) -> bool:
        """Hands one line to the session; False when it was refused (the process is then killed)."""
        if not line or line.isspace():
          return True
        if len(line) > INLINE_PARSE_BYTES:
          msg = await anyio.to_thread.run_sync(parse, line)
        else:
          msg = parse(line)
        del line
        if isinstance(msg, json_limits.LimitError):
          self._overflow = f"{msg}; the process was killed"
          proc.kill()
          return False
        await to_session.send(msg)
        return True

      async with to_session:
        try:
          async for chunk in proc.stdout:
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
              buf += chunk[start:end]
              line = bytes(buf)
              buf.clear()
              start = end + 1
              if not await deliver(line):
                return
            buf += chunk[start:]
            if len(buf) > MAX_LINE_BYTES:  # a message line this long is an attack or a bug: end the process
              self._overflow = (f"the environment process wrote a line of more than {MAX_LINE_BYTES} bytes "
                                "on the MCP pipe (MAX_LINE_BYTES); it was killed")
              buf.clear()
              proc.kill()
              break
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
    note = f"; {self._overflow}" if self._overflow else ""
    return f"environment process exited (exit code {code}){note}"

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


def result_payload(res) -> tuple[str, dict, bool]:
  """(text, structured content, is_error) of an MCP CallToolResult."""
  text = "".join(getattr(c, "text", "") for c in (res.content or []))
  return text, dict(res.structured_content or {}), bool(res.is_error)
