"""Runs that several test modules read, made once per test session (tests/conftest.py's session folder).

The first caller makes a run under a file lock; the others (in this or another xdist worker) wait for it and
then read the same folder. Readers that write into a run (a resumed trainer, the plotting app) copy it first
(`copy_of`), so no test sees another's writes.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import filelock

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache")   # the embedding cache of the test runs
PHGPO_SMOKE_RUNS = ("nearest", "warmup", "grpo", "phgpo")


def session_dir() -> pathlib.Path:
  d = pathlib.Path(os.environ.get("AGENTIC_RL_TEST_SESSION_DIR") or tempfile.gettempdir()) / "shared_runs"
  d.mkdir(parents=True, exist_ok=True)
  return d


def phgpo_smoke() -> pathlib.Path:
  """The launcher's PhGPO smoke run: `python -m experiments.train --config=configs/phgpo_traject.py:smoke` with
  its four runs (nearest, warmup, grpo, phgpo), sandboxed environments and TensorBoard on, as a user runs it.

  Returns the workdir; `stdout.txt` in it holds what the launcher printed. Raises AssertionError with the
  launcher's stderr if it fails (the next caller tries again).
  """
  root = session_dir()
  workdir = root / "phgpo_smoke"
  done = root / "phgpo_smoke.done"
  with filelock.FileLock(str(root / "phgpo_smoke.lock")):
    if not done.exists():
      shutil.rmtree(workdir, ignore_errors=True)
      cmd = [sys.executable, "-m", "experiments.train", "--config=configs/phgpo_traject.py:smoke",
             f"--workdir={workdir}", "--noprogress", f"--config.runs={','.join(PHGPO_SMOKE_RUNS)}",
             f"--config.encoder.cache_dir={CACHE}", "--config.logging.tensorboard=True"]
      out = subprocess.run(cmd, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=1800)
      assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stderr[-5000:]}"
      (workdir / "stdout.txt").write_text(out.stdout)
      done.touch()
  return workdir


def copy_of(run: pathlib.Path, dest) -> pathlib.Path:
  """A private copy of a shared run under `dest` (a fresh folder)."""
  dest = pathlib.Path(dest) / run.name
  shutil.copytree(run, dest)
  return dest
