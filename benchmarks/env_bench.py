"""Environment-layer benchmark: sandboxed process vs in-process, W = 1, 2, 4, in one run.

  python -m benchmarks.env_bench            # full (a few minutes: every ScienceWorld worker starts a JVM)
  python -m benchmarks.env_bench --quick    # smaller workload

For ScienceWorld (gold action sequences of `find-animal` variations) and the TRAJECT-Bench replay
environment (gold calls of Finance tasks), the same scripted gold policy runs through the same
RolloutDriver with workers that are either sandboxed MCP processes (common.env_client.EnvClient) or
the environment object in this process (common.env_client.InProcessEnv). Reported per setting:
  step_ms   mean wall time of one env step as the driver sees it (submit -> result);
  eps       episodes per second of the whole run (policy, parsing and resets included);
  start_s   time to start the W workers (not part of eps).
Ratios: sandboxed / in-process step latency, sandboxed / in-process episodes per second, and the
speed-up of W workers over one. `run(quick=False) -> dict` returns everything printed.
Machine note: the project machines have 2 cores, so W = 4 oversubscribes them.
"""

from __future__ import annotations

import json
import time

from benchmarks import _cli
from common.env_client import EnvSpec
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

WORKERS = (1, 2, 4)


def _scienceworld(quick: bool):
  spec = EnvSpec("common.envs.scienceworld_env:ScienceWorldToolEnv", {"env_step_limit": 100},
                 start_timeout_s=300)
  n = 2 if quick else 4

  def tasks(worker):
    return [f"find-animal/{v}" for v in worker.query("variations", task="find-animal",
                                                        split="train")[:n]]

  def gold(worker, task):
    return [{"name": "action", "arguments": {"action": a}}
            for a in worker.query("gold_actions", task_id=task)]

  return spec, tasks, gold, None


def _replay(quick: bool):
  from phgpo.replay_env import match_reward, replay_env_spec
  spec = replay_env_spec(domains=["Finance"], max_steps=20)
  n = 8 if quick else 24

  def tasks(worker):
    return worker.query("task_list")[:n]

  def gold(worker, task):
    return worker.query("gold_calls", task_id=task)

  return spec, tasks, gold, match_reward


def _one(spec, tasks_fn, gold_fn, reward_fn, *, in_process: bool, workers: int,
         group_size: int) -> dict:
  t0 = time.monotonic()
  pool = WorkerPool(spec, workers, in_process=in_process, step_timeout_s=300)
  start_s = time.monotonic() - t0
  try:
    w0 = pool.workers[0]
    tasks = tasks_fn(w0)
    gold = {t: gold_fn(w0, t) for t in tasks}
    tok = ByteTokenizer()

    def script(req):
      calls = gold[req.task_id]
      return json.dumps(calls[req.turn]) if req.turn < len(calls) else "finished"

    driver = RolloutDriver(pool, ScriptedPolicy(script, tok), tok,
                           config=RolloutConfig(group_size=group_size, max_turns=200,
                                                step_timeout_s=300, max_context_tokens=10**7,
                                                max_observation_chars=4000),
                           **({"reward_fn": reward_fn} if reward_fn else {}))
    trajs = driver.run(tasks)
    st = driver.stats
    errors = sum(t.termination == "env_error" for t in trajs)
    return {"start_s": start_s, "step_ms": 1000 * st["mean_step_s"], "eps": st["episodes_per_s"],
            "episodes": st["episodes"], "steps": st["env_steps"], "env_errors": errors,
            "mean_reward": sum(t.reward for t in trajs) / len(trajs)}
  finally:
    pool.close()


def run(quick: bool = False) -> dict:
  """Runs every setting once; returns {env: {mode: {W: numbers}}, 'ratios': {...}}."""
  out: dict = {}
  envs = {"scienceworld": _scienceworld, "replay": _replay}
  group = 1 if quick else 2
  for name, make in envs.items():
    try:
      spec, tasks_fn, gold_fn, reward_fn = make(quick)
    except FileNotFoundError as e:  # replay data missing
      out[name] = {"skipped": str(e).splitlines()[0]}
      continue
    res = {}
    for mode in ("sandboxed", "in-process"):
      res[mode] = {}
      for w in WORKERS:
        res[mode][w] = _one(spec, tasks_fn, gold_fn, reward_fn, in_process=mode == "in-process", workers=w,
                            group_size=group)
        r = res[mode][w]
        print(f"{name:13s} {mode:10s} W={w}  step {r['step_ms']:8.2f} ms  {r['eps']:7.2f} episodes/s  "
              f"start {r['start_s']:6.2f} s  ({r['episodes']} episodes, {r['steps']} steps, "
              f"reward {r['mean_reward']:.2f}, env errors {r['env_errors']})", flush=True)
    out[name] = res
  ratios = {}
  for name, res in out.items():
    if "skipped" in res:
      continue
    sb, ip = res["sandboxed"], res["in-process"]
    ratios[name] = {
        w: {"step_latency_sandboxed_over_inprocess": sb[w]["step_ms"] / ip[w]["step_ms"],
            "eps_sandboxed_over_inprocess": sb[w]["eps"] / ip[w]["eps"],
            "eps_speedup_over_W1_sandboxed": sb[w]["eps"] / sb[1]["eps"],
            "eps_speedup_over_W1_inprocess": ip[w]["eps"] / ip[1]["eps"]}
        for w in WORKERS}
  out["ratios"] = ratios
  print("\nratios (sandboxed process vs in-process; W workers vs 1):")
  for name, per_w in ratios.items():
    for w, r in per_w.items():
      print(f"  {name:13s} W={w}: step latency x{r['step_latency_sandboxed_over_inprocess']:.2f}, "
            f"episodes/s x{r['eps_sandboxed_over_inprocess']:.2f}; speed-up over W=1: sandboxed "
            f"x{r['eps_speedup_over_W1_sandboxed']:.2f}, in-process x{r['eps_speedup_over_W1_inprocess']:.2f}")
  return out


def main() -> None:
  _cli.main(run, __doc__)


if __name__ == "__main__":
  main()
