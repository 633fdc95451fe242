"""Context cost without a model: the oracles under DTC and PTC at v0..v3, context tokens per episode.

  python -m progagent.context_cost [--levels 0,1,2,3] [--tasks retail,hr] [--tokenizer PATH]
                                   [--runtime inprocess|kernel] [--json out.json]

For every task and level, the task's oracle is replayed under each harness (harness.run_oracle): DTC one
JSON call per turn with every raw result in the context, PTC the oracle program(s) with only the printed
output in the context. Printed per level, as means over tasks: context tokens per episode (the whole
final context: system prompt, instruction, actions, observations), the tool-output (observation) tokens,
tool calls, and the oracle's reward (1.0 when all passed). This is the experiment behind ProgAgent's claim
(SPEC.md, ProgAgent): PTC's context stays flat as the environment state grows while DTC's grows with it.

Tokens: the model-free regex count of progagent.harness (words and punctuation marks) unless --tokenizer
names a local Hugging Face tokenizer directory. PTC programs run in-process with a `tools` dict of direct
callables by default; --runtime kernel runs them in the sandboxed IPython kernel (progagent.runtime), which
gives the same outputs and counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from progagent import audit
from progagent import harness
from progagent.task_env import ProgTaskEnv

FIELDS = ("context_tokens", "observation_tokens", "tool_calls", "turns", "reward")


def measure(task_ids, levels, *, seed: int = 0, tokenizer=None, runtime: str = "inprocess",
            cache_dir: str | None = None) -> dict:
  """{level: {mode: {field: [value per task]}, 'db_kb': [...], 'files': [...]}} for modes dtc and ptc."""
  out: dict = {}
  for lvl in levels:
    rec = {"dtc": {f: [] for f in FIELDS}, "ptc": {f: [] for f in FIELDS}, "db_kb": [], "files": []}
    for tid in task_ids:
      env = ProgTaskEnv(tid, lvl, cache_dir=cache_dir)
      try:
        env.reset(seed=seed)
        size = env.state_size()   # of the fresh instance
        for mode in ("dtc", "ptc"):
          ep = harness.run_oracle(env, mode, seed=seed, runtime=runtime, tokenizer=tokenizer)
          for f in FIELDS:
            rec[mode][f].append(float(getattr(ep.stats, f)))
        rec["db_kb"].append(size["db_kb"])
        rec["files"].append(size["files"])
      finally:
        env.close()
    out[lvl] = rec
  return out


def format_table(res: dict) -> str:
  """The per-level table of means over tasks."""
  head = ("level  db_kb  files | DTC ctx_tok  PTC ctx_tok  DTC/PTC | DTC obs_tok  PTC obs_tok | "
          "DTC calls  PTC calls | DTC turns  PTC turns | DTC R  PTC R")
  lines = [head, "-" * len(head)]
  m = statistics.mean
  for lvl, r in res.items():
    d, p = r["dtc"], r["ptc"]
    lines.append(f"v{lvl}   {m(r['db_kb']):6.1f} {m(r['files']):6.1f} | {m(d['context_tokens']):11.0f}  "
                 f"{m(p['context_tokens']):11.0f}  {m(d['context_tokens']) / m(p['context_tokens']):7.1f} | "
                 f"{m(d['observation_tokens']):11.0f}  {m(p['observation_tokens']):11.0f} | "
                 f"{m(d['tool_calls']):9.1f}  {m(p['tool_calls']):9.1f} | {m(d['turns']):9.1f}  {m(p['turns']):9.1f} | "
                 f"{m(d['reward']):5.2f}  {m(p['reward']):5.2f}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--levels", default="0,1,2,3")
  p.add_argument("--tasks", default=None, help="comma-separated task ids or domains (default: all)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--tokenizer", default=None, help="local Hugging Face tokenizer directory (default: regex count)")
  p.add_argument("--runtime", default="inprocess", choices=("inprocess", "kernel"))
  p.add_argument("--json", default=None, help="also write the per-task numbers to this JSON file")
  a = p.parse_args(argv)
  tok = None
  if a.tokenizer:
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
  ids = audit.tasks_arg(a.tasks)
  levels = [int(x) for x in a.levels.split(",")]
  t0 = time.time()
  with tempfile.TemporaryDirectory(prefix="progcost-") as cache:
    res = measure(ids, levels, seed=a.seed, tokenizer=tok, runtime=a.runtime, cache_dir=cache)
  print(f"context cost of the oracles over {len(ids)} tasks (means per episode; tokens: "
        f"{'regex count' if tok is None else a.tokenizer}; PTC runtime: {a.runtime}; {time.time() - t0:.0f} s)\n")
  print(format_table(res))
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"tasks": ids, "levels": {f"v{k}": v for k, v in res.items()}}, f)
  failed = any(min(r[m]["reward"]) < 1.0 for r in res.values() for m in ("dtc", "ptc"))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
