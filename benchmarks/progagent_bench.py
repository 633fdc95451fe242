"""ProgAgent runtime benchmark: persistent-kernel PTC vs DTC turns vs replay PTC, in one run.

  python -m benchmarks.progagent_bench            # full
  python -m benchmarks.progagent_bench --quick    # fewer repetitions

Measured, all against the same tool backends in the same process:
  cold_start_s      time to start a sandboxed kernel (sandbox, ipykernel, proxy prelude) until it
                    runs programs (median of several);
  trivial_ms        round trip of a trivial program (`pass`) in a warm kernel (median);
  ptc_s             one program making N tool calls in a loop (ProgramRuntime.run);
  dtc_s             N DTC turns: N separate tool calls issued by the host through the same backend,
                    each result decoded as a harness would (no language model in the loop: this is
                    the runtime's own cost, which a real DTC episode pays on top of N generations);
  replay_s          the same program under "replay" PTC, the way LOCA-bench runs programmatic tool
                    calls: run the program from scratch with the tool results cached so far; at the
                    first uncached call stop, execute that call, and re-run; until the program
                    completes (N + 1 executions, O(N^2) cached calls). The replay here is charitable:
                    it re-runs in the same warm kernel and keeps the cache there.
for two backends: `function` (Python functions in this process: the proxy's own overhead) and `mcp`
(a sandboxed environment process, common.env_server over MCP stdio, as in training).
Ratios: ptc/dtc, replay/ptc, cold start/trivial round trip. `run(quick=False) -> dict` returns
everything printed. Timings on shared 2-core machines are noisy: compare ratios within one run.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time

from benchmarks import _cli
from common.env_client import EnvClient, EnvSpec
from common.envs.base import StepResult
from common.sandbox import SandboxConfig
from progagent import tool_proxy
from progagent.runtime import ProgramRuntime

N_CALLS = 100

_TOOLS = [{"name": "lookup", "description": "Returns the record stored under `key`.",
           "inputSchema": {"type": "object", "properties": {"key": {"type": "integer"}},
                           "required": ["key"]}}]


def _record(key: int) -> dict:
  return {"key": key, "value": key * 3 % 17, "name": f"item-{key}"}


class LookupEnv:
  """A ToolEnv-shaped environment with one tool, for the `mcp` backend (served by env_server)."""

  def __init__(self, **unused):
    pass

  def tools(self):
    return [dict(t) for t in _TOOLS]

  def reset(self, task_id: str, seed: int = 0) -> str:
    return "ready"

  def step(self, call):
    key = int(call["arguments"]["key"])
    return StepResult(json.dumps(_record(key)), "ok", False, {})

  def close(self):
    pass


PROGRAM = f"""
acc = 0
for i in range({N_CALLS}):
    r = tools["lookup"](key=i)
    acc += r["value"]
