"""Benchmark suites for `python -m progagent.bench.evaluate`: each a function returning task records.

  tasks = SUITES["toolathlon_local"].load(args)      # [BenchTask, ...]
  for t in tasks:
    env = make_env(t, mode="ptc")                      # ProgEnv over McpTaskEnv(t.servers, [t.task]) or a library task
    ...

A suite is a `Suite(name, load, add_args)` (progagent.bench.base): `add_args(parser)` adds the suite's own flags (e.g.
`--toolathlon_dir`), `load(args)` reads them and returns the suite's tasks as BenchTask records. A task over MCP
servers carries what progagent.mcp_task_env.McpTaskEnv takes: its servers ('NAME=COMMAND') and an McpTask
(instruction, workspace, ground truth, evaluator command); a task of the project's own library carries its
instance id ('domain/name@vK') and no servers; a task whose servers need more than a command line (LOCA's mock
services and their state) carries a `make_env` factory instead. Adding a benchmark is one more entry in SUITES.

Suites here:
  progagent         the project's task library (progagent.tasks): the tasks of `--progagent_tasks` (default
                    every task) at the levels of `--progagent_levels` (default 0); reward = the task's verifier.
  toolathlon_local  the ten Toolathlon tasks whose servers are all local (progagent.bench.toolathlon).
  loca              LOCA-bench's task set of `--loca_size` (progagent.bench.loca: `--loca_dir`, `--loca_types`,
                    `--loca_seeds`, `--loca_state_dir`); each task's environment is loca.make_env([task]) (its mock
                    services over its generated state); reward = the task's env class's own step(). scripted:groundtruth
                    is refused here: LOCA's ground truth is not a workspace copy (`python -m progagent.bench.loca
                    --check` runs the copies that do exist).
"""

from __future__ import annotations

import argparse
import functools

from progagent import tasks as tasks_lib
from progagent.bench import loca
from progagent.bench import toolathlon
from progagent.bench.base import BenchTask, Suite, SuiteError


# ------------------------------------------------------------------------------------------------ progagent


def _progagent_args(p: argparse.ArgumentParser) -> None:
  g = p.add_argument_group("suite progagent (the project's task library)")
  g.add_argument("--progagent_tasks", default="",
                 help="task ids, domains or tag:NAME, comma-separated (progagent.tasks.select_tasks; default all)")
  g.add_argument("--progagent_levels", default="0", help="levels v0..v3, comma-separated (default 0)")


def load_progagent(args: argparse.Namespace) -> list[BenchTask]:
  """The library tasks of `--progagent_tasks` at each level of `--progagent_levels`.

  Raises:
    SuiteError: a level outside 0..3. KeyError: an unknown task id (progagent.tasks.select_tasks).
  """
  levels = [int(x) for x in str(getattr(args, "progagent_levels", "0") or "0").split(",") if x.strip()]
  bad = [lvl for lvl in levels if lvl not in tasks_lib.base.LEVELS]
  if bad:
    raise SuiteError(f"--progagent_levels {bad}: levels are {list(tasks_lib.base.LEVELS)}")
  ids = tasks_lib.select_tasks(getattr(args, "progagent_tasks", "") or "")
  return [BenchTask("progagent", f"{t}@v{lvl}") for lvl in levels for t in ids]


# ------------------------------------------------------------------------------------------------ loca


LOCA_GROUNDTRUTH_NOTE = ("LOCA's ground truth is the evaluator's reference data, not what an episode leaves; "
                         "`python -m progagent.bench.loca --loca_dir DIR --check` puts it where each evaluator "
                         "looks, for the task types where a copy can")


def load_loca(args: argparse.Namespace) -> list[BenchTask]:
  """LOCA-bench's tasks of the `--loca_*` flags (loca.load_suite), states generated under
  `--loca_state_dir` (default <--workdir>/states/loca), each with its own environment factory.

  Raises:
    progagent.bench.loca.LocaError: no checkout, an unknown size, task type or seed (a SuiteError through
      evaluate's exit status 2). progagent.bench.loca.LocaStateError: a state whose generation logged errors.
  """
  return [BenchTask("loca", t.task_id, (), t, make_env=functools.partial(loca.make_env, [t]),
                    groundtruth_note=LOCA_GROUNDTRUTH_NOTE) for t in loca.load_suite(args)]


# ------------------------------------------------------------------------------------------------ registry


SUITES: dict[str, Suite] = {
    "progagent": Suite("progagent", load_progagent, _progagent_args),
    "toolathlon_local": Suite("toolathlon_local", toolathlon.load_suite, toolathlon.add_args),
    "loca": Suite("loca", load_loca, loca.add_args),
}


def get_suites(spec: str) -> list[Suite]:
  """The suites of a comma list of names, in order, each once.

  Raises:
    SuiteError: an empty list or an unknown name (the known names listed).
  """
  names = [s.strip() for s in str(spec).split(",") if s.strip()]
  if not names:
    raise SuiteError(f"--suite names no suite; the suites are {sorted(SUITES)}")
  unknown = [n for n in names if n not in SUITES]
  if unknown:
    raise SuiteError(f"--suite: unknown suite(s) {unknown}; the suites are {sorted(SUITES)}")
  return [SUITES[n] for n in dict.fromkeys(names)]
