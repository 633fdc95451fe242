"""Environment process entry point: serves one tool environment as an MCP server over stdio.

  python -m common.env_server --factory MODULE:CALLABLE [--kwargs JSON]

`MODULE:CALLABLE` is any class or function returning a tool environment with the `ToolEnv` surface
(common/envs/base.py):

  tools() -> list[dict]                      MCP tool entries {name, description, inputSchema}
  reset(task_id: str, seed: int) -> str      first observation
  step(call: dict) -> StepResult             call = {'name': str, 'arguments': dict}; the result has
                                             .observation (str), .status (str), .done (bool), .info (dict)
  close() -> None
  QUERY_METHODS (optional class attribute)   names of read-only methods callable through `env_query`
                                             (task lists, gold actions, valid actions...)
  clone() -> env (optional)                  an independent episode state sharing read-only data;
                                             enables episode slots (below)

MCP surface (`tools/list`): the environment's own tools, each calling `env.step` with its name and
arguments, plus the episode-control tools

  env_reset {task_id: str, seed: int, slot}  -> text: observation
  env_step {name: str, arguments: object, slot}
                                             -> the step; accepts names the env does not list (the
                                                env answers them with its own error observation)
  env_step_batch {steps: [{slot, name, arguments}]}
                                             -> structured {'results': [step or {'exception': str}]}:
                                                many slots' steps in one message (one round trip per
                                                decision instead of one per trajectory); one slot's
                                                exception does not stop the others
  env_reset_batch {episodes: [{slot, task_id, seed}]}
                                             -> structured {'results': [{'observation'} or
                                                {'exception'}]}
  env_query {method: str, kwargs: object}    -> structured {'result': ...}
  env_close {}                               -> closes the environment; the process exits when its
                                                stdin closes

Slots: `slot` (default 0) selects one of several concurrent episodes in the same process; slot k > 0
is created on first use by `env.clone()`. A cheap environment (the TRAJECT-Bench replay) can thus
serve a whole batch of concurrent trajectories from one sandboxed process.

Each step answers with text content (the observation) and structured content
{'observation', 'status', 'done', 'info'}; `isError` is set when the environment raised. Environment
code runs in a worker thread, one call at a time, so a slow step never blocks the protocol loop.

SDK choice: `mcp==2.3.0`, pinned. The reference servers this project drives (mcp-server-git and
mcp-server-time, 2026.10.19) require mcp>=2.3,<3, so the 1.x line (where the high-level server was
`FastMCP`) cannot share the environment with them; 2.x renamed it `MCPServer`
(`mcp.server.mcpserver`). This server uses neither: it is built on the low-level
`mcp.server.lowlevel.Server`, because the tool list is only known at run time (it comes from the
environment object, with ready-made JSON schemas), which the decorator-based high-level server does
not model. mcp 2.x's `stdio_server` also diverts fd 1 to stderr while serving, so stray prints of
environment code (and of child processes such as ScienceWorld's JVM) cannot corrupt the wire.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import traceback
from typing import Any, Callable

CONTROL_TOOLS = ("env_reset", "env_step", "env_step_batch", "env_reset_batch", "env_query", "env_close")

_log = logging.getLogger("common.env_server")


def load_factory(path: str) -> Callable[..., Any]:
  """Imports 'package.module:attr' (attr may be dotted).

  Raises:
    ValueError: malformed path, naming the expected form.
    ImportError / AttributeError: the module or attribute does not exist.
  """
  if ":" not in path:
    raise ValueError(f"environment factory {path!r} must look like 'package.module:ClassOrFunction'")
  mod_name, attr = path.split(":", 1)
  obj: Any = importlib.import_module(mod_name)
  for part in attr.split("."):
    obj = getattr(obj, part)
  if not callable(obj):
    raise ValueError(f"environment factory {path!r} is not callable")
  return obj


def _jsonable(x: Any) -> Any:
  """Round-trips through JSON, turning anything unknown into its str()."""
  return json.loads(json.dumps(x, default=str))


def tool_entry(d: dict) -> dict:
  """An MCP tool entry {name, description, inputSchema} from a ToolEnv tool dict (input_schema or inputSchema)."""
  schema = d.get("inputSchema", d.get("input_schema")) or {"type": "object"}
  return {"name": d["name"], "description": d.get("description", ""), "inputSchema": schema}


_CONTROL_SCHEMAS = {
    "env_reset": ("Start a new episode of the given task; returns the first observation.",
                  {"type": "object", "properties": {"task_id": {"type": "string"},
                                                    "seed": {"type": "integer"},
                                                    "slot": {"type": "integer"}},
                   "required": ["task_id"]}),
    "env_step": ("Apply one tool call {name, arguments} to the environment.",
                 {"type": "object", "properties": {"name": {"type": "string"},
                                                   "arguments": {"type": "object"},
                                                   "slot": {"type": "integer"}},
                  "required": ["name"]}),
    "env_step_batch": ("Apply one tool call to each of several episode slots.",
                       {"type": "object", "properties": {"steps": {"type": "array"}},
                        "required": ["steps"]}),
    "env_reset_batch": ("Start episodes in several slots.",
                        {"type": "object", "properties": {"episodes": {"type": "array"}},
                         "required": ["episodes"]}),
    "env_query": ("Call one of the environment's read-only query methods.",
                  {"type": "object", "properties": {"method": {"type": "string"},
                                                    "kwargs": {"type": "object"}},
                   "required": ["method"]}),
    "env_close": ("Close the environment.", {"type": "object", "properties": {}}),
}


class EnvHost:
  """Holds the environment object and turns control-tool calls into its method calls (sync)."""

  def __init__(self, env: Any):
    self.env = env
    self.env_tools = [tool_entry(t) for t in env.tools()]
    names = {t["name"] for t in self.env_tools}
    clash = names.intersection(CONTROL_TOOLS)
    if clash:
      raise ValueError(f"environment tool names {sorted(clash)} clash with the control tools; rename them")
    self.env_tool_names = names
    self.query_methods = tuple(getattr(env, "QUERY_METHODS", ()))
    self.slots = {0: env}
    self.closed = False

  def slot(self, k: Any) -> Any:
    """The environment of episode slot k (created by env.clone() on first use)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
      raise ValueError(f"slot must be an int >= 0, got {k!r}")
    if k not in self.slots:
      if not hasattr(self.env, "clone"):
        raise ValueError(f"{type(self.env).__name__} has no clone(), so it serves one episode at a "
                         "time (slot 0); start one process per concurrent episode instead")
      self.slots[k] = self.env.clone()
    return self.slots[k]

  def close(self) -> None:
    if not self.closed:
      self.closed = True
      for k, e in sorted(self.slots.items(), reverse=True):
        if k == 0 or e is not self.env:
          e.close()

  def all_tools(self) -> list[dict]:
    ctrl = [{"name": n, "description": d, "inputSchema": s} for n, (d, s) in _CONTROL_SCHEMAS.items()]
    return self.env_tools + ctrl

  def step(self, call: dict, slot: int = 0) -> dict:
    r = self.slot(slot).step(call)
    return {"observation": str(r.observation), "status": str(r.status), "done": bool(r.done),
            "info": _jsonable(dict(r.info or {}))}

  def handle(self, name: str, args: dict) -> dict:
    """Returns {'text': str, 'structured': dict}; raises on environment errors."""
    if name == "env_reset":
      obs = self.slot(args.get("slot", 0)).reset(str(args["task_id"]), int(args.get("seed", 0)))
      return {"text": str(obs), "structured": {"observation": str(obs)}}
    if name == "env_step":
      out = self.step({"name": args.get("name"), "arguments": args.get("arguments") or {}},
                      args.get("slot", 0))
      return {"text": out["observation"], "structured": out}
    if name == "env_step_batch":
      results = []
      for item in args.get("steps") or []:
        try:
          results.append(self.step({"name": item.get("name"), "arguments": item.get("arguments") or {}},
                                   item.get("slot", 0)))
        except Exception as e:  # pylint: disable=broad-except
          results.append({"exception": f"{type(e).__name__}: {e}"})
      return {"text": f"{len(results)} steps", "structured": {"results": results}}
    if name == "env_reset_batch":
      results = []
      for item in args.get("episodes") or []:
        try:
          obs = self.slot(item.get("slot", 0)).reset(str(item["task_id"]), int(item.get("seed", 0)))
          results.append({"observation": str(obs)})
        except Exception as e:  # pylint: disable=broad-except
          results.append({"exception": f"{type(e).__name__}: {e}"})
      return {"text": f"{len(results)} resets", "structured": {"results": results}}
    if name == "env_query":
      method = args.get("method")
      if method not in self.query_methods:
        raise ValueError(f"query method {method!r} is not offered; this environment offers "
                         f"{list(self.query_methods)}")
      res = _jsonable(getattr(self.env, method)(**(args.get("kwargs") or {})))
      return {"text": json.dumps(res), "structured": {"result": res}}
    if name == "env_close":
      self.close()
      return {"text": "closed", "structured": {}}
    if name in self.env_tool_names:
      out = self.step({"name": name, "arguments": args})
      return {"text": out["observation"], "structured": out}
    raise ValueError(f"unknown tool {name!r}")


