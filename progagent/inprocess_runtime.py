"""The in-process PTC runtime (oracles, audits, SFT data, tests) and the runtime factory.

`InProcessRuntime` runs programs in this process with the same `tools` object as the sandboxed
kernel (progagent.tool_proxy.ToolProxy, here over a DirectConnection instead of a socket) and the same
run rule (common.tool_wire.run_program: final-expression display, tracebacks, stdout/stderr order,
truncation), so that for the same program and the same environment both runtimes return the same
observation (tests/observation_identity_test.py checks every task oracle and probes of the edges).
The program's sys.stdout / sys.stderr are common.tool_wire.OutStream objects in both runtimes (the Python
API of ipykernel's streams: no `.buffer`, write() takes str only, fileno() 1 / 2), and os.write to fd 1
or 2 from the program's thread is captured in write order in both (common.tool_wire routes os.write per
thread; the trainer's real fd 1 is never redirected, other threads' writes are untouched).
What differs: no sandbox, no time limit, no memory limit, and output written below Python (a
subprocess's, a C library's, a forked child's) or from a thread the program started is NOT captured
here (it reaches the trainer's own stdout; the kernel captures it). So this runtime is for trusted
programs only (task oracles, audits, oracle SFT data); progagent.runtime is the real one.
Runs in several threads at once keep their output apart (common.tool_wire routes sys.stdout/stderr and
os.write per thread), so callers need no lock around run().
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping, Sequence

from common import tool_wire
from progagent import tool_proxy

RUNTIME_KINDS = ("inprocess", "kernel")


class _CallToolBackend:
  """Backend over a `call_tool(name, arguments)` function and the names it serves."""

  def __init__(self, call_tool: Callable[[str, dict], Any], tool_list: Sequence[Mapping[str, Any]]):
    self._call_tool = call_tool
    self._tools = [dict(t) for t in tool_list]

  def tools(self) -> list[dict]:
    return [dict(t) for t in self._tools]

  def call_tool(self, name: str, arguments: dict) -> Any:
    return self._call_tool(name, arguments)


class InProcessRuntime:
  """Runs PTC programs in this process; the namespace persists across run() calls.

  Args:
    call_tool: (name, arguments) -> tool result (an MCP CallToolResult wire dict, e.g.
      ProgTaskEnv.call_tool; anything common.tool_wire.to_wire reads).
    tools: the program's tools: MCP tool entries {name, description, inputSchema}, or tool names.
    max_output_chars: characters of output kept per run (ProgAgent: 50,000).
    truncation: 'head_tail' or 'head' (common.tool_wire.OutputBuffer).
  """

  def __init__(self, call_tool: Callable[[str, dict], Any], tools: Sequence[Any], *,
               max_output_chars: int = tool_wire.MAX_OUTPUT_CHARS, truncation: str = "head_tail"):
    tool_wire.OutputBuffer(max_output_chars, truncation)  # validates both
    self.max_output_chars = int(max_output_chars)
    self.truncation = truncation
    tool_list = [{"name": t, "inputSchema": {"type": "object"}} if isinstance(t, str) else dict(t)
                 for t in tools]
    self._handler = tool_proxy.ToolHandler(_CallToolBackend(call_tool, tool_list))
    self.tools = tool_proxy.ToolProxy(tool_proxy.DirectConnection(self._handler), tool_list)
    own_builtins = dict(vars(builtins), input=tool_wire.no_input)
    self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": own_builtins,
                                      "tools": self.tools, "ToolError": tool_wire.ToolError}
    self._sources: list[str] = []

  @property
  def tool_list(self) -> list[dict]:
    """The MCP tool entries the program sees as `tools`."""
    return [dict(t) for t in self._handler.tool_list]

  def run(self, code: str, *, timeout_s: float | None = None) -> tool_wire.ExecResult:
    """Runs one program (timeout_s is accepted for interface parity and ignored).

    Raises:
      TypeError: code is not a str.
    """
    if not isinstance(code, str):
      raise TypeError(f"code must be a str, got {type(code).__name__}")
    buf = tool_wire.OutputBuffer(self.max_output_chars, self.truncation)
    calls0 = self._handler.calls
    error = tool_wire.run_program(code, self.namespace, buf.write, self._sources)
    return tool_wire.ExecResult(output=buf.getvalue(), error=error,
                                tool_calls=self._handler.calls - calls0, truncated_chars=buf.cut)

  def close(self) -> None:
    self.namespace.clear()


def make_runtime(kind: str, env: Any, **kwargs: Any) -> Any:
  """A PTC runtime for the current episode of `env` (a ProgTaskEnv after reset()).

  kind 'inprocess': InProcessRuntime over env.call_tool. kind 'kernel': the sandboxed persistent IPython
  kernel of progagent.runtime (ProgramRuntime(env, workspace_dir=env.workspace_dir)): its tools are
  proxied to env.call_tool, and of the episode's state it sees the workspace only (as /workspace); an env
  whose workspace other sandboxes share (McpTaskEnv's MCP servers) gives its capped folder as
  `env.workspace_cap`, which the kernel then binds instead of mounting its own.
  kwargs go to the runtime (max_output_chars, truncation; for the kernel also timeout_s, sandbox, ...).

  Raises:
    ValueError: unknown kind. ImportError: the kernel runtime is not installed.
  """
  if kind not in RUNTIME_KINDS:
    raise ValueError(f"runtime kind must be 'inprocess' or 'kernel', got {kind!r}")
  if kind == "inprocess":
    return InProcessRuntime(env.call_tool, env.tools(), **kwargs)
  from progagent import runtime as runtime_lib  # the sandboxed kernel runtime (imported only when asked for)
  return runtime_lib.ProgramRuntime(env, workspace_dir=str(env.workspace_dir),
                                    workspace_cap=getattr(env, "workspace_cap", None), **kwargs)
