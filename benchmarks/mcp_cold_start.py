"""Cold start of ProgAgent's runtime in front of a real MCP server, against the bare server's own start.

  python -m benchmarks.mcp_cold_start            # 5 repetitions of each
  python -m benchmarks.mcp_cold_start --quick    # 2

The backend is the npm filesystem server (@modelcontextprotocol/server-filesystem, run by node) where setup.sh
installed it, else tests/mcp_fixture_server.py (the python `mcp` SDK). Measured in one run, medians of the
repetitions, wall seconds from spawning a process:
  backend_s        baseline: the bare server, on the host (no sandbox), spawned and driven by
                   common.mcp_process.McpProcess until its tools/list is answered;
  runtime_list_s   `python -m progagent.mcp_runtime_server --mcp-server NAME=COMMAND` (the server sandboxed, the
                   kernel started at the same time) until its tools/list is answered, by the MCP SDK's client;
  runtime_first_s  the same until the first program (`print(1)`) has run: the kernel, the tool proxy and the
                   sandboxed server all up;
  own_s            runtime_first_s - backend_s: the runtime's own start (interpreter and imports, sandbox,
                   kernel, proxy) beyond the backend's (issue 29 asks for under 2 s);
  restart_s        McpServerGroup.restart() of the sandboxed server: a fresh server per episode when it is
                   started once and reused (progagent.mcp_task_env.McpTaskEnv), against a cold group start
                   (group_start_s).
Ratios: runtime_first_s / backend_s and restart_s / group_start_s. Timings on shared 2-core machines are noisy:
read the ratios and compare runs on the same machine; they are never asserted in tests.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks import _cli
from common.mcp_process import LoopThread, McpProcess
from progagent import mcp_servers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FS_PACKAGE = "@modelcontextprotocol/server-filesystem"
FIXTURE = os.path.join(ROOT, "tests", "mcp_fixture_server.py")


def backend_command(workspace: str) -> tuple[str, str]:
  """(label, NAME=COMMAND) of the backend: the npm filesystem server if installed, else the fixture server."""
  try:
    mcp_servers.resolve_command(mcp_servers.parse_server(f"fs=npx -y {FS_PACKAGE} {{workspace}}"), workspace=workspace)
    return "npm filesystem server (node)", f"fs=npx -y {FS_PACKAGE} {{workspace}}"
  except mcp_servers.McpServerError:
    return "fixture server (python mcp SDK)", f"fx=python {FIXTURE}"


def time_backend(spec: str, workspace: str) -> float:
  """Seconds from spawning the bare server on the host to its tools/list answer."""
  argv, _ = mcp_servers.resolve_command(mcp_servers.parse_server(spec), workspace=workspace, sandboxed=False)
  lt = LoopThread("bench-backend")
  t0 = time.monotonic()
  p = McpProcess(argv, loop=lt, env=dict(os.environ), cwd=workspace)
  try:
    p.start(120)
    return time.monotonic() - t0
  finally:
    p.close(grace_s=1.0)
    lt.close()


def time_runtime(spec: str, workspace: str) -> tuple[float, float]:
  """(seconds to tools/list, seconds to the first program's answer) of the runtime server over `spec`."""
  import anyio
  from mcp.client.session import ClientSession
  from mcp.client.stdio import StdioServerParameters, stdio_client
  out = {}

  async def main():
    t0 = time.monotonic()
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "progagent.mcp_runtime_server", "--mcp-server", spec, "--workspace", workspace],
        env={"PYTHONPATH": ROOT}, cwd=ROOT)
    with open(os.devnull, "w") as errlog:
      async with stdio_client(params, errlog=errlog) as (r, w):
        async with ClientSession(r, w) as s:
          await s.initialize()
          await s.list_tools()
          out["list"] = time.monotonic() - t0
          res = await s.call_tool("programmatic_tool_call", {"code": "print(1)"})
          out["first"] = time.monotonic() - t0
          if res.is_error:
            raise RuntimeError(f"the first program failed: {res.content}")

  anyio.run(main)
  return out["list"], out["first"]


def time_group(spec: str, workspace: str, reps: int) -> tuple[float, float]:
  """(median seconds of a cold sandboxed group start, median seconds of a restart of its server)."""
  starts, restarts = [], []
  for _ in range(reps):
    t0 = time.monotonic()
    g = mcp_servers.McpServerGroup([mcp_servers.parse_server(spec)], workspace=workspace)
    starts.append(time.monotonic() - t0)
    try:
      t0 = time.monotonic()
      g.restart()
      restarts.append(time.monotonic() - t0)
    finally:
      g.close()
  return statistics.median(starts), statistics.median(restarts)


def run(quick: bool = False) -> dict:
  reps = 2 if quick else 5
  ws = tempfile.mkdtemp(prefix="bench-mcp-")
  try:
    os.chmod(ws, 0o755)
    with open(os.path.join(ws, "a.txt"), "w") as f:
      f.write("hello\n")
    label, spec = backend_command(ws)
    time_backend(spec, ws)  # warm the page cache once (node, python, the SDK)
    backend = statistics.median(time_backend(spec, ws) for _ in range(reps))
    runs = [time_runtime(spec, ws) for _ in range(reps)]
    listed = statistics.median(r[0] for r in runs)
    first = statistics.median(r[1] for r in runs)
    group_start, restart = time_group(spec, ws, reps)
  finally:
    shutil.rmtree(ws, ignore_errors=True)
  res = {"backend": label, "repetitions": reps, "backend_s": backend, "runtime_list_s": listed,
         "runtime_first_s": first, "own_s": first - backend, "group_start_s": group_start, "restart_s": restart,
         "runtime_over_backend_ratio": first / backend, "restart_over_start_ratio": restart / group_start}
  try:
    load = os.getloadavg()[0]
  except OSError:
    load = float("nan")
  print(f"backend: {label}; medians of {reps}; load average {load:.1f} on {os.cpu_count()} CPUs")
  print(f"  bare backend start (baseline, host)          {backend:6.2f} s")
  print(f"  runtime server: tools listed                 {listed:6.2f} s")
  print(f"  runtime server: first program answered       {first:6.2f} s   ({first / backend:.2f} x baseline)")
  print(f"  runtime's own start beyond the backend's     {first - backend:6.2f} s   (target < 2 s)")
  print(f"  sandboxed group start / restart (reuse)      {group_start:6.2f} s / {restart:.2f} s "
        f"({restart / group_start:.2f} x)")
  return res


if __name__ == "__main__":
  _cli.main(run, __doc__)
