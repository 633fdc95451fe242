"""The records a benchmark suite returns (progagent.bench.suites): BenchTask, Suite, SuiteError."""

from __future__ import annotations

import argparse
from typing import Any, Callable, NamedTuple

from progagent import mcp_task_env


class BenchTask(NamedTuple):
  """One task of a suite.

  Attributes:
    suite: the suite's name.
    task_id: the task's id within the suite (for a library task: 'domain/name@vK').
    servers: 'NAME=COMMAND' of the task's MCP servers (progagent.mcp_servers.parse_server); () for a library task.
    task: the McpTask of a task over servers (instruction, workspace, groundtruth, evaluator), or a record with
      McpTask's fields first (progagent.bench.loca.LocaTask); None for a library task.
    make_env: where 'NAME=COMMAND' strings cannot say how the task's servers run (LOCA's mock services need the
      task's service state mounted), a function of no arguments returning the task's McpTaskEnv (or a subclass);
      None: McpTaskEnv(servers, [task]).
    groundtruth_note: why scripted:groundtruth cannot solve this task ('' where it can): the evaluation command
      refuses that policy for it with this reason.
  """
  suite: str
  task_id: str
  servers: tuple[str, ...] = ()
  task: Any = None
  make_env: Callable[[], mcp_task_env.McpTaskEnv] | None = None
  groundtruth_note: str = ""


class Suite(NamedTuple):
  """A suite: `load(args) -> list[BenchTask]`; `add_args(parser)` adds the flags `load` reads."""
  name: str
  load: Callable[[argparse.Namespace], list[BenchTask]]
  add_args: Callable[[argparse.ArgumentParser], None]


class SuiteError(ValueError):
  """An unknown suite name or a bad selection of a suite's tasks."""
