r"""One evaluation command over benchmark suites and the project's own tasks, under PTC, DTC and Hybrid.

  python -m progagent.bench.evaluate --suite toolathlon_local,progagent --harness ptc,dtc,hybrid \
      --policy scripted:groundtruth | scripted:do_nothing | checkpoint:gguf:smollm2 | endpoint:http://127.0.0.1:8000 \
      [--model NAME] [--toolathlon_dir DIR] [--loca_dir DIR --loca_size 8k] \
      [--progagent_tasks retail --progagent_levels 0] \
      [--samples 1] [--seeds 1000] [--max_turns 30] [--workdir runs/bench] [--out FILE] [--per_task]

For every task of every suite (progagent.bench.suites: `--suite` a comma list of SUITES' names), every harness
of `--harness` and every (seed, sample) of `--seeds` x `--samples`, one episode of the policy
(progagent.bench.policies) runs through progagent.harness.run_episode over progagent.ptc_env.ProgEnv:
  a task over MCP servers (a benchmark's): ProgEnv(McpTaskEnv(its servers, [its task]), mode), or over the
    environment its suite's factory makes (BenchTask.make_env: LOCA's mock services over the task's state); the servers are
    started once per task (each episode restages the workspace and restarts them), every server and the
    evaluator sandboxed; the system prompt says to finish with a reply that calls no tool
    (harness.system_prompt(mode, submit=False)); reward = the task's own evaluator (exit status 0);
  a library task ('domain/name@vK'): ProgEnv(mode, scale=K) on environment seed `--seeds`; reward = its verifier.
Programs run in the sandboxed kernel (`--runtime kernel`, the default; 'inprocess' runs them in this process:
library tasks and trusted scripted policies only; refused with MCP tasks, whose /workspace it cannot see).

Printed: one row per suite and harness:
  tasks, episodes;
  pass@1 [95% CI]   mean over tasks of the task's share of passed episodes, with the bootstrap interval that
                    resamples tasks (common.stats.clustered_difference against 0; BCa; one task: no interval, n/a
                    here and null in the JSON);
  ctx_tok           tokens of the episode's final context (tool schemas, system prompt, instruction, every action
                    and observation; harness.EpisodeStats.context_tokens), mean over episodes; counted by the
                    checkpoint's tokenizer for a checkpoint policy, else `--tokenizer` (a local HF tokenizer
                    folder), else harness.regex_token_count (a model-free proxy);
  calls, errors     tool calls reaching the servers or the task's tools (programs' calls included) and errors
                    (tool, parse and program errors), means over episodes;
  turns             assistant replies, mean;
  eval_err          episodes whose evaluator could not run or timed out (scored 0).
With `--per_task`, a task x harness table of passed / episodes. The JSON (`--out`, default
<workdir>/results.json) holds the commit and whether the checkout was dirty (common.provenance), the arguments,
the policy, the rows, and one record per episode (task, harness, seed, sample, reward, end, stats, the number
of tools each of the task's servers listed, the
evaluator's verdict without its output beyond 2,000 characters, the endpoint's usage, the first 1,000
characters of the last reply's text, seconds).

Exit status: 0 when every episode ran (whatever the rewards), 2 on bad arguments, a policy that cannot be made
(an endpoint without --model, a missing checkpoint) or a suite that cannot load (the reason on stderr: e.g. no
Toolathlon checkout, naming what to fetch), 3 when an endpoint stopped answering (progagent.teacher_client's
TeacherError, with the URL to check): the episodes that ran are written, with the reason under "stopped"; a task
whose servers do not start stops the run with progagent.mcp_servers.McpServerError (its stderr's end in the
message).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

from common import io
from common import provenance
from common import stats
from progagent import harness
from progagent import ptc_env
from progagent.bench import policies
from progagent.bench import suites as suites_lib
from progagent.bench.base import BenchTask, SuiteError
from progagent.mcp_task_env import McpTaskEnv
from progagent.teacher_client import TeacherError

_log = logging.getLogger(__name__)

RUNTIMES = ("kernel", "inprocess")
OUTPUT_KEEP = 2000
LAST_REPLY_CHARS = 1000


class EvaluateError(ValueError):
  """Bad arguments of the evaluation command (an unknown harness or runtime, no seed, samples < 1)."""


# ------------------------------------------------------------------------------------------------ episodes


def _verdict(env: Any) -> dict | None:
  v = getattr(env, "last_verdict", None)
  if not v:
    return None
  v = dict(v)
  if isinstance(v.get("output"), str):
    v["output"] = v["output"][-OUTPUT_KEEP:]
  return v


def run_task(task: BenchTask, policy: Any, *, modes: Sequence[str], seeds: Sequence[int], samples: int,
             runtime: str = "kernel", max_turns: int = 30, tokenizer: Any = None, cache_dir: str | None = None,
             log=None) -> list[dict]:
  """Every episode of one task: each harness of `modes` x seed x sample; returns their records (module
  docstring). An MCP task's servers start once here and stop at the end.

  Raises:
    progagent.mcp_servers.McpServerError: a server did not start. ValueError: a bad task.
  """
  records = []
  if task.make_env is not None:
    mcp_env = task.make_env()
  else:
    mcp_env = McpTaskEnv(task.servers, [task.task]) if task.task is not None else None
  server_tools = None
  if mcp_env is not None:   # {server: tools it listed from inside its sandbox}
    server_tools = {}
    for t in mcp_env.tools():
      server = mcp_env.group.route(t["name"])[0]
      server_tools[server] = server_tools.get(server, 0) + 1
  try:
    for mode in modes:
      for seed in seeds:
        for sample in range(samples):
          if mcp_env is not None:
            env = ptc_env.ProgEnv(mcp_env, mode=mode, runtime=runtime)
            workspace, system, tid = mcp_env.workspace_inside, harness.system_prompt(mode, submit=False), task.task.task_id
          else:
            tid, _, lvl = task.task_id.partition("@v")
            env = ptc_env.ProgEnv(mode=mode, runtime=runtime, scale=int(lvl or 0), cache_dir=cache_dir)
            workspace, system, tid = "/workspace", None, tid
          pol = policy.for_episode(task, mode, workspace)
          t0 = time.monotonic()
          try:
            ep = harness.run_episode(env, pol, mode=mode, task_id=tid, seed=int(seed), tokenizer=tokenizer,
                                     max_turns=max_turns, system=system)
          finally:
            if hasattr(pol, "close"):
              pol.close()
            env.close()
          st = ep.stats
          rec = {"suite": task.suite, "task_id": task.task_id, "mode": mode, "seed": int(seed), "sample": sample,
                 "reward": float(st.reward), "passed": st.reward >= 1.0, "end": st.end, "turns": st.turns,
                 "tool_calls": st.tool_calls, "errors": st.errors, "context_tokens": st.context_tokens,
                 "stats": {k: getattr(st, k) for k in ("tool_errors", "parse_errors", "program_errors",
                                                      "prompt_tokens", "action_tokens", "observation_tokens")},
                 "verdict": _verdict(mcp_env) if mcp_env is not None else None, "server_tools": server_tools,
                 "usage": pol.usage() if hasattr(pol, "usage") else None,
                 "last_reply": next((str(m.get("content") or "")[:LAST_REPLY_CHARS] for m in reversed(ep.messages)
                                     if m["role"] == "assistant"), ""),
                 "seconds": round(time.monotonic() - t0, 3)}
          v = rec["verdict"]
          rec["eval_error"] = bool(v and (v.get("error") or v.get("timed_out")))
          records.append(rec)
          if log:
            log(f"  {_label(task.suite, task.task_id)} {mode} seed={seed} #{sample}: R={rec['reward']:.0f} end={st.end} "
                f"turns={st.turns} calls={st.tool_calls} ctx={st.context_tokens} ({rec['seconds']:.1f} s)")
  finally:
    if mcp_env is not None:
      mcp_env.close()
  return records


# ------------------------------------------------------------------------------------------------ summary


def summarize(records: Sequence[dict], *, confidence: float = 0.95, resamples: int = 10_000) -> dict:
  """{suite: {mode: row}} of the episode records, suites and harnesses in the records' order (module docstring,
  "Printed")."""
  out: dict[str, dict[str, dict]] = {}
  suites = list(dict.fromkeys(r["suite"] for r in records))
  modes = list(dict.fromkeys(r["mode"] for r in records))
  for suite, mode in [(s, m) for s in suites for m in modes]:
    rs = [r for r in records if r["suite"] == suite and r["mode"] == mode]
    if not rs:
      continue
    tasks = [r["task_id"] for r in rs]
    x = np.array([float(r["passed"]) for r in rs])
    ci = stats.clustered_difference(x, np.zeros_like(x), tasks, confidence=confidence, resamples=resamples)
    row = {"tasks": len(set(tasks)), "episodes": len(rs), "pass@1": ci.mean,
           "pass@1_low": stats.finite_or_none(ci.low), "pass@1_high": stats.finite_or_none(ci.high),
           "eval_err": int(sum(r["eval_error"] for r in rs))}
    for f in ("context_tokens", "tool_calls", "errors", "turns"):
      row[f] = float(np.mean([r[f] for r in rs]))
    out.setdefault(suite, {})[mode] = row
  return out


def _pct(x: float) -> str:
  return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:.1f}"


def format_table(summary: dict) -> str:
  """The printed table: one row per suite and harness."""
  width = max([5] + [len(s) for s in summary])
  head = (f"{'suite':{width}} {'harness':7} {'tasks':>5} {'episodes':>8} {'pass@1 [95% CI]':>22} {'ctx_tok':>9} "
          f"{'calls':>6} {'errors':>6} {'turns':>5} {'eval_err':>8}")
  lines = [head, "-" * len(head)]
  for suite, rows in summary.items():
    for mode, r in rows.items():
      ci = f"{_pct(r['pass@1'])} [{_pct(r['pass@1_low'])}, {_pct(r['pass@1_high'])}]"
      lines.append(f"{suite:{width}} {mode:7} {r['tasks']:5d} {r['episodes']:8d} {ci:>22} {r['context_tokens']:9.0f} "
                   f"{r['tool_calls']:6.1f} {r['errors']:6.2f} {r['turns']:5.1f} {r['eval_err']:8d}")
  return "\n".join(lines)


def _label(suite: str, task_id: str) -> str:
  """'suite/task', or the task id alone where it already begins with its suite (LOCA's 'loca/8k/...')."""
  return task_id if task_id.startswith(f"{suite}/") else f"{suite}/{task_id}"


def format_per_task(records: Sequence[dict], modes: Sequence[str]) -> str:
  """task x harness: passed/episodes."""
  tasks = list(dict.fromkeys((r["suite"], r["task_id"]) for r in records))
  width = max([4] + [len(_label(s, t)) for s, t in tasks])
  lines = [f"{'task':{width}} " + " ".join(f"{m:>7}" for m in modes)]
  for s, t in tasks:
    cells = []
    for m in modes:
      rs = [r for r in records if r["suite"] == s and r["task_id"] == t and r["mode"] == m]
      cells.append(f"{sum(r['passed'] for r in rs)}/{len(rs)}" if rs else "-")
    lines.append(f"{_label(s, t):{width}} " + " ".join(f"{c:>7}" for c in cells))
  return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ CLI


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m progagent.bench.evaluate", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--suite", default="progagent", help=f"comma list of suites: {', '.join(suites_lib.SUITES)}")
  p.add_argument("--harness", default="ptc,dtc,hybrid", help="comma list of harnesses: ptc, dtc, hybrid")
  p.add_argument("--policy", required=True, help="scripted:do_nothing | scripted:groundtruth | checkpoint:PATH | "
                 "endpoint:URL (progagent.bench.policies)")
  p.add_argument("--model", default="", help="the endpoint's model name")
  p.add_argument("--api_key", default=None, help="the endpoint's bearer token (default $OPENAI_API_KEY)")
  p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (checkpoint), sent as is (endpoint)")
  p.add_argument("--max_new_tokens", type=int, default=512, help="tokens per reply")
  p.add_argument("--timeout_s", type=float, default=300.0,
                 help="an endpoint's seconds for one HTTP request, connect and answer (progagent.teacher_client)")
  p.add_argument("--max_context_tokens", type=int, default=8192, help="a checkpoint's longest prompt")
  p.add_argument("--samples", type=int, default=1, help="episodes per task, harness and seed")
  p.add_argument("--seeds", default="1000", help="environment seeds of the library tasks (held out from training)")
  p.add_argument("--max_turns", type=int, default=30, help="replies per episode")
  p.add_argument("--runtime", default="kernel", choices=RUNTIMES)
  p.add_argument("--tokenizer", default=None, help="a local HF tokenizer folder for token counts")
  p.add_argument("--workdir", default="runs/bench", help="generated states and the results")
  p.add_argument("--out", default=None, help="results JSON (default <workdir>/results.json)")
  p.add_argument("--per_task", action="store_true", help="also print the task x harness table")
  p.add_argument("--quiet", action="store_true", help="no per-episode lines")
  for s in suites_lib.SUITES.values():
    s.add_args(p)
  return p.parse_args(argv)


