r"""Runs every hot-path benchmark in one process; each prints ratios against a baseline measured in the same run.

  python -m benchmarks.run_all            # full sizes
  python -m benchmarks.run_all --quick    # small sizes, seconds
  python -m benchmarks.run_all --only pheromone,grpo_advantages

Timings on shared machines are noisy: read the ratios, compare runs on the same machine, and never assert
them in tests.
"""

import argparse
import importlib
import json
import sys

BENCHMARKS = {
    "grpo_advantages": "benchmarks.grpo_advantages_bench",
    "planpo_advantages": "benchmarks.planpo_advantages_bench",
    "pheromone": "benchmarks.pheromone_bench",
    "env": "benchmarks.env_bench",
    "lm": "benchmarks.lm_bench",
    "kv_pool": "benchmarks.kv_pool_bench",
    "progagent": "benchmarks.progagent_bench",
    "progagent_model": "benchmarks.progagent_model_bench",
    "mcp_cold_start": "benchmarks.mcp_cold_start",
    "chat": "benchmarks.chat_bench",
}


def _ratio_lines(res, path=""):
  """Yields 'path: value' for every number whose path names a ratio or speed-up."""
  if isinstance(res, dict):
    for k, v in res.items():
      yield from _ratio_lines(v, f"{path}/{k}" if path else str(k))
  elif isinstance(res, (int, float)) and not isinstance(res, bool):
    if "ratio" in path or "speedup" in path or "_over_" in path:
      yield f"{path}: {res:.4g}"


def _print_result(res) -> None:
  """Prints a benchmark's ratios (each benchmark prints its own table too)."""
  lines = list(_ratio_lines(res))
  if lines:
    print("  ratios:")
    for line in lines:
      print("    " + line)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="small sizes")
  ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
  ap.add_argument("--json", default="", help="also write all results to this JSON file")
  args = ap.parse_args(argv)
  names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
  unknown = [n for n in names if n not in BENCHMARKS]
  if unknown:
    ap.error(f"unknown benchmark(s) {unknown}; valid: {list(BENCHMARKS)}")
  results = {}
  for name in names:
    try:
      mod = importlib.import_module(BENCHMARKS[name])
    except ImportError as e:
      print(f"[{name}] skipped: {e}", file=sys.stderr)
      continue
    print(f"==== {name} ====", flush=True)
    results[name] = res = mod.run(quick=args.quick)
    _print_result(res)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1, default=str)
  return 0


if __name__ == "__main__":
  sys.exit(main())
