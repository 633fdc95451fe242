"""Process sandbox for environment workers: bubblewrap isolation plus cgroup resource limits.

Every environment process the rollout driver starts runs through `Sandbox.command`:

  sh -c '<join cgroups>; exec "$@"' sh ... bwrap <mounts, namespaces> -- <argv>

* bubblewrap (Debian package `bubblewrap`): a read-only view of the system (`/usr` and its merged-usr
  links, a short list of `/etc` entries, the Python prefixes, the project's packages and any extra
  read-only paths the environment asks for); a private writable workspace at `/workspace` (also
  bound at `/tmp`); every other path does not exist. New user-visible namespaces for PID, IPC, UTS,
  cgroup and network (loopback only, unless `SandboxConfig.network`), all capabilities dropped, the
  root remounted read-only, a new session, and `--die-with-parent` so that the sandbox dies with the
  driver.
* Resource limits, chosen once per machine by `detect_cgroup` (config key `SandboxConfig.cgroup`):
  1. cgroup v2 `memory.max`, `memory.swap.max = 0` and `pids.max`, when the unified hierarchy offers
     the `memory` and `pids` controllers and lets us enable them;
  2. else cgroup v1 `memory.limit_in_bytes` (+ `memory.memsw.limit_in_bytes` where swap accounting
     exists) and `pids.max` in the v1 `memory` and `pids` hierarchies (this project's machines: v2
     is mounted at /sys/fs/cgroup/unified but carries neither controller);
  3. else `ulimit -v` (address space, a weaker stand-in for memory) and no process limit.
  The choice is logged once, as one line starting with "sandbox limits:".
  Defaults follow ProgAgent's runtime (SPEC.md, ProgAgent "Runtime"): 2 GiB memory, 256 processes.

The sandbox is a test and training tool, not a security boundary against a determined attacker
(it runs as root on the host, inside namespaces); it stops accidental and ordinary misbehaviour:
network use, writes to the host, reading host files, fork bombs and memory blow-ups.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import logging
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import NamedTuple, Sequence

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


class SandboxError(RuntimeError):
  """The sandbox cannot be set up on this machine (missing bubblewrap, unusable cgroups...)."""


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
  """
  memory_max_bytes: int = 2 * GIB
  pids_max: int = 256
  network: bool = False
  ro_paths: tuple[str, ...] = ()
  env: tuple[tuple[str, str], ...] = ()
  cgroup: str = "auto"
  bwrap: str = "bwrap"
  enabled: bool = True


# --------------------------------------------------------------------------------------------
# cgroups


@dataclasses.dataclass(frozen=True)
class CgroupRoots:
  """Where the cgroup hierarchies are mounted, and where this process sits in them.

  Injectable so that tests can point the detection at a fake tree.
  """
  v2_mount: str | None
  v1_memory_mount: str | None
  v1_pids_mount: str | None
  self_v2_path: str = "/"
  self_v1_memory_path: str = "/"
  self_v1_pids_path: str = "/"

  @classmethod
  def of_this_machine(cls) -> "CgroupRoots":
    v2 = None
    for cand in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
      if os.path.exists(os.path.join(cand, "cgroup.controllers")):
        v2 = cand
        break
    mem = "/sys/fs/cgroup/memory" if os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") else None
    pids = "/sys/fs/cgroup/pids" if os.path.exists("/sys/fs/cgroup/pids/cgroup.procs") else None
    paths = {"v2": "/", "memory": "/", "pids": "/"}
    try:
      with open("/proc/self/cgroup") as f:
        for line in f:
          _, ctrls, path = line.rstrip("\n").split(":", 2)
          if ctrls == "":
            paths["v2"] = path
          for c in ctrls.split(","):
            if c in ("memory", "pids"):
              paths[c] = path
    except OSError:
      pass
    return cls(v2, mem, pids, paths["v2"], paths["memory"], paths["pids"])


def _join(mount: str, path: str) -> str:
  rel = path.strip("/")
  return os.path.join(mount, rel) if rel else mount


def _write(path: str, value: str) -> None:
  with open(path, "w") as f:
    f.write(value)


def _read(path: str) -> str:
  with open(path) as f:
    return f.read()


class Detection(NamedTuple):
  """Which limit mechanism is usable, and why the better ones are not."""
  mode: str                 # 'v2' | 'v1' | 'rlimit' | 'none'
  parents: tuple[str, ...]  # directories under which per-sandbox cgroups are created
  why_not: tuple[str, ...]  # one reason per mechanism that was skipped


