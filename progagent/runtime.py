"""ProgAgent's programmatic tool-calling runtime: one persistent, sandboxed IPython kernel per episode.

  with ProgramRuntime(backend, workspace_dir=ws) as rt:
    r = rt.run('rows = tools["query"](sql="select 1")\\nprint(len(rows))')
    r.output, r.error, r.timed_out, r.restarted, r.tool_calls, r.truncated_chars

The kernel process itself (launch, readiness, prelude, stop) lives in progagent/kernel_launch.py.

Source: ProgAgent (2026), "Runtime" (SPEC.md, ProgAgent): a persistent IPython kernel per episode, a
tool proxy routing `tools["name"](...)` to the environment's tools and returning native Python
objects, Bubblewrap isolation with cgroup limits (2 GiB, 256 processes), printed output cut to
50,000 characters, 120 s per evaluation, verifiers and oracles never mounted, episodes isolated.

Layout of one episode:

  host (this process)                               sandbox (common/sandbox.py: bwrap + cgroup)
  ProgramRuntime                                    python -m ipykernel_launcher (pid 1's child)
    kernel_wire.KernelClient             <-- ZMTP on Unix sockets -->  shell/iopub (connected once)
    tool_proxy.ToolServer (thread)       <-- Unix socket, JSON lines --  tools["name"](**kw)
    tool backend (MCP client, env, functions)
  <workspace_dir>/           = /workspace inside (the task's files; read-write; the runtime
                               adds nothing to it): for the episode a tmpfs of workspace_max_bytes
                               mounted over the caller's folder, its files copied in as the sandbox
                               user's and back at close() with the owners and modes they had
  <base>/                    = <tmp>/agentrl-pa-<pid>-*, the host's (root, 0700): removed by this
                               process's reaper if it is killed (common.sandbox_cgroup)
  <base>/tmp/                = /tmp inside (read-write), kept across kernel restarts: a tmpfs of
                               tmp_max_bytes, root-owned and sticky (01777) like a machine's /tmp
  <base>/run/                = /tmp/.progagent inside, READ-ONLY there: the tool socket
                               (tools.sock) and each kernel's log (kN.log), out of the program's reach
  <base>/run/kN/             = /tmp/.progagent/kN inside (read-write): kernel N's connection file,
                               ZMQ sockets, IPython/Jupyter/matplotlib folders; a fresh tmpfs of
                               kernel_launch.KERNEL_DIR_MAX_BYTES per kernel, removed when it stops

Host side of folders a program can write (README, "Security"): each is a tmpfs of fixed size and file
count (common/sandbox_fs.py; `Sandbox.quota_paths` lists them), so a write, fallocate or held-open
file past the budget fails at once (ENOSPC) and a kernel can start again however full /tmp and
/workspace are. The host never opens a path there by name after the program has run: the workspace
is written back through descriptors (no link followed), the others are unmounted. The mount points
under /tmp (/tmp/.progagent, parents of read-only paths) are root-owned folders the host makes in
the sticky /tmp before each start, which the program can neither rename nor replace.

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
  Python environment, and the code of common/tool_wire.py and progagent/tool_proxy.py is sent into
  the kernel as source at start. Another
  episode's workspace is never mounted, and each episode has its own kernel, PID namespace and
  cgroup, so neither its files nor its variables nor its processes are reachable. Programs import
  from the project's Python environment (numpy, ...), not from the project. The only way out of
  the sandbox is the tool socket, which answers the listed tools and nothing else.
* Timeout (`timeout_s`, default 120 s): SIGINT to the kernel's process group (KeyboardInterrupt in
  the program, and in a child it waits on); if the kernel is not idle within `interrupt_grace_s`
  (default 5 s, times the load factor), every process of the episode is killed and a fresh kernel
  started in the same workspace; the output then tells the program's author that variables were lost (files kept).
  A kernel that dies by itself (os._exit, the memory limit) is restarted the same way.
* input() and getpass() raise at once (allow_stdin=False, with a readable message); stdin is
  /dev/null, so sys.stdin.read() returns ''.
* Programs run by common.tool_wire.run_program inside the kernel (progagent.tool_proxy.run_cell),
  the rule the in-process runtime applies too, so both show the same observation for the same
  program: plain Python (no IPython magics), stdout and stderr in one stream in write order, a
  final expression shown as its repr, tracebacks with the program's frames only. Output is cut by
  common.tool_wire.OutputBuffer to `max_output_chars` characters (first and last halves kept, a
  marker line between; `truncation='head'` keeps the beginning instead). Display data
  (text/plain) is kept too. Runtime notices (timeout, restart) are appended after the cut and
  never cut.
* Start-up waits scale with the machine (progagent/kernel_launch.py: `start_timeout_s`, default
  120 s or $PROGAGENT_START_TIMEOUT_S, times the load factor `wait_scale()`); the kernel counts as
  ready only once it answers on the shell channel and its status reaches the iopub channel.
* Between programs: once a program has returned, every process of the episode (the kernel, the
  threads and children the program left running) is frozen with the cgroup freezer (v1 freezer
  hierarchy, or v2 cgroup.freeze) and thawed when the next program starts, so nothing runs between
  turns. Without cgroups (SandboxConfig.cgroup 'rlimit'/'none') there is no freezer and they run on.
* End of episode (`close`): the cgroup is killed (every process the program started, however it
  detached), the launcher's process group too, and bubblewrap's PID namespace dies with its init;
  the workspace is written back to the caller's folder and unmounted; <base> (/tmp and the runtime
  directory) is unmounted and removed. If this process is SIGKILLed (between turns too, with the
  episode frozen), its reaper does the same within about a second, except that the workspace is
  not written back: the caller's folder is left as it was before the episode.
* /tmp is the runtime's own scratch tmpfs (Sandbox(tmp=...)), so that the task's workspace holds
  only the task's files and what programs write there (file-listing tools and verifiers see no
  runtime files), and so that socket paths stay short whatever the workspace path.
* The host's client connects by path to sockets in the kernel's writable folder, so it connects
  once, before any program runs, and never again (kernel_launch.connect_client: shell and iopub only,
  each file checked to be a socket of the sandbox user and each peer by its uid, no heartbeat
  channel). It speaks ZMTP itself (progagent.kernel_wire) and reads a frame at a time: a message past
  MAX_FRAMES, MAX_MESSAGE_BYTES or the JSON limits is refused before the host holds or parses it. A
  dropped connection counts as a dead kernel (Kernel.alive()): the kernel is restarted in a fresh
  folder, like after a crash, and the program's error names why. Replacing the socket files with links
  to another Unix socket of the host therefore reaches nothing.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import Any

from common import sandbox_fs
from common import sandbox_guard
from common import tool_wire
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_launch as kl
from progagent import tool_proxy

ExecResult = tool_wire.ExecResult              # re-exported: what run() returns
OutputBuffer = tool_wire.OutputBuffer
RuntimeStartError = kl.RuntimeStartError

_log = logging.getLogger(__name__)


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
    interrupt_grace_s: seconds an interrupted program has to stop before the kernel is restarted
      (times the load factor kernel_launch.wait_scale(), measured at construction).
    start_timeout_s: seconds allowed for the kernel to start and load the prelude, times the load
      factor; None: $PROGAGENT_START_TIMEOUT_S, else 120 (kernel_launch.DEFAULT_START_TIMEOUT_S).
    truncation: 'head_tail' (keep the first and last halves) or 'head' (keep the beginning).
    workspace_cap: the workspace's capped folder (common.sandbox_fs.CappedDir over workspace_dir), when the
      caller holds it because other sandboxes bind the same folder (the MCP servers of
      progagent.mcp_servers): used as it is and left open at close(); None: the runtime mounts its own.
  Start-up: the kernel is launched at once; `tool_backend.tools()` is first read once the kernel is up,
  right before the prelude that binds `tools` (so a backend still starting, e.g. an McpServerGroup,
  starts while the kernel does).
  Raises:
    RuntimeStartError: the kernel did not start (its log's tail attached).
    TypeError: tool_backend has neither surface.
  """

  def __init__(self, tool_backend: Any, *, workspace_dir: str, timeout_s: float = 120.0,
               max_output_chars: int = 50_000, sandbox: SandboxConfig = SandboxConfig(),
               interrupt_grace_s: float = 5.0, start_timeout_s: float | None = None,
               truncation: str = "head_tail", workspace_cap: sandbox_fs.CappedDir | None = None):
    if timeout_s <= 0:
      raise ValueError(f"timeout_s={timeout_s} must be > 0")
    tool_wire.OutputBuffer(max_output_chars, truncation)  # validates both
    self.backend = tool_proxy.as_backend(tool_backend)
    self.workspace_dir = os.path.abspath(workspace_dir)
    os.makedirs(self.workspace_dir, exist_ok=True)
    self.timeout_s = float(timeout_s)
    self.max_output_chars = int(max_output_chars)
    self.truncation = truncation
    self.wait_scale = kl.wait_scale()
    self.interrupt_grace_s = float(interrupt_grace_s) * self.wait_scale
    self.start_timeout_s = (kl.default_start_timeout_s() if start_timeout_s is None
                            else float(start_timeout_s)) * self.wait_scale
    self.sandbox_config = sandbox
    # <tmp>/agentrl-pa-<pid>-*: removed by this process's reaper (common.sandbox_cgroup) if it is killed.
    self.base_dir = sandbox_guard.owned_tempdir("pa")
    self.scratch_dir = os.path.join(self.base_dir, "tmp")
    self.runtime_dir = os.path.join(self.base_dir, "run")
    probe = os.path.join(self.runtime_dir, "k9999", "k-1")
    if len(probe.encode()) > kl.MAX_SOCKET_PATH:
      shutil.rmtree(self.base_dir, ignore_errors=True)
      raise ValueError(f"the temporary directory {tempfile.gettempdir()!r} is too long for Unix "
                       f"socket paths ({len(probe)} > {kl.MAX_SOCKET_PATH} bytes with the runtime's "
                       "suffix); point TMPDIR at a shorter one")
    self._inside_dir = (kl.RUNTIME_DIR_INSIDE if sandbox.enabled else self.runtime_dir)
    self._lock = threading.Lock()
    self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="progagent-spawn")
    self._kernel: kl.Kernel | None = None
    self._generation = 0
    self.closed = False
    self.restarts = 0
    self.executions = 0
    self._ws_cap: sandbox_fs.CappedDir | None = None
    self._own_ws_cap = workspace_cap is None
    self._scratch_cap: sandbox_fs.CappedDir | None = None
    self._tool_server: tool_proxy.ToolServer | None = None
    self._tool_socket = os.path.join(self.runtime_dir, "tools.sock")
    os.mkdir(self.scratch_dir, 0o700)
    os.mkdir(self.runtime_dir, 0o755)
    try:
      if sandbox.enabled:
        # /tmp: root-owned and sticky like a machine's /tmp, so that the mount points the host makes in
        # it (/tmp/.progagent) stay the host's; kept across kernel restarts.
        self._scratch_cap = sandbox_fs.CappedDir(
            self.scratch_dir, "tmp", max_bytes=sandbox.tmp_max_bytes, max_files=sandbox.workspace_max_files,
            uid=0, gid=0, mode=0o1777, limits=("SandboxConfig.tmp_max_bytes", "SandboxConfig.workspace_max_files"))
        if workspace_cap is not None:
          if os.path.abspath(workspace_cap.path) != self.workspace_dir:
            raise ValueError(f"workspace_cap is mounted at {workspace_cap.path}, not at workspace_dir "
                             f"{self.workspace_dir}")
          self._ws_cap = workspace_cap
        else:
          self._ws_cap = sandbox_fs.CappedDir(
              self.workspace_dir, "ws", max_bytes=sandbox.workspace_max_bytes,
              max_files=sandbox.workspace_max_files, uid=sandbox.uid, gid=sandbox.gid, keep=True,
              limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
      self._kernel = self._start_kernel()
    except BaseException:
      self.close()
      raise

  # --- public API --------------------------------------------------------------------------

  @property
  def tool_list(self) -> list[dict]:
    """The MCP tool entries the program sees as `tools`."""
    return [dict(t) for t in self._tools_server().tool_list]

  def _tools_server(self) -> tool_proxy.ToolServer:
    """The tool socket's server, made at its first use (the backend's tools() is read then)."""
    if self._tool_server is None:
      if self.closed:
        raise RuntimeError("this ProgramRuntime is closed")
      self._tool_server = tool_proxy.ToolServer(self.backend, self._tool_socket)
    return self._tool_server

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
      self._freeze(False)
      try:
        return self._run_locked(code, limit)
      finally:
        self._freeze(True)

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
        k.stop()
      server = getattr(self, "_tool_server", None)
      if server is not None:
        server.close()
      self._spawner.shutdown(wait=True)
      try:
        if self._scratch_cap is not None:
          self._scratch_cap.close()
        if self._ws_cap is not None and self._own_ws_cap:  # written back, owners and modes as they were
          self._ws_cap.close()
      finally:
        # base_dir is the host's (root, in the host's /tmp); rmtree's fd-based walk follows no link.
        shutil.rmtree(self.base_dir, ignore_errors=True)

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

  def _freeze(self, frozen: bool) -> None:
    """Between programs every process of the episode is frozen (cgroup freezer), thawed before
    the next; without a freezer (no cgroups) they keep running (README, "Security")."""
    k = self._kernel
    cg = k.sandbox.cgroup if k is not None and k.sandbox is not None else None
    if cg is None:
      return
    if frozen:
      cg.freeze()
    else:
      cg.thaw()

  def _start_kernel(self) -> kl.Kernel:
    return self._spawner.submit(self._start_kernel_on_spawner).result()

  def _start_kernel_on_spawner(self) -> kl.Kernel:
    self._generation += 1
    name = f"k{self._generation}"
    return kl.start_kernel(name=name, kernel_dir=os.path.join(self.runtime_dir, name),
                           inside_dir=self._inside_dir, workspace_dir=self.workspace_dir,
                           scratch_dir=self.scratch_dir, sandbox_config=self.sandbox_config,
                           tool_list=lambda: self._tools_server().tool_list,
                           start_timeout_s=self.start_timeout_s, scale=self.wait_scale,
                           workspace_cap=self._ws_cap, scratch_cap=self._scratch_cap)

  def _restart_locked(self) -> None:
    k, self._kernel = self._kernel, None
    if k is not None:
      k.stop()
    self.restarts += 1
    self._kernel = self._start_kernel()

  # --- execution ---------------------------------------------------------------------------

  def _wait_idle(self, kernel: kl.Kernel, grace_s: float,
                 buf: tool_wire.OutputBuffer) -> tuple[bool, str | None]:
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
      elif t == "error":  # raised outside the program (between its end and the report)
        error = c.get("ename")
        buf.write(kl.clean_traceback(c.get("traceback") or []))
      elif t == "status" and c.get("execution_state") == "idle":
        kl.drain_shell(client)
        return True, error
    return False, error

  def _run_locked(self, code: str, limit_s: float) -> ExecResult:
    if self._kernel is None or not self._kernel.alive():
      self._restart_locked()
      lost = True
    else:
      lost = False
    kernel = self._kernel
    calls0 = self._tools_server().calls
    buf = tool_wire.OutputBuffer(self.max_output_chars, self.truncation)
    cell = f"__import__('_progagent_tool_proxy').run_cell({code!r})"
    status, error, self._last_msg_id = kl.execute(kernel, cell, limit_s, buf)
    timed_out = restarted = False
    notes = []
    if lost:
      restarted = True
      notes.append("[runtime] The previous kernel had exited, so this program ran in a fresh one: "
                   "variables from earlier programs are lost (files in /workspace are kept).")
    if status == "timeout":
      timed_out = True
      kernel.interrupt()
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
      code_ = kernel.exit_code()
      why = kernel.limit_note()
      restarted = True
      self._restart_locked()
      broke = kernel.client.misbehaved if kernel.client is not None else None
      if broke:  # the kernel sent what the host refuses (progagent.kernel_wire's limits)
        error = f"KernelRestarted: the host dropped its connection to the Python kernel: {broke}"
        what = f"The host stopped the Python kernel while it ran this program ({broke})"
      else:
        error = f"KernelRestarted: the Python kernel died (exit code {code_}{why})"
        what = f"The Python kernel died while running this program (exit code {code_}{why})"
      notes.append(f"[runtime] {what} and restarted it: all variables, imports and functions defined "
                   "by earlier programs are lost (files in /workspace are kept).")
    out = buf.getvalue()
    if notes:
      out = (out + ("\n" if out and not out.endswith("\n") else "") + "\n".join(notes) + "\n")
    return ExecResult(output=out, error=error, timed_out=timed_out, restarted=restarted,
                      tool_calls=self._tools_server().calls - calls0, truncated_chars=buf.cut)
