"""ProgAgent's programmatic tool-calling runtime: one persistent, sandboxed IPython kernel per episode.

  with ProgramRuntime(backend, workspace_dir=ws) as rt:
    r = rt.run('rows = tools["query"](sql="select 1")\\nprint(len(rows))')
    r.output, r.error, r.timed_out, r.restarted, r.tool_calls, r.truncated_chars

Source: ProgAgent (2026), "Runtime" (SPEC.md, ProgAgent): a persistent IPython kernel per episode, a
tool proxy routing `tools["name"](...)` to the environment's tools and returning native Python
objects, Bubblewrap isolation with cgroup limits (2 GiB, 256 processes), printed output cut to
50,000 characters, 120 s per evaluation, verifiers and oracles never mounted, episodes isolated.

Layout of one episode:

  host (this process)                               sandbox (common/sandbox.py: bwrap + cgroup)
  ProgramRuntime                                    python -m ipykernel_launcher (pid 1's child)
    jupyter_client.BlockingKernelClient  <-- ZMQ ipc:// sockets -->  shell/iopub/control/hb
    tool_proxy.ToolServer (thread)       <-- Unix socket, JSON lines --  tools["name"](**kw)
    tool backend (MCP client, env, functions)
  <workspace_dir>/           = /workspace inside (the task's files; read-write; the runtime
                               adds nothing to it)
  <scratch>/                 = /tmp inside: a private directory per runtime (tempfile.mkdtemp),
                               kept across kernel restarts, removed at close
  <scratch>/.progagent/      = /tmp/.progagent: connection file, ZMQ and tool sockets, IPython's
                               profile directory, the kernel's log

Decisions (and why):
* Transport. The kernel runs in a private network namespace with only loopback, so the host cannot
  reach a TCP port inside it. ZMQ's `ipc` transport binds Unix-domain sockets on the file system,
  and file-system sockets are not scoped to a network namespace: the kernel binds them in
  /tmp/.progagent (a bind mount of the episode's own directory), and the host connects to the same
  files under their host path. The tool proxy uses one more Unix socket in the same directory,
  listened on by the host. No port is ever opened, and the network stays off. (Running the kernel
  manager and proxy inside the sandbox, talking MCP over stdio, was the alternative; it would put
  the tool backend inside the sandbox too, or need a second channel back out for every tool call.)
* The kernel is launched by this module (not by jupyter_client's KernelManager) so that the whole
  command is `Sandbox.command(...)` and the runtime owns the process tree: the launcher runs in its
  own session, the kernel in bubblewrap's PID namespace and the episode's cgroup. Processes are
  started from one long-lived thread per runtime, because bubblewrap's --die-with-parent follows
  the thread that spawned it (a pooled worker thread exiting would kill the kernel).
* What is mounted. The project's packages (common/, progagent/ with its tasks, verifiers and
  oracle solutions, ...) are removed from the sandbox's read-only mounts: the kernel needs only the
  Python environment, and the proxy's code is sent into the kernel as source at start. Another
  episode's workspace is never mounted, and each episode has its own kernel, PID namespace and
  cgroup, so neither its files nor its variables nor its processes are reachable. Programs import
  from the project's Python environment (numpy, ...), not from the project. The only way out of
  the sandbox is the tool socket, which answers the listed tools and nothing else.
* Timeout (`timeout_s`, default 120 s): SIGINT to the kernel's process group (KeyboardInterrupt in
  the program, and in a child it waits on); if the kernel is not idle within `interrupt_grace_s`
  (default 5 s), every process of the episode is killed and a fresh kernel started in the same
  workspace; the output then tells the program's author that variables were lost (files kept).
  A kernel that dies by itself (os._exit, the memory limit) is restarted the same way.
* input() and getpass() raise at once (allow_stdin=False, with a readable message); stdin is
  /dev/null, so sys.stdin.read() returns ''.
* Output: stdout, stderr, the value of a final expression, display data (text/plain) and the error
  traceback, in arrival order, with ANSI escapes removed and the proxy's own frames dropped from
  tracebacks. Cut to `max_output_chars` characters (Python str: Unicode code points, so no
  character is ever split): the first half and the last half are kept and a marker line in
  between says how many characters were cut (`truncation='head'` keeps the beginning instead).
  Runtime notices (timeout, restart) are appended after the cut and never cut.
* End of episode (`close`): the cgroup is killed (every process the program started, however it
  detached), the launcher's process group too, and bubblewrap's PID namespace dies with its init;
  the scratch directory (/tmp) is removed; the workspace is the caller's.
* /tmp. common/sandbox.py binds <workspace>/tmp at /tmp; the runtime re-points that bind at its own
  scratch directory, so that the task's workspace holds only the task's files and what programs
  write there (file-listing tools and verifiers see no runtime files), and so that socket paths
  stay short whatever the workspace path.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import os
import pathlib
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple

from common.sandbox import Sandbox, SandboxConfig
from progagent import tool_proxy

_log = logging.getLogger(__name__)

_PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
_RUNTIME_DIR_INSIDE = "/tmp/.progagent"
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; ZMQ appends "-N"
_STDERR_TAIL_CHARS = 3000


class ExecResult(NamedTuple):
  """What one program run returns.

  Attributes:
    output: str, what the program printed (and its final expression's value, and its traceback),
      cut to max_output_chars, followed by the runtime's notices; this is what enters the context.
    error: None, or "Name: message" of the exception that ended the program ("TimeoutError: ...",
      "KernelRestarted: ..." when the kernel had to be restarted).
    timed_out: bool, the program hit the per-execution time limit.
    restarted: bool, the kernel was restarted during this run; variables are lost.
    tool_calls: int, tool calls answered during this run.
    truncated_chars: int, characters cut from the output (0 when nothing was cut).
  """
  output: str
  error: str | None
  timed_out: bool
  restarted: bool
  tool_calls: int
  truncated_chars: int


class RuntimeStartError(RuntimeError):
  """The kernel did not come up; the message carries the tail of its log."""


class OutputBuffer:
  """Keeps at most `max_chars` characters of a stream: its head and its tail, counting the rest.

  Args:
    max_chars: characters kept (int >= 0).
    mode: 'head_tail' (half each) or 'head'.
  """

  def __init__(self, max_chars: int, mode: str = "head_tail"):
    if mode not in ("head_tail", "head"):
      raise ValueError(f"truncation={mode!r}; use 'head_tail' or 'head'")
    if max_chars < 0:
      raise ValueError(f"max_output_chars={max_chars} must be >= 0")
    self.max_chars = int(max_chars)
    self.head_cap = self.max_chars if mode == "head" else (self.max_chars + 1) // 2
    self.tail_cap = self.max_chars - self.head_cap
    self._head: list[str] = []
    self._head_len = 0
    self._tail: collections.deque[str] = collections.deque()
    self._tail_len = 0
    self.total = 0

  def write(self, s: str) -> None:
    if not s:
      return
    self.total += len(s)
    room = self.head_cap - self._head_len
    if room > 0:
      self._head.append(s[:room])
      self._head_len += min(room, len(s))
      s = s[room:]
    if not s or self.tail_cap == 0:
      return
    if len(s) >= self.tail_cap:
      self._tail.clear()
      self._tail.append(s[-self.tail_cap:])
      self._tail_len = self.tail_cap
      return
    self._tail.append(s)
    self._tail_len += len(s)
    while self._tail_len - len(self._tail[0]) >= self.tail_cap:
      self._tail_len -= len(self._tail.popleft())

  @property
  def cut(self) -> int:
    return max(0, self.total - self.max_chars)

  def getvalue(self) -> str:
    head = "".join(self._head)
    tail = "".join(self._tail)
    cut = self.cut
    if cut == 0:
      return head + tail
    tail = tail[len(tail) - self.tail_cap:] if self.tail_cap else ""
    marker = (f"\n[... {cut} characters cut: the output had {self.total}, at most "
              f"{self.max_chars} are kept ...]\n")
    return head + marker + tail


def _strip_project_mounts(argv: list[str]) -> list[str]:
  """Drops the sandbox's read-only mounts of the project's own packages (verifiers, oracles...).

  Keeps the Python environment (sys.prefix, which may live under the project root) and everything
  outside the project root.
  """
  root = str(_PROJECT_ROOT)
  keep_prefixes = {os.path.realpath(sys.prefix), sys.prefix}
  out = []
  i = 0
  while i < len(argv):
    a = argv[i]
    if a == "--":
      out.extend(argv[i:])
      break
    if a == "--ro-bind" and i + 2 < len(argv):
      src = argv[i + 1]
      # argv[i + 2] == root: the read-only stub common.sandbox binds over a checkout under /tmp.
      inside = src == root or src.startswith(root + os.sep) or argv[i + 2] == root
      if inside and not any(src == p or src.startswith(p + os.sep) for p in keep_prefixes):
        i += 3
        continue
    out.append(a)
    i += 1
  return out


def _rebind_tmp(argv: list[str], ws_tmp: str, scratch: str) -> list[str]:
  """Points the sandbox's `--bind <workspace>/tmp /tmp` at the runtime's scratch directory."""
  out = list(argv)
  for i in range(len(out) - 2):
    if out[i] == "--":
      break
    if out[i] == "--bind" and out[i + 1] == ws_tmp and out[i + 2] == "/tmp":
      out[i + 1] = scratch
      return out
  raise RuntimeError("common/sandbox.py no longer binds <workspace>/tmp at /tmp; update "
                     "progagent.runtime._rebind_tmp to its new layout")


def _clean_traceback(frames: list[str]) -> str:
  """Joins ipykernel's traceback entries without ANSI colours and without the proxy's own frames."""
  keep = [f for f in frames if tool_proxy._PROXY_FILENAME not in f]
  return _ANSI_RE.sub("", "".join(keep))


class _Kernel:
  """One kernel process in one sandbox, and its client."""

  def __init__(self, sandbox: Sandbox, proc: subprocess.Popen, client: Any, log_path: str):
    self.dir = os.path.dirname(log_path)
    self.sandbox = sandbox
    self.proc = proc
    self.client = client
    self.log_path = log_path
    self.kernel_pid: int | None = None

  def alive(self) -> bool:
    return self.proc.poll() is None


class ProgramRuntime:
  """A persistent sandboxed Python kernel for one episode, with `tools` bound to a tool backend.

  Args:
    tool_backend: object with `tools()` and `call_tool(name, arguments)`, or a ToolEnv-shaped
      object with `tools()` and `step(call)` (see progagent/tool_proxy.py).
    workspace_dir: host directory of this episode's files, seen as /workspace inside; must be
      private to the episode (created if missing).
    timeout_s: seconds per execution before the program is interrupted (SPEC: 120).
    max_output_chars: characters of output kept per execution (SPEC: 50,000).
    sandbox: SandboxConfig (memory and process limits, network off by default).
      `SandboxConfig(enabled=False)` runs the kernel without isolation (debugging only: then the
      program sees the host).
    interrupt_grace_s: seconds an interrupted program has to stop before the kernel is restarted.
    start_timeout_s: seconds allowed for the kernel to start.
    truncation: 'head_tail' (keep the first and last halves) or 'head' (keep the beginning).
  Raises:
    RuntimeStartError: the kernel did not start (its log's tail attached).
    TypeError: tool_backend has neither surface.
  """

  def __init__(self, tool_backend: Any, *, workspace_dir: str, timeout_s: float = 120.0,
               max_output_chars: int = 50_000, sandbox: SandboxConfig = SandboxConfig(),
               interrupt_grace_s: float = 5.0, start_timeout_s: float = 60.0,
               truncation: str = "head_tail"):
    if timeout_s <= 0:
      raise ValueError(f"timeout_s={timeout_s} must be > 0")
    OutputBuffer(max_output_chars, truncation)  # validates both
    self.backend = tool_proxy.as_backend(tool_backend)
    self.workspace_dir = os.path.abspath(workspace_dir)
    os.makedirs(self.workspace_dir, exist_ok=True)
    self.timeout_s = float(timeout_s)
    self.max_output_chars = int(max_output_chars)
    self.truncation = truncation
    self.interrupt_grace_s = float(interrupt_grace_s)
    self.start_timeout_s = float(start_timeout_s)
    self.sandbox_config = sandbox
    self.scratch_dir = tempfile.mkdtemp(prefix="progagent-")
    self.runtime_dir = os.path.join(self.scratch_dir, ".progagent")
    probe = os.path.join(self.runtime_dir, "k9999", "k-1")
    if len(probe.encode()) > _MAX_SOCKET_PATH:
      shutil.rmtree(self.scratch_dir, ignore_errors=True)
      raise ValueError(f"the temporary directory {tempfile.gettempdir()!r} is too long for Unix "
                       f"socket paths ({len(probe)} > {_MAX_SOCKET_PATH} bytes with the runtime's "
                       "suffix); point TMPDIR at a shorter one")
    self._inside_dir = (_RUNTIME_DIR_INSIDE if sandbox.enabled else self.runtime_dir)
    self._lock = threading.Lock()
    self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="progagent-spawn")
    self._kernel: _Kernel | None = None
    self._generation = 0
    self.closed = False
    self.restarts = 0
    self.executions = 0
    os.makedirs(self.runtime_dir)
    try:
      self._tool_server = tool_proxy.ToolServer(self.backend,
                                                os.path.join(self.runtime_dir, "tools.sock"))
      self._kernel = self._start_kernel()
    except BaseException:
      self.close()
      raise

  # --- public API --------------------------------------------------------------------------

  @property
  def tool_list(self) -> list[dict]:
    """The MCP tool entries the program sees as `tools`."""
    return [dict(t) for t in self._tool_server.tool_list]

  @property
  def kernel_pid(self) -> int | None:
    """Host pid of the kernel process (None before start or after close)."""
    return None if self._kernel is None else self._kernel.kernel_pid

  @property
  def sandbox(self) -> Sandbox | None:
    return None if self._kernel is None else self._kernel.sandbox

  def run(self, code: str, *, timeout_s: float | None = None) -> ExecResult:
    """Executes `code` in the episode's kernel (variables persist between calls).

    Args:
      code: Python source (IPython syntax is accepted).
      timeout_s: override of the per-execution limit for this call.
    Returns:
      ExecResult.
    Raises:
      RuntimeError: the runtime is closed.
      RuntimeStartError: the kernel had to be restarted and did not come back.
    """
    if not isinstance(code, str):
      raise TypeError(f"code must be a str, got {type(code).__name__}")
    limit = self.timeout_s if timeout_s is None else float(timeout_s)
    with self._lock:
      if self.closed:
        raise RuntimeError("this ProgramRuntime is closed; start a new one for a new episode")
      self.executions += 1
      return self._run_locked(code, limit)

  def restart(self) -> None:
    """Kills the kernel and starts a fresh one in the same workspace (variables are lost)."""
    with self._lock:
      self._restart_locked()

  def close(self) -> None:
    """Ends the episode: kills every process of it, stops the proxy, removes the runtime files."""
    with self._lock:
      if self.closed:
        return
      self.closed = True
      k, self._kernel = self._kernel, None
      if k is not None:
        self._stop_kernel(k)
      server = getattr(self, "_tool_server", None)
      if server is not None:
        server.close()
      self._spawner.shutdown(wait=True)
      shutil.rmtree(self.scratch_dir, ignore_errors=True)

  def __enter__(self) -> "ProgramRuntime":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def __del__(self):
    try:
      if not self.closed:
        self.close()
    except Exception:
      pass

  # --- kernel lifecycle --------------------------------------------------------------------

  def _start_kernel(self) -> _Kernel:
    return self._spawner.submit(self._start_kernel_on_spawner).result()

  def _start_kernel_on_spawner(self) -> _Kernel:
    from jupyter_client import BlockingKernelClient
    t0 = time.monotonic()
    self._generation += 1
    kname = f"k{self._generation}"
    kdir = os.path.join(self.runtime_dir, kname)
    os.makedirs(kdir)
    key = secrets.token_hex(32)
    info = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
            "transport": "ipc", "key": key, "signature_scheme": "hmac-sha256", "kernel_name": ""}
    inside = dict(info, ip=f"{self._inside_dir}/{kname}/k")
    host = dict(info, ip=os.path.join(kdir, "k"))
    conn_file = os.path.join(kdir, "kernel.json")
    fd = os.open(conn_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
      json.dump(inside, f)
    rd = self._inside_dir
    env = (("IPYTHONDIR", f"{rd}/ipython"), ("JUPYTER_RUNTIME_DIR", f"{rd}/jupyter"),
           ("JUPYTER_CONFIG_DIR", f"{rd}/jupyter"), ("JUPYTER_DATA_DIR", f"{rd}/jupyter"),
           ("MPLCONFIGDIR", f"{rd}/mpl"), ("MPLBACKEND", "Agg"),
           ("PYDEVD_DISABLE_FILE_VALIDATION", "1"), ("JUPYTER_PLATFORM_DIRS", "1"))
    cfg = self.sandbox_config._replace(env=tuple(self.sandbox_config.env) + env)
    sandbox = Sandbox(cfg, workspace=self.workspace_dir)
    try:
      argv = [sys.executable, "-m", "ipykernel_launcher", "-f", f"{rd}/{kname}/kernel.json",
              "--IPKernelApp.quiet=True", "--HistoryManager.enabled=False",
              "--IPKernelApp.parent_handle=0"]
      if cfg.enabled:
        ws_tmp = os.path.join(self.workspace_dir, "tmp")
        had_tmp = os.path.lexists(ws_tmp)
        cmd = _rebind_tmp(_strip_project_mounts(sandbox.command(argv)), ws_tmp, self.scratch_dir)
        if not had_tmp:  # bwrap_argv created it for its /tmp bind, which now points elsewhere
          try:
            os.rmdir(ws_tmp)
          except OSError:
            pass
        child_env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
      else:
        cmd = argv
        child_env = dict(os.environ)
        child_env.update(dict(env))
        cmd[cmd.index("-f") + 1] = conn_file
      log_path = os.path.join(kdir, "kernel.log")
      with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, env=child_env,
                                cwd=self.workspace_dir if not cfg.enabled else None)
    except BaseException:
      sandbox.close()
      raise
    client = BlockingKernelClient()
    client.load_connection_info(host)
    kernel = _Kernel(sandbox, proc, client, log_path)
    try:
      client.start_channels()
      self._wait_ready(kernel, t0)
      kernel.kernel_pid = self._find_kernel_pid(proc.pid)
      self._prelude(kernel, kname)
    except BaseException:
      self._stop_kernel(kernel)
      raise
    _log.debug("kernel %s ready in %.2f s (pid %s, %s)", kname, time.monotonic() - t0,
               kernel.kernel_pid, sandbox.limits)
    return kernel

  def _log_tail(self, kernel: _Kernel) -> str:
    try:
      with open(kernel.log_path, "rb") as f:
        data = f.read()
    except OSError:
      return ""
    return data[-_STDERR_TAIL_CHARS:].decode("utf-8", "replace").strip()

  def _wait_ready(self, kernel: _Kernel, t0: float) -> None:
    """Sends kernel_info until the kernel answers on the shell channel."""
    client = kernel.client
    deadline = t0 + self.start_timeout_s
    while True:
      if not kernel.alive():
        raise RuntimeStartError(f"the kernel exited during start (exit code {kernel.proc.returncode}"
                                f"{self._limit_note(kernel)}); log tail:\n{self._log_tail(kernel)}")
      if time.monotonic() > deadline:
        raise RuntimeStartError(f"the kernel did not answer within {self.start_timeout_s:.0f} s; "
                                f"log tail:\n{self._log_tail(kernel)}")
      msg_id = client.kernel_info()
      try:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
          reply = client.get_shell_msg(timeout=0.25)
          if reply["parent_header"].get("msg_id") == msg_id:
            return
      except queue.Empty:
        continue

  @staticmethod
  def _find_kernel_pid(launcher_pid: int) -> int | None:
    import psutil
    try:
      for p in psutil.Process(launcher_pid).children(recursive=True):
        try:
          if "ipykernel_launcher" in p.cmdline():
            return p.pid
        except psutil.Error:
          continue
      if "ipykernel_launcher" in psutil.Process(launcher_pid).cmdline():
        return launcher_pid
    except psutil.Error:
      return None
    return None

  def _prelude(self, kernel: _Kernel, kname: str) -> None:
    """Loads the proxy into the kernel and binds `tools`, `ToolError`; plain tracebacks."""
    src = (pathlib.Path(tool_proxy.__file__)).read_text()
    code = "\n".join([
        "def __progagent_setup(src, sock, tool_list):",
        "    import sys, types",
        "    ip = get_ipython()",
        "    mod = types.ModuleType('_progagent_tool_proxy')",
        f"    mod.__file__ = {tool_proxy._PROXY_FILENAME!r}",
        "    sys.modules[mod.__name__] = mod",
        f"    exec(compile(src, {tool_proxy._PROXY_FILENAME!r}, 'exec'), mod.__dict__)",
        "    mod.install(ip.user_ns, sock, tool_list, kernel=ip.kernel)",
        "    ip.run_line_magic('colors', 'nocolor')",
        "    ip.run_line_magic('xmode', 'Plain')",
        f"__progagent_setup({src!r}, {self._inside_dir + '/tools.sock'!r}, "
        f"__import__('json').loads({json.dumps(self._tool_server.tool_list)!r}))",
        "del __progagent_setup",
    ])
    status, out, err = self._execute(kernel, code, self.start_timeout_s, silent=True)
    if status != "ok":
      raise RuntimeStartError(f"the runtime's prelude failed in the kernel: {err}\n{out}")

  def _stop_kernel(self, kernel: _Kernel) -> None:
    try:
      kernel.client.stop_channels()
    except Exception:
      pass
    kernel.sandbox.kill()
    if kernel.proc.poll() is None:
      try:
        os.killpg(kernel.proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    try:
      kernel.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      _log.warning("kernel launcher %s did not exit after SIGKILL", kernel.proc.pid)
    kernel.sandbox.close()
    shutil.rmtree(kernel.dir, ignore_errors=True)

  def _restart_locked(self) -> None:
    k, self._kernel = self._kernel, None
    if k is not None:
      self._stop_kernel(k)
    self.restarts += 1
    self._kernel = self._start_kernel()

  def _limit_note(self, kernel: _Kernel) -> str:
    notes = []
    if kernel.sandbox.oom_killed():
      notes.append(f"killed at the memory limit ({kernel.sandbox.limits})")
    if kernel.sandbox.pids_limit_hit():
      notes.append(f"the process limit was reached ({kernel.sandbox.limits})")
    return "; " + "; ".join(notes) if notes else ""

  def _interrupt(self, kernel: _Kernel) -> None:
    pid = kernel.kernel_pid
    if pid is None:
      return
    try:
      pgid = os.getpgid(pid)
      if pgid == pid:
        os.killpg(pgid, signal.SIGINT)
      else:
        os.kill(pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
      pass

  # --- execution ---------------------------------------------------------------------------

  def _execute(self, kernel: _Kernel, code: str, limit_s: float, *, silent: bool = False,
               buf: OutputBuffer | None = None) -> tuple[str, str, str | None]:
    """Runs code; returns (status, output, error) with status 'ok' | 'error' | 'timeout' | 'died'."""
    client = kernel.client
    buf = buf if buf is not None else OutputBuffer(self.max_output_chars, self.truncation)
    msg_id = client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                            stop_on_error=False)
    self._last_msg_id = msg_id
    deadline = time.monotonic() + limit_s
    error = None
    status = "ok"
    while True:
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        return "timeout", buf.getvalue(), error
      try:
        msg = client.get_iopub_msg(timeout=min(remaining, 0.2))
      except queue.Empty:
        if not kernel.alive():
          return "died", buf.getvalue(), error
        continue
      if msg["parent_header"].get("msg_id") != msg_id:
        continue
      t, c = msg["msg_type"], msg["content"]
      if t == "stream":
        buf.write(c.get("text", ""))
      elif t in ("execute_result", "display_data"):
        text = c.get("data", {}).get("text/plain")
        if text is not None:
          buf.write(_ANSI_RE.sub("", text) + "\n")
      elif t == "error":
        status = "error"
        error = f"{c.get('ename', 'Error')}: {c.get('evalue', '')}".rstrip(": ") or "Error"
        buf.write(_clean_traceback(c.get("traceback") or []))
      elif t == "status" and c.get("execution_state") == "idle":
        self._drain_shell(client)
        return status, buf.getvalue(), error

  @staticmethod
  def _drain_shell(client: Any) -> None:
    while True:
      try:
        client.get_shell_msg(timeout=0)
      except queue.Empty:
        return

  def _wait_idle(self, kernel: _Kernel, grace_s: float, buf: OutputBuffer) -> tuple[bool, str | None]:
    """After an interrupt: waits for the run's 'idle'; returns (idle, error name)."""
    client = kernel.client
    deadline = time.monotonic() + grace_s
    error = None
    while time.monotonic() < deadline:
      try:
        msg = client.get_iopub_msg(timeout=0.1)
      except queue.Empty:
        if not kernel.alive():
          return False, error
        continue
      if msg["parent_header"].get("msg_id") != self._last_msg_id:
        continue
      t, c = msg["msg_type"], msg["content"]
      if t == "stream":
        buf.write(c.get("text", ""))
      elif t == "error":
        error = c.get("ename")
        buf.write(_clean_traceback(c.get("traceback") or []))
      elif t == "status" and c.get("execution_state") == "idle":
        self._drain_shell(client)
        return True, error
    return False, error

  def _run_locked(self, code: str, limit_s: float) -> ExecResult:
    if self._kernel is None or not self._kernel.alive():
      self._restart_locked()
      lost = True
    else:
      lost = False
    kernel = self._kernel
    calls0 = self._tool_server.calls
    buf = OutputBuffer(self.max_output_chars, self.truncation)
    status, _, error = self._execute(kernel, code, limit_s, buf=buf)
    timed_out = restarted = False
    notes = []
    if lost:
      restarted = True
      notes.append("[runtime] The previous kernel had exited, so this program ran in a fresh one: "
                   "variables from earlier programs are lost (files in /workspace are kept).")
    if status == "timeout":
      timed_out = True
      self._interrupt(kernel)
      idle, _ = self._wait_idle(kernel, self.interrupt_grace_s, buf)
      if idle:
        error = f"TimeoutError: the program ran longer than {limit_s:g} s and was interrupted"
        notes.append(f"[runtime] The program exceeded the {limit_s:g} s time limit and was "
                     "interrupted (KeyboardInterrupt). Variables assigned before the interruption "
                     "are kept.")
      else:
        restarted = True
        self._restart_locked()
        error = (f"KernelRestarted: the program ran longer than {limit_s:g} s and ignored the "
                 "interrupt, so the kernel was restarted")
        notes.append(f"[runtime] The program exceeded the {limit_s:g} s time limit and did not stop "
                     "when interrupted, so the Python kernel was restarted: all variables, imports "
                     "and functions defined by earlier programs are lost (files in /workspace are "
                     "kept). Re-create what you need.")
    elif status == "died":
      code_ = kernel.proc.poll()
      why = self._limit_note(kernel)
      restarted = True
      self._restart_locked()
      error = f"KernelRestarted: the Python kernel died (exit code {code_}{why})"
      notes.append(f"[runtime] The Python kernel died while running this program (exit code "
                   f"{code_}{why}) and was restarted: all variables, imports and functions defined "
                   "by earlier programs are lost (files in /workspace are kept).")
    out = buf.getvalue()
    if notes:
      out = (out + ("\n" if out and not out.endswith("\n") else "") + "\n".join(notes) + "\n")
    return ExecResult(output=out, error=error, timed_out=timed_out, restarted=restarted,
                      tool_calls=self._tool_server.calls - calls0, truncated_chars=buf.cut)
