"""The ProgAgent task library: generated tasks over a SQLite database and a file workspace, at scales v0..v3.

  from progagent import tasks
  tasks.task_ids()                 # ['retail/pending_over_500', ...]
  tasks.get_task('retail/pending_over_500')   # a base.Task
  tasks.DOMAINS['retail']          # a base.Domain

Each domain lives in its own module (schema, generator, tools, tasks); base.py holds the framework and
oracle.py the DTC oracle. Episodes are run by progagent.task_env.ProgTaskEnv.
"""

from __future__ import annotations

import importlib
import pkgutil

from progagent.tasks import base

# Every module of this package except the framework is a domain (DOMAIN, TASKS); adding a domain is adding
# a module. Sorted by name so that task_ids() has one order everywhere.
_FRAMEWORK = frozenset({"base", "oracle"})
_MODULES = tuple(importlib.import_module(f"{__name__}.{m.name}")
                 for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
                 if m.name not in _FRAMEWORK and not m.name.startswith("_"))

DOMAINS: dict[str, base.Domain] = {m.DOMAIN.name: m.DOMAIN for m in _MODULES}
TASKS: dict[str, base.Task] = {t.task_id: t for m in _MODULES for t in m.TASKS}
if len(TASKS) != sum(len(m.TASKS) for m in _MODULES):
  raise ImportError("duplicate task ids in the ProgAgent task library")


def task_ids(domain: str | None = None) -> list[str]:
  """All task ids, or those of one domain."""
  if domain is not None and domain not in DOMAINS:
    raise KeyError(f"unknown domain {domain!r}; domains: {sorted(DOMAINS)}")
  return [t for t, task in TASKS.items() if domain is None or task.domain.name == domain]


def get_task(task_id: str) -> base.Task:
  """The task with this id ('domain/name'); KeyError listing the domain's tasks otherwise."""
  task = TASKS.get(task_id)
  if task is None:
    dom = task_id.split("/", 1)[0]
    hint = task_ids(dom) if dom in DOMAINS else sorted(DOMAINS)
    raise KeyError(f"unknown task id {task_id!r}; ids look like 'retail/pending_over_500'. "
                   f"Known: {hint[:8]}")
  return task
