"""Audit of the ProgAgent task library: every oracle passes at every scale, doing nothing and a wrong answer fail.

  python -m progagent.audit [--levels 0,1,2,3] [--seeds 0] [--tasks retail,hr/] [--runtime inprocess|kernel]

Per task and level (SPEC.md, ProgAgent, "task synthesis with environment-state scaling"):
  noop     R = 0 right after reset (doing nothing fails);
  ptc      the PTC oracle program(s) under the PTC harness give R = 1 with no failed tool call;
  dtc      the DTC oracle (the program one JSON call per turn, reading observations) gives R = 1;
  wrong    the task's plausible wrong solution gives R = 0 (a wrong program, or the oracle's answer perturbed);
  same     instruction and tool list are identical to those at v0.
Then, per level, the mean database size (KB = 1024 bytes), workspace file count and database rows over
tasks. `--runtime kernel` runs the PTC programs in the sandboxed kernel (progagent.runtime) instead of
in-process. Exit status 1 when any check fails (each failure is listed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from progagent import harness
from progagent import tasks as tasks_lib
from progagent.task_env import ProgTaskEnv
from progagent.tasks import base


def check_instance(env: ProgTaskEnv, *, seed: int = 0, runtime: str = "inprocess") -> dict:
  """Runs the four checks on one instance; returns {'noop', 'ptc', 'dtc', 'wrong': ok bool, 'notes': [...],
  'size': state_size(), 'answer': the oracle's submitted answer}."""
  task = env.task
  out: dict = {"notes": []}
  env.reset(task.task_id, seed)
  out["size"] = env.state_size()
  out["noop"] = env.verify() == 0
  if not out["noop"]:
    out["notes"].append("doing nothing passes the verifier")
  ep = harness.run_oracle(env, "ptc", seed=seed, runtime=runtime)
  out["answer"] = env.submitted_answer
  out["ptc"] = ep.stats.reward == 1.0 and ep.stats.errors == 0 and ep.stats.end == "done"
  if not out["ptc"]:
    obs = [m["content"][:300] for m in ep.messages[3:]]
    out["notes"].append(f"PTC oracle: R={ep.stats.reward}, errors={ep.stats.errors}, end={ep.stats.end}, {obs}")
  ep = harness.run_oracle(env, "dtc", seed=seed)
  out["dtc"] = ep.stats.reward == 1.0 and ep.stats.errors == 0 and ep.stats.end == "done"
  if not out["dtc"]:
    out["notes"].append(f"DTC oracle: R={ep.stats.reward}, errors={ep.stats.errors}, end={ep.stats.end}, "
                        f"last={ep.messages[-1]['content'][:300]}")
  out["wrong"] = run_wrong(env, out["answer"], seed=seed, runtime=runtime) == 0
  if not out["wrong"]:
    out["notes"].append("the plausible wrong solution passes the verifier")
  return out


def run_wrong(env: ProgTaskEnv, oracle_answer, *, seed: int = 0, runtime: str = "inprocess") -> int:
  """R of the task's plausible wrong solution on a fresh instance."""
  task = env.task
  env.reset(task.task_id, seed)
  prog = task.wrong_program()
  if prog is not None:
    rt = harness.make_runtime(runtime, env)
    try:
      rt.run(prog)
    finally:
      rt.close()
    return env.verify()
  env.step({"name": "submit_answer", "arguments": {"answer": base.perturb(task.answer, oracle_answer)}})
  return env.verify()


def _select(spec: str | None) -> list[str]:
  ids = tasks_lib.task_ids()
  if not spec:
    return ids
  pats = [p.strip() for p in spec.split(",") if p.strip()]
  chosen = [t for t in ids if any(t == p or t.startswith(p if "/" in p else p + "/") for p in pats)]
  if not chosen:
    raise SystemExit(f"--tasks {spec!r} matches no task; ids look like 'retail/pending_over_500' or a domain 'retail'")
  return chosen


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--levels", default="0,1,2,3", help="comma-separated scale levels (0..3)")
  p.add_argument("--seeds", default="0", help="comma-separated generator seeds")
  p.add_argument("--tasks", default=None, help="comma-separated task ids or domains (default: all)")
  p.add_argument("--runtime", default="inprocess", choices=("inprocess", "kernel"),
                 help="where PTC programs run: in this process, or the sandboxed kernel (progagent.runtime)")
  a = p.parse_args(argv)
  levels = [int(x) for x in a.levels.split(",")]
  for lvl in levels:
    base.level_factor(lvl)
  seeds = [int(x) for x in a.seeds.split(",")]
  ids = _select(a.tasks)
  failures: list[str] = []
  t0 = time.time()
  print(f"auditing {len(ids)} tasks in {len({t.split('/')[0] for t in ids})} domains at levels {levels}, "
        f"seeds {seeds}, PTC runtime {a.runtime}")
  with tempfile.TemporaryDirectory(prefix="progaudit-") as cache:
    rows = []
    for lvl in levels:
      sizes = []
      passed = 0
      for tid in ids:
        env = ProgTaskEnv(tid, lvl, cache_dir=cache)
        try:
          ref = ProgTaskEnv(tid, 0)
          same = ref.tools() == env.tools() and ref.task.prompt == env.task.prompt
          ref.close()
          ok = same
          if not same:
            failures.append(f"{tid}@v{lvl}: instruction or tools differ from v0")
          for seed in seeds:
            r = check_instance(env, seed=seed, runtime=a.runtime)
            sizes.append(r["size"])
            good = r["noop"] and r["ptc"] and r["dtc"] and r["wrong"]
            ok = ok and good
            failures += [f"{tid}@v{lvl} seed {seed}: {n}" for n in r["notes"]]
          passed += int(ok)
        except Exception as e:  # a broken task is a failure, the audit goes on
          failures.append(f"{tid}@v{lvl}: {type(e).__name__}: {e}")
        finally:
          env.close()
      rows.append((lvl, passed, statistics.mean(s["db_kb"] for s in sizes) if sizes else 0.0,
                   statistics.mean(s["files"] for s in sizes) if sizes else 0.0,
                   statistics.mean(s["rows"] for s in sizes) if sizes else 0.0))
      print(f"  v{lvl}: {passed}/{len(ids)} tasks pass  ({time.time() - t0:.0f} s)", flush=True)
  print("\nlevel  tasks_passed  mean_db_kb  mean_files  mean_db_rows")
  for lvl, passed, kb, files, nrows in rows:
    print(f"v{lvl}     {passed:>3}/{len(ids):<3}      {kb:8.1f}    {files:8.1f}    {nrows:10.1f}")
  if failures:
    print(f"\n{len(failures)} FAILURES:")
    for f in failures:
      print("  " + f)
    return 1
  print(f"\nall checks passed ({time.time() - t0:.0f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
