"""The SYNTHETIC long-horizon split of TRAJECT-Bench (config `splits` 'long'): two chains of one domain joined
under one query, 6-20 calls.

TRAJECT-Bench chains have at most 10 calls, so PhGPO's "the gain grows at 10-20 steps" (SPEC.md, PhGPO) cannot
be tested on them directly; composing two tasks of one domain is the choice made here (issue 24). Every table
labels the split synthetic: the queries are joined text, not a user's request, and the two halves are
independent.
"""
from __future__ import annotations

import collections
import zlib
from typing import Sequence

import numpy as np

from phgpo.data import Task

# The 'long' split's joined queries ("<first request> Then, <second request>").
LONG_JOIN = " Then, "


def compose_long_horizon(tasks: Sequence[Task], *, min_calls: int = 6, max_calls: int = 20,
                         seed: int = 0) -> list[Task]:
  """SYNTHETIC long-horizon tasks: each task joined with one other task of its domain under one query.

  For every task a (in task-id order) one partner b != a of the same domain is drawn (numpy Generator
  [seed, crc32(a.task_id)]) among those with min_calls <= len(a.calls) + len(b.calls) <= max_calls; the
  composed task asks a.query + LONG_JOIN + b.query (b's first letter lower-cased), its gold calls are a's then
  b's (with their recorded outputs, so the replay environment serves them), its id
  '<domain>/long/<a index>+<b index>'. A task with no partner in range composes none. TRAJECT-Bench chains have
  at most 10 calls, so this is the only way its tasks reach 11-20 calls; it is labelled synthetic wherever it
  is reported (the queries are joined text, not a user's request; the two halves are independent).

  Args:
    tasks: the tasks to compose (one side of a split: the partners come from the same list).
    min_calls, max_calls: the composed length range (config `data.long_min_calls`, `data.long_max_calls`).
    seed: the draw's seed (config `data.split_seed`).
  Returns:
    The composed tasks, in the order of their first halves.
  Raises:
    ValueError: min_calls > max_calls.
  """
  if min_calls > max_calls:
    raise ValueError(f"config data.long_min_calls={min_calls} exceeds data.long_max_calls={max_calls}")
  by_domain: dict[str, list[Task]] = collections.defaultdict(list)
  for t in sorted(tasks, key=lambda t: t.task_id):
    by_domain[t.domain].append(t)
  out = []
  for a in sorted(tasks, key=lambda t: t.task_id):
    cands = [b for b in by_domain[a.domain]
             if b.task_id != a.task_id and min_calls <= len(a.calls) + len(b.calls) <= max_calls]
    if not cands:
      continue
    b = cands[int(np.random.default_rng([seed, zlib.crc32(a.task_id.encode())]).integers(len(cands)))]
    out.append(compose_pair(a, b))
  return out


def compose_pair(a: Task, b: Task) -> Task:
  """The SYNTHETIC task 'a then b' of `compose_long_horizon` (id '<domain>/long/<a index>+<b index>')."""
  if a.domain != b.domain:
    raise ValueError(f"compose_pair joins tasks of one domain, got {a.task_id} and {b.task_id}")
  second = b.query[:1].lower() + b.query[1:]
  return Task(task_id=f"{a.domain}/long/{a.task_id.split('/')[-1]}+{b.task_id.split('/')[-1]}",
              domain=a.domain, query=a.query.rstrip() + LONG_JOIN + second, calls=a.calls + b.calls,
              final_answer=f"{a.final_answer}\n{b.final_answer}")


def long_task_parts(task_id: str) -> tuple[str, str] | None:
  """The two source task ids of a composed id ('Finance/long/3+17' -> ('Finance/3', 'Finance/17')), else None."""
  domain, sep, rest = task_id.partition("/long/")
  if not sep:
    return None
  first, plus, second = rest.partition("+")
  if not plus:
    raise ValueError(f"composed task id {task_id!r} must read '<domain>/long/<index>+<index>'")
  return f"{domain}/{first}", f"{domain}/{second}"
