"""Process sandbox for environment workers: bubblewrap isolation plus cgroup resource limits.

Every environment process (common/env_client.py) and every ProgAgent kernel (progagent/runtime.py)
runs through `Sandbox.command`:

  sh -c '<launcher>' sh <cgroup.procs files> bwrap <mounts, namespaces> -- setpriv <drop> -- <argv>

* The launcher (common/sandbox_guard.py, run on the host as root): joins the cgroups, sets
  RLIMIT_FSIZE, chowns the writable bind sources to the sandbox user, caps stdout/stderr when they
  are log files (`log_max_bytes`), opens the seccomp filter for bubblewrap.
* bubblewrap (Debian package `bubblewrap`): a read-only view of the system (`/usr` and its merged-usr
  links, a short list of `/etc` entries, the Python prefixes, the project's packages and any extra
  read-only paths the environment asks for); a private writable workspace at `/workspace` and
  `/tmp` (size-capped tmpfs, or the caller's host folder); every other path does not exist;
  `/proc/sys` read-only. New namespaces for PID, IPC, UTS, cgroup and network (loopback only,
  unless `SandboxConfig.network`), the root remounted read-only, a new session, `--die-with-parent`
  so that the sandbox dies with the driver, and the seccomp filter (`SandboxConfig.seccomp`).
* setpriv (util-linux): the program runs as host uid/gid `SandboxConfig.uid`/`gid` (65534), with
  no capabilities (bounding set empty), no supplementary groups and no_new_privs.
* Resource limits, chosen once per machine by `common.sandbox_cgroup.detect_cgroup` (`SandboxConfig.cgroup`):
  1. cgroup v2 `memory.max`, `memory.swap.max = 0`, `pids.max` and `cpu.max`, when the unified
     hierarchy offers the `memory` and `pids` controllers (cpu where offered);
  2. else cgroup v1 `memory.limit_in_bytes` (+ `memory.memsw.limit_in_bytes` where swap accounting
     exists), `pids.max` and `cpu.cfs_quota_us` in the v1 `memory`, `pids` and `cpu` hierarchies
     (this project's machines: v2 is mounted at /sys/fs/cgroup/unified but carries no controller);
  3. else `ulimit -v` (address space, a weaker stand-in for memory), no process or CPU limit.
  The choice is logged once, as one line starting with "sandbox limits:".
  Defaults follow ProgAgent's runtime (SPEC.md, ProgAgent "Runtime"): 2 GiB memory, 256 processes;
  plus 1 CPU core, 1 GiB of disk, 16 MiB of log.
* Cleanup: `Sandbox.close`; what a SIGKILLed owner left (cgroups, `agentrl-<kind>-<pid>-*` host
  folders) is swept by the first sandbox of the next process (`common.sandbox_cgroup.sweep_stale`).

README.md, "Security", lists what this isolates and what it does not defend against.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import pathlib
import shutil
import sys
import tempfile
from typing import NamedTuple, Sequence

from common import sandbox_guard
from common.sandbox_cgroup import Cgroup, SandboxError, detect_once

_log = logging.getLogger(__name__)

GIB = 1024 ** 3

# /etc entries the sandbox may read: the dynamic loader cache, the Java runtime's alternatives and
# configuration, time zones, TLS roots and name-service basics. Notably absent: passwd, shadow, ssh.
_ETC_ALLOW = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/java-*", "/etc/ssl", "/etc/ca-certificates", "/etc/localtime", "/etc/timezone",
    "/etc/hosts", "/etc/nsswitch.conf", "/etc/mime.types", "/etc/gitconfig",
)
# Top-level system directories: bound read-only, or re-created as the same symlink (merged /usr).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/java")

_PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
_PROJECT_PACKAGES = ("common", "phgpo", "planpo", "progagent", "configs", "benchmarks")


class SandboxConfig(NamedTuple):
  """How an environment process is isolated and limited.

  Attributes:
    memory_max_bytes: int, memory limit of the whole process tree (bytes); default 2 GiB.
    pids_max: int, maximum number of processes/threads in the tree; default 256. A JVM counts
      each of its threads (ScienceWorld needs about 40).
    network: bool, keep the host network (default False: a private network namespace with only
      loopback).
    ro_paths: extra host paths mounted read-only at the same place (data sets...). Paths that do
      not exist are skipped.
    env: extra environment variables, as (name, value) pairs.
    cgroup: 'auto' | 'v2' | 'v1' | 'rlimit' | 'none': which limit mechanism to use; 'auto' takes
      the first usable of v2, v1, rlimit.
    bwrap: path or name of the bubblewrap binary.
    enabled: False runs the command with no sandbox at all (benchmarks' baseline only).
    uid, gid: host user and group the sandboxed program runs as (default 65534, "nobody"): not
      root, no capabilities, no supplementary groups. Writable bind sources (a caller's
      workspace, a runtime's scratch) are chowned to it at each launch.
    cpu_max_cores: float, CPU time per wall second for the whole tree (cgroup v2 cpu.max, v1
      cpu.cfs_quota_us; period 100 ms); default 1.0; 0 or None: no CPU limit.
    workspace_max_bytes: int, disk budget of the workspace (bytes; default 1 GiB). The sandbox's
      own workspace is a tmpfs of this size (a write past it fails with ENOSPC, "No space left
      on device"; tmpfs pages also count against memory_max_bytes). A workspace bound from the
      host is watched by the host every quota_poll_s and the sandbox is killed past the budget
      (`Sandbox.quota_exceeded()` names it). It is also the largest file any sandboxed process
      may write (RLIMIT_FSIZE: EFBIG, "File too large"). Deleted files the sandbox's processes
      still hold open count too (cgroup modes only: the members are found through cgroup.procs).
    tmp_max_bytes: int, size of the tmpfs at /tmp when the sandbox owns its workspace (bytes;
      default 1 GiB).
    log_max_bytes: int, cap on what the sandboxed tree writes to its stdout/stderr when they are
      regular files (logs; bytes, default 16 MiB); the rest is dropped after a note. 0: no cap.
    quota_poll_s: float, seconds between two disk-usage checks of host-bound workspaces.
    workspace_max_files: int, most files, folders and links (and deleted files held open) a
      host-bound workspace may hold (default 50,000; 0: no limit), checked with the disk budget
      and enforced the same way (the tree is killed; `quota_exceeded()` names it). One check
      stops once a limit is passed, so its cost is bounded by this limit.
    seccomp: bool, install the seccomp filter (common/sandbox_guard.py BLOCKED_SYSCALLS) where
      libseccomp2 is present (default True).
  """
  memory_max_bytes: int = 2 * GIB
  pids_max: int = 256
  network: bool = False
  ro_paths: tuple[str, ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  cgroup: str = "auto"
  bwrap: str = "bwrap"
  enabled: bool = True
  uid: int = 65534
  gid: int = 65534
  cpu_max_cores: float | None = 1.0
  workspace_max_bytes: int = GIB
  tmp_max_bytes: int = GIB
  log_max_bytes: int = 16 * 1024 ** 2
  quota_poll_s: float = 0.5
  seccomp: bool = True
  workspace_max_files: int = 50_000


# --------------------------------------------------------------------------------------------
# bubblewrap


def find_bwrap(name: str = "bwrap") -> str:
  """Absolute path of bubblewrap, or SandboxError saying how to install it."""
  path = shutil.which(name)
  if path is None:
    raise SandboxError(
        f"bubblewrap ({name!r}) not found on PATH: install it with 'apt-get install -y bubblewrap' "
        "(setup.sh does), or run without a sandbox via SandboxConfig(enabled=False) (tests of the "
        "sandbox itself then fail)")
  return path


def default_ro_paths() -> tuple[str, ...]:
  """Host paths every environment process needs read-only: Python prefixes and project packages."""
  paths = {sys.prefix, sys.base_prefix, os.path.realpath(sys.base_prefix)}
  for pkg in _PROJECT_PACKAGES:
    p = _PROJECT_ROOT / pkg
    if p.is_dir():
      paths.add(str(p))
  # Editable installs leave a small finder/.pth in site-packages that points back at the project;
  # the package directories above are what it points at, so nothing else is needed.
  return tuple(sorted(paths))


def bwrap_argv(argv: Sequence[str], *, workspace: str | None, config: SandboxConfig,
               bwrap: str | None = None, seccomp: bool = False) -> list[str]:
  """The bubblewrap command line that runs `argv` inside the sandbox.

  Args:
    argv: command to run inside (absolute paths, or names found on the sandbox's PATH).
    workspace: host directory bound read-write at /workspace (and its tmp/ at /tmp); None: a
      tmpfs of config.workspace_max_bytes at /workspace and one of config.tmp_max_bytes at /tmp.
    config: SandboxConfig.
    bwrap: resolved bwrap path (default: found on PATH).
    seccomp: add `--seccomp 9` (the launcher opens the filter on fd 9).
  Returns:
    list[str], the full command (starting with the bwrap binary).
  """
  bw = bwrap or find_bwrap(config.bwrap)
  # Capabilities: all dropped but those setpriv needs to become config.uid (see the end) and the
  # search right bubblewrap needs to chdir into a workspace owned by config.uid.
  a = [bw, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
       "--unshare-cgroup-try", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add",
       "CAP_SETGID", "--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_DAC_READ_SEARCH", "--hostname", "sandbox"]
  if not config.network:
    a.append("--unshare-net")
  if seccomp:
    a += ["--seccomp", "9"]
  # The private /tmp first: read-only paths that live under the host's /tmp (a checkout or venv in
  # /tmp, as CI clones can be) are then mounted on top of it instead of being hidden by it.
  if workspace is None:
    a += ["--perms", "01777", "--size", str(int(config.workspace_max_bytes)), "--tmpfs",
          "/workspace", "--perms", "01777", "--size", str(int(config.tmp_max_bytes)), "--tmpfs",
          "/tmp"]
  else:
    os.makedirs(os.path.join(workspace, "tmp"), exist_ok=True)
    a += ["--bind", workspace, "/workspace", "--bind", os.path.join(workspace, "tmp"), "/tmp"]
  for d in _SYSTEM_DIRS:
    if os.path.islink(d):
      a += ["--symlink", os.readlink(d), d]
    elif os.path.isdir(d):
      a += ["--ro-bind", d, d]
  etc = []
  for pat in _ETC_ALLOW:
    etc.extend(sorted(glob.glob(pat)))
  if config.network:
    etc += [p for p in ("/etc/resolv.conf", "/etc/gai.conf") if os.path.exists(p)]
  ro = list(etc) + list(default_ro_paths()) + [os.path.abspath(p) for p in config.ro_paths]
  # A checkout under the host's /tmp: its folder would otherwise be made (writable) inside the private
  # /tmp as the parent of the package binds. A read-only stub holding only the mount points of this
  # launch's binds is bound there first, so the folder stays read-only and shows nothing else.
  root = str(_PROJECT_ROOT)
  seen = set()
  binds = []
  for p in ro:
    if p in seen or not os.path.exists(p):
      continue
    seen.add(p)
    binds.append(p)
  mounts = [(p, p) for p in binds]
  if root.startswith("/tmp/"):
    under = sorted({os.path.relpath(p, root).split(os.sep)[0] for p in binds
                    if p.startswith(root + os.sep)})
    stub = os.path.join(tempfile.gettempdir(), ".agentrl-root-stubs",
                        hashlib.sha1("\0".join([root] + under).encode()).hexdigest()[:16])
    for d in under:
      os.makedirs(os.path.join(stub, d), exist_ok=True)
    os.makedirs(stub, exist_ok=True)
    mounts.insert(0, (stub, root))
  # bubblewrap makes a mount point's missing parents with mode 0700, which the sandbox user could
  # not traverse (e.g. a checkout inside a `mktemp -d` folder): every mount point's parents, the
  # stub's included, are made first, 0755.
  made = {"/", "", "/tmp", "/workspace"}
  for _, p in mounts:
    chain = []
    parent = os.path.dirname(p)
    while parent not in made:
      made.add(parent)
      chain.append(parent)
      parent = os.path.dirname(parent)
    for d in reversed(chain):
      a += ["--perms", "0755", "--dir", d]
  for src, dst in mounts:
    a += ["--ro-bind", src, dst]
  # /proc/sys read-only (kernel.core_pattern & co. are host-wide); the uid drop forbids writes too.
  a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
  if os.path.exists("/proc/sysrq-trigger"):
    a += ["--ro-bind", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
  a += ["--dev", "/dev", "--chdir", "/workspace", "--remount-ro", "/"]
  env = {
      "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace", "TMPDIR": "/tmp",
      "LANG": "C.UTF-8", "PYTHONPATH": str(_PROJECT_ROOT), "PYTHONDONTWRITEBYTECODE": "1",
      "PYTHONUNBUFFERED": "1", "GIT_CONFIG_NOSYSTEM": "1",
  }
  env.update(dict(config.env))
  a.append("--clearenv")
  for k, v in env.items():
    a += ["--setenv", k, v]
  a.append("--")
  # The program runs as config.uid/gid: no capabilities (bounding set empty), no groups, no new
  # privileges. bubblewrap's own --uid needs a user namespace, which maps the inside uid to host
  # root when root starts it (sysctl writes are checked against the host uid): not used.
  a += ["/usr/bin/setpriv", f"--reuid={int(config.uid)}", f"--regid={int(config.gid)}",
        "--clear-groups", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
  a += list(argv)
  return a


_LOGGED = set()


class Sandbox:
  """One sandbox instance: a private workspace, a cgroup, and the command that enters both.

  Usage:
    sb = Sandbox(SandboxConfig())
    argv = sb.command([sys.executable, '-m', 'common.env_server', ...])
    ... start argv as a process (start_new_session=True) ...
    sb.close()   # kills whatever is left in the cgroup, removes cgroup and host folders

  Without `workspace`, /workspace and /tmp are size-capped tmpfs (nothing reaches the host disk);
  `self.workspace` is then the sandbox's private host folder (root only: log FIFOs). With a host
  `workspace`, it is bound read-write, chowned to config.uid at each launch, and watched against
  config.workspace_max_bytes together with `quota_paths` (callers may add folders they bind).
  """

  def __init__(self, config: SandboxConfig = SandboxConfig(), *, workspace: str | None = None):
    self.config = config
    self._own_workspace = workspace is None
    self._private = sandbox_guard.owned_tempdir("sb") if config.enabled else None
    self.workspace = workspace or self._private or sandbox_guard.owned_tempdir("ws")
    self.quota_paths: list[str] = [] if self._own_workspace else [self.workspace]
    self._quota_hit: str | None = None
    self._held = sandbox_guard.OpenDeleted()
    self.cgroup: Cgroup | None = None
    self._bwrap = find_bwrap(config.bwrap) if config.enabled else None
    self._seccomp: str | None = None
    if config.enabled:
      if not os.path.exists("/usr/bin/setpriv"):
        raise SandboxError("/usr/bin/setpriv (util-linux) not found: apt-get install -y util-linux")
      self.cgroup = Cgroup.create(config)
      why = ""
      if config.seccomp:
        self._seccomp, why = sandbox_guard.seccomp_filter()
      if config.cgroup not in _LOGGED:
        _LOGGED.add(config.cgroup)
        det = detect_once(config.cgroup)
        extra = f" ({'; '.join(det.why_not + ((why,) if why else ()))})" if det.why_not or why else ""
        _log.info("sandbox limits: %s; bubblewrap %s, uid %d, seccomp %s, network %s%s",
                  self.cgroup.description, self._bwrap, config.uid,
                  "on" if self._seccomp else "off", "on" if config.network else "off", extra)

  @property
  def limits(self) -> str:
    """One line: which limits are in force for this sandbox."""
    return self.cgroup.description if self.cgroup else "no sandbox"

  def command(self, argv: Sequence[str]) -> list[str]:
    """Full host command that runs `argv` inside this sandbox."""
    if not self.config.enabled:
      return list(argv)
    c = self.config
    inner = bwrap_argv(argv, workspace=None if self._own_workspace else self.workspace, config=c,
                       bwrap=self._bwrap, seccomp=bool(self._seccomp))
    mem_kib = c.memory_max_bytes // 1024 if self.cgroup.mode == "rlimit" else None
    launcher = sandbox_guard.launcher_script(
        procs_files=self.cgroup.procs_files, memory_kib=mem_kib,
        fsize_bytes=c.workspace_max_bytes, uid=c.uid, gid=c.gid, log_max_bytes=c.log_max_bytes,
        private_dir=self._private, seccomp_path=self._seccomp)
    if self.quota_paths and (c.workspace_max_bytes or c.workspace_max_files):
      sandbox_guard.WATCHER.add(self)
    return launcher + inner

  def _check_quota(self) -> None:
    """Called by sandbox_guard.WATCHER: kills the tree once the host folders pass the budget."""
    if self._quota_hit or not self.cgroup:
      return
    c, paths = self.config, list(self.quota_paths)
    max_b, max_n = c.workspace_max_bytes, c.workspace_max_files
    used, files = sandbox_guard.scan_usage(paths, max_bytes=max_b, max_files=max_n)
    held_b = held_n = 0
    if not ((max_b and used > max_b) or (max_n and files > max_n)):
      held_b, held_n = self._held.update(self.cgroup.pids(), sandbox_guard.devices(paths), c.uid)
    used, files = used + held_b, files + held_n
    where = ", ".join(paths) + (f" (+ {held_n} deleted files held open)" if held_n else "")
    if max_b and used > max_b:
      self._quota_hit = (f"disk quota exceeded: {used} bytes in {where} > "
                         f"SandboxConfig.workspace_max_bytes={max_b}")
    elif max_n and files > max_n:
      self._quota_hit = (f"file limit exceeded: {files} files and folders in {where} > "
                         f"SandboxConfig.workspace_max_files={max_n}")
    if self._quota_hit:
      _log.warning("sandbox killed: %s", self._quota_hit)
      self.cgroup.kill()

  def quota_exceeded(self) -> str | None:
    """The reason the host killed this sandbox for its disk use or file count, or None."""
    return self._quota_hit

  def oom_killed(self) -> bool:
    return bool(self.cgroup and self.cgroup.oom_killed())

  def pids_limit_hit(self) -> bool:
    return bool(self.cgroup and self.cgroup.pids_limit_hit())

  def kill(self) -> None:
    if self.cgroup:
      self.cgroup.kill()

  def close(self) -> None:
    """Kills every process left in the cgroup, removes it and the host folders. Idempotent."""
    sandbox_guard.WATCHER.remove(self)
    if self.cgroup is not None:
      self.cgroup.remove()
      self.cgroup = None
    for d in (self._private, self.workspace if self._own_workspace else None):
      if d and os.path.isdir(d):
        shutil.rmtree(d, ignore_errors=True)
    self._private = None
    self.workspace = None
