r"""Draws the pictures of a PhGPO run directory: pheromone heat maps and learning curves per split.

  python -m experiments.phgpo_plots --workdir=runs/phgpo_traject

Finds every <workdir>/<split>/seed_<s>/<run>/ folder (and the older <workdir>/seed_<s>/<run>/ layout), then
calls `phgpo.analysis.plot_all` for the splits, runs and seeds found, and prints the written paths:
<workdir>/<split>/heatmap_<run>_seed<s>.png for runs with pheromone snapshots and
<workdir>/<split>/learning_curves.png (older layout: <workdir>/plots/).
"""

import os

from absl import app
from absl import flags

from phgpo import analysis
from phgpo import runs as runs_lib



def _define_flags() -> None:
  """Defined only when run as a program, so importing plot_workdir (tests, notebooks) never clashes with
  experiments.train's flag of the same name."""
  flags.DEFINE_string("workdir", None, "The run directory given to experiments.train as --workdir.")
  flags.mark_flags_as_required(["workdir"])


def plot_workdir(workdir: str) -> list[str]:
  """`phgpo.analysis.plot_all` over every split, run and seed found in workdir; returns the written paths.

  Raises:
    FileNotFoundError: workdir does not exist or holds no <split>/seed_<s>/<run> folder (the message names
      the command that makes one).
  """
  workdir = os.path.abspath(workdir)
  found = analysis.find_runs(workdir)
  if not found:
    state = "does not exist" if not os.path.isdir(workdir) else "holds no <split>/seed_<s>/<run> folder"
    raise FileNotFoundError(
        f"--workdir {workdir} {state}: nothing to plot. Train first, e.g. `python -m experiments.train "
        f"--config=configs/phgpo_traject.py --workdir={workdir}`.")
  splits = sorted({s for s, _, _ in found}, key=lambda s: s or "")
  seeds = sorted({seed for _, seed, _ in found})
  order = {r: i for i, r in enumerate(runs_lib.RUN_KINDS)}   # the trainer's order; unknown folders last
  runs = sorted({r for _, _, r in found}, key=lambda r: (order.get(r, len(order)), r))
  return analysis.plot_all(workdir, splits=splits, runs=runs, seeds=seeds)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  workdir = flags.FLAGS.workdir
  try:
    paths = plot_workdir(workdir)
  except FileNotFoundError as e:
    raise app.UsageError(str(e)) from None
  for p in paths:
    print(p)
  if not paths:
    print(f"no picture: no run under {workdir} has pheromone snapshots or logged rl/reward")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
