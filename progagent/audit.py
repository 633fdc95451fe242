"""Audit of the ProgAgent task library: every oracle passes under every harness at every scale; doing nothing, a
plausible wrong answer, a shortcut that ignores one condition of the instruction and a memorised answer fail.

  python -m progagent.audit [--levels 0,1,2,3] [--seeds 0,1,2,3,4] [--tasks retail,hr/] [--runtime inprocess|kernel]
                            [--max-dtc-tokens 16000] [--json audit.json]

Per task, level and seed (SPEC.md, ProgAgent, "task synthesis with environment-state scaling"):
  noop     R = 0 right after reset (doing nothing fails);
  ptc      the PTC oracle program(s) under the PTC harness give R = 1 with no error (a failed tool call is
           allowed only in tasks tagged 'errors', whose tools fail on purpose: audit.clean);
  hybrid   the same programs under the Hybrid harness (both tool kinds offered) give R = 1;
  dtc      the DTC oracle (the program one JSON call per turn, reading observations) gives R = 1; at v0 its
           whole context stays within --max-dtc-tokens (regex token proxy, progagent.harness);
  wrong    the task's plausible wrong solution gives R = 0 (a wrong program, or the oracle's answer perturbed);
  conditions  for each condition of the instruction the task declares (base.Task.conditions: a date range, a
           kind, a status, a threshold, a site, ...), the oracle with that one condition dropped runs without
           raising and gives R = 0: the domain's generator plants a distractor per condition, so that a shortcut
           which ignores it finds another answer (a crash would test nothing, so it fails the check too);
  same     instruction and tool list are identical to those at v0.
Per task, over the audited seeds and levels (answers cannot be memorised):
  vary     at each level, the oracle's answers are not all equal over the seeds (tasks that ask for an answer;
           needs two or more seeds);
  cross    the v0 / first-seed instance's outcome does not carry over: its answer, submitted on every other
           audited (level, seed) instance, fails there; for tasks with a state check, its DTC oracle's tool
           calls replayed verbatim on every other instance fail there.
The summary line `conditions` counts the declared conditions whose dropping failed on every audited instance.
Then, per level, the mean database size (KB = 1024 bytes), workspace file count, database rows and the DTC
oracle's context tokens, and a summary of the library (domains, tasks, tools per domain, tags). `--runtime
kernel` runs the PTC programs in the sandboxed kernel (progagent.runtime) instead of in-process. Exit status
1 when any check fails (each failure is listed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from progagent import harness
from progagent import inprocess_runtime
from progagent import tasks as tasks_lib
from progagent.task_env import ProgTaskEnv
from progagent.tasks import base


def check_instance(env: ProgTaskEnv, *, seed: int = 0, runtime: str = "inprocess",
                   max_dtc_tokens: int | None = None) -> dict:
  """Runs the per-instance checks on one instance.

  Returns {'noop', 'ptc', 'hybrid', 'dtc', 'wrong', 'conditions': ok bool, 'notes': [...], 'size': state_size(),
  'answer': the PTC oracle's submitted answer, 'dtc_calls': the DTC oracle's calls [{'name', 'arguments'}],
  'dtc_tokens': the DTC oracle's context tokens, 'failed_conditions': names of the conditions whose dropping
  passes or raises}. `max_dtc_tokens` (None: no limit) bounds dtc_tokens."""
  task = env.task
  out: dict = {"notes": []}
  env.reset(task.task_id, seed)
  out["size"] = env.state_size()
  out["noop"] = env.verify() == 0
  if not out["noop"]:
    out["notes"].append("doing nothing passes the verifier")
  for mode in ("ptc", "hybrid"):
    ep = harness.run_oracle(env, mode, seed=seed, runtime=runtime)
    if mode == "ptc":
      out["answer"] = env.submitted_answer
    out[mode] = ep.stats.reward == 1.0 and ep.stats.end == "done" and clean(task, ep.stats)
    if not out[mode]:
      obs = [m["content"][:300] for m in ep.messages[3:]]
      out["notes"].append(f"{mode.upper()} oracle: R={ep.stats.reward}, errors={ep.stats.errors}, "
                          f"end={ep.stats.end}, {obs}")
  ep = harness.run_oracle(env, "dtc", seed=seed)
  out["dtc_tokens"] = ep.stats.context_tokens
  out["dtc_calls"] = episode_calls(ep)
  out["dtc"] = ep.stats.reward == 1.0 and ep.stats.end == "done" and clean(task, ep.stats)
  if not out["dtc"]:
    out["notes"].append(f"DTC oracle: R={ep.stats.reward}, errors={ep.stats.errors}, end={ep.stats.end}, "
                        f"last={ep.messages[-1]['content'][:300]}")
  if max_dtc_tokens is not None and out["dtc_tokens"] > max_dtc_tokens:
    out["dtc"] = False
    out["notes"].append(f"DTC oracle context {out['dtc_tokens']} tokens > {max_dtc_tokens} (--max-dtc-tokens): "
                        "give the list tools filters the oracle can use")
  out["wrong"] = run_wrong(env, out["answer"], seed=seed, runtime=runtime) == 0
  if not out["wrong"]:
    out["notes"].append("the plausible wrong solution passes the verifier")
  out["failed_conditions"] = []
  for name in task.condition_names:
    reward, error = run_condition(env, name, seed=seed, runtime=runtime)
    if reward != 0 or error is not None:
      out["failed_conditions"].append(name)
      out["notes"].append(f"condition {name!r}: the oracle without it " + (
          f"raises {error[:200]} (a shortcut that crashes tests nothing: fix the substitution)" if error else
          "passes the verifier (plant a distractor for it in the generator)"))
  out["conditions"] = not out["failed_conditions"]
  return out


def episode_calls(ep: harness.Episode) -> list[dict]:
  """The tool calls of an episode's assistant messages, in order, as [{'name', 'arguments'}] (what carries_over
  replays)."""
  return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
          for m in ep.messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]


def clean(task: base.Task, stats: harness.EpisodeStats) -> bool:
  """Whether an oracle episode made no error it should not: no unreadable call, no program that raised, and no
  failed tool call unless the task is tagged 'errors' (its tools fail on purpose and the oracle recovers)."""
  return (stats.parse_errors == 0 and stats.program_errors == 0
          and (stats.tool_errors == 0 or "errors" in task.tags))


def answers_vary(kind: str, answers: list) -> bool:
  """Whether the oracle answers of one level differ somewhere (False: one answer would pass every seed)."""
  return any(not base.answer_matches(kind, a, answers[0]) for a in answers[1:])


def carries_over(env: ProgTaskEnv, reference: dict, seed: int) -> bool:
  """Whether the reference instance's outcome passes on (env's level, seed): its answer submitted there (tasks
  without a state check), else its DTC oracle calls replayed verbatim. True is a failed audit."""
  task = env.task
  env.reset(task.task_id, seed)
  if task.check is None:
    env.step({"name": "submit_answer", "arguments": {"answer": reference["answer"]}})
  else:
    for call in reference["dtc_calls"]:
      if env.done:
        break
      env.step(call)
  return env.verify() == 1


def run_wrong(env: ProgTaskEnv, oracle_answer, *, seed: int = 0, runtime: str = "inprocess") -> int:
  """R of the task's plausible wrong solution on a fresh instance."""
  task = env.task
  env.reset(task.task_id, seed)
  prog = task.wrong_program()
  if prog is not None:
    rt = inprocess_runtime.make_runtime(runtime, env)
    try:
      rt.run(prog)
    finally:
      rt.close()
    return env.verify()
  env.step({"name": "submit_answer", "arguments": {"answer": base.perturb(task.answer, oracle_answer)}})
  return env.verify()


