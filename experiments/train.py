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

import json
import logging
import os

from absl import app
from absl import flags
import ml_collections
from ml_collections import config_flags

from common import distributed

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and results go.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "TRAJECT-Bench folder, if not at ../shared/data.")
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


# Keys that choose which results a run reports, not what its checkpoints hold: a PlanPO workdir is shared by
# its main and ablation tables (runs are folders named by run; planpo/train.py).
_REPORT_KEYS = {"planpo": ("runs", "table", "reference", "stats"),
                "phgpo_compare": ("runs", "table", "reference", "stats", "seeds", "splits")}


# Keys that change where and how fast a run computes, not what it computes (equal results up to float rounding):
# a run may resume with other values, e.g. on another mesh (the checkpoint restores into the new shardings).
_RESUME_FREE = ("mesh.", "model.attention_impl", "model.attention_chunk", "model.logits_chunk", "model.remat",
                "policy.attention_impl", "policy.attention_chunk", "policy.logits_chunk", "policy.remat",
                "gspo.kv_reuse", "gspo.kv_cache_max_gb", "gspo.generate_batch_size", "rollout.kv_reuse",
                "rollout.kv_cache_max_gb")


def _split_list_overrides(config) -> None:
  """Splits a tuple-of-strings field given as one comma-separated flag value, in place, at any depth.

  `--config.runs=warmup,grpo` on a tuple field arrives as the one string 'warmup,grpo'; every config's
  run/split lists mean the names between the commas.
  """
  with config.unlocked():
    for key, value in list(config.items()):
      if isinstance(value, ml_collections.ConfigDict):
        _split_list_overrides(value)
      elif isinstance(value, str) and "," in value and key in ("runs", "splits"):
        config[key] = tuple(x.strip() for x in value.split(",") if x.strip())
      elif isinstance(value, (tuple, list)) and any(isinstance(v, str) and "," in v for v in value):
        config[key] = tuple(x.strip() for v in value for x in (v.split(",") if isinstance(v, str) else [v])
                            if not isinstance(x, str) or x.strip())


def _check_same_config(workdir: str, config, *, write: bool = True) -> None:
  """Refuses a workdir whose saved config differs: its checkpoints and results belong to that config.

  Keys of _REPORT_KEYS[config.method] may differ (they select and summarise runs, not train them), and so may
  the keys of _RESUME_FREE (mesh, attention blocks, remat, KV reuse: where and how fast, not what).
  `write`: save config.json (only process 0 does, in a multi-process run).

  Raises:
    ValueError: listing the differing keys, and how to proceed.
  """
  path = os.path.join(workdir, "config.json")
  new = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path) as f:
      old = json.load(f)
    skip = _REPORT_KEYS.get(config.get("method", ""), ())
    diffs = [d for d in _diff(old, new) if d.split(":")[0].split(".")[0] not in skip
             and not d.split(":")[0].startswith(_RESUME_FREE)]
    if diffs:
      raise ValueError(
          f"--workdir {workdir} holds checkpoints and results of a different config:\n  "
          + "\n  ".join(diffs[:20]) + "\nUse a new --workdir (or delete this one) to run with the new "
          "values; rerun with the same config to resume.")
  if write:
    with open(path, "w") as f:
      json.dump(new, f, indent=1)


def _diff(old, new, prefix="") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    out = []
    for k in sorted(set(old) | set(new)):
      out += _diff(old.get(k, "<missing>"), new.get(k, "<missing>"), f"{prefix}{k}." if prefix or k else k)
    return out
  return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def main(argv):
  del argv
  # First, before anything touches JAX devices; a no-op for a single process.
  process = distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  config = _CONFIG.value
  logging.getLogger("absl").setLevel(logging.WARNING)
  workdir = os.path.abspath(_WORKDIR.value)
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ValueError(f"--workdir {workdir} is a file; give a folder (it is created if missing)")
  if _DATA_DIR.value:
    if "data" not in config:
      raise ValueError(f"--data_dir applies to TRAJECT-Bench configs; config.method={config.method!r} has no data")
    with config.unlocked():
      config.data.path = _DATA_DIR.value
  _split_list_overrides(config)
  if config.method == "planpo":   # a bad value is named before anything is written into the workdir
    from planpo import train as planpo_train  # pylint: disable=g-import-not-at-top
    planpo_train.check_config(config)
  elif config.method == "phgpo_compare":
    from phgpo import train as phgpo_train  # pylint: disable=g-import-not-at-top
    phgpo_train.check_config(config)
  elif config.method == "progagent":
    from progagent import train as progagent_train  # pylint: disable=g-import-not-at-top
    progagent_train.check_config(config)
  os.makedirs(workdir, exist_ok=True)
  _check_same_config(workdir, config, write=process.process_id == 0)
  if config.method == "phgpo_compare":
    from phgpo import train  # pylint: disable=g-import-not-at-top
    train.run(config, workdir, progress=_PROGRESS.value)
  elif config.method == "progagent":
    from progagent import train  # pylint: disable=g-import-not-at-top
    train.run(config, workdir)
  elif config.method == "planpo":
    from planpo import train  # pylint: disable=g-import-not-at-top
    train.run(config, workdir)
  else:
    raise ValueError(f"unknown config.method {config.method!r}; valid: 'phgpo_compare', 'progagent', 'planpo'")


if __name__ == "__main__":
  app.run(main)
