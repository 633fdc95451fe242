"""PhGPO training and evaluation on TRAJECT-Bench: warm-up, GRPO with pheromone-guided sampling, held-out table.

Source: PhGPO, arXiv 2602.13691 (SPEC.md, PhGPO). One RL step:
  1. sample `rl.tasks_per_step` training tasks (only those within the curriculum's horizon);
  2. roll out M = `rl.rollouts_per_task` trajectories per task against the replay environment
     (`phgpo.classifier_rollout`); each decision takes the policy's top-K tools and samples from
     exp(log pi + beta log tau(prev, . | x)) at temperature T, then an argument template from tau_arg
     (`phgpo.objective.decide`); with probability p_tf (stage 2) the gold call is executed instead;
  3. reward R = match ratio of the executed tool sequence (config `rl.reward`), GRPO advantages per task;
  4. `rl.epochs` passes of lambda L_SL + (1 - lambda) L_PG - gamma H (`phgpo.objective.phgpo_loss`; plus an
     optional KL to the warm-up policy, `rl.kl_coef`);
  5. pheromone update from the scored trajectories: evaporation, deposit alpha * q, MAX-MIN clip, and
     memory-bank writes for the task-dependent pheromone (`phgpo.pheromone`, `phgpo.memory_bank`).

Modules: `problem` (data, graph, embeddings, policy), `steps` (train state, jit-compiled functions, one
update), `classifier_rollout` (episodes on the worker pool), `evaluation` (held-out metrics, table); this
module only runs the stages: build state, loop, write metrics and checkpoints.

Host/device split: the decision function and the update are jit-compiled pure functions over padded
arrays; the loop over turns and the environment calls are host Python, because the environment is an
external process in general (`common.envs.base.ToolEnv`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

import jax
import numpy as np
import tqdm

from common import checkpoint as ckpt_lib
from common import metric_writer
from phgpo import classifier_rollout as rollout_lib
from phgpo import curriculum
from phgpo import evaluation
from phgpo import problem as problem_lib
from phgpo import steps
from phgpo.problem import Problem
from phgpo.steps import Compiled, TrainState

RUN_KINDS = ("warmup", "grpo", "phgpo")


def _progress(total: int, initial: int, desc: str, enabled: bool):
  return tqdm.tqdm(total=total, initial=initial, desc=desc, disable=not enabled, dynamic_ncols=True,
                   leave=False)


def _write_json(path: str, obj: dict) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)


def _open_run(config, workdir: str, init: TrainState):
  """Checkpointer, train state (latest saved, else `init`), first step and metric writer of one run."""
  ck = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                             save_every=config.checkpoint.every)
  state, start = ck.restore_or_init(init)
  start = 0 if start is None else start
  writer = metric_writer.MetricWriter(workdir, resume_step=start, tensorboard=config.logging.tensorboard)
  return ck, steps.commit(state), start, writer


def _log_now(config, step: int, total: int) -> bool:
  return (step + 1) % config.logging.every == 0 or step + 1 == total


def run_warmup(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int,
               progress: bool = True) -> TrainState:
  """Stage 1: supervised next-tool learning on the gold trajectories of the training split.

  Saves the whole train state every `checkpoint.every` steps and at the end; resumes from the latest step
  when called again with the same workdir. Returns the final train state.
  """
  os.makedirs(workdir, exist_ok=True)
  wc = config.warmup
  state = steps.init_state(config, compiled.policy, problem, seed=seed, learning_rate=wc.learning_rate)
  ck, state, start, writer = _open_run(config, workdir, state)
  pairs = steps.gold_decisions(problem)
  bs = min(wc.batch_size, len(pairs))
  bar = _progress(wc.steps, start, f"warm-up seed {seed}", progress)
  for step in range(start, wc.steps):
    rng = np.random.default_rng([seed, 1, step])
    sel = pairs[rng.choice(len(pairs), size=bs, replace=False)]
    state, aux = steps.warmup_step(compiled, state, problem, sel, step)
    if _log_now(config, step, wc.steps):
      aux = jax.device_get(aux)
      writer.write(step + 1, {"warmup/" + k: v for k, v in aux.items()})
      bar.set_postfix(loss=f"{float(aux['loss']):.3f}", acc=f"{float(aux['accuracy']):.3f}")
    ck.maybe_save(step + 1, state, force=step + 1 == wc.steps)
    bar.update(1)
  bar.close()
  if ck.latest_step() != wc.steps:
    ck.save(wc.steps, state)
  writer.close()
  ck.close()
  return state


def run_rl(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int, init_params,
           beta_max: float, w_max: float, progress: bool = True, stop_after: int | None = None) -> TrainState:
  """Stages 2 and 3: mixed curriculum then GRPO with pheromone-guided sampling (beta_max = 0: plain GRPO).

  Args:
    init_params: the warm-up policy's parameters (also the KL reference when rl.kl_coef > 0).
    beta_max, w_max: pheromone weights reached at the end of the curriculum.
    stop_after: stop (after saving) once this many steps are done; used to test kill-and-resume.

  Returns:
    The final train state.
  """
  os.makedirs(workdir, exist_ok=True)
  rc, cc = config.rl, config.curriculum
  state = steps.init_state(config, compiled.policy, problem, seed=seed, learning_rate=rc.learning_rate,
                           params=init_params)
  ck, state, start, writer = _open_run(config, workdir, state)
  m = rc.rollouts_per_task
  envs = rollout_lib.make_envs(config, problem, rc.tasks_per_step * m)
  try:
    train_len = problem.gold_len[problem.train_idx]
    bar = _progress(rc.steps, start, f"{'phgpo' if beta_max > 0 else 'grpo'} seed {seed}", progress)
    for step in range(start, rc.steps):
      sv = curriculum.stage_values(
          step, curriculum_steps=cc.steps, lambda_start=cc.lambda_start, p_tf_start=cc.p_tf_start,
          horizon_start=cc.horizon_start, max_steps=config.env.max_steps, beta_max=beta_max, w_max=w_max)
      rng = np.random.default_rng([seed, 2, step])
      tasks = curriculum.tasks_within_horizon(problem.train_idx, train_len, rng, horizon=sv.horizon,
                                              count=rc.tasks_per_step)
      key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
      rb = rollout_lib.rollout(
          compiled, state.params, state.pheromone, problem, envs, np.repeat(tasks, m), key, beta=sv.beta,
          w=sv.w, temperature=config.sampling.temperature, p_tf=sv.p_tf, tf_rng=rng, reward_kind=rc.reward,
          success_threshold=config.eval.success_threshold)
      state, aux = steps.rl_step(compiled, state, problem, rb, group_ids=np.repeat(np.arange(len(tasks)), m),
                                 num_groups=len(tasks), sl_weight=sv.sl_weight, ref_params=init_params,
                                 step=step)
      if _log_now(config, step, rc.steps):
        aux = jax.device_get(aux)
        row = {f"rl/{k}": v for k, v in aux.items()}
        row.update({"rl/reward": float(rb.reward.mean()), "rl/match_ratio": float(rb.reward.mean())
                    if rc.reward == "match_ratio" else float("nan"), "rl/beta": sv.beta, "rl/w": sv.w,
                    "rl/p_tf": sv.p_tf, "rl/sl_weight": sv.sl_weight, "rl/horizon": sv.horizon,
                    "rl/stage": sv.stage, "rl/mean_length": float(rb.length.mean())})
        writer.write(step + 1, row)
        bar.set_postfix(loss=f"{float(aux['loss']):.3f}", match=f"{float(rb.reward.mean()):.3f}")
      ck.maybe_save(step + 1, state, force=step + 1 == rc.steps)
      bar.update(1)
      if stop_after is not None and step + 1 >= stop_after:
        ck.save(step + 1, state)
        break
  finally:
    envs.close()
  bar.close()
  writer.close()
  ck.close()
  return state


def run_seed(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int,
             progress: bool = True) -> dict:
  """Warm-up, then GRPO (beta = 0) and PhGPO from the same warm-up policy; held-out metrics of each.

  Each run's results are written to `<workdir>/seed_<s>/<run>/results.json`; a finished run is not
  repeated, an unfinished one resumes from its latest checkpoint.

  Returns:
    {run kind: metrics dict}.
  """
  out = {}
  base = os.path.join(workdir, f"seed_{seed}")
  wdir = os.path.join(base, "warmup")
  res_path = os.path.join(wdir, "results.json")
  warm = run_warmup(config, problem, compiled, wdir, seed=seed, progress=progress)
  if "warmup" in config.runs:
    if os.path.exists(res_path):
      out["warmup"] = json.load(open(res_path))
    else:
      out["warmup"] = evaluation.evaluate(config, compiled, warm.params, warm.pheromone, problem, beta=0.0,
                                          w=0.0, seed=seed)
      _write_json(res_path, out["warmup"])
  pc = config.pheromone
  for kind, beta_max, w_max in (("grpo", 0.0, 0.0), ("phgpo", pc.beta_max, pc.w_max)):
    if kind not in config.runs:
      continue
    rdir = os.path.join(base, kind)
    res_path = os.path.join(rdir, "results.json")
    if os.path.exists(res_path):
      out[kind] = json.load(open(res_path))
      continue
    t0 = time.time()
    st = run_rl(config, problem, compiled, rdir, seed=seed, init_params=warm.params,
                beta_max=beta_max, w_max=w_max, progress=progress)
    res = evaluation.evaluate(config, compiled, st.params, st.pheromone, problem, beta=beta_max, w=w_max,
                              seed=seed)
    if beta_max > 0:
      # The same policy decoded without the pheromone: what the network itself learned.
      res["policy_only"] = evaluation.evaluate(config, compiled, st.params, st.pheromone, problem, beta=0.0,
                                               w=0.0, seed=seed)
    res["train_seconds"] = time.time() - t0
    _write_json(res_path, res)
    out[kind] = res
  return out


def run(config, workdir: str, *, progress: bool = True, log: Callable[[str], None] = print) -> dict:
  """The main job: for each seed, warm-up / GRPO / PhGPO; prints and saves the held-out table and plot.

  Returns:
    {seed: {run kind: held-out metrics}}.
  """
  t0 = time.time()
  problem = problem_lib.prepare_problem(config)
  log(f"TRAJECT-Bench: {len(problem.tasks)} tasks ({len(problem.train_idx)} train, "
      f"{len(problem.eval_idx)} held out), {len(problem.tool_specs)} tools, "
      f"{int(problem.graph.edge_mask.sum())} graph edges; features ready in {time.time() - t0:.0f}s")
  compiled = Compiled(config, problem_lib.make_policy(config, problem), problem)
  results = {seed: run_seed(config, problem, compiled, workdir, seed=seed, progress=progress)
             for seed in config.seeds}
  table = evaluation.format_table(results, config.runs)
  with open(os.path.join(workdir, "results_table.txt"), "w") as f:
    f.write(table + "\n")
  _write_json(os.path.join(workdir, "results.json"), {str(s): r for s, r in results.items()})
  series = {f"{kind} s{seed}": os.path.join(workdir, f"seed_{seed}", kind, "metrics.jsonl")
            for seed in config.seeds for kind in ("grpo", "phgpo")}
  metric_writer.plot_curves(series, ["rl/reward", "rl/loss", "rl/entropy"],
                            os.path.join(workdir, "learning_curves.png"),
                            title="PhGPO vs GRPO on TRAJECT-Bench (training reward = match ratio)")
  log(table)
  log(f"total {time.time() - t0:.0f}s; table, results.json and learning_curves.png in {workdir}")
  return results


