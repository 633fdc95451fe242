"""The records a benchmark suite returns (progagent.bench.suites): BenchTask, Suite, SuiteError."""

from __future__ import annotations

import argparse
from typing import Callable, NamedTuple

from progagent import mcp_task_env


class BenchTask(NamedTuple):
  """One task of a suite.

  Attributes:
    suite: the suite's name.
    task_id: the task's id within the suite (for a library task: 'domain/name@vK').
    servers: 'NAME=COMMAND' of the task's MCP servers (progagent.mcp_servers.parse_server); () for a library task.
    task: the McpTask of a task over servers (instruction, workspace, groundtruth, evaluator); None for a
      library task.
  """
  suite: str
  task_id: str
  servers: tuple[str, ...] = ()
  task: mcp_task_env.McpTask | None = None


class Suite(NamedTuple):
  """A suite: `load(args) -> list[BenchTask]`; `add_args(parser)` adds the flags `load` reads."""
  name: str
  load: Callable[[argparse.Namespace], list[BenchTask]]
  add_args: Callable[[argparse.ArgumentParser], None]


class SuiteError(ValueError):
  """An unknown suite name or a bad selection of a suite's tasks."""
