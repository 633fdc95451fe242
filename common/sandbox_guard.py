"""Hardening pieces of common/sandbox.py: seccomp filter, launcher script, disk quota, stale sweep.

Kept apart from common/sandbox.py (bubblewrap arguments, cgroups, `Sandbox`) for size; only
common/sandbox.py uses this module. What each piece defends against is listed in README.md,
"Security".

* `seccomp_filter(...)`: a BPF program (built with libseccomp through ctypes: the Debian library
  `libseccomp2`, present wherever systemd is; no Python binding needed) that makes the syscalls in
  `BLOCKED_SYSCALLS` fail with EPERM, `clone` with a namespace flag fail with EPERM and `clone3`
  fail with ENOSYS (its flags sit in memory a filter cannot read; glibc then falls back to
  `clone`). Syscalls of a foreign architecture (32-bit `int 0x80`) kill the process. Written once
  per process to a root-only file; bubblewrap reads it through `--seccomp FD`. None (and a reason)
  when libseccomp is missing.
* `launcher_script(...)`: the `sh -c` prefix run on the host as root before bubblewrap: joins the
  cgroups, sets the file-size limit, gives every writable bind source to the sandbox user, caps the
  process's stdout/stderr when they are regular files (logs), opens the seccomp filter on fd 9.
* `QuotaWatcher`: one host thread that sums the disk usage of each registered sandbox's
  host-side writable folders every `SandboxConfig.quota_poll_s` and kills the sandbox past
  `SandboxConfig.workspace_max_bytes` (workspaces bound from the host; the sandbox's own workspace
  is a size-capped tmpfs and needs no watching).
* `owned_tempdir(kind)` / `sweep_stale_dirs()`: host folders named `agentrl-<kind>-<pid>-*` in the
  temporary directory; the next process to start a sandbox removes those whose owner pid is gone.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import logging
import os
import shlex
import shutil
import tempfile
import threading
import weakref

_log = logging.getLogger(__name__)

# Syscalls a sandboxed program never needs, blocked with EPERM: tracing other processes, mounts
# (old and new API), kernel modules and kexec, eBPF and perf, the kernel keyring, namespaces,
# reboot/swap/accounting, userfaultfd and io_uring (kernel attack surface), handle-based opens,
# clock and time setting, raw port I/O.
BLOCKED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "unshare", "setns", "reboot", "swapon",
    "swapoff", "acct", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "name_to_handle_at", "open_by_handle_at", "syslog", "quotactl", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "lookup_dcookie", "vhangup",
)
# clone() flags that create namespaces (blocked in clone's first argument).
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000, 0x00000080)  # NEWNS CGROUP UTS IPC USER PID NET TIME
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


class _ArgCmp(ctypes.Structure):
  _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
              ("datum_b", ctypes.c_uint64)]


_FILTER_LOCK = threading.Lock()
_FILTER: dict[str, tuple[str | None, str]] = {}


def seccomp_filter() -> tuple[str | None, str]:
  """Path of the BPF file (built once per process), or (None, why not).

  Returns:
    (path, '') or (None, reason): the reason names what is missing (libseccomp2).
  """
  with _FILTER_LOCK:
    if "f" not in _FILTER:
      _FILTER["f"] = _build_filter()
    return _FILTER["f"]


def _build_filter() -> tuple[str | None, str]:
  try:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
  except OSError as e:
    return None, f"no seccomp filter: libseccomp2 not found ({e}); apt-get install -y libseccomp2"
  lib.seccomp_init.restype = ctypes.c_void_p
  lib.seccomp_init.argtypes = [ctypes.c_uint32]
  lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                         ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
  lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
  lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
  lib.seccomp_release.argtypes = [ctypes.c_void_p]
  ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
  if not ctx:
    return None, "no seccomp filter: seccomp_init failed"
  try:
    def add(name, err, cmps=()):
      nr = lib.seccomp_syscall_resolve_name(name.encode())
      if nr < 0:  # not a syscall on this architecture
        return
      arr = (_ArgCmp * len(cmps))(*cmps) if cmps else None
      rc = lib.seccomp_rule_add_array(ctx, 0x00050000 | err, nr, len(cmps), arr)
      if rc < 0:
        raise OSError(-rc, f"seccomp_rule_add({name})")
    for name in BLOCKED_SYSCALLS:
      add(name, errno.EPERM)
    for flag in _CLONE_NS_FLAGS:
      add("clone", errno.EPERM, [_ArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag)])
    add("clone3", errno.ENOSYS)
    d = os.path.join(tempfile.gettempdir(), ".agentrl-seccomp")
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, f"filter-{os.getpid()}.bpf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
      rc = lib.seccomp_export_bpf(ctx, fd)
    finally:
      os.close(fd)
    if rc < 0:
      return None, f"no seccomp filter: seccomp_export_bpf failed ({os.strerror(-rc)})"
    return path, ""
  except OSError as e:
    return None, f"no seccomp filter: {e}"
  finally:
    lib.seccomp_release(ctx)


_LOG_NOTE = "\\n[agentrl sandbox: log cut at %s bytes (SandboxConfig.log_max_bytes); the rest is discarded]\\n"


def launcher_script(*, procs_files, memory_kib: int | None, fsize_bytes: int, uid: int, gid: int,
                    log_max_bytes: int, private_dir: str, seccomp_path: str | None) -> list[str]:
  """`sh -c` prefix that prepares and then execs the rest of argv (bubblewrap).

  Args:
    procs_files: cgroup.procs files to join (empty: none).
    memory_kib: `ulimit -v` in KiB where cgroups are unavailable, else None.
    fsize_bytes: RLIMIT_FSIZE (largest file any sandboxed process may write), bytes; 0: none.
    uid, gid: the sandbox user; every `--bind SRC` source in argv is chowned to it (links not
      followed), so the workspace and scratch are writable inside.
    log_max_bytes: cap on stdout/stderr when they are regular files (0: no cap).
    private_dir: host folder (root only) for the capping FIFOs.
    seccomp_path: BPF file opened on fd 9 for `--seccomp 9`, or None.
  Returns:
    list[str]: ['/bin/sh', '-c', script, 'sh', *procs_files] (argv follows).
  """
  q = shlex.quote
  lines = [f'echo $$ > "${i + 1}"' for i in range(len(procs_files))]
  if procs_files:
    lines.append(f"shift {len(procs_files)}")
  if memory_kib:
    lines.append(f"ulimit -v {int(memory_kib)} || exit 125")
  if fsize_bytes:
    lines.append(f"ulimit -f {max(1, int(fsize_bytes) // 512)} || exit 125")
  lines.append(f'p=; for a in "$@"; do [ "$a" = -- ] && break; '
               f'[ "$p" = --bind ] && chown -R -h -P {int(uid)}:{int(gid)} -- "$a"; p=$a; done')
  if log_max_bytes:
    n, d = int(log_max_bytes), q(private_dir)
    # A fresh sh (not a subshell, whose command line would repeat the sandboxed argv).
    cap = "/bin/sh -c " + q(f'head -c {n}; if [ "$(head -c 1 | wc -c)" -gt 0 ]; then printf '
                            f"'{_LOG_NOTE % n}'; fi; exec cat >/dev/null") + " log-cap"

    def fifo(i):  # the capper reads a FIFO and writes to the original fd; fd i then writes the FIFO
      return f"mkfifo -m 600 {d}/{i} || exit 125; {cap} <{d}/{i} >&{i} & exec {i}>{d}/{i}; rm -f {d}/{i}"
    lines += [
        "l1=$(readlink /proc/$$/fd/1); l2=$(readlink /proc/$$/fd/2)",
        'if [ -f "$l1" ]; then ' + fifo(1) + "; fi",
        'if [ -f "$l1" ] && [ "$l2" = "$l1" ]; then exec 2>&1; elif [ -f "$l2" ]; then '
        + fifo(2) + "; fi",
    ]
  if seccomp_path:
    lines.append(f"exec 9<{q(seccomp_path)} || exit 125")
  lines.append('exec "$@"')
  return ["/bin/sh", "-c", "\n".join(lines), "sh", *procs_files]


# --------------------------------------------------------------------------------------------
# disk quota for host folders a sandbox writes


def disk_usage(path: str) -> int:
  """Bytes allocated under `path` (st_blocks * 512, links not followed; vanished entries skipped)."""
  total = 0
  stack = [path]
  while stack:
    d = stack.pop()
    try:
      with os.scandir(d) as it:
        for e in it:
          try:
            st = e.stat(follow_symlinks=False)
          except OSError:
            continue
          total += st.st_blocks * 512
          if e.is_dir(follow_symlinks=False):
            stack.append(e.path)
    except OSError:
      continue
  return total


class QuotaWatcher:
  """One daemon thread checking every registered sandbox's host folders against its budget."""

  def __init__(self):
    self._items: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    self._lock = threading.Lock()
    self._wake = threading.Event()
    self._thread: threading.Thread | None = None

  def add(self, sandbox) -> None:
    with self._lock:
      self._items[sandbox] = True
      if self._thread is None or not self._thread.is_alive():
        self._thread = threading.Thread(target=self._loop, name="sandbox-quota", daemon=True)
        self._thread.start()

  def remove(self, sandbox) -> None:
    with self._lock:
      self._items.pop(sandbox, None)

  def _loop(self) -> None:
    while True:
      with self._lock:
        items = list(self._items.keys())
      if not items:
        with self._lock:
          if not self._items:
            self._thread = None
            return
      poll = min([s.config.quota_poll_s for s in items] or [0.5])
      for s in items:
        try:
          s._check_quota()
        except Exception:  # a sandbox closing under us
          _log.debug("quota check failed", exc_info=True)
      self._wake.wait(poll)


