"""Where a result came from: the code's git commit and whether the checkout had uncommitted changes.

Written into every results file (planpo/train.py results_<table>.json and .txt), so a table can be traced to
the commit and the config that produced it. Uses the `git` command on the package's own checkout; outside a
git checkout (an installed wheel, a copied folder) the commit is 'unknown'. `data_fingerprint` hashes the data
files a result was computed from (relative paths and contents), so a changed or different copy of the data shows.
"""
from __future__ import annotations

import hashlib
import os
import subprocess

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> str | None:
  try:
    out = subprocess.run(["git", "-C", _ROOT, *args], capture_output=True, text=True, timeout=30, check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip()


def code_version() -> dict[str, str | bool]:
  """{'commit': 40-hex HEAD of this checkout or 'unknown', 'dirty': True when tracked files differ from HEAD
  (untracked files are ignored), 'root': the checkout's path}. Never raises."""
  commit = _git("rev-parse", "HEAD") or "unknown"
  status = _git("status", "--porcelain", "--untracked-files=no") if commit != "unknown" else None
  return {"commit": commit, "dirty": bool(status), "root": _ROOT}


def file_sha256(path: str) -> str:
  """sha256 hex digest (64 characters) of one file's contents, read in 1 MiB chunks.

  Raises:
    OSError: the file cannot be read (FileNotFoundError when it does not exist).
  """
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def data_fingerprint(paths: list[str]) -> str:
  """sha256 hex digest of the files under `paths`: their relative paths and contents, in sorted order.

  Each path may be a file or a directory (walked recursively; symlinked files are read, symlinked directories
  are not entered). A file's relative path is the path below the parent of the given path that holds it
  (e.g. 'traject_bench/tools/x.json' for the directory .../traject_bench), so the fingerprint does not depend
  on where the data lives. The digest is over the sorted lines '<relative path>\\0<sha256 of the contents>\\n'
  (contents read in 1 MiB chunks); a file reached twice counts once.

  Raises:
    FileNotFoundError: a path does not exist.
  """
  files: dict[str, str] = {}
  for p in paths:
    p = os.path.normpath(os.path.abspath(p))
    if not os.path.exists(p):
      raise FileNotFoundError(f"data_fingerprint: no such file or directory: {p}")
    parent = os.path.dirname(p)
    if os.path.isdir(p):
      for dirpath, dirnames, filenames in os.walk(p):
        dirnames.sort()
        for name in filenames:
          full = os.path.join(dirpath, name)
          files[os.path.relpath(full, parent).replace(os.sep, "/")] = full
    else:
      files[os.path.relpath(p, parent).replace(os.sep, "/")] = p
  total = hashlib.sha256()
  for rel in sorted(files):
    total.update(f"{rel}\0{file_sha256(files[rel])}\n".encode("utf-8", "surrogateescape"))
  return total.hexdigest()