def run_condition(env: ProgTaskEnv, name: str, *, seed: int = 0, runtime: str = "inprocess") -> tuple[int, str | None]:
  """(R, error) of the oracle with condition `name` dropped (base.Task.condition_program) on a fresh instance:
  error is the "Name: message" of the exception that ended the program, or None.

  Raises:
    KeyError: the task declares no such condition.
  """
  task = env.task
  prog = task.condition_program(name)
  env.reset(task.task_id, seed)
  rt = inprocess_runtime.make_runtime(runtime, env)
  try:
    res = rt.run(prog)
  finally:
    rt.close()
  return env.verify(), res.error


def tasks_arg(spec: str | None) -> list[str]:
  """The task ids of a `--tasks` flag (progagent.tasks.select_tasks: comma-separated task ids or domains; empty =
  every task).

  Raises:
    SystemExit: a part that is neither a task id nor a domain (the message shows what ids look like).
  """
  try:
    return tasks_lib.select_tasks(spec or "")
  except KeyError as e:
    raise SystemExit(f"--tasks {spec!r}: {e.args[0]}") from None


def audit_task(tid: str, levels: list[int], seeds: list[int], *, runtime: str, cache: str,
               max_dtc_tokens: int | None) -> dict:
  """All checks of one task: {'levels': {level: {'ok', 'sizes', 'dtc_tokens'}}, 'vary', 'cross', 'conditions',
  'failures'}; 'conditions' maps each declared condition to whether its dropping failed (R = 0, no error) on
  every audited level and seed."""
  failures: list[str] = []
  per_level: dict = {}
  ref = None
  answers: dict = {}
  ref_env = ProgTaskEnv(tid, 0)
  try:
    v0_tools, v0_prompt = ref_env.tools(), ref_env.task.prompt
  finally:
    ref_env.close()
  task = tasks_lib.get_task(tid)
  cond_ok = {name: True for name in task.condition_names}
  for lvl in levels:
    rec = {"ok": True, "sizes": [], "dtc_tokens": []}
    env = ProgTaskEnv(tid, lvl, cache_dir=cache)
    try:
      if env.tools() != v0_tools or env.task.prompt != v0_prompt:
        rec["ok"] = False
        failures.append(f"{tid}@v{lvl}: instruction or tools differ from v0")
      for seed in seeds:
        r = check_instance(env, seed=seed, runtime=runtime, max_dtc_tokens=max_dtc_tokens if lvl == 0 else None)
        rec["sizes"].append(r["size"])
        rec["dtc_tokens"].append(r["dtc_tokens"])
        answers.setdefault(lvl, []).append(r["answer"])
        if ref is None:
          ref = r
        rec["ok"] = (rec["ok"] and r["noop"] and r["ptc"] and r["hybrid"] and r["dtc"] and r["wrong"]
                     and r["conditions"])
        for name in r["failed_conditions"]:
          cond_ok[name] = False
        failures += [f"{tid}@v{lvl} seed {seed}: {n}" for n in r["notes"]]
    except Exception as e:  # a broken task is a failure, the audit goes on
      rec["ok"] = False
      failures.append(f"{tid}@v{lvl}: {type(e).__name__}: {e}")
    finally:
      env.close()
    per_level[lvl] = rec
  vary = None
  if task.answer is not None and len(seeds) > 1:
    const = [lvl for lvl, a in answers.items() if len(a) == len(seeds) and not answers_vary(task.answer, a)]
    vary = not const
    if const:
      failures.append(f"{tid}: the oracle answer is the same for every seed {seeds} at level(s) {const} "
                      f"({answers[const[0]][0]!r}): plant seed-dependent values")
  cross = None
  if ref is not None:
    carried = []
    for lvl in levels:
      env = ProgTaskEnv(tid, lvl, cache_dir=cache)
      try:
        for seed in seeds:
          if (lvl, seed) != (levels[0], seeds[0]) and carries_over(env, ref, seed):
            carried.append(f"v{lvl}/s{seed}")
      finally:
        env.close()
    cross = not carried
    if carried:
      what = "answer" if task.check is None else "replayed tool calls"
      failures.append(f"{tid}: the v{levels[0]}/seed-{seeds[0]} {what} also pass on {carried}")
  return {"levels": per_level, "vary": vary, "cross": cross, "conditions": cond_ok, "failures": failures}