WATCHER = QuotaWatcher()


# --------------------------------------------------------------------------------------------
# host folders owned by a process, swept when their owner is gone


def owned_tempdir(kind: str) -> str:
  """Creates `<tmp>/agentrl-<kind>-<pid>-XXXX` (mode 0700), swept by `sweep_stale_dirs` once this
  process is gone. `kind`: letters only (e.g. 'ws', 'sb')."""
  if not kind.isalpha():
    raise ValueError(f"kind={kind!r}: letters only")
  return tempfile.mkdtemp(prefix=f"agentrl-{kind}-{os.getpid()}-")


def sweep_stale_dirs(tmpdir: str | None = None) -> list[str]:
  """Removes `agentrl-<kind>-<pid>-*` folders and seccomp filter files whose owner pid no longer
  exists; returns their paths."""
  removed = []
  for d in glob.glob(os.path.join(tmpdir or tempfile.gettempdir(), "agentrl-*-*-*")):
    parts = os.path.basename(d).split("-")
    if len(parts) < 4 or not parts[1].isalpha() or not parts[2].isdigit():
      continue
    owner = int(parts[2])
    if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
      continue
    if os.path.isdir(d) and not os.path.islink(d):
      shutil.rmtree(d, ignore_errors=True)
      removed.append(d)
  for f in glob.glob(os.path.join(tmpdir or tempfile.gettempdir(), ".agentrl-seccomp", "filter-*.bpf")):
    owner = os.path.basename(f)[len("filter-"):-len(".bpf")]
    if owner.isdigit() and int(owner) != os.getpid() and not os.path.exists(f"/proc/{owner}"):
      try:
        os.unlink(f)
        removed.append(f)
      except OSError:
        pass
  return removed