def _probe_v2(roots: CgroupRoots) -> tuple[str | None, str]:
  if roots.v2_mount is None:
    return None, "cgroup v2: no unified hierarchy mounted"
  base = _join(roots.v2_mount, roots.self_v2_path)
  try:
    avail = _read(os.path.join(base, "cgroup.controllers")).split()
  except OSError as e:
    return None, f"cgroup v2: cannot read {base}/cgroup.controllers ({e})"
  missing = [c for c in ("memory", "pids") if c not in avail]
  if missing:
    return None, f"cgroup v2: {','.join(missing)} not in {base}/cgroup.controllers"
  try:
    _write(os.path.join(base, "cgroup.subtree_control"), "+memory +pids")
  except OSError as e:
    return None, f"cgroup v2: cannot enable memory,pids in {base}/cgroup.subtree_control ({e})"
  return base, ""


def _probe_v1(roots: CgroupRoots) -> tuple[tuple[str, str] | None, str]:
  if roots.v1_memory_mount is None or roots.v1_pids_mount is None:
    return None, "cgroup v1: memory or pids hierarchy not mounted"
  mem = _join(roots.v1_memory_mount, roots.self_v1_memory_path)
  pids = _join(roots.v1_pids_mount, roots.self_v1_pids_path)
  for d in (mem, pids):
    if not os.access(d, os.W_OK):
      return None, f"cgroup v1: {d} is not writable"
  return (mem, pids), ""


def detect_cgroup(mode: str = "auto", roots: CgroupRoots | None = None) -> Detection:
  """Picks the resource-limit mechanism (see the module docstring for the order).

  Args:
    mode: 'auto' or one of 'v2', 'v1', 'rlimit', 'none' to force it.
    roots: where the hierarchies are; default: this machine's.
  Returns:
    A `Detection`.
  Raises:
    SandboxError: a forced mode that is not usable here, naming why.
  """
  if mode not in ("auto", "v2", "v1", "rlimit", "none"):
    raise SandboxError(f"SandboxConfig.cgroup={mode!r}; use 'auto', 'v2', 'v1', 'rlimit' or 'none'")
  if mode in ("rlimit", "none"):
    return Detection(mode, (), ())
  roots = roots or CgroupRoots.of_this_machine()
  why = []
  if mode in ("auto", "v2"):
    base, reason = _probe_v2(roots)
    if base is not None:
      return Detection("v2", (base,), ())
    why.append(reason)
    if mode == "v2":
      raise SandboxError(f"{reason}; use SandboxConfig(cgroup='auto') to fall back")
  base1, reason = _probe_v1(roots)
  if base1 is not None:
    return Detection("v1", base1, tuple(why))
  why.append(reason)
  if mode == "v1":
    raise SandboxError(f"{reason}; use SandboxConfig(cgroup='auto') to fall back")
  return Detection("rlimit", (), tuple(why))


_DETECTED: dict[str, Detection] = {}
_DETECT_LOCK = threading.Lock()
_COUNTER = iter(range(1 << 62))


def _detect_once(mode: str) -> Detection:
  """Caches the machine's detection per mode and logs the "sandbox limits:" line once."""
  with _DETECT_LOCK:
    if mode not in _DETECTED:
      det = detect_cgroup(mode)
      _DETECTED[mode] = det
      _sweep_stale(det)
    return _DETECTED[mode]


def _sweep_stale(det: Detection) -> None:
  """Removes empty per-sandbox cgroups left by driver processes that died without cleaning up."""
  for parent in det.parents:
    for d in glob.glob(os.path.join(parent, "agentrl-*")):
      try:
        owner = int(os.path.basename(d).split("-")[1])
      except (IndexError, ValueError):
        continue
      if owner != os.getpid() and not os.path.exists(f"/proc/{owner}"):
        try:
          os.rmdir(d)
        except OSError:
          pass