async def serve(factory: str, kwargs: dict) -> None:
  """Builds the environment and serves it on stdin/stdout until stdin closes."""
  import anyio
  import anyio.to_thread
  import mcp_types as types
  from mcp.server.lowlevel import Server
  from mcp.server.stdio import stdio_server

  lock = anyio.Lock()
  async with stdio_server() as (read_stream, write_stream):
    # Built inside stdio_server: from here on fd 1 points at stderr, so the environment's prints
    # (and its children's) cannot reach the protocol stream.
    env = await anyio.to_thread.run_sync(lambda: load_factory(factory)(**kwargs))
    host = EnvHost(env)
    tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"])
             for t in host.all_tools()]

    async def list_tools(ctx, params):
      return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
      args = dict(params.arguments or {})
      async with lock:
        try:
          out = await anyio.to_thread.run_sync(host.handle, params.name, args)
        except Exception as e:  # environment bug or bad control call: reported, process lives on
          tb = traceback.format_exc(limit=8)
          _log.error("tool %s failed: %s", params.name, tb)
          return types.CallToolResult(
              content=[types.TextContent(type="text", text=f"{type(e).__name__}: {e}")],
              structured_content={"exception": f"{type(e).__name__}: {e}", "traceback": tb},
              is_error=True)
      return types.CallToolResult(content=[types.TextContent(type="text", text=out["text"])],
                                  structured_content=out["structured"], is_error=False)

    server = Server("agentrl-env", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    try:
      await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
      if not host.closed:
        try:
          await anyio.to_thread.run_sync(host.close)
        except Exception:  # best effort at shutdown
          _log.exception("env.close() failed")


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--factory", required=True, help="MODULE:CALLABLE returning the environment")
  p.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the factory")
  p.add_argument("--log-level", default="WARNING")
  a = p.parse_args(argv)
  logging.basicConfig(stream=sys.stderr, level=a.log_level,
                      format="%(asctime)s env_server %(levelname)s %(message)s")
  kwargs = json.loads(a.kwargs)
  if not isinstance(kwargs, dict):
    raise SystemExit(f"--kwargs must be a JSON object, got {a.kwargs!r}")
  import anyio
  anyio.run(serve, a.factory, kwargs)


if __name__ == "__main__":
  main()
