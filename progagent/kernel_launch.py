"""Starting, talking to and stopping one sandboxed IPython kernel (the process half of progagent.runtime).

`start_kernel(...)` launches `python -m ipykernel_launcher` under common.sandbox (bubblewrap + cgroup)
with ZMQ `ipc` sockets in the episode's runtime directory, waits until the kernel answers on both the
shell and the iopub channel, and loads the prelude (common.tool_wire and progagent.tool_proxy, sent as
source) that binds `tools` and `ToolError`. `execute(...)` runs one cell and collects its output;
`Kernel.stop()` kills every process of it. The design and its reasons are in progagent/runtime.py.

The host's client (`connect_client`, progagent.kernel_wire: ZMTP spoken over plain Unix sockets, so
that what the kernel sends is read a frame at a time within fixed bounds) connects by path to socket
files in the kernel's folder, which the program can write. So it connects exactly once, before any
program runs: only the shell and iopub channels (no stdin, control or heartbeat channel: the heartbeat
would reopen its socket by path after each missed beat), each socket file checked first with lstat
beneath the folder's O_NOFOLLOW descriptor (a Unix socket owned by the sandbox user) and each peer by
its uid (SO_PEERCRED); it never reconnects. A closed connection, or a message past kernel_wire's
limits, drops the channels, and `Kernel.alive()` then answers False: the runtime restarts the kernel
in a fresh folder, as after a crash, naming why. A program that replaces the socket files with links
therefore cannot make the host connect to another Unix socket of the host
(tests/security_kernel_test.py).

Start-up waits scale with the machine (tests and rollouts run beside other CPU-heavy work): the kernel
start limit is `start_timeout_s` (default DEFAULT_START_TIMEOUT_S = 120 s, or the environment variable
PROGAGENT_START_TIMEOUT_S) times `wait_scale()`, the 1-minute load average per CPU when above 1, times
PROGAGENT_WAIT_SCALE (default 1). The same factor stretches the interrupt grace period. A program's own
time limit (timeout_s) is never scaled: it is part of the task.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import queue
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from typing import Any

from common import sandbox_fs, tool_wire
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_wire
from progagent import tool_proxy

_log = logging.getLogger("progagent.runtime")

_PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNTIME_DIR_INSIDE = "/tmp/.progagent"
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; ZMQ appends "-N"
_LOG_TAIL_CHARS = 3000
DEFAULT_START_TIMEOUT_S = 120.0
CHANNELS = ("shell", "iopub")  # the only channels the host connects (see the module docstring)
# Each kernel's own folder (/tmp/.progagent/kN: its sockets, IPython, Jupyter and matplotlib state) is a
# fresh tmpfs of this size and file count, so that a kernel can start however full /tmp and /workspace are.
KERNEL_DIR_MAX_BYTES = 16 * 1024 ** 2
KERNEL_DIR_MAX_FILES = 1000
MAX_DRAIN_MESSAGES = 1000      # shell messages read after a cell at most (a flooding kernel ends the drain)


class RuntimeStartError(RuntimeError):
  """The kernel did not come up; the message says what happened and carries the tail of its log."""


def wait_scale() -> float:
  """Factor for start-up waits: max(1, load average (1 min) / CPUs) x $PROGAGENT_WAIT_SCALE (default 1).

  Raises:
    ValueError: PROGAGENT_WAIT_SCALE is not a positive number.
  """
  try:
    load = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
  except OSError:
    load = 1.0
  extra = float(os.environ.get("PROGAGENT_WAIT_SCALE", "1"))
  if not extra > 0:
    raise ValueError(f"PROGAGENT_WAIT_SCALE={extra} must be > 0")
  return max(1.0, load) * extra


def default_start_timeout_s() -> float:
  """$PROGAGENT_START_TIMEOUT_S, else DEFAULT_START_TIMEOUT_S (before wait_scale())."""
  return float(os.environ.get("PROGAGENT_START_TIMEOUT_S", DEFAULT_START_TIMEOUT_S))


def load_note() -> str:
  """ "load average L on N CPUs", for messages about waits that ran out."""
  try:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
  except OSError:
    return f"{os.cpu_count()} CPUs"


def strip_project_mounts(argv: list[str], keep: tuple[str, ...] = ()) -> list[str]:
  """Drops the sandbox's read-only mounts of the project's own packages (verifiers, oracles...).

  Keeps the Python environment (sys.prefix, which may live under the project root), the paths in `keep`
  (and what lies beneath them: files a caller mounts on purpose, e.g. an MCP server's script) and
  everything outside the project root. The tmpfs common.sandbox mounts over a checkout under /tmp becomes
  a plain folder (0755, the parent of a Python environment kept inside it).
  """
  root = str(_PROJECT_ROOT)
  keep_prefixes = {os.path.realpath(sys.prefix), sys.prefix} | {os.path.abspath(p) for p in keep}
  out = []
  i = 0
  while i < len(argv):
    a = argv[i]
    if a == "--":
      out.extend(argv[i:])
      break
    if a == "--ro-bind" and i + 2 < len(argv):
      src = argv[i + 1]
      inside = src == root or src.startswith(root + os.sep)
      if inside and not any(src == p or src.startswith(p + os.sep) for p in keep_prefixes):
        i += 3
        continue
    if a == "--tmpfs" and argv[i + 1:i + 2] == [root]:
      out += ["--dir", root]
      i += 2
      continue
    if a == "--remount-ro" and argv[i + 1:i + 2] == [root]:
      i += 2
      continue
    out.append(a)
    i += 1
  return out


def clean_traceback(frames: list[str]) -> str:
  """Joins ipykernel's traceback entries without ANSI colours and without the prelude's own frames."""
  keep = [f for f in frames if tool_proxy.PROXY_FILENAME not in f and tool_proxy.WIRE_FILENAME not in f]
  return ANSI_RE.sub("", "".join(keep))


class Kernel:
  """One kernel process in one sandbox, and its client."""

  def __init__(self, sandbox: Sandbox, proc: subprocess.Popen, client: Any, log_path: str,
               kernel_dir: str | None = None, cap: sandbox_fs.CappedDir | None = None):
    self.dir = kernel_dir or os.path.dirname(log_path)
    self.cap = cap  # the kernel folder's tmpfs (None without a sandbox)
    self.sandbox = sandbox
    self.proc = proc
    self.client = client
    self.log_path = log_path
    self.kernel_pid: int | None = None
    self.dropped: str | None = None  # why the host's channels to the kernel dropped (never re-made)

  def alive(self) -> bool:
    """The kernel process runs and none of the host's connections to it has dropped."""
    if self.dropped is None and self.client is not None:
      self.dropped = self.client.check()
    return self.dropped is None and self.proc.poll() is None

  def exit_code(self, wait_s: float = 2.0) -> int | None:
    """The launcher's exit code, or None while it runs. After the kernel closed its connection (not after
    a refused message), waits up to wait_s for it: a dying kernel's sockets close a moment before its
    sandbox exits."""
    if self.dropped and not (self.client is not None and self.client.misbehaved):
      try:
        return self.proc.wait(timeout=wait_s)
      except subprocess.TimeoutExpired:
        return None
    return self.proc.poll()

  def log_tail(self) -> str:
    try:
      with open(self.log_path, "rb") as f:
        data = f.read()
    except OSError:
      return ""
    return data[-_LOG_TAIL_CHARS:].decode("utf-8", "replace").strip() or "(empty)"

  def limit_note(self) -> str:
    """"; killed at the memory limit (...)" etc., or "": what is known of a dead kernel's end. Full folders are
    named as the program sees them (/workspace, /tmp; common.sandbox.Sandbox.quota_exceeded), as a state
    found afterwards, not as the cause."""
    notes = []
    if self.dropped:
      notes.append(f"its connection to the host dropped: {self.dropped}")
    if self.sandbox.oom_killed():
      notes.append(f"killed at the memory limit ({self.sandbox.limits})")
    if self.sandbox.pids_limit_hit():
      notes.append(f"the process limit was reached ({self.sandbox.limits})")
    full = self.sandbox.quota_exceeded()
    if full:  # a state, not a cause: a program may fill a folder and die of something else
      notes.append(f"found afterwards, not known to be the cause: {full}")
    return "; " + "; ".join(notes) if notes else ""

  def interrupt(self) -> None:
    """SIGINT to the kernel's process group (KeyboardInterrupt in the program)."""
    pid = self.kernel_pid
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

  def stop(self) -> None:
    """Kills every process of the kernel (cgroup, launcher group) and removes its directory."""
    try:
      if self.client is not None:
        self.client.stop_channels()
    except Exception:
      pass
    self.sandbox.kill()
    if self.proc.poll() is None:
      try:
        os.killpg(self.proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
    try:
      self.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      _log.warning("kernel launcher %s did not exit after SIGKILL", self.proc.pid)
    self.sandbox.close()
    if self.cap is not None:
      self.cap.close()
    # The kernel's folder (its tmpfs unmounted) is the host's: its parent, the runtime directory, is
    # read-only inside; shutil.rmtree's fd-based walk would follow no link anyway.
    shutil.rmtree(self.dir, ignore_errors=True)
    if self.log_path != os.path.join(self.dir, "kernel.log"):
      try:
        os.unlink(self.log_path)
      except OSError:
        pass


def socket_problem(path: str, uid: int) -> str | None:
  """Why `path` is not the kernel's socket: None if it is a Unix socket owned by `uid`.

  The file is lstat'ed beneath an O_NOFOLLOW descriptor of its folder (the kernel's folder, whose
  parents are the host's), so a link is reported, never followed. "missing" if it does not exist.
  """
  folder, name = os.path.split(path)
  try:
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
  except OSError as e:
    return f"{folder}: {e.strerror}"
  try:
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
  except FileNotFoundError:
    return "missing"
  except OSError as e:
    return f"{path}: {e.strerror}"
  finally:
    os.close(dfd)
  if not stat.S_ISSOCK(st.st_mode):
    return f"{path} is not a Unix socket (mode {stat.filemode(st.st_mode)})"
  if st.st_uid != uid:
    return f"{path} belongs to uid {st.st_uid}, not the kernel's uid {uid}"
  return None


def channel_path(info: dict, channel: str) -> str:
  """Host path of a channel's ipc socket, as jupyter_client names it (<ip>-<port>)."""
  return f"{info['ip']}-{info[channel + '_port']}"


def connect_client(info: dict, uid: int) -> kernel_wire.KernelClient:
  """A kernel_wire.KernelClient connected once to the kernel's shell and iopub sockets (host paths).

  Each socket file is checked with socket_problem() to be a socket of `uid` before it is connected, and
  its peer's uid again after (SO_PEERCRED); the client never reconnects, and no other channel is opened
  (jupyter_client would connect them by path after programs ran).

  Raises:
    RuntimeStartError: a socket file is missing, is not a socket of `uid`, or its peer does not speak
      ZMTP as a kernel's socket of `uid`.
  """
  paths = {}
  for channel in CHANNELS:
    path = channel_path(info, channel)
    why = socket_problem(path, uid)
    if why is not None:
      raise RuntimeStartError(f"refusing to connect the {channel} channel: {why}")
    paths[channel] = path
  try:
    return kernel_wire.KernelClient(info, paths, uid)
  except kernel_wire.WireError as e:
    raise RuntimeStartError(f"could not connect to the kernel's channels: {e}") from None


def _wait_sockets(kernel: Kernel, info: dict, uid: int, deadline: float, limit_s: float) -> None:
  """Waits until the kernel listens on its shell and iopub sockets (before any program runs).

  A client that never reconnects must connect after the kernel listens: each file is checked with
  socket_problem(), then a plain connect probes that listen() followed bind().
  """
  pending = [channel_path(info, ch) for ch in CHANNELS]
  while pending:
    if not kernel.alive():
      raise RuntimeStartError(f"the kernel exited during start (exit code {kernel.proc.returncode}"
                              f"{kernel.limit_note()}); log tail:\n{kernel.log_tail()}")
    if time.monotonic() > deadline:
      raise RuntimeStartError(f"the kernel did not open its sockets within {limit_s:.0f} s "
                              f"({load_note()}; set PROGAGENT_START_TIMEOUT_S or PROGAGENT_WAIT_SCALE "
                              f"to wait longer); log tail:\n{kernel.log_tail()}")
    why = socket_problem(pending[0], uid)
    if why is not None and why != "missing":
      raise RuntimeStartError(f"the kernel's socket is wrong: {why}")
    if why is None:
      with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
          probe.connect(pending[0])
          pending.pop(0)
          continue
        except OSError:  # bound, not yet listening
          pass
    time.sleep(0.02)


def drain_shell(client: Any) -> None:
  """Reads the shell replies already there (at most MAX_DRAIN_MESSAGES)."""
  for _ in range(MAX_DRAIN_MESSAGES):
    try:
      client.get_shell_msg(timeout=0)
    except queue.Empty:
      return


def execute(kernel: Kernel, code: str, limit_s: float, buf: tool_wire.OutputBuffer, *,
            silent: bool = False) -> tuple[str, str | None, str]:
  """Runs one cell; its output goes to `buf`.

  Returns:
    (status, error, msg_id): status 'ok' | 'error' | 'timeout' | 'died'; error None or "Name: message"
    (from progagent.tool_proxy.run_cell's ERROR_MIME report, or IPython's own error message).
  """
  client = kernel.client
  msg_id = client.execute(code, silent=silent, store_history=False, allow_stdin=False,
                          stop_on_error=False)
  deadline = time.monotonic() + limit_s
  error = None
  status = "ok"
  while True:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
      return "timeout", error, msg_id
    try:
      msg = client.get_iopub_msg(timeout=min(remaining, 0.2))
    except queue.Empty:
      if not kernel.alive():
        return "died", error, msg_id
      continue
    if msg["parent_header"].get("msg_id") != msg_id:
      continue
    t, c = msg["msg_type"], msg["content"]
    if t == "stream":
      buf.write(c.get("text", ""))
    elif t in ("execute_result", "display_data"):
      data = c.get("data", {})
      if tool_proxy.ERROR_MIME in data:
        error = (data[tool_proxy.ERROR_MIME] or {}).get("error")
        error = tool_wire.escape_surrogates(str(error))[0] if error else None  # valid Unicode, whatever was sent
        status = "error" if error else status
        continue
      text = data.get("text/plain")
      if text is not None:
        buf.write(ANSI_RE.sub("", text) + "\n")
    elif t == "error":
      status = "error"
      error = f"{c.get('ename', 'Error')}: {c.get('evalue', '')}".rstrip(": ") or "Error"
      error = tool_wire.escape_surrogates(error)[0]
      buf.write(clean_traceback(c.get("traceback") or []))
    elif t == "status" and c.get("execution_state") == "idle":
      drain_shell(client)
      return status, error, msg_id


def _wait_ready(kernel: Kernel, deadline: float, limit_s: float, scale: float) -> None:
  """Sends kernel_info until the kernel answers on the shell channel AND its status reaches iopub.

  Waiting for iopub too closes the ZMQ "slow joiner" gap: a subscription made just before the first
  request may not be live yet, and a cell's output (or its 'idle') published before it is lost.
  """
  client = kernel.client
  while True:
    if not kernel.alive():
      raise RuntimeStartError(f"the kernel exited during start (exit code {kernel.proc.returncode}"
                              f"{kernel.limit_note()}); log tail:\n{kernel.log_tail()}")
    if time.monotonic() > deadline:
      raise RuntimeStartError(f"the kernel did not answer within {limit_s:.0f} s ({load_note()}; "
                              "set PROGAGENT_START_TIMEOUT_S or PROGAGENT_WAIT_SCALE to wait longer); "
                              f"log tail:\n{kernel.log_tail()}")
    msg_id = client.kernel_info()
    replied = published = False
    end = min(deadline, time.monotonic() + 2.0 * scale)
    while time.monotonic() < end and not (replied and published):
      for get, flag in ((client.get_shell_msg, "replied"), (client.get_iopub_msg, "published")):
        try:
          msg = get(timeout=0.05)
        except queue.Empty:
          continue
        if msg["parent_header"].get("msg_id") == msg_id:
          if flag == "replied":
            replied = True
          else:
            published = True
    if replied and published:
      while True:  # the rest of this request's iopub messages (its 'idle')
        try:
          client.get_iopub_msg(timeout=0.05)
        except queue.Empty:
          break
      drain_shell(client)
      return


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


def _prelude_code(socket_inside: str, tool_list: list[dict]) -> str:
  """Loads tool_wire and the proxy into the kernel as modules; binds `tools`, `ToolError`."""
  wire_src = pathlib.Path(tool_wire.__file__).read_text()
  proxy_src = pathlib.Path(tool_proxy.__file__).read_text()
  return "\n".join([
      "def __progagent_setup(wire_src, proxy_src, sock, tool_list):",
      "    import sys, types",
      "    ip = get_ipython()",
      f"    for name, fname, src in (('_progagent_tool_wire', {tool_proxy.WIRE_FILENAME!r}, wire_src),",
      f"                             ('_progagent_tool_proxy', {tool_proxy.PROXY_FILENAME!r}, proxy_src)):",
      "        mod = types.ModuleType(name)",
      "        mod.__file__ = fname",
      "        sys.modules[name] = mod",
      "        exec(compile(src, fname, 'exec', dont_inherit=True), mod.__dict__)",
      "    sys.modules['_progagent_tool_proxy'].install(ip.user_ns, sock, tool_list, kernel=ip.kernel)",
      "    ip.run_line_magic('colors', 'nocolor')",
      "    ip.run_line_magic('xmode', 'Plain')",
      f"__progagent_setup({wire_src!r}, {proxy_src!r}, {socket_inside!r}, "
      f"__import__('json').loads({json.dumps(tool_list)!r}))",
      "del __progagent_setup",
  ])


def start_kernel(*, name: str, kernel_dir: str, inside_dir: str, workspace_dir: str, scratch_dir: str,
                 sandbox_config: SandboxConfig, tool_list: "list[dict] | Any", start_timeout_s: float,
                 scale: float, workspace_cap: sandbox_fs.CappedDir | None = None,
                 scratch_cap: sandbox_fs.CappedDir | None = None) -> Kernel:
  """Launches one kernel and loads the prelude (call from the runtime's spawner thread).

  Args:
    name: the kernel's name in the runtime directory ('k1', 'k2', ...).
    kernel_dir: host path of <runtime dir>/<name> (created here, a fresh tmpfs of KERNEL_DIR_MAX_BYTES;
      the kernel's only writable part of the runtime directory: ZMQ sockets, IPython's and Jupyter's
      folders). Its log is <runtime dir>/<name>.log, out of the program's reach.
    inside_dir: the runtime directory as the kernel sees it.
    workspace_dir, scratch_dir: host directories seen as /workspace and /tmp (without a sandbox).
    workspace_cap, scratch_cap: their size-capped tmpfs (common.sandbox_fs; the runtime's, kept across
      kernels); None with a sandbox: the sandbox caps the workspace itself and /tmp is a fresh tmpfs.
    sandbox_config: limits and isolation.
    tool_list: the tools bound as `tools`, or a callable returning them, called once the kernel answers
      (right before the prelude; so a tool backend can start while the kernel does).
    start_timeout_s: seconds allowed from launch to a ready prelude (already scaled).
    scale: wait_scale() of the runtime (per-attempt waits).
  Raises:
    RuntimeStartError: the kernel exited, did not answer, or the prelude failed; the message says
      which, with the kernel log's tail.
  """
  t0 = time.monotonic()
  deadline = t0 + start_timeout_s
  os.makedirs(kernel_dir)
  cap = None
  if sandbox_config.enabled:
    cap = sandbox_fs.CappedDir(
        kernel_dir, "kd", max_bytes=KERNEL_DIR_MAX_BYTES, max_files=KERNEL_DIR_MAX_FILES,
        uid=sandbox_config.uid, gid=sandbox_config.gid, mode=0o755,
        limits=("progagent.kernel_launch.KERNEL_DIR_MAX_BYTES", "progagent.kernel_launch.KERNEL_DIR_MAX_FILES"))
  key = secrets.token_hex(32)
  info = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
          "transport": "ipc", "key": key, "signature_scheme": "hmac-sha256", "kernel_name": ""}
  inside = dict(info, ip=f"{inside_dir}/{name}/k")
  host = dict(info, ip=os.path.join(kernel_dir, "k"))
  conn_file = os.path.join(kernel_dir, "kernel.json")
  fd = os.open(conn_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
  with os.fdopen(fd, "w") as f:
    json.dump(inside, f)
    if cap is not None:  # the kernel (the sandbox user) reads it
      os.fchown(f.fileno(), sandbox_config.uid, sandbox_config.gid)
  rd = inside_dir
  kd = f"{rd}/{name}"
  env = (("IPYTHONDIR", f"{kd}/ipython"), ("JUPYTER_RUNTIME_DIR", f"{kd}/jupyter"),
         ("JUPYTER_CONFIG_DIR", f"{kd}/jupyter"), ("JUPYTER_DATA_DIR", f"{kd}/jupyter"),
         ("MPLCONFIGDIR", f"{kd}/mpl"), ("MPLBACKEND", "Agg"),
         # tempfile tries TMPDIR (/tmp), TEMP, then TMP: with /tmp and /workspace full (the program used
         # its budget) the kernel still finds the temporary folder IPython needs at start in its own one.
         ("TMP", kd),
         ("PYDEVD_DISABLE_FILE_VALIDATION", "1"), ("JUPYTER_PLATFORM_DIRS", "1"))
  cfg = sandbox_config._replace(env=tuple(sandbox_config.env) + env)
  try:
    # /tmp/.progagent: the runtime directory, read-only; only the kernel's own folder in it is writable.
    sandbox = Sandbox(cfg, workspace=workspace_cap or workspace_dir, tmp=scratch_cap,
                      binds=((os.path.dirname(kernel_dir), rd, True), (cap or kernel_dir, kd, False)))
  except BaseException:
    if cap is not None:
      cap.close()
    raise
  try:
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", f"{rd}/{name}/kernel.json",
            "--IPKernelApp.quiet=True", "--HistoryManager.enabled=False",
            "--IPKernelApp.parent_handle=0"]
    if cfg.enabled:
      cmd = strip_project_mounts(sandbox.command(argv))
      child_env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    else:
      cmd = argv
      child_env = dict(os.environ)
      child_env.update(dict(env))
      cmd[cmd.index("-f") + 1] = conn_file
    log_path = kernel_dir + ".log"
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as logf:
      proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                              start_new_session=True, env=child_env,
                              cwd=workspace_dir if not cfg.enabled else None)
  except BaseException:
    sandbox.close()
    if cap is not None:
      cap.close()
    raise
  kernel = Kernel(sandbox, proc, None, log_path, kernel_dir, cap)
  try:
    uid = int(cfg.uid) if cfg.enabled else os.getuid()
    _wait_sockets(kernel, host, uid, deadline, start_timeout_s)
    kernel.client = connect_client(host, uid)
    _wait_ready(kernel, deadline, start_timeout_s, scale)
    kernel.kernel_pid = _find_kernel_pid(proc.pid)
    if callable(tool_list):
      tool_list = tool_list()
    buf = tool_wire.OutputBuffer(_LOG_TAIL_CHARS)
    left = max(deadline - time.monotonic(), 10.0 * scale)
    status, err, _ = execute(kernel, _prelude_code(f"{inside_dir}/tools.sock", tool_list), left, buf,
                             silent=True)
    if status != "ok":
      what = {"timeout": f"did not finish within {left:.0f} s ({load_note()}; set "
                         "PROGAGENT_START_TIMEOUT_S or PROGAGENT_WAIT_SCALE to wait longer)",
              "died": f"killed the kernel (exit code {kernel.exit_code()}{kernel.limit_note()})",
              "error": f"raised {err}"}[status]
      raise RuntimeStartError(f"the runtime's prelude {what}; its output:\n{buf.getvalue() or '(none)'}"
                              f"\nkernel log tail:\n{kernel.log_tail()}")
  except BaseException:
    kernel.stop()
    raise
  _log.debug("kernel %s ready in %.2f s (pid %s, %s)", name, time.monotonic() - t0, kernel.kernel_pid,
             sandbox.limits)
  return kernel