class Cgroup:
  """The per-sandbox cgroup(s) holding one environment process tree, with its limits.

  Created by `Cgroup.create`; `procs_files` are the `cgroup.procs` files the launcher joins before
  exec-ing bubblewrap; `kill()` SIGKILLs every member; `remove()` deletes the directories.
  """

  def __init__(self, mode: str, dirs: tuple[str, ...], description: str, memory_max: int,
               pids_max: int):
    self.mode = mode
    self.dirs = dirs
    self.description = description
    self.memory_max = memory_max
    self.pids_max = pids_max

  @classmethod
  def create(cls, config: SandboxConfig, *, detection: Detection | None = None) -> "Cgroup":
    det = detection or _detect_once(config.cgroup)
    mem, npids = int(config.memory_max_bytes), int(config.pids_max)
    name = f"agentrl-{os.getpid()}-{next(_COUNTER)}"
    if det.mode == "v2":
      d = os.path.join(det.parents[0], name)
      os.mkdir(d)
      try:
        _write(os.path.join(d, "memory.max"), str(mem))
        if os.path.exists(os.path.join(d, "memory.swap.max")):
          _write(os.path.join(d, "memory.swap.max"), "0")
        _write(os.path.join(d, "pids.max"), str(npids))
      except OSError:
        os.rmdir(d)
        raise
      desc = f"cgroup v2 memory.max={mem} pids.max={npids}"
      return cls("v2", (d,), desc, mem, npids)
    if det.mode == "v1":
      dm = os.path.join(det.parents[0], name)
      dp = os.path.join(det.parents[1], name)
      os.mkdir(dm)
      try:
        os.mkdir(dp)
      except OSError:
        os.rmdir(dm)
        raise
      try:
        _write(os.path.join(dm, "memory.limit_in_bytes"), str(mem))
        memsw = os.path.join(dm, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
          _write(memsw, str(mem))
        _write(os.path.join(dp, "pids.max"), str(npids))
      except OSError:
        os.rmdir(dm)
        os.rmdir(dp)
        raise
      desc = f"cgroup v1 memory.limit_in_bytes={mem} pids.max={npids}"
      return cls("v1", (dm, dp), desc, mem, npids)
    if det.mode == "rlimit":
      return cls("rlimit", (), f"ulimit -v {mem // 1024} KiB (address space), processes not limited",
                 mem, npids)
    return cls("none", (), "no resource limits", mem, npids)

  @property
  def procs_files(self) -> tuple[str, ...]:
    return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs)

  def pids(self) -> list[int]:
    """Members of the cgroup (empty for 'rlimit'/'none')."""
    out: set[int] = set()
    for f in self.procs_files:
      try:
        out.update(int(x) for x in _read(f).split())
      except OSError:
        pass
    return sorted(out)

  def oom_killed(self) -> bool:
    """True when the kernel killed a member for exceeding the memory limit."""
    try:
      if self.mode == "v2":
        ev = dict(l.split() for l in _read(os.path.join(self.dirs[0], "memory.events")).splitlines())
        return int(ev.get("oom_kill", 0)) > 0 or int(ev.get("max", 0)) > 0 and int(ev.get("oom", 0)) > 0
      if self.mode == "v1":
        ctl = dict(l.split() for l in _read(os.path.join(self.dirs[0], "memory.oom_control")).splitlines())
        if "oom_kill" in ctl:
          return int(ctl["oom_kill"]) > 0
        return int(_read(os.path.join(self.dirs[0], "memory.failcnt"))) > 0
    except (OSError, ValueError):
      pass
    return False

  def pids_limit_hit(self) -> bool:
    """True when a fork was refused because of `pids.max`."""
    try:
      if self.mode == "v2":
        ev = dict(l.split() for l in _read(os.path.join(self.dirs[0], "pids.events")).splitlines())
        return int(ev.get("max", 0)) > 0
      if self.mode == "v1":
        ev = dict(l.split() for l in _read(os.path.join(self.dirs[1], "pids.events")).splitlines())
        return int(ev.get("max", 0)) > 0
    except (OSError, ValueError):
      pass
    return False

  def kill(self) -> None:
    """SIGKILLs every member (v2: cgroup.kill where the kernel has it)."""
    if self.mode == "v2" and os.path.exists(os.path.join(self.dirs[0], "cgroup.kill")):
      try:
        _write(os.path.join(self.dirs[0], "cgroup.kill"), "1")
        return
      except OSError:
        pass
    for _ in range(5):  # members may fork while we kill; a few passes settle it
      pids = self.pids()
      if not pids:
        return
      for p in pids:
        try:
          os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
          pass
      time.sleep(0.01)

  def remove(self, timeout_s: float = 5.0) -> None:
    """Kills what is left and removes the directories (retrying while the kernel reaps)."""
    if not self.dirs:
      return
    self.kill()
    deadline = time.monotonic() + timeout_s
    for d in self.dirs:
      while True:
        try:
          os.rmdir(d)
          break
        except FileNotFoundError:
          break
        except OSError:
          if time.monotonic() > deadline:
            _log.warning("could not remove cgroup %s (members: %s)", d, self.pids())
            break
          self.kill()
          time.sleep(0.02)


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


