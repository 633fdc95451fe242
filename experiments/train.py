r"""Launcher: parses flags, sets up logging and the workdir, then calls one library function.

  python -m experiments.train --config=configs/phgpo_traject.py --workdir=runs/phgpo_traject
  python -m experiments.train --config=configs/phgpo_traject.py:smoke --workdir=/tmp/smoke \
      --config.pheromone.rho=0.05

Running the same command again resumes every unfinished run from its latest checkpoint and skips the
finished ones.
"""

import logging
import os

from absl import app
from absl import flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and results go.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "TRAJECT-Bench folder, if not at ../shared/data.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  config = _CONFIG.value
  logging.getLogger("absl").setLevel(logging.WARNING)
  workdir = os.path.abspath(_WORKDIR.value)
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=1))
  if _DATA_DIR.value:
    if "data" not in config:
      raise ValueError(f"--data_dir applies to TRAJECT-Bench configs; config.method={config.method!r} has no data")
    with config.unlocked():
      config.data.path = _DATA_DIR.value
  if config.method == "phgpo_compare":
    from phgpo import train  # pylint: disable=g-import-not-at-top
    train.run_comparison(config, workdir, progress=_PROGRESS.value)
  elif config.method == "progagent":
    from progagent import train  # pylint: disable=g-import-not-at-top
    train.run(config, workdir)
  else:
    raise ValueError(f"unknown config.method {config.method!r}; valid: 'phgpo_compare', 'progagent'")


if __name__ == "__main__":
  app.run(main)
