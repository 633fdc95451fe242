"""Size-capped host folders of common/sandbox.py: every folder a sandboxed program can write is a tmpfs.

A folder on the host that a sandboxed program can write (a caller's workspace, ProgAgent's /tmp and each
kernel's folder) is a tmpfs that the host (root) mounts at that folder, with a fixed size (`size=`) and a
fixed number of files, folders and links (`nr_inodes=`). A write, fallocate(2) (with or without
FALLOC_FL_KEEP_SIZE), a file kept open after it was deleted, or a mapping past the size fails at once
(ENOSPC; a store into a mapping gets SIGBUS), and so does a new file past the count: nothing exceeds the
budget for any time, and nothing of it reaches the host's disk. tmpfs pages are memory: they are charged
to the memory cgroup of the process that wrote them (the sandbox's, within its memory limit) and are freed
when the folder is unmounted.

`CappedDir(path, kind, ...)`:
  keep=False: `path` (an empty folder of the host's) becomes an empty capped folder; its content is
    discarded at close (ProgAgent's /tmp and kernel folders).
  keep=True: a caller's folder (a workspace). The host opens the folder first and mounts on that
    descriptor; its content is copied into the tmpfs (owned by the sandbox user so that programs can edit
    it, modes kept), and the folder underneath stays untouched while mounted. `close()` writes the result
    back through that descriptor (no link followed), within the same budget (`write_back_size`): first it
    adds up what writing back would put on the host, each regular file at its full size (a sparse file's
    holes are written as zeros, and each hard link is a copy of its own) plus each link's target, and
    the entries; past `max_bytes` or `max_files` it writes nothing (CapError naming the setting) and the
    folder is as it was before the sandbox started. Otherwise files that were there get back the owner
    and mode they had, new ones the folder's owner; unchanged files are not rewritten. A file the program
    changed in any way (content, mode, links: its copy's inode or ctime differs) is written anew, as a
    new inode renamed into place (a hard link of the host's to a file elsewhere is replaced, never written
    through), with no set-id bit (as the kernel clears them when another user writes a file), no extended
    attribute (file capabilities, ACLs) and no device or FIFO of the program's. A crash (the owner
    SIGKILLed) only unmounts (common.sandbox_cgroup's reaper or sweep): the folder is as it was before.
Mount sources are named `agentrl-<kind>-<pid>-<n>`, so that a dead owner's mounts are found in
/proc/self/mountinfo (`owned_mounts`, `detach_owned`). Mounting needs root (CAP_SYS_ADMIN), as the rest of
the sandbox does.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import shutil
import stat
from typing import NamedTuple

from common.sandbox_guard import SandboxError

_log = logging.getLogger("common.sandbox")

_MS_NOSUID, _MS_NODEV = 0x2, 0x4
_MNT_DETACH = 0x2
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COUNTER = itertools.count()
# Folders deeper than this below a kept folder's root are not written back (a program can nest folders far
# deeper than a recursive copy, or the descriptors it holds per level, allow); what lies there is dropped.
MAX_COPY_DEPTH = 64
_LIBC = None


class CapError(SandboxError):
  """A capped folder could not be made (mount refused, content over the budget); the message names the fix."""


def _libc():
  global _LIBC
  if _LIBC is None:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    _LIBC = lib
  return _LIBC


def _mount_tmpfs(name: str, target: str, options: str) -> None:
  if _libc().mount(name.encode(), target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()) != 0:
    e = ctypes.get_errno()
    raise CapError(f"cannot mount a size-capped tmpfs ({options}) for {target}: {os.strerror(e)}; the sandbox "
                   "needs root (CAP_SYS_ADMIN) on the host, or SandboxConfig(enabled=False) to run without one")


def detach(path: str) -> bool:
  """Lazily unmounts the mount whose root is `path` (umount2 MNT_DETACH); False if it was not mounted."""
  if _libc().umount2(os.fsencode(path), _MNT_DETACH) == 0:
    return True
  e = ctypes.get_errno()
  if e not in (errno.EINVAL, errno.ENOENT):
    _log.warning("could not unmount %s: %s", path, os.strerror(e))
  return False


def _unescape(field: str) -> str:
  """A path of /proc/self/mountinfo (spaces, tabs, newlines and backslashes are written as \\ooo)."""
  out, i = [], 0
  while i < len(field):
    if field[i] == "\\" and field[i + 1:i + 4].isdigit():
      out.append(chr(int(field[i + 1:i + 4], 8)))
      i += 4
    else:
      out.append(field[i])
      i += 1
  return "".join(out)


def owned_mounts() -> list[tuple[int, str]]:
  """(owner pid, mount point) of every capped folder mounted in this mount namespace (deepest first)."""
  out = []
  try:
    with open("/proc/self/mountinfo") as f:
      lines = f.read().splitlines()
  except OSError:
    return out
  for line in lines:
    fields = line.split(" ")
    try:
      sep = fields.index("-")
      fstype, source, target = fields[sep + 1], fields[sep + 2], _unescape(fields[4])
    except (ValueError, IndexError):
      continue
    parts = source.split("-")
    if fstype == "tmpfs" and len(parts) == 4 and parts[0] == "agentrl" and parts[2].isdigit():
      out.append((int(parts[2]), target))
  out.sort(key=lambda x: -len(x[1]))
  return out


def detach_owned(pid: int) -> list[str]:
  """Unmounts every capped folder of owner `pid` (deepest first); returns their mount points."""
  done = []
  for owner, target in owned_mounts():
    if owner == pid and detach(target):
      done.append(target)
  return done


class _Entry(NamedTuple):
  """What copy-in saw of one entry: its kind ('d', 'f', 'l', or 'x' for one not copied: FIFO, socket...),
  the owner and mode it had, and the inode and ctime of its copy (to tell an unchanged file at copy-out)."""
  kind: str
  uid: int
  gid: int
  mode: int
  ino: int = 0
  ctime_ns: int = 0


class CappedDir:
  """A host folder that is a tmpfs of fixed size and file count while a sandbox may write it.

  Args:
    path: the host folder (it must exist and not be a link).
    kind: letters naming the use in the mount source `agentrl-<kind>-<pid>-<n>` (e.g. 'ws', 'tmp').
    max_bytes: size of the tmpfs (bytes; 0: no size limit, only the host's memory).
    max_files: files, folders and links it may hold besides its root (0: no limit).
    uid, gid, mode: owner and mode of its root (keep=True: the mode the folder has).
    keep: copy the folder's content in, owned by uid/gid, and back at close (see the module docstring);
      False: start empty and discard the content at close.
    limits: names of the settings behind max_bytes and max_files, for messages
      (e.g. ('SandboxConfig.workspace_max_bytes', 'SandboxConfig.workspace_max_files')).
  Raises:
    CapError: the mount was refused (not root), the folder holds more than the budget (names the setting),
      or `path` is a symbolic link (names the real folder to pass instead).
    OSError: `path` is missing or not a folder.
  """

  def __init__(self, path: str, kind: str, *, max_bytes: int, max_files: int, uid: int, gid: int,
               mode: int = 0o755, keep: bool = False, limits: tuple[str, str] = ("max_bytes", "max_files")):
    if not kind.isalpha():
      raise ValueError(f"kind={kind!r}: letters only")
    self.path = os.path.abspath(path)
    self.max_bytes, self.max_files, self.limits = int(max_bytes), int(max_files), limits
    self.uid, self.gid = int(uid), int(gid)
    self.keep = keep
    self.name = f"agentrl-{kind}-{os.getpid()}-{next(_COUNTER)}"
    if os.path.islink(self.path):
      raise CapError(f"{self.path} is a symbolic link (to {os.readlink(self.path)!r}): the sandbox opens its "
                     f"folders with no link followed; pass the real folder, {os.path.realpath(self.path)}")
    self._under = os.open(self.path, _DIR)
    self._fd: int | None = None
    self._record: dict[str, _Entry] = {}
    self._full: list[str] = []
    self._left = (0, 0)  # (bytes, entries) the write-back in progress may still put on the host
    try:
      st = os.fstat(self._under)
      self._owner = (st.st_uid, st.st_gid)
      if keep:
        mode = st.st_mode & 0o1777
        self._record["."] = _Entry("d", st.st_uid, st.st_gid, st.st_mode & 0o7777)
      opts = [f"mode={mode & 0o7777:o}", f"uid={self.uid}", f"gid={self.gid}"]
      if self.max_bytes:
        opts.append(f"size={self.max_bytes}")
      if self.max_files:
        opts.append(f"nr_inodes={self.max_files + 1}")  # its root is one
      from common import sandbox_cgroup  # (a sibling that imports this module) unmounts it if this process dies
      sandbox_cgroup.start_reaper()
      _mount_tmpfs(self.name, f"/proc/self/fd/{self._under}", ",".join(opts))
      try:
        self._fd = os.open(self.path, _DIR)
        if os.fstat(self._fd).st_dev == st.st_dev:
          raise CapError(f"{self.path} was replaced while its tmpfs was mounted")
        if keep:
          self._copy_in(self._under, self._fd, "")
      except BaseException:
        self._unmount()
        raise
    except BaseException:
      os.close(self._under)
      raise

  # -- state

  def usage(self) -> tuple[int, int]:
    """(bytes used, files, folders and links besides the root) now; (0, 0) once closed."""
    if self._fd is None:
      return 0, 0
    sv = os.fstatvfs(self._fd)
    return (sv.f_blocks - sv.f_bfree) * sv.f_frsize, sv.f_files - sv.f_ffree - 1

  def full(self, where: str | None = None) -> str | None:
    """Which of the folder's limits are reached now (at close: kept from then), or None.

    Args:
      where: the name to give the folder (e.g. '/workspace', as the sandboxed program sees it); default
        its host path.
    Returns:
      e.g. "/workspace is full (disk budget reached: 33554432 bytes of SandboxConfig.workspace_max_bytes=
      33554432, and file limit reached: 500 files, folders and links of SandboxConfig.workspace_max_files=
      500; writes there fail with ENOSPC)", naming each limit reached; None if neither is.
    """
    reached = self._reached()
    if not reached:
      return None
    return f"{where or self.path} is full ({', and '.join(reached)}; writes there fail with ENOSPC)"

  def _reached(self) -> list[str]:
    """The limits reached now, each with its setting (at close: kept from then)."""
    if self._fd is None:
      return self._full
    sv = os.fstatvfs(self._fd)
    used, files = self.usage()
    reached = []
    if self.max_bytes and sv.f_bfree * sv.f_frsize < 4096:
      reached.append(f"disk budget reached: {used} bytes of {self.limits[0]}={self.max_bytes}")
    if self.max_files and sv.f_ffree == 0:
      reached.append(f"file limit reached: {files} files, folders and links of {self.limits[1]}={self.max_files}")
    return reached

  # -- copy in and out

  def _copy_in(self, src: int, dst: int, rel: str) -> None:
    try:
      for name in os.listdir(src):
        r = f"{rel}{name}"
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
          os.mkdir(name, 0o700, dir_fd=dst)
          s, d = os.open(name, _DIR, dir_fd=src), os.open(name, _DIR, dir_fd=dst)
          try:
            self._copy_in(s, d, r + "/")
            os.fchown(d, self.uid, self.gid)
            os.fchmod(d, st.st_mode & 0o1777)
            cst = os.fstat(d)
          finally:
            os.close(s)
            os.close(d)
          self._record[r] = _Entry("d", st.st_uid, st.st_gid, st.st_mode & 0o7777, cst.st_ino, cst.st_ctime_ns)
        elif stat.S_ISREG(st.st_mode):
          cst = _copy_file(src, dst, name, name, self.uid, self.gid, st.st_mode & 0o777, st)[0]
          self._record[r] = _Entry("f", st.st_uid, st.st_gid, st.st_mode & 0o7777, cst.st_ino, cst.st_ctime_ns)
        elif stat.S_ISLNK(st.st_mode):
          os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
          os.chown(name, self.uid, self.gid, dir_fd=dst, follow_symlinks=False)
          self._record[r] = _Entry("l", st.st_uid, st.st_gid, 0)
        else:
          self._record[r] = _Entry("x", st.st_uid, st.st_gid, st.st_mode & 0o7777)
    except OSError as e:
      if e.errno in (errno.ENOSPC, errno.EFBIG):
        raise CapError(f"{self.path} holds more than its budget ({self.limits[0]}={self.max_bytes}, "
                       f"{self.limits[1]}={self.max_files}): raise them or empty the folder") from None
      raise

  def restage(self, src: str | None = None) -> None:
    """Empties the capped folder and copies the host folder `src` into it (None: leaves it empty), as at
    start with keep=True: owned by uid/gid, modes kept, no link followed (links are copied as links).

    For a folder that several sandboxes keep bound across episodes (ProgAgent's MCP servers started once,
    progagent.mcp_servers): each episode starts from `src` without remounting. What is written back at
    close (keep=True) is then compared with `src`'s owners and modes.

    Raises:
      CapError: `src` holds more than the budget (the folder is left empty), or `src` is a link.
      RuntimeError: the folder is closed.
    """
    if self._fd is None:
      raise RuntimeError(f"{self.path}: the capped folder is closed")
    for name in os.listdir(self._fd):
      _remove(self._fd, name)
    self._record = {k: v for k, v in self._record.items() if k == "."}
    if src is None:
      return
    if os.path.islink(src):
      raise CapError(f"{src} is a symbolic link (to {os.readlink(src)!r}): pass the real folder, "
                     f"{os.path.realpath(src)}")
    sfd = os.open(src, _DIR)
    try:
      self._copy_in(sfd, self._fd, "")
    except BaseException:
      for name in os.listdir(self._fd):
        _remove(self._fd, name)
      self._record = {k: v for k, v in self._record.items() if k == "."}
      raise
    finally:
      os.close(sfd)

  def write_back_size(self) -> tuple[int, int]:
    """(bytes, entries) that `close()` would leave in the folder: each regular file at its full size (a
    sparse file's holes count, each hard link counts on its own), each link its target's length; each
    file, folder and link as one entry. What is not written back (folders deeper than MAX_COPY_DEPTH,
    FIFOs and sockets) is not counted. (0, 0) once closed."""
    if self._fd is None:
      return 0, 0
    return _tree_size(self._fd, 0)

  def _spend(self, nbytes: int, rel: str) -> None:
    """Counts one entry of `nbytes` against the write-back's budget; CapError past it (a tree that changed
    after `write_back_size` was checked)."""
    left_bytes, left_entries = self._left[0] - nbytes, self._left[1] - 1
    self._left = (left_bytes, left_entries)
    if (self.max_bytes and left_bytes < 0) or (self.max_files and left_entries < 0):
      raise CapError(f"{self.path}: writing back stopped at {rel!r}: the folder changed while it was written "
                     f"back and holds more than {self.limits[0]}={self.max_bytes} or {self.limits[1]}="
                     f"{self.max_files}; the folder holds part of the result")

  def _copy_out(self, src: int, dst: int, rel: str, depth: int = 0) -> None:
    """Makes the folder under `dst` what the tmpfs holds under `src` (no link followed on either side)."""
    if depth >= MAX_COPY_DEPTH:
      _log.warning("%s: folders below %s (deeper than sandbox_fs.MAX_COPY_DEPTH=%d) are not written back",
                   self.path, rel, MAX_COPY_DEPTH)
      return
    theirs = set(os.listdir(src))
    for name in os.listdir(dst):
      if name not in theirs and self._record.get(f"{rel}{name}", _Entry("", 0, 0, 0)).kind != "x":
        _remove(dst, name)
    for name in sorted(theirs):
      r = f"{rel}{name}"
      st = os.stat(name, dir_fd=src, follow_symlinks=False)
      was = self._record.get(r)
      now = _lstat(dst, name)
      kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else \
          "l" if stat.S_ISLNK(st.st_mode) else "x"
      if was is not None and was.kind == kind:
        uid, gid, mode = was.uid, was.gid, was.mode
      else:  # new (or of another kind): the folder's owner; never a set-id bit
        uid, gid, mode = self._owner[0], self._owner[1], st.st_mode & 0o777
        was = None
      if kind != "x":
        self._spend(st.st_size if kind in "fl" else 0, r)
      if kind == "d":
        if now is None or not stat.S_ISDIR(now.st_mode):
          if now is not None:
            _remove(dst, name)
          os.mkdir(name, 0o700, dir_fd=dst)
        s, d = os.open(name, _DIR, dir_fd=src), os.open(name, _DIR, dir_fd=dst)
        try:
          self._copy_out(s, d, r + "/", depth + 1)
          os.fchown(d, uid, gid)
          os.fchmod(d, mode)
        finally:
          os.close(s)
          os.close(d)
      elif kind == "f":
        if was is not None and (was.ino, was.ctime_ns) == (st.st_ino, st.st_ctime_ns) and now is not None:
          continue  # not touched since copy-in: the file underneath is the same
        # Changed: a new inode, no set-id bit (a program cannot leave a set-id file of the host's rewritten).
        tmp = _copy_file(src, dst, name, None, uid, gid, mode & ~0o6000, st)[1]
        if now is not None and stat.S_ISDIR(now.st_mode):
          _remove(dst, name)
        os.rename(tmp, name, src_dir_fd=dst, dst_dir_fd=dst)
      elif kind == "l":
        target = os.readlink(name, dir_fd=src)
        if now is not None:
          if stat.S_ISLNK(now.st_mode) and os.readlink(name, dir_fd=dst) == target:
            continue
          _remove(dst, name)
        os.symlink(target, name, dir_fd=dst)
        os.chown(name, uid, gid, dir_fd=dst, follow_symlinks=False)
      # FIFOs and sockets a program made are not copied back

  # -- end

  def _unmount(self) -> None:
    """Detaches the tmpfs through a descriptor of its root (the path is not looked up again)."""
    fd, self._fd = self._fd, None
    if fd is None:
      detach(self.path)
      return
    try:
      if not detach(f"/proc/self/fd/{fd}"):
        _log.warning("capped folder %s (%s) was not mounted at close", self.path, self.name)
    finally:
      os.close(fd)

  def close(self, *, copy_back: bool = True) -> None:
    """Writes the content back (keep=True and copy_back) and unmounts. Idempotent.

    Raises:
      CapError: what writing back would put on the host (`write_back_size`) is more than max_bytes or
        max_files: nothing is written, the folder is as it was before (the tmpfs is unmounted all the same).
      OSError: writing back failed (the tmpfs is unmounted all the same; the folder underneath may hold
        part of the result).
    """
    if self._fd is None:
      return
    try:
      self._full = self._reached()
      if self.keep and copy_back:
        nbytes, entries = self.write_back_size()
        over = ([f"{nbytes} bytes, more than {self.limits[0]}={self.max_bytes} (sparse files and hard links "
                 "counted at their full size, each link on its own: what writing them back would put on the "
                 "host)"] if self.max_bytes and nbytes > self.max_bytes else [])
        if self.max_files and entries > self.max_files:
          over.append(f"{entries} files, folders and links, more than {self.limits[1]}={self.max_files}")
        if over:
          raise CapError(f"{self.path} was not written back: the sandbox left {' and '.join(over)}; the folder "
                         "is as it was before the sandbox started")
        self._left = (self.max_bytes, self.max_files)
        self._copy_out(self._fd, self._under, "")
    finally:
      try:
        self._unmount()
      finally:
        os.close(self._under)

  def __del__(self):
    try:
      self.close()
    except Exception:
      pass


def _tree_size(fd: int, depth: int) -> tuple[int, int]:
  """(bytes, entries) of the folder `fd` as `CappedDir.write_back_size` counts them (no link followed)."""
  if depth >= MAX_COPY_DEPTH:
    return 0, 0
  nbytes = entries = 0
  for name in os.listdir(fd):
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
      sub = os.open(name, _DIR, dir_fd=fd)
      try:
        b, e = _tree_size(sub, depth + 1)
      finally:
        os.close(sub)
      nbytes, entries = nbytes + b, entries + e + 1
    elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
      nbytes, entries = nbytes + st.st_size, entries + 1
  return nbytes, entries


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
  try:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
  except FileNotFoundError:
    return None


def _remove(dir_fd: int, name: str) -> None:
  """Removes the entry `name` of the folder `dir_fd` (a folder with all it holds; no link followed)."""
  st = _lstat(dir_fd, name)
  if st is None:
    return
  if stat.S_ISDIR(st.st_mode):
    shutil.rmtree(name, dir_fd=dir_fd)
  else:
    os.unlink(name, dir_fd=dir_fd)


def _copy_file(src_dir: int, dst_dir: int, name: str, dst_name: str | None, uid: int, gid: int, mode: int,
               st: os.stat_result) -> tuple[os.stat_result, str]:
  """Copies the regular file `name` of src_dir to a new file in dst_dir (owner, mode, times set; no extended
  attribute): `dst_name`, or None for a fresh temporary name there. Copies at most `st.st_size` bytes (holes
  written as zeros). Returns (its stat, its name)."""
  fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
  try:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
      out_name = dst_name or f".agentrl-copy-{os.getpid()}-{next(_COUNTER)}"
      try:
        fout = os.open(out_name, flags, 0o600, dir_fd=dst_dir)
        break
      except FileExistsError:
        if dst_name is not None:
          raise
    try:
      left = min(os.fstat(fin).st_size, st.st_size)  # no more than was counted
      while left > 0:
        n = os.sendfile(fout, fin, None, min(left, 1 << 30))
        if n == 0:
          break
        left -= n
      os.fchown(fout, uid, gid)
      os.fchmod(fout, mode)
      os.utime(fout, ns=(st.st_atime_ns, st.st_mtime_ns))
      return os.fstat(fout), out_name
    finally:
      os.close(fout)
  finally:
    os.close(fin)


def make_mount_points(root: str, points) -> None:
  """Makes each mount point beneath `root` and its parents as root-owned entries (folders 0755, files
  0644), beneath `root`'s descriptor with no link followed; anything else at one of their names (a link, a
  program's file or folder) is removed first. With `root` root-owned and sticky (mode 01777), a program
  running as another user can neither rename, replace nor write them afterwards.

  Args:
    root: the host folder (a /tmp bound into a sandbox).
    points: (path relative to root, is a folder) pairs.
  """
  rfd = os.open(root, _DIR)
  try:
    for rel, is_dir in points:
      parts = [p for p in rel.split("/") if p not in ("", ".")]
      if ".." in parts:
        raise ValueError(f"mount point {rel!r} leaves {root}")
      fd = os.dup(rfd)
      try:
        for i, part in enumerate(parts):
          want_dir = is_dir or i < len(parts) - 1
          st = _lstat(fd, part)
          good = (st is not None and st.st_uid == 0 and not st.st_mode & 0o022
                  and (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)))
          if not good:
            if st is not None:
              _remove(fd, part)
            if want_dir:
              os.mkdir(part, 0o755, dir_fd=fd)
            else:
              os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o644, dir_fd=fd))
            os.chown(part, 0, 0, dir_fd=fd, follow_symlinks=False)
            os.chmod(part, 0o755 if want_dir else 0o644, dir_fd=fd)  # umask aside; a new entry, no link
          if want_dir:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
      finally:
        os.close(fd)
  finally:
    os.close(rfd)
