"""ProgAgent's runtime as an MCP server (stdio): one tool, `programmatic_tool_call(code)`.

  python -m progagent.mcp_runtime_server --tools-factory MODULE:CALLABLE [--kwargs JSON]
      [--workspace DIR] [--timeout-s 120] [--max-output-chars 50000] [--no-sandbox]

`MODULE:CALLABLE` builds the tool backend the programs call as `tools["name"](...)`: an object with
`tools()` and `call_tool(name, arguments)`, or a ToolEnv-shaped object with `tools()` and `step(call)`
(progagent/tool_proxy.py; e.g. `progagent.tool_proxy:demo_backend`). The backend is built in this
server process, which is not sandboxed (it starts the sandbox); only the programs run inside it. To
keep the environment's own code sandboxed too, let the factory return a common.env_client.EnvClient.

One server process serves one episode: one persistent kernel, variables kept across calls, the
workspace (default: a fresh temporary directory, removed at exit) seen as /workspace. The process
exits when its stdin closes (or on SIGTERM), and every process of the episode dies with it. What a
SIGKILLed server leaves (its default workspace, the runtime's folder, cgroups) is named after its pid
and removed by the next server (or any process) that starts a sandbox (common.sandbox.sweep_stale).

The tool answers with text content (common.tool_wire.format_exec: the same observation text the
in-process runtime and progagent.ptc_env give for the program) and structured
content {output, error, timed_out, restarted, tool_calls, truncated_chars} (runtime.ExecResult);
`isError` is true when the program ended with an exception, a timeout or a kernel restart.

Built on the low-level `mcp.server.lowlevel.Server` like common/env_server.py (mcp==2.3.0; see there
for why), whose `stdio_server` diverts fd 1 to stderr while serving.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
from typing import Any

from common import sandbox_guard, tool_wire
from common.env_server import load_factory
from common.sandbox import SandboxConfig

TOOL_NAME = "programmatic_tool_call"

_log = logging.getLogger("progagent.mcp_runtime_server")


def tool_description(tool_list: list[dict], *, timeout_s: float, max_output_chars: int) -> str:
  """The description of `programmatic_tool_call`, listing the tools a program can call."""
  return (
      "Run a Python program in a persistent sandboxed interpreter (variables, imports and functions "
      "survive between calls). Call tools as tools[\"name\"](arg=value, ...); they return Python "
      "objects (dicts, lists, numbers, strings) and raise ToolError on failure. Loops, branches "
      "and try/except are allowed. Only what the program prints (and the value of a final "
      f"expression) is returned, cut to {max_output_chars} characters. Each call may run "
      f"{timeout_s:g} s. input() is not available; there is no network. Files live in "
      "/workspace.\nAvailable tools:\n" + tool_wire.describe_tools(tool_list))


CODE_SCHEMA = {"type": "object", "properties": {"code": {
    "type": "string", "description": "Python source to run"}}, "required": ["code"]}


def program_tool(tool_list: list[dict], *, timeout_s: float, max_output_chars: int) -> dict:
  """The MCP tools/list entry of `programmatic_tool_call` {name, description, inputSchema}."""
  return {"name": TOOL_NAME, "inputSchema": CODE_SCHEMA,
          "description": tool_description(tool_list, timeout_s=timeout_s, max_output_chars=max_output_chars)}


def result_payload(res: Any) -> tuple[str, dict, bool]:
  """ExecResult -> (text, structured, is_error) of the MCP answer; text is tool_wire.format_exec(res)."""
  is_error = res.error is not None or res.timed_out or res.restarted
  return tool_wire.format_exec(res), res._asdict(), is_error


async def serve(factory: str, kwargs: dict, *, workspace: str, timeout_s: float,
                max_output_chars: int, sandbox: SandboxConfig, holder: list) -> None:
  """Starts the runtime and serves `programmatic_tool_call` on stdin/stdout until stdin closes."""
  import anyio
  import anyio.to_thread
  import mcp_types as types
  from mcp.server.lowlevel import Server
  from mcp.server.stdio import stdio_server

  from progagent.runtime import ProgramRuntime

  lock = anyio.Lock()
  async with stdio_server() as (read_stream, write_stream):
    def build():
      backend = load_factory(factory)(**kwargs)
      holder.append(backend)
      rt = ProgramRuntime(backend, workspace_dir=workspace, timeout_s=timeout_s,
                          max_output_chars=max_output_chars, sandbox=sandbox)
      holder.append(rt)
      return rt

    rt = await anyio.to_thread.run_sync(build)
    spec = program_tool(rt.tool_list, timeout_s=timeout_s, max_output_chars=max_output_chars)
    tools = [types.Tool(name=spec["name"], description=spec["description"],
                        input_schema=spec["inputSchema"])]

    async def list_tools(ctx, params):
      return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
      args = dict(params.arguments or {})
      if params.name != TOOL_NAME:
        msg = f"unknown tool {params.name!r}; this server offers only {TOOL_NAME!r}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=msg)], is_error=True)
      code = args.get("code")
      if not isinstance(code, str):
        msg = f"{TOOL_NAME} needs a string argument 'code', got {type(code).__name__}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=msg)], is_error=True)
      async with lock:
        try:
          res = await anyio.to_thread.run_sync(rt.run, code)
        except Exception as e:  # the runtime itself failed (kernel would not restart)
          _log.exception("programmatic_tool_call failed")
          return types.CallToolResult(
              content=[types.TextContent(type="text", text=f"runtime failure: {type(e).__name__}: {e}")],
              is_error=True)
      text, structured, is_error = result_payload(res)
      return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                  structured_content=structured, is_error=is_error)

    server = Server("progagent-runtime", version="0.1.0", on_list_tools=list_tools,
                    on_call_tool=call_tool)
    await server.run(read_stream, write_stream, server.create_initialization_options())


def _close_all(holder: list) -> None:
  for obj in reversed(holder):
    try:
      obj.close()
    except Exception:  # best effort at shutdown
      _log.exception("close() failed for %s", type(obj).__name__)
  holder.clear()


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tools-factory", required=True,
                 help="MODULE:CALLABLE returning the tool backend")
  p.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
  p.add_argument("--workspace", default=None,
                 help="episode workspace directory (default: a fresh temporary one, removed at exit)")
  p.add_argument("--timeout-s", type=float, default=120.0, help="seconds per program")
  p.add_argument("--max-output-chars", type=int, default=50_000)
  p.add_argument("--no-sandbox", action="store_true",
                 help="run the kernel without bubblewrap/cgroups (debugging only)")
  p.add_argument("--log-level", default="WARNING")
  a = p.parse_args(argv)
  logging.basicConfig(stream=sys.stderr, level=a.log_level,
                      format="%(asctime)s mcp_runtime_server %(levelname)s %(message)s")
  kwargs = json.loads(a.kwargs)
  if not isinstance(kwargs, dict):
    raise SystemExit(f"--kwargs must be a JSON object, got {a.kwargs!r}")
  # <tmp>/agentrl-pws-<pid>-*: like the runtime's folder (agentrl-pa-<pid>-*) and the sandbox's cgroups
  # (agentrl-<pid>-*), swept by the next process's common.sandbox.sweep_stale() if this one is SIGKILLed.
  workspace = a.workspace or sandbox_guard.owned_tempdir("pws")
  holder: list = []

  def on_term(signum, frame):
    raise SystemExit(128 + signum)

  signal.signal(signal.SIGTERM, on_term)
  import anyio
  try:
    anyio.run(lambda: serve(a.tools_factory, kwargs, workspace=workspace, timeout_s=a.timeout_s,
                            max_output_chars=a.max_output_chars,
                            sandbox=SandboxConfig(enabled=not a.no_sandbox), holder=holder))
  finally:
    _close_all(holder)
    if a.workspace is None:
      shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
  main()
