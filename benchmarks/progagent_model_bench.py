"""ProgAgent with the model in the loop: wall time per solved episode, PTC vs DTC, at v0..v3, in one run.

  python -m benchmarks.progagent_model_bench            # the paradigm table's 4 tasks, 3 held-out seeds, 2 samples
  python -m benchmarks.progagent_model_bench --quick    # 3 tasks, 1 held-out seed, 20 SFT updates

A DTC turn costs a model call; a PTC program replaces many of them. So the comparison the paper makes is
the time to solve an episode with a model generating every action, not the runtime's cost per tool call
(benchmarks/progagent_bench.py). Here one small Qwen2-shaped model is trained from scratch by SFT on the
oracle episodes of *both* harnesses (configs/progagent.py:paradigms' tasks, model and SFT settings; training
seeds 0..2, v0..v3), then, for each level and harness, eval rollouts of the held-out seeds run through the
same driver as training (progagent.evaluation.run_eval_rollouts: batched generation, PTC programs in-process)
and are timed end to end (generation, tool calls, programs). Printed per level and harness: episodes, solved
(R = 1), wall seconds, generation seconds (wall minus the environment's step time), seconds per solved
episode; then the ratios DTC / PTC of the time per solved episode (above 1: PTC solves episodes faster) and of
the time per episode. A harness that solves nothing at a level has no time per solved episode (n/a); when DTC
solves none and PTC some, the ratio's lower bound is printed (DTC's wall time as if it had solved one episode).
Timings on shared 2-core machines are noisy: compare within one run.
"""

from __future__ import annotations

import shutil
import tempfile
import time

import jax
import ml_collections

from benchmarks import _cli
from configs import progagent as progagent_config
from progagent import evaluation
from progagent import sft_data
from progagent import tasks as tasks_lib
from progagent import train

MODES = ("dtc", "ptc")


def bench_config(quick: bool):
  """The paradigms config, trained on both harnesses at once."""
  c = progagent_config.get_config("paradigms")
  c.paradigms.modes = ()
  c.sft.oracle_modes = MODES
  c.eval.k = (1,)
  if quick:
    c.tasks = tuple(c.tasks[:3])
    c.sft.steps = 20
    c.sft.oracle_seeds = (0, 1)
    c.eval.seeds = (1000,)
  return c


def run(quick: bool = False) -> dict:
  """Trains the policy, times the rollouts; returns {'levels': {level: {mode: {...}}}, 'ratios': {level: r}}."""
  c = bench_config(quick)
  train.check_config(c)
  workdir = tempfile.mkdtemp(prefix="pa-model-bench-")
  cache = tempfile.mkdtemp(prefix="pa-model-bench-states-")
  out: dict = {"tasks": list(c.tasks), "seeds": list(c.eval.seeds), "samples": c.eval.samples, "levels": {},
               "ratios": {}}
  try:
    task_ids = tasks_lib.select_tasks(tuple(c.tasks))
    policy = train.load_policy(c, task_ids)
    t0 = time.perf_counter()
    examples = sft_data.sft_examples(c, policy.chat, task_ids, cache_dir=cache)
    state = train.run_sft(c, policy, examples, workdir)
    out["sft_s"] = time.perf_counter() - t0
    print(f"SFT on {len(examples)} oracle episodes (DTC and PTC) of {len(task_ids)} tasks: {c.sft.steps} updates, "
          f"{out['sft_s']:.0f} s", flush=True)
    for lvl in c.eval.levels:
      row = {}
      for mode in MODES:
        lc = ml_collections.ConfigDict(c.to_dict())
        lc.mode = mode
        lc.eval.levels = (lvl,)
        t1 = time.perf_counter()
        trajs = evaluation.run_eval_rollouts(lc, policy, state.params, task_ids, mode=mode,
                                             key=jax.random.key(7), cache_dir=cache)
        wall = time.perf_counter() - t1
        env_s = sum(tn.env_seconds for t in trajs for tn in t.turns)
        solved = sum(t.reward >= 1.0 for t in trajs)
        row[mode] = {"episodes": len(trajs), "solved": int(solved), "wall_s": wall, "env_s": env_s,
                     "s_per_solved": wall / solved if solved else None,
                     "turns": sum(t.num_turns for t in trajs) / len(trajs)}
      out["levels"][lvl] = row
      out["ratios"][lvl] = level_ratios(row)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
  print(f"\nper level and harness ({len(task_ids)} tasks x {len(c.eval.seeds)} held-out seeds x {c.eval.samples} "
        "samples; wall = generation + environment):")
  print(f"{'level':5} {'harness':7} {'episodes':>8} {'solved':>6} {'turns':>5} {'wall_s':>7} {'env_s':>6} "
        f"{'s/solved':>8}")
  for lvl, row in out["levels"].items():
    for mode, r in row.items():
      sps = f"{r['s_per_solved']:.2f}" if r["s_per_solved"] else "n/a"
      print(f"v{lvl:<4} {mode:7} {r['episodes']:8d} {r['solved']:6d} {r['turns']:5.1f} {r['wall_s']:7.1f} "
            f"{r['env_s']:6.1f} {sps:>8}")
  print("\nratios DTC / PTC (above 1: PTC faster):")
  for lvl, r in out["ratios"].items():
    per_solved = (f"x{r['per_solved']:.2f}" if r["per_solved"] is not None else
                  f"> x{r['per_solved_bound']:.1f} (DTC solved none; bound as if it had solved one)"
                  if r["per_solved_bound"] is not None else "n/a (PTC solved none)")
    print(f"  v{lvl}: wall time per solved episode {per_solved}; wall time per episode x{r['per_episode']:.2f}")
  return out


def level_ratios(row: dict) -> dict:
  """DTC / PTC ratios of one level: per solved episode (None unless both solved some), its lower bound when
  DTC solved none and PTC some (DTC's wall time as if one episode had been solved), and per episode."""
  d, p = row["dtc"], row["ptc"]
  per_solved = d["s_per_solved"] / p["s_per_solved"] if d["s_per_solved"] and p["s_per_solved"] else None
  bound = d["wall_s"] / p["s_per_solved"] if not d["solved"] and p["s_per_solved"] else None
  return {"per_solved": per_solved, "per_solved_bound": bound,
          "per_episode": (d["wall_s"] / d["episodes"]) / (p["wall_s"] / p["episodes"])}


def main() -> None:
  _cli.main(run, __doc__)


if __name__ == "__main__":
  main()
