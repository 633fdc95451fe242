"""Where a result came from: the code's git commit and whether the checkout had uncommitted changes.

Written into every results file (planpo/train.py results_<table>.json and .txt), so a table can be traced to
the commit and the config that produced it. Uses the `git` command on the package's own checkout; outside a
git checkout (an installed wheel, a copied folder) the commit is 'unknown'.
"""
from __future__ import annotations

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
