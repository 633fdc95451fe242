r"""Launcher: parses flags, sets up logging and the workdir, then calls one library function.

  python -m experiments.train --config=configs/phgpo_traject.py --workdir=runs/phgpo_traject
  python -m experiments.train --config=configs/phgpo_traject.py:smoke --workdir=/tmp/smoke \
      --config.pheromone.rho=0.05

Running the same command again resumes every unfinished run from its latest checkpoint and skips the
finished ones.

Several processes (hosts): start the same command on every process with --coordinator_address=HOST:PORT
(process 0's address), --num_processes=N and --process_id=0..N-1, or set JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES and JAX_PROCESS_ID; under Slurm, Open MPI or Kubernetes JAX finds them itself
(common/distributed.py, which also says what multi-process runs write today).
"""

import importlib
import inspect
import json
import logging
import os
import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from common import config_util
from common import distributed
from common.lm import stages

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and results go.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "TRAJECT-Bench folder (sets config data.path), used as given: it wins over $TRAJECT_BENCH_DIR "
    "and the shared copy ../shared/data/traject_bench, which is the default only when neither is given.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "Multi-process runs: HOST:PORT of process 0's coordinator, the same on "
    "every process (default: env JAX_COORDINATOR_ADDRESS, or the cluster's, detected by JAX).")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Multi-process runs: the number of processes (default: env JAX_NUM_PROCESSES, "
    "or detected by JAX; 1 or unset = a single process).")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "Multi-process runs: this process's id in 0..num_processes-1 (default: env "
    "JAX_PROCESS_ID, or detected by JAX).")
flags.mark_flags_as_required(["config", "workdir"])


# config.method -> the trainer module. Each exports check_config(config) (raises ValueError naming a bad key,
# before anything is written), run(config, workdir, ...), RESUME_FREE (keys that change where and how fast a run
# computes, not what: a workdir may resume with other values, e.g. on another mesh) and REPORT_ONLY (keys that
# choose and summarise what is reported: a finished workdir is re-reported with new values, no retraining).
# A key ending in '.' names a whole section. Optionally ADDED_KEYS: key -> the value that reproduces what the
# trainer did before the key existed (a workdir saved without the key resumes when it has that value).
TRAINERS = {"phgpo_compare": "phgpo.train", "planpo": "planpo.train", "progagent": "progagent.train"}


def trainer_of(config):
  """The trainer module of `config.method` (TRAINERS).

  Raises:
    ValueError: an unknown method, naming the valid ones.
  """
  method = config.get("method", "")
  if method not in TRAINERS:
    raise ValueError(f"unknown config.method {method!r}; valid: {sorted(TRAINERS)}")
  return importlib.import_module(TRAINERS[method])


def _matches(key: str, patterns) -> bool:
  return any(key == p.rstrip(".") or key.startswith(p if p.endswith(".") else p + ".") for p in patterns)


def _check_same_config(workdir: str, config, trainer=None, *, write: bool = True) -> None:
  """Refuses a workdir whose saved config differs: its checkpoints and results belong to that config.

  Keys of the trainer's REPORT_ONLY may differ (they select and summarise runs, not train them), and so may
  those of its RESUME_FREE (mesh, attention blocks, remat, KV reuse: where and how fast, not what). A workdir
  holding nothing but config.json (a run that failed before writing anything) takes the new config.
  `write`: save config.json (only process 0 does, in a multi-process run).

  Raises:
    ValueError: listing the differing keys, and how to proceed.
  """
  trainer = trainer or trainer_of(config)
  path = os.path.join(workdir, "config.json")
  new = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path) as f:
      old = json.load(f)
    free = tuple(trainer.REPORT_ONLY) + tuple(trainer.RESUME_FREE)
    # a key added since the workdir was saved, at the value that does what the trainer did without it
    # (compared as saved: JSON, so a tuple is a list)
    added = {f"{k}: '<missing>' -> {json.loads(json.dumps(v))!r}"
             for k, v in getattr(trainer, "ADDED_KEYS", {}).items()}
    diffs = [d for d in _diff(old, new) if not _matches(d.split(":")[0], free) and d not in added]
    if diffs and not _holds_results(workdir):
      # A run that stopped before writing anything (e.g. a checkpoint path that does not exist): nothing to keep.
      logging.warning("--workdir %s holds only the config.json of a run that wrote nothing; replacing it "
                      "(%s)", workdir, "; ".join(diffs[:5]))
      diffs = []
    if diffs:
      raise ValueError(
          f"--workdir {workdir} holds checkpoints and results of a different config:\n  "
          + "\n  ".join(diffs[:20]) + "\nUse a new --workdir (or delete this one) to run with the new "
          "values; rerun with the same config to resume.")
  if write:
    with open(path, "w") as f:
      json.dump(new, f, indent=1)