def library_summary(ids: list[str]) -> str:
  """Domains, tasks, tools per domain and tags of the audited tasks."""
  domains = sorted({tasks_lib.get_task(t).domain.name for t in ids})
  n_tools = [len(tasks_lib.DOMAINS[d].tools) + 1 for d in domains]   # + submit_answer
  tags = {tag: sum(tag in tasks_lib.get_task(t).tags for t in ids) for tag in base.TAGS}
  hard = sum(any(tag in base.HARD_TAGS for tag in tasks_lib.get_task(t).tags) for t in ids)
  state = sum(tasks_lib.get_task(t).answer is None for t in ids)
  return (f"library: {len(domains)} domains, {len(ids)} tasks ({state} pure state changes), "
          f"{statistics.mean(n_tools):.2f} tools per domain (submit_answer included); tags: "
          + ", ".join(f"{k} {v}" for k, v in tags.items()) + f"; {hard} tasks with explore/errors/writeback")


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--levels", default="0,1,2,3", help="comma-separated scale levels (0..3)")
  p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated generator seeds (two or more for 'vary')")
  p.add_argument("--tasks", default=None, help="comma-separated task ids or domains (default: all)")
  p.add_argument("--runtime", default="inprocess", choices=("inprocess", "kernel"),
                 help="where PTC programs run: in this process, or the sandboxed kernel (progagent.runtime)")
  p.add_argument("--max-dtc-tokens", type=int, default=16_000,
                 help="the DTC oracle's context limit at v0 (regex token proxy); 0 = no limit")
  p.add_argument("--json", default=None, help="also write every task's results to this JSON file")
  a = p.parse_args(argv)
  try:
    levels = [int(x) for x in a.levels.split(",")]
    for lvl in levels:
      base.level_factor(lvl)
    seeds = [int(x) for x in a.seeds.split(",")]
  except ValueError as e:
    p.error(f"--levels / --seeds: {e}")
  if len(set(seeds)) != len(seeds) or len(set(levels)) != len(levels):
    p.error(f"--levels {a.levels} / --seeds {a.seeds}: give each level and seed once")
  ids = tasks_arg(a.tasks)
  failures: list[str] = []
  t0 = time.time()
  print(f"auditing {len(ids)} tasks in {len({t.split('/')[0] for t in ids})} domains at levels {levels}, "
        f"seeds {seeds}, PTC runtime {a.runtime}", flush=True)
  print(library_summary(ids), flush=True)
  results: dict = {}
  with tempfile.TemporaryDirectory(prefix="progaudit-") as cache:
    for i, tid in enumerate(ids):
      res = audit_task(tid, levels, seeds, runtime=a.runtime, cache=cache, max_dtc_tokens=a.max_dtc_tokens or None)
      results[tid] = res
      failures += res["failures"]
      ok = all(r["ok"] for r in res["levels"].values()) and res["vary"] is not False and res["cross"] is not False
      print(f"  [{i + 1}/{len(ids)}] {tid}: {'ok' if ok else 'FAIL'}  ({time.time() - t0:.0f} s)", flush=True)
  print("\nlevel  tasks_passed      mean_db_kb  mean_files  mean_db_rows  DTC_ctx_tok(mean/max)")
  for lvl in levels:
    recs = [results[t]["levels"][lvl] for t in ids]
    sizes = [s for r in recs for s in r["sizes"]]
    toks = [x for r in recs for x in r["dtc_tokens"]]
    passed = sum(r["ok"] for r in recs)
    m = statistics.mean
    print(f"v{lvl}     {passed:>3}/{len(ids):<3} tasks   {m(s['db_kb'] for s in sizes) if sizes else 0:8.1f}    "
          f"{m(s['files'] for s in sizes) if sizes else 0:8.1f}    {m(s['rows'] for s in sizes) if sizes else 0:10.1f}"
          f"    {m(toks) if toks else 0:8.0f} / {max(toks) if toks else 0:6.0f}")
  answer_tasks = [t for t in ids if results[t]["vary"] is not None]
  if len(seeds) < 2:
    print("\nvary:  not checked (needs two or more seeds)")
  else:
    print(f"\nvary:  {sum(results[t]['vary'] for t in answer_tasks)}/{len(answer_tasks)} answer tasks have "
          f"seed-dependent answers at every level")
  crossed = [t for t in ids if results[t]["cross"] is not None]
  others = len(levels) * len(seeds) - 1
  if others:
    print(f"cross: {sum(results[t]['cross'] for t in crossed)}/{len(crossed)} tasks: the v{levels[0]}/seed-{seeds[0]} "
          f"answer (or replayed calls) fails on all {others} other instances")
  else:
    print("cross: not checked (one level and one seed: no other instance)")
  declared = [t for t in ids if results[t]["conditions"]]
  n_cond = sum(len(results[t]["conditions"]) for t in declared)
  print(f"conditions: {sum(sum(results[t]['conditions'].values()) for t in declared)}/{n_cond} declared conditions "
        f"of {len(declared)} tasks: the oracle without the condition fails (R = 0) on all "
        f"{len(levels) * len(seeds)} instances ({len(ids) - len(declared)} tasks declare none)")
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"levels": levels, "seeds": seeds, "tasks": {
          t: {"vary": r["vary"], "cross": r["cross"], "conditions": r["conditions"], "failures": r["failures"],
              "levels": {str(k): {"ok": v["ok"], "dtc_tokens": v["dtc_tokens"], "sizes": v["sizes"]}
                         for k, v in r["levels"].items()}} for t, r in results.items()}}, f, indent=1)
  if failures:
    print(f"\n{len(failures)} FAILURES:")
    for f in failures:
      print("  " + f)
    return 1
  print(f"\nall checks passed ({time.time() - t0:.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