def bwrap_argv(argv: Sequence[str], *, workspace: str, config: SandboxConfig,
               bwrap: str | None = None) -> list[str]:
  """The bubblewrap command line that runs `argv` inside the sandbox.

  Args:
    argv: command to run inside (absolute paths, or names found on the sandbox's PATH).
    workspace: host directory bound read-write at /workspace (and its tmp/ at /tmp).
    config: SandboxConfig.
    bwrap: resolved bwrap path (default: found on PATH).
  Returns:
    list[str], the full command (starting with the bwrap binary).
  """
  bw = bwrap or find_bwrap(config.bwrap)
  a = [bw, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
       "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", "sandbox"]
  if not config.network:
    a.append("--unshare-net")
  # The private /tmp first: read-only paths that live under the host's /tmp (a checkout or venv in
  # /tmp, as CI clones can be) are then mounted on top of it instead of being hidden by it.
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
  if root.startswith("/tmp/"):
    under = sorted({os.path.relpath(p, root).split(os.sep)[0] for p in binds
                    if p.startswith(root + os.sep)})
    stub = os.path.join(tempfile.gettempdir(), ".agentrl-root-stubs",
                        hashlib.sha1("\0".join([root] + under).encode()).hexdigest()[:16])
    for d in under:
      os.makedirs(os.path.join(stub, d), exist_ok=True)
    os.makedirs(stub, exist_ok=True)
    a += ["--ro-bind", stub, root]
  for p in binds:
    a += ["--ro-bind", p, p]
  a += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/workspace", "--remount-ro", "/"]
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
  a += list(argv)
  return a


def _launcher(cgroup: Cgroup) -> list[str]:
  """`sh -c` prefix that joins the cgroups (or sets ulimit) and then execs the rest of argv."""
  if cgroup.mode in ("v1", "v2"):
    script = "; ".join(f'echo $$ > "${i + 1}"' for i in range(len(cgroup.procs_files)))
    script += f'; shift {len(cgroup.procs_files)}; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *cgroup.procs_files]
  if cgroup.mode == "rlimit":
    return ["/bin/sh", "-c", f'ulimit -v {cgroup.memory_max // 1024} && exec "$@"', "sh"]
  return []


_LOGGED = set()


class Sandbox:
  """One sandbox instance: a private workspace, a cgroup, and the command that enters both.

  Usage:
    sb = Sandbox(SandboxConfig())
    argv = sb.command([sys.executable, '-m', 'common.env_server', ...])
    ... start argv as a process (start_new_session=True) ...
    sb.close()   # kills whatever is left in the cgroup, removes cgroup and workspace
  """

  def __init__(self, config: SandboxConfig = SandboxConfig(), *, workspace: str | None = None):
    self.config = config
    self._own_workspace = workspace is None
    self.workspace = workspace or tempfile.mkdtemp(prefix="agentrl-ws-")
    self.cgroup: Cgroup | None = None
    self._bwrap = find_bwrap(config.bwrap) if config.enabled else None
    if config.enabled:
      self.cgroup = Cgroup.create(config)
      if config.cgroup not in _LOGGED:
        _LOGGED.add(config.cgroup)
        det = _detect_once(config.cgroup)
        extra = f" ({'; '.join(det.why_not)})" if det.why_not else ""
        _log.info("sandbox limits: %s; bubblewrap %s, network %s%s", self.cgroup.description,
                  self._bwrap, "on" if config.network else "off", extra)

  @property
  def limits(self) -> str:
    """One line: which limits are in force for this sandbox."""
    return self.cgroup.description if self.cgroup else "no sandbox"

  def command(self, argv: Sequence[str]) -> list[str]:
    """Full host command that runs `argv` inside this sandbox."""
    if not self.config.enabled:
      return list(argv)
    inner = bwrap_argv(argv, workspace=self.workspace, config=self.config, bwrap=self._bwrap)
    return _launcher(self.cgroup) + inner

  def oom_killed(self) -> bool:
    return bool(self.cgroup and self.cgroup.oom_killed())

  def pids_limit_hit(self) -> bool:
    return bool(self.cgroup and self.cgroup.pids_limit_hit())

  def kill(self) -> None:
    if self.cgroup:
      self.cgroup.kill()

  def close(self) -> None:
    """Kills every process left in the cgroup, removes it and the workspace. Idempotent."""
    if self.cgroup is not None:
      self.cgroup.remove()
      self.cgroup = None
    if self._own_workspace and self.workspace and os.path.isdir(self.workspace):
      shutil.rmtree(self.workspace, ignore_errors=True)
    self.workspace = None