def _holds_results(workdir: str) -> bool:
  """Whether `workdir` holds any file besides its config.json (checkpoints, metrics, results, logs)."""
  for root, _, files in os.walk(workdir):
    if any(not (root == workdir and f == "config.json") for f in files):
      return True
  return False


def _diff(old, new, prefix="") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    out = []
    for k in sorted(set(old) | set(new)):
      out += _diff(old.get(k, "<missing>"), new.get(k, "<missing>"), f"{prefix}{k}." if prefix or k else k)
    return out
  return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def main(argv):
  del argv
  # JAX's own INFO lines (e.g. "Unable to initialize backend 'tpu'" on every CPU or GPU machine) would come before
  # a config error's FATAL line; --verbosity=1 keeps them.
  if flags.FLAGS.verbosity < 1:
    logging.getLogger("jax").setLevel(logging.WARNING)
  # First, before anything touches JAX devices; a no-op for a single process.
  process = distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  config = _CONFIG.value
  try:
    config.get("method")   # a config file that failed to load raises here (ml_collections defers the error)
  except OSError:
    path = config_flags.get_config_filename(flags.FLAGS["config"])
    if os.path.exists(path.split(":", 1)[0]):
      raise   # the file is there but failed to load: its own traceback
    known = sorted(f"configs/{f}" for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "configs"))
                   if f.endswith(".py") and not f.startswith("_") and f != "schema.py")
    sys.exit(f"FATAL --config={path}: no such config file; the configs are {', '.join(known)} "
             "(a variant after a colon, e.g. configs/planpo_twx.py:smoke)")
  logging.getLogger("absl").setLevel(logging.WARNING)
  workdir = os.path.abspath(_WORKDIR.value)
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    sys.exit(f"FATAL --workdir {workdir} is a file; give a folder (it is created if missing)")
  if _DATA_DIR.value:
    if "data" not in config:
      sys.exit(f"FATAL --data_dir applies to TRAJECT-Bench configs; config.method={config.method!r} has no data")
    with config.unlocked():
      config.data.path = _DATA_DIR.value
  config_util.split_list_overrides(config)
  trainer = trainer_of(config)
  try:
    trainer.check_config(config)   # a bad value is named before anything is written into the workdir
    os.makedirs(workdir, exist_ok=True)
    _check_same_config(workdir, config, trainer, write=process.process_id == 0)
  except ValueError as e:   # a bad value, or a workdir of another config: one line, not a traceback
    sys.exit(f"FATAL {e}")
  kwargs = {"progress": _PROGRESS.value} if "progress" in inspect.signature(trainer.run).parameters else {}
  try:
    trainer.run(config, workdir, **kwargs)
  except stages.RegimeGateFailed as e:   # printed before any RL: the rows would be read in the wrong regime
    print(f"STOPPED {e}", file=sys.stderr, flush=True)
    sys.exit(3)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with an override of a key the config does not have (a misspelt --config.<key>) reported as
  one line naming it instead of ml_collections' traceback (exit status 1)."""
  try:
    return flags.FLAGS(argv)
  except flags.IllegalFlagValueError as e:
    # get_config's own "unknown config variant ...; valid: ..." (ml_collections wraps it in two tracebacks)
    line = next((l for l in reversed(str(e).splitlines()) if "unknown config variant" in l), None)
    if line is None:
      raise
    given = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")), "")
    sys.exit(f"FATAL --config={given}: {line.split(': ', 1)[-1] if line.startswith('ValueError') else line}")
  except (AttributeError, KeyError) as e:
    bad = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
    keys = {k for b in bad for k in b[len("--config."):].split(".")}
    # ml_collections' "Did you mean" message holds the key in escaped quotes and an escaped newline
    msg = str(e).replace("\\n", " ").replace("\\", "")
    if not any(f"'{k}'" in msg or f".{k}" in msg for k in keys):
      raise   # not an override's key (e.g. a bug inside the config file): the full traceback
    named = [b for b in bad if any(f"'{k}'" in msg or f".{k}" in msg for k in b[len("--config."):].split("."))]
    given = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")), "")
    module = os.path.splitext(os.path.basename(given.split(":", 1)[0]))[0] or "<config module>"
    hint = " ".join(msg.replace("'", "").split()).strip('"')
    sys.exit(f"FATAL Flags parsing error: {', '.join(named) or bad} names a key the config does not have "
             f"({hint}). Check the spelling against the config file's get_config(), e.g. "
             f"python -c 'from configs import {module} as c; print(c.get_config())'")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