print("sum", acc)
"""
EXPECTED = f"sum {sum(_record(i)['value'] for i in range(N_CALLS))}\n"

_REPLAY_SETUP = r'''
import json as _json
_replay_cache = []

class _ReplayMiss(BaseException):
    pass

def _replay_round(src):
    import _progagent_tool_proxy as tp
    calls = []

    class _ReplayTools:
        def __getitem__(self, name):
            def call(**kwargs):
                i = len(calls)
                calls.append(name)
                if i < len(_replay_cache):
                    c_name, c_args, wire = _replay_cache[i]
                    if c_name != name or c_args != kwargs:
                        raise RuntimeError(f"replay diverged at call {i}: {name} {kwargs}")
                    return tp.decode_result(wire, name)
                raise _ReplayMiss(name, kwargs)
            return call

    ns = {"tools": _ReplayTools(), "ToolError": tp.ToolError}
    try:
        exec(compile(src, "<program>", "exec"), ns)
    except _ReplayMiss as m:
        print("\n__REPLAY_MISS__" + _json.dumps({"name": m.args[0], "arguments": m.args[1]}))
'''


def _median_s(fn, n: int) -> float:
  ts = []
  for _ in range(n):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts)


def _replay(rt: ProgramRuntime, backend, program: str) -> tuple[float, int, str]:
  """Runs `program` under replay PTC; returns (seconds, executions, final output)."""
  setup = rt.run(_REPLAY_SETUP + "\n_replay_cache.clear()")
  assert setup.error is None, setup.output
  t0 = time.perf_counter()
  execs = 0
  prefix = ""
  while True:
    r = rt.run(prefix + f"_replay_round({program!r})")
    execs += 1
    assert r.error is None, r.output
    marker = r.output.rfind("__REPLAY_MISS__")
    if marker < 0:
      return time.perf_counter() - t0, execs, r.output
    miss = json.loads(r.output[marker + len("__REPLAY_MISS__"):])
    wire = tool_proxy.to_wire(backend.call_tool(miss["name"], miss["arguments"]))
    entry = json.dumps([miss["name"], miss["arguments"], wire])
    prefix = f"_replay_cache.append(_json.loads({entry!r}))\n"


def _one_backend(name: str, backend, *, reps: int, ws_root: str) -> dict:
  ws = tempfile.mkdtemp(prefix="ws-", dir=ws_root)
  t0 = time.perf_counter()
  rt = ProgramRuntime(backend, workspace_dir=ws, timeout_s=600)
  first_start = time.perf_counter() - t0
  try:
    rt.run("pass")
    trivial = _median_s(lambda: rt.run("pass"), 10 * reps)

    def ptc():
      r = rt.run(PROGRAM)
      assert r.output == EXPECTED and r.tool_calls == N_CALLS, r
    ptc()
    ptc_s = _median_s(ptc, reps)

    def dtc():
      for i in range(N_CALLS):
        value = tool_proxy.decode_result(tool_proxy.to_wire(backend.call_tool("lookup", {"key": i})),
                                         "lookup")
        assert value["key"] == i
    dtc()
    dtc_s = _median_s(dtc, reps)

    replay_s, execs, out = _replay(rt, backend, PROGRAM)
    assert out.endswith(EXPECTED), out[-200:]
  finally:
    rt.close()
  res = {"first_start_s": first_start, "trivial_ms": trivial * 1e3, "ptc_s": ptc_s, "dtc_s": dtc_s,
         "replay_s": replay_s, "replay_executions": execs,
         "ptc_ms_per_call": ptc_s / N_CALLS * 1e3, "dtc_ms_per_turn": dtc_s / N_CALLS * 1e3,
         "ratio_ptc_over_dtc": ptc_s / dtc_s, "ratio_replay_over_ptc": replay_s / ptc_s}
  print(f"{name:8s} trivial {res['trivial_ms']:7.2f} ms | {N_CALLS} calls: PTC {ptc_s * 1e3:8.1f} ms "
        f"({res['ptc_ms_per_call']:.2f} ms/call), DTC {dtc_s * 1e3:8.1f} ms "
        f"({res['dtc_ms_per_turn']:.2f} ms/turn), replay PTC {replay_s * 1e3:9.1f} ms "
        f"({execs} executions)", flush=True)
  return res


def run(quick: bool = False) -> dict:
  """Runs every measurement once; returns {'cold_start_s', 'function': {...}, 'mcp': {...}, 'ratios'}."""
  reps = 2 if quick else 5
  ws_root = tempfile.mkdtemp(prefix="pa-bench-")
  out: dict = {"n_calls": N_CALLS}
  try:
    starts = []
    for _ in range(2 if quick else 4):
      ws = tempfile.mkdtemp(prefix="ws-", dir=ws_root)
      t0 = time.perf_counter()
      rt = ProgramRuntime(tool_proxy.FunctionBackend({"lookup": _record}), workspace_dir=ws)
      r = rt.run("print(1)")
      starts.append(time.perf_counter() - t0)
      rt.close()
      assert r.output == "1\n"
    out["cold_start_s"] = statistics.median(starts)
    print(f"kernel cold start (sandbox + ipykernel + proxy, first program): "
          f"{out['cold_start_s']:.2f} s (median of {len(starts)})", flush=True)

    out["function"] = _one_backend("function", tool_proxy.FunctionBackend({"lookup": _record}),
                                   reps=reps, ws_root=ws_root)
    with EnvClient(EnvSpec("benchmarks.progagent_bench:LookupEnv"), sandbox=SandboxConfig()) as env:
      out["mcp"] = _one_backend("mcp", tool_proxy.ToolEnvBackend(env), reps=reps, ws_root=ws_root)
  finally:
    shutil.rmtree(ws_root, ignore_errors=True)
  ratios = {}
  for b in ("function", "mcp"):
    r = out[b]
    ratios[b] = {"ptc_over_dtc": r["ratio_ptc_over_dtc"], "replay_over_ptc": r["ratio_replay_over_ptc"],
                 "replay_over_dtc": r["replay_s"] / r["dtc_s"],
                 "cold_start_over_trivial": out["cold_start_s"] / (r["trivial_ms"] / 1e3)}
  out["ratios"] = ratios
  print(f"\nratios ({N_CALLS} tool calls; lower is faster for the numerator):")
  for b, r in ratios.items():
    print(f"  {b:8s} PTC / DTC x{r['ptc_over_dtc']:.2f}; replay PTC / PTC x{r['replay_over_ptc']:.1f}; "
          f"replay PTC / DTC x{r['replay_over_dtc']:.1f}; cold start / trivial round trip "
          f"x{r['cold_start_over_trivial']:.0f}")
  return out


def main() -> None:
  _cli.main(run, __doc__)


if __name__ == "__main__":
  main()
