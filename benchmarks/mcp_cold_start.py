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
  group_start_s    a cold start of the sandboxed server (progagent.mcp_servers.McpServerGroup, in this process);
  reset_restart_s  progagent.mcp_task_env.McpTaskEnv.reset() when the server is restarted for each episode (its
                   state reset by a fresh process; the workspace restaged);
  reset_reuse_s    the same with the server started once and kept (config `env.mcp.reuse_servers`: servers
                   whose whole state is the workspace): only the workspace is restaged.
Ratios: runtime_first_s / backend_s, reset_restart_s / group_start_s and reset_reuse_s / reset_restart_s.
Timings on shared 2-core machines are noisy: read the ratios and compare runs on the same machine; they are
never asserted in tests.
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


def time_group(spec: str, workspace: str, reps: int) -> float:
  """Median seconds of a cold start of the sandboxed server (McpServerGroup)."""
  starts = []
  for _ in range(reps):
    t0 = time.monotonic()
    g = mcp_servers.McpServerGroup([mcp_servers.parse_server(spec)], workspace=workspace)
    starts.append(time.monotonic() - t0)
    g.close()
  return statistics.median(starts)


def time_resets(spec: str, task_dir: str, reps: int, *, reuse: bool) -> float:
  """Median seconds of McpTaskEnv.reset() (after the first), the server restarted or kept."""
  from progagent import mcp_task_env
  task = mcp_task_env.McpTask("t", "Read a.txt.", workspace=task_dir)
  name = spec.split("=", 1)[0]
  env = mcp_task_env.McpTaskEnv([spec], [task], reuse_servers=(name,) if reuse else ())
  try:
    env.reset("t")
    times = []
    for _ in range(reps):
      t0 = time.monotonic()
      env.reset("t")
      times.append(time.monotonic() - t0)
    return statistics.median(times)
  finally:
    env.close()


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
    group_start = time_group(spec, ws, reps)
    restart = time_resets(spec, ws, reps, reuse=False)
    reuse = time_resets(spec, ws, reps, reuse=True)
  finally:
    shutil.rmtree(ws, ignore_errors=True)
  res = {"backend": label, "repetitions": reps, "backend_s": backend, "runtime_list_s": listed,
         "runtime_first_s": first, "own_s": first - backend, "group_start_s": group_start,
         "reset_restart_s": restart, "reset_reuse_s": reuse, "runtime_over_backend_ratio": first / backend,
         "reset_restart_over_start_ratio": restart / group_start, "reset_reuse_over_restart_ratio": reuse / restart}
  try:
    load = os.getloadavg()[0]
  except OSError:
    load = float("nan")
  print(f"backend: {label}; medians of {reps}; load average {load:.1f} on {os.cpu_count()} CPUs")
  print(f"  bare backend start (baseline, host)          {backend:6.2f} s")
  print(f"  runtime server: tools listed                 {listed:6.2f} s")
  print(f"  runtime server: first program answered       {first:6.2f} s   ({first / backend:.2f} x baseline)")
  print(f"  runtime's own start beyond the backend's     {first - backend:6.2f} s   (target < 2 s)")
  print(f"  sandboxed server: cold start                 {group_start:6.2f} s")
  print(f"  episode reset, server restarted              {restart:6.2f} s   ({restart / group_start:.2f} x cold start)")
  print(f"  episode reset, server reused                 {reuse * 1000:6.1f} ms  ({reuse / restart:.4f} x restarted)")
  return res


if __name__ == "__main__":
  _cli.main(run, __doc__)
