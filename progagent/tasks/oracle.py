"""The DTC oracle derived from a task's PTC program.

DTC oracle rule: the DTC oracle of a task is its PTC oracle program executed one tool call per turn. The
program runs in a worker thread with a `tools` dict whose callables hand each call to the DTC loop (one JSON
call per turn) and block until that turn's *observation text* comes back, which they decode like a client
would (common.tool_wire.decode_result on the text: JSON -> the value, an error text such as "Error: ..." ->
`ToolError` raised in the program, the same rule as PTC's tool proxy). So the DTC
oracle acts only on what the DTC context shows, and it adapts to observations exactly as the program does.
Its printed output is discarded (a DTC agent has no interpreter; its "arithmetic" is the program's).
"""

from __future__ import annotations

import functools
import io
import queue
import threading
from typing import Generator, Iterable

from common import tool_wire

ToolError = tool_wire.ToolError   # the one tool-error class (common.tool_wire); re-exported


class OracleError(RuntimeError):
  """An oracle program raised (a bug in the task library, never the agent's fault)."""


class _Abort(BaseException):
  """Ends an abandoned oracle program (BaseException: a program's `except Exception` cannot swallow it)."""


def dtc_oracle(programs: Iterable[str], tool_names: Iterable[str]) -> Generator[dict, str, None]:
  """The DTC oracle: yields JSON tool calls {'name', 'arguments'}; send() each call's observation text.

  Args:
    programs: the task's PTC oracle programs (run in order in one namespace).
    tool_names: the tools the environment offers (the program's `tools` dict keys).
  Yields:
    one call per turn; the generator returns when the program has finished.
  Raises:
    OracleError: the program raised (the original exception is chained).
  """
  programs = list(programs)
  to_loop: queue.Queue = queue.Queue()
  to_prog: queue.Queue = queue.Queue()

  def make(name: str):
    def call(**kwargs):
      to_loop.put(("call", {"name": name, "arguments": kwargs}))
      msg = to_prog.get()
      if msg is None:
        raise _Abort()
      return tool_wire.decode_result(tool_wire.text_result(msg), name)
    return call

  def worker():
    ns = {"__name__": "__oracle__", "tools": {n: make(n) for n in tool_names},
          "print": functools.partial(print, file=io.StringIO())}
    try:
      for prog in programs:
        exec(compile(prog, "<oracle>", "exec"), ns)  # pylint: disable=exec-used
    except _Abort:
      return
    except BaseException as e:  # reported to the loop, which raises OracleError
      to_loop.put(("error", e))
      return
    to_loop.put(("done", None))

  thread = threading.Thread(target=worker, daemon=True, name="dtc-oracle")
  thread.start()
  try:
    while True:
      kind, payload = to_loop.get()
      if kind == "done":
        return
      if kind == "error":
        raise OracleError(f"oracle program raised {type(payload).__name__}: {payload}") from payload
      obs = yield payload
      if not isinstance(obs, str):
        raise TypeError(f"send() the observation text (str) to the DTC oracle, got {type(obs).__name__}")
      to_prog.put(obs)
  finally:
    if thread.is_alive():
      to_prog.put(None)
      thread.join(timeout=5)
