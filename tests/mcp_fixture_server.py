"""A small stdio MCP server the tests run inside the sandbox (python mcp SDK, low-level server, mcp==2.3.0).

  python tests/mcp_fixture_server.py [--text-only] [--name NAME]

Tools:
  stats(numbers: list[number])  -> structuredContent {count, mean} with an outputSchema, and the same as JSON
                                   text (as the MCP spec asks); with --text-only: a sentence as text only, no
                                   outputSchema
  shout(text: string)           -> text only: the text upper-cased (a str that is not JSON)
  read(path: string)            -> text: the file's content, read with plain open() (no check of its own: what
                                   the sandbox lets it see is all that limits it)
  write(path: string, text: string) -> text: "wrote N characters"
  pid()                         -> text: this process's pid (the restart tests)
"""

import argparse
import json
import os

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

STATS_OUT = {"type": "object", "properties": {"count": {"type": "integer"}, "mean": {"type": "number"}},
             "required": ["count", "mean"]}


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--text-only", action="store_true")
  p.add_argument("--name", default="fixture")
  a = p.parse_args()

  def obj(props: dict, required: list) -> dict:
    return {"type": "object", "properties": props, "required": required}

  tools = [
      types.Tool(name="stats", description="Count and mean of numbers.",
                 input_schema=obj({"numbers": {"type": "array", "items": {"type": "number"}}}, ["numbers"]),
                 output_schema=None if a.text_only else STATS_OUT),
      types.Tool(name="shout", description="Upper-cases a text.", input_schema=obj({"text": {"type": "string"}},
                                                                                      ["text"])),
      types.Tool(name="read", description="Reads a file.", input_schema=obj({"path": {"type": "string"}}, ["path"])),
      types.Tool(name="write", description="Writes a file.",
                 input_schema=obj({"path": {"type": "string"}, "text": {"type": "string"}}, ["path", "text"])),
      types.Tool(name="pid", description="This server's process id.", input_schema=obj({}, [])),
  ]

  def text(t: str, **kw) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=t)], **kw)

  async def list_tools(ctx, params):
    return types.ListToolsResult(tools=tools)

  async def call_tool(ctx, params):
    args = dict(params.arguments or {})
    if params.name == "stats":
      nums = [float(x) for x in args["numbers"]]
      out = {"count": len(nums), "mean": sum(nums) / len(nums) if nums else 0.0}
      if a.text_only:
        return text(f"{out['count']} numbers, mean {out['mean']}")
      return text(json.dumps(out), structured_content=out)
    if params.name == "shout":
      return text(args["text"].upper() + "!")
    if params.name == "read":
      try:
        with open(args["path"]) as f:
          return text(f.read())
      except OSError as e:
        return text(f"{type(e).__name__}: {e}", is_error=True)
    if params.name == "write":
      with open(args["path"], "w") as f:
        n = f.write(args["text"])
      return text(f"wrote {n} characters")
    if params.name == "pid":
      return text(str(os.getpid()))
    return text(f"unknown tool {params.name}", is_error=True)

  async def run():
    async with stdio_server() as (r, w):
      server = Server(a.name, version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
      await server.run(r, w, server.create_initialization_options())

  anyio.run(run)


if __name__ == "__main__":
  main()
