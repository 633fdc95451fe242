"""Benchmark suites for `python -m progagent.bench.evaluate`: each a function returning task records.

  tasks = SUITES["toolathlon_local"].load(args)      # [BenchTask, ...]
  for t in tasks:
    env = make_env(t, mode="ptc")                      # ProgEnv over McpTaskEnv(t.servers, [t.task]) or a library task
    ...

A suite is a `Suite(name, load, add_args)` (progagent.bench.base): `add_args(parser)` adds the suite's own flags (e.g.
`--toolathlon_dir`), `load(args)` reads them and returns the suite's tasks as BenchTask records. A task over MCP
servers carries what progagent.mcp_task_env.McpTaskEnv takes: its servers ('NAME=COMMAND') and an McpTask
(instruction, workspace, ground truth, evaluator command); a task of the project's own library carries its
instance id ('domain/name@vK') and no servers. Adding a benchmark is one more entry in SUITES (a LOCA-bench
adapter adds `Suite("loca", ...)` the same way).

Suites here:
  progagent         the project's task library (progagent.tasks): the tasks of `--progagent_tasks` (default
                    every task) at the levels of `--progagent_levels` (default 0); reward = the task's verifier.
  toolathlon_local  the ten Toolathlon tasks whose servers are all local (progagent.bench.toolathlon).
"""

from __future__ import annotations

import argparse
from progagent import tasks as tasks_lib
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


# ------------------------------------------------------------------------------------------------ registry


SUITES: dict[str, Suite] = {
    "progagent": Suite("progagent", load_progagent, _progagent_args),
    "toolathlon_local": Suite("toolathlon_local", toolathlon.load_suite, toolathlon.add_args),
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