def _check(a: argparse.Namespace) -> tuple[list[str], list[int]]:
  modes = [m.strip() for m in a.harness.split(",") if m.strip()]
  bad = [m for m in modes if m not in harness.MODES]
  if not modes or bad:
    raise EvaluateError(f"--harness {a.harness!r}: the harnesses are {harness.MODES}")
  try:
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
  except ValueError:
    raise EvaluateError(f"--seeds {a.seeds!r}: a comma list of integers") from None
  if not seeds:
    raise EvaluateError("--seeds names no seed")
  if a.samples < 1:
    raise EvaluateError(f"--samples {a.samples}: must be >= 1")
  if not a.timeout_s > 0:
    raise EvaluateError(f"--timeout_s {a.timeout_s}: must be > 0 seconds")
  return list(dict.fromkeys(modes)), seeds


def _corpus(tasks: Sequence[BenchTask]) -> list[str]:
  """Texts a 'tiny:' checkpoint's tokenizer is trained on: the instructions and the harnesses' prompts."""
  out = [harness.system_prompt(m, submit=s) for m in harness.MODES for s in (True, False)]
  out += [t.task.instruction for t in tasks if t.task is not None]
  return out + ["<tool_call>", "programmatic_tool_call", "print(tools)"]


def main(argv: Sequence[str] | None = None) -> int:
  """The CLI (module docstring); returns the exit status."""
  a = parse_args(argv)
  log = None if a.quiet else (lambda s: print(s, flush=True))
  try:
    modes, seeds = _check(a)
    policies.parse_policy(a.policy)
    tasks: list[BenchTask] = []
    for suite in suites_lib.get_suites(a.suite):
      loaded = suite.load(a)
      if log:
        log(f"suite {suite.name}: {len(loaded)} tasks")
      tasks += loaded
    refused = [t for t in tasks if t.groundtruth_note]
    if policies.parse_policy(a.policy) == ("scripted", "groundtruth") and refused:
      raise EvaluateError(f"--policy scripted:groundtruth cannot solve {refused[0].suite} tasks "
                          f"({len(refused)} of them): {refused[0].groundtruth_note}")
    if a.runtime == "inprocess" and any(t.task is not None for t in tasks):
      raise EvaluateError("--runtime inprocess runs programs in this process, where an MCP task's /workspace does "
                          "not exist (a program would write the host's /workspace); use --runtime kernel")
    policy = policies.make_policy(a.policy, model=a.model, api_key=a.api_key, temperature=a.temperature,
                                  max_new_tokens=a.max_new_tokens, max_context_tokens=a.max_context_tokens,
                                  timeout_s=a.timeout_s, corpus=_corpus(tasks))
  except (SuiteError, EvaluateError, policies.PolicyError, ValueError, KeyError) as e:
    print(f"error: {e}", file=sys.stderr)   # a CheckpointError is a ValueError
    return 2
  tokenizer = getattr(policy, "tokenizer", None)
  if tokenizer is None and a.tokenizer:
    import transformers  # pylint: disable=g-import-not-at-top
    tokenizer = transformers.AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
  cache_dir = os.path.join(a.workdir, "states", "progagent")
  os.makedirs(cache_dir, exist_ok=True)
  t0 = time.monotonic()
  records: list[dict] = []
  stopped = None
  for task in tasks:
    try:
      records += run_task(task, policy, modes=modes, seeds=seeds, samples=a.samples, runtime=a.runtime,
                          max_turns=a.max_turns, tokenizer=tokenizer, cache_dir=cache_dir, log=log)
    except TeacherError as e:   # the endpoint is gone: keep what ran, say why the rest did not
      stopped = f"{type(e).__name__} in {_label(task.suite, task.task_id)}: {e}"
      break
  summary = summarize(records)
  table = format_table(summary)
  print(table)
  if a.per_task:
    print()
    print(format_per_task(records, modes))
  out = a.out or os.path.join(a.workdir, "results.json")
  result = {"code": provenance.code_version(), "policy": policies.describe(a.policy), "argv": list(argv or sys.argv[1:]),
            "args": {k: v for k, v in vars(a).items() if k != "api_key"}, "harnesses": modes, "seeds": seeds,
            "summary": summary, "table": table, "overflow": getattr(policy, "overflow", None),
            "seconds": round(time.monotonic() - t0, 1), "episodes": records, "stopped": stopped}
  io.write_json(out, result)
  print(f"wrote {out} (commit {result['code']['commit'][:12]}{' dirty' if result['code']['dirty'] else ''})")
  if stopped:
    print(f"error: the evaluation stopped after {len(records)} episodes: {stopped}", file=sys.stderr)
    return 3
  return 0


if __name__ == "__main__":
  logging.basicConfig(level=logging.WARNING)
  sys.exit(main())
