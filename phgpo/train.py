"""PhGPO training and evaluation on TRAJECT-Bench: warm-up, GRPO with pheromone-guided sampling, the tables.

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

Runs (config `runs`; `RUN_SPECS` says what each changes): 'nearest' (no training: copy the chain of the most
similar training query), 'warmup' (stage 1 only), 'grpo_vanilla' (GRPO from the warm-up, no curriculum, beta
= 0), 'grpo' (the curriculum with beta = 0), 'phgpo', and the ablation rows 'no_curriculum', 'rho0',
'agnostic_only', 'frozen', plus 'authors' (PhGPO with every schedule choice of the authors' trainer). Every run of one (split, seed) starts from the same warm-up policy; each split
(config `splits`: 'random', 'chain') has its own problem (the graph is built from its training tasks).

Modules: `problem` (data, graph, embeddings, policy), `steps` (train state, jit-compiled functions, one
update), `classifier_rollout` (episodes on the worker pool), `evaluation` (held-out metrics, tables), `analysis`
(pictures); this module only runs the stages: build state, loop, write metrics, checkpoints and results.

Several processes (issue 28; common/distributed.py): each step's groups are cut into sampling blocks of
`rl.block_tasks` tasks (evaluations: `eval.block_tasks`), block b keyed fold_in(key, b); each process rolls out
its slice of blocks on its own replay workers and the rollouts are all-gathered
(`phgpo.classifier_rollout.rollout_blocks`), so the update, the pheromone and memory bank, the curriculum and
the first-success records are computed identically on every process; only the primary process writes files.

Host/device split: the decision function and the update are jit-compiled pure functions over padded
arrays; the loop over turns and the environment calls are host Python, because the environment is an
external process in general (`common.envs.base.ToolEnv`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable

import jax
import ml_collections
import numpy as np

from common import config_util
from common import distributed
from common import env_pool
from common import io
from common import provenance
from common.lm import stages
from phgpo import catalogue as catalogue_lib
from phgpo import classifier_rollout as rollout_lib
from phgpo import curriculum
from phgpo import data as data_lib
from phgpo import evaluation
from phgpo import pheromone as pher_lib
from phgpo import problem as problem_lib
from phgpo import retrieval_policy
from phgpo import steps
from phgpo import warmup
from phgpo.runs import RUN_SPECS, TABLE_RUNS, run_config
from phgpo.problem import Problem
from phgpo.steps import Compiled, TrainState

SL_STEPS = ("teacher_forced", "all")
DATA_NAMES = {"traject_bench": "TRAJECT-Bench", "authors_graph": "the PhGPO authors' graph + TRAJECT-Bench queries"}
POLICY_KINDS = ("encoder_mlp", "retrieval_mlp", "lm")   # config policy.kind (phgpo.problem.make_policy)

# The launcher's registry entry (experiments/train.py). Keys that change where and how fast a run computes, not
# what it computes (a workdir may resume with other values), and keys that only choose and summarise the runs a
# table reports (every run is a folder <split>/seed_<s>/<run>, so other rows, seeds or splits reuse it).
RESUME_FREE = stages.SCALE_KEYS + env_pool.BACKEND_KEYS
REPORT_ONLY = ("runs", "table", "reference", "primary", "gate.", "stats.", "seeds", "splits")
# Keys added after workdirs were written, with the value that reproduces what those workdirs computed.
ADDED_KEYS = {"rl.block_tasks": 0, "eval.block_tasks": 0, "data.format": "traject_bench", "data.graph_path": "",
              "graph.min_trajectories": 10, "pheromone.init_graph": "", "ablation.init_graph": "prior"}


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the config key of a bad value; splits comma-separated run and split lists in place.

  Checks `runs` (names of `RUN_SPECS`, no repeats), `splits` ('random', 'chain'), `seeds` (distinct
  non-negative integers), `reference` (a run name, or ''), `gate.*`, `rl.sl_steps`, `rl.tis_cap`, the
  curriculum floors, `ablation.freeze_at`, `logging.pheromone_snapshots` and `env.backend`.
  """
  env_pool.backend_options(config.env)   # env.backend
  kind = config.policy.get("kind", "")
  if kind not in POLICY_KINDS:
    raise ValueError(f"config policy.kind={kind!r} is not one of {list(POLICY_KINDS)}")
  if kind == "lm":
    stages.check_model_config(config.model, config.get("mesh", None), model_key="model")
  if kind == "retrieval_mlp":
    ks = tuple(config.policy.vote_ks)
    if not ks or any(int(k) != k or k < 1 for k in ks):
      raise ValueError(f"config policy.vote_ks must be neighbour counts >= 1, e.g. (1, 3, 5); got {ks}")
    retrieval_policy.leakage_mode(config.policy.leakage, "random")   # names a bad policy.leakage
  stages.check_optim_config(config.optim)
  stages.check_rl_config(config.rl, rl_key="rl")
  warmup.check_warmup_config(config.warmup)
  with config.unlocked():
    config.runs = config_util.split_commas(config.runs)
    config.splits = config_util.split_commas(config.splits)
    config.seeds = config_util.split_commas(config.seeds)
  bad = [r for r in config.runs if r not in RUN_SPECS]
  if bad or not config.runs:
    raise ValueError(f"config runs holds unknown run names {bad or '(none given)'}; valid: {list(RUN_SPECS)}")
  if len(set(config.runs)) != len(config.runs):
    raise ValueError(f"config runs repeats a run: {list(config.runs)}")
  bad = [s for s in config.splits if s not in data_lib.SPLITS]
  if bad or not config.splits or len(set(config.splits)) != len(config.splits):
    raise ValueError(f"config splits must be distinct names out of {list(data_lib.SPLITS)}, got {list(config.splits)}")
  with config.unlocked():
    config.seeds = config_util.seed_list(config.seeds)
  if config.reference and config.reference not in RUN_SPECS:
    raise ValueError(f"config reference {config.reference!r} is not a run name; valid: {list(RUN_SPECS)}, or '' for "
                     "no paired differences (a reference outside config runs gives none either)")
  g = config.get("gate", None)
  if g is not None and (g.policy or g.baseline):
    bad = [k for k in ("policy", "baseline") if g[k] not in RUN_SPECS]
    if bad or not float(g.tolerance) >= 0:
      raise ValueError(f"config gate.policy and gate.baseline must be run names (e.g. 'warmup', 'vote3'; valid: "
                       f"{list(RUN_SPECS)}) and gate.tolerance >= 0 points; got {g.policy!r}, {g.baseline!r}, "
                       f"{g.tolerance}")
  if config.rl.sl_steps not in SL_STEPS:
    raise ValueError(f"config rl.sl_steps must be one of {SL_STEPS}, got {config.rl.sl_steps!r}")
  for section in ("rl", "eval"):
    key, v = f"{section}.block_tasks", config[section].get("block_tasks", 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
      raise ValueError(f"config {key} must be an integer >= 0 (tasks per sampling block; 0: one block), got {v!r}")
  if not config.rl.tis_cap >= 0:
    raise ValueError(f"config rl.tis_cap must be >= 0 (0 = no importance weight), got {config.rl.tis_cap}")
  cc = config.curriculum
  for key in ("lambda_floor", "p_tf_floor", "beta_start_fraction"):
    if not 0.0 <= cc[key] <= 1.0:
      raise ValueError(f"config curriculum.{key} must lie in [0, 1], got {cc[key]}")
  if "frozen" in config.runs and not 0 <= config.ablation.freeze_at <= config.rl.steps:
    raise ValueError(f"config ablation.freeze_at must lie in [0, rl.steps = {config.rl.steps}], got "
                     f"{config.ablation.freeze_at}")
  snaps = list(config.logging.pheromone_snapshots)
  if any(int(k) != k or not 0 <= k <= config.rl.steps for k in snaps):
    raise ValueError(f"config logging.pheromone_snapshots must be RL steps in [0, {config.rl.steps}], got {snaps}")
  pc = config.pheromone
  if not 0.0 <= pc.sim_threshold <= 1.0:
    raise ValueError(f"config pheromone.sim_threshold must lie in [0, 1], got {pc.sim_threshold}")
  if not pc.kappa > 0 or int(pc.bank_per_edge) < 1 or int(pc.top_k_similar) < 1:
    raise ValueError(f"config pheromone.kappa must be > 0 and pheromone.bank_per_edge, pheromone.top_k_similar >= 1; "
                     f"got {pc.kappa}, {pc.bank_per_edge}, {pc.top_k_similar}")
  if pc.bank_seed not in steps.BANK_SEEDS:
    raise ValueError(f"config pheromone.bank_seed must be one of {steps.BANK_SEEDS}, got {pc.bank_seed!r}")
  if pc.bank_leakage not in steps.BANK_LEAKAGE:
    raise ValueError(f"config pheromone.bank_leakage must be one of {steps.BANK_LEAKAGE}, got {pc.bank_leakage!r}")
  if config.data.get("format", "traject_bench") not in catalogue_lib.FORMATS:
    raise ValueError(f"config data.format must be one of {list(catalogue_lib.FORMATS)}, got {config.data.format!r}")
  mt = config.graph.get("min_trajectories", 0)
  if isinstance(mt, bool) or not isinstance(mt, int) or mt < 0:
    raise ValueError(f"config graph.min_trajectories must be an integer >= 0, got {mt!r}")
  for key, value in (("pheromone.init_graph", pc.get("init_graph", "")),
                     ("ablation.init_graph", config.ablation.get("init_graph", "prior"))):
    if value not in steps.INIT_GRAPHS:
      raise ValueError(f"config {key} must be one of {list(steps.INIT_GRAPHS)}, got {value!r}")
  if pc.dep_units not in pher_lib.DEP_UNITS:
    raise ValueError(f"config pheromone.dep_units must be one of {pher_lib.DEP_UNITS}, got {pc.dep_units!r}")
  if int(pc.freeze_at) < -1:
    raise ValueError(f"config pheromone.freeze_at must be -1 (never) or an RL step >= 0, got {pc.freeze_at}")
  if config.rl.reward not in ("match_ratio", "success", "exact"):
    raise ValueError(f"config rl.reward must be 'match_ratio', 'success' or 'exact', got {config.rl.reward!r}")
  if cc.lambda_floor > 0 and config.rl.sl_steps == "teacher_forced" and cc.p_tf_floor == 0:
    raise ValueError("config curriculum.lambda_floor > 0 keeps an SL weight in stage 3, but stage 3 has no "
                     "teacher-forced step with curriculum.p_tf_floor = 0 and rl.sl_steps = 'teacher_forced', so it "
                     "would only scale the policy gradient by 1 - lambda; set rl.sl_steps=all or "
                     "curriculum.p_tf_floor > 0 (the authors: 0.05)")
  if kind == "lm":
    stages.check_checkpoint(config.model)


def _write_json(path: str, obj: dict) -> None:
  """Writes `obj` as sorted JSON; several processes: only the primary writes (common/distributed.py)."""
  if distributed.is_primary():
    io.write_json(path, obj, sort_keys=True)


def _snapshot(config, workdir: str, step: int, pher) -> None:
  """Writes the effective task-agnostic pheromone f32[N+1, N] after `step` RL updates to
  `<workdir>/pheromone/tau_step_<step>.npy` when `step` is one of config `logging.pheromone_snapshots`."""
  if step not in tuple(config.logging.pheromone_snapshots) or not distributed.is_primary():
    return
  folder = os.path.join(workdir, "pheromone")
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f"tau_step_{step}.npy")
  tau = np.asarray(jax.device_get(pher_lib.effective_tau(pher, tau_min=config.pheromone.tau_min)), np.float32)
  with io.atomic_write(path, "wb") as f:
    np.save(f, tau)


def pheromone_digest(pher) -> str:
  """sha256 (hex) over every array of a PheromoneState (task-agnostic tau, argument pheromone, memory bank), in
  leaf order, with each leaf's dtype and shape: equal digests mean bit-identical pheromone. A multi-process run
  prints it on every process (issue 28: the host-side state is the same on all of them)."""
  h = hashlib.sha256()
  for leaf in jax.tree_util.tree_leaves(jax.device_get(pher)):
    a = np.ascontiguousarray(np.asarray(leaf))
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def first_success_summary(first: dict[str, int], visited) -> dict:
  """{'median_steps': median RL step (1-based) of each visited task's first successful rollout, or None;
  'fraction': share of visited training tasks with a successful rollout; 'visited': count}.

  Args:
    first: task id -> RL step (1-based) of its first successful rollout without a teacher-forced call.
    visited: task ids rolled out at least once (any iterable; a dict's keys count).
  """
  visited = set(visited)
  hits = [first[t] for t in visited if t in first]
  return {"median_steps": float(np.median(hits)) if hits else None,
          "fraction": len(hits) / len(visited) if visited else 0.0, "visited": len(visited)}


def run_rl(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int, init_params,
           progress: bool = True, stop_after: int | None = None, desc: str = "rl") -> TrainState:
  """Stages 2 and 3: the mixed curriculum, then GRPO with pheromone-guided sampling.

  The run's pheromone weights are its config's `pheromone.beta_max` and `pheromone.w_max` (0: plain GRPO; see
  run_config). The pheromone stops changing after `pheromone.freeze_at` RL steps when that is >= 0. Writes
  the effective pheromone at the steps of `logging.pheromone_snapshots`, and `first_success.json`: for each
  training task visited (and the step of its first visit), the RL step (1-based) of its first rollout with match
  ratio >= `eval.success_threshold` and no teacher-forced call (so rows with and without the curriculum's
  teacher forcing compare the policy's own successes). On resume, entries after the checkpoint are dropped.

  Args:
    config: the run's config (from run_config).
    init_params: the warm-up policy's parameters (also the KL reference when rl.kl_coef > 0).
    stop_after: stop (after saving) once this many steps are done; used to test kill-and-resume.
    desc: progress-bar label.

  Returns:
    The final train state.
  """
  os.makedirs(workdir, exist_ok=True)
  rc, cc, pc = config.rl, config.curriculum, config.pheromone
  state = steps.init_state(config, compiled.policy, problem, seed=seed, learning_rate=rc.learning_rate,
                           params=init_params)
  if len(problem.train_idx) == 0:   # nothing to roll out: the pheromone stays at its start (the graph prior)
    _write_json(os.path.join(workdir, "first_success.json"), {"first": {}, "visited": {}})
    return steps.place(state, compiled.policy)
  stage = warmup.open_run(config, workdir, state, compiled.policy)
  ck, state, start, writer = stage.checkpointer, stage.state, stage.start, stage.writer
  fs_path = os.path.join(workdir, "first_success.json")
  fs = json.load(open(fs_path)) if start > 0 and os.path.exists(fs_path) else {"first": {}, "visited": {}}
  # Steps after the checkpoint are replayed: forget what they recorded.
  first = {t: s for t, s in fs["first"].items() if s <= start}
  visited = {t: s for t, s in fs["visited"].items() if s <= start}
  m = rc.rollouts_per_task
  block_tasks = int(rc.get("block_tasks", 0))
  envs = rollout_lib.make_envs(config, problem, rollout_lib.block_slots(rc.tasks_per_step, m, block_tasks))
  try:
    train_len = problem.gold_len[problem.train_idx]
    bar = warmup.progress_bar(rc.steps, start, f"{desc} seed {seed}", progress)
    for step in range(start, rc.steps):
      if pc.beta_max > 0:
        _snapshot(config, workdir, step, state.pheromone)
      sv = curriculum.stage_values(
          step, curriculum_steps=cc.steps, lambda_start=cc.lambda_start, p_tf_start=cc.p_tf_start,
          horizon_start=cc.horizon_start, max_steps=config.env.max_steps, beta_max=pc.beta_max, w_max=pc.w_max,
          lambda_floor=cc.lambda_floor, p_tf_floor=cc.p_tf_floor, beta_start_fraction=cc.beta_start_fraction)
      rng = np.random.default_rng([seed, 2, step])
      tasks = curriculum.tasks_within_horizon(problem.train_idx, train_len, rng, horizon=sv.horizon,
                                              count=rc.tasks_per_step)
      key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
      rb = rollout_lib.rollout_blocks(
          compiled, state.params, state.pheromone, problem, envs, tasks, key, group_size=m,
          block_tasks=block_tasks, tf_rng=rng, tf_seed=(seed, 2, step), beta=sv.beta, w=sv.w,
          temperature=config.sampling.temperature, p_tf=sv.p_tf, reward_kind=rc.reward,
          success_threshold=config.eval.success_threshold)
      frozen = 0 <= pc.freeze_at <= step
      state, aux = steps.rl_step(compiled, state, problem, rb, group_ids=np.repeat(np.arange(len(tasks)), m),
                                 num_groups=len(tasks), sl_weight=sv.sl_weight, ref_params=init_params,
                                 step=step, frozen=frozen)
      mr = rollout_lib.score_trajectories(rb.tools, rb.length, problem.gold_tools[rb.task],
                                          problem.gold_len[rb.task], kind="match_ratio",
                                          horizon=problem.gold_tools.shape[1])
      own = ~rb.sl_mask.any(axis=1)   # no teacher-forced call
      for i, t in enumerate(rb.task):
        tid = problem.tasks[int(t)].task_id
        visited.setdefault(tid, step + 1)
        if own[i] and mr[i] >= config.eval.success_threshold and tid not in first:
          first[tid] = step + 1
      _write_json(fs_path, {"first": first, "visited": visited})
      if warmup.log_now(config, step, rc.steps):
        aux = jax.device_get(aux)
        row = {f"rl/{k}": v for k, v in aux.items()}
        row.update({"rl/reward": float(rb.reward.mean()), "rl/match_ratio": float(mr.mean()), "rl/beta": sv.beta,
                    "rl/w": sv.w, "rl/p_tf": sv.p_tf, "rl/sl_weight": sv.sl_weight, "rl/horizon": sv.horizon,
                    "rl/stage": sv.stage, "rl/mean_length": float(rb.length.mean()), "rl/frozen": float(frozen)})
        writer.write(step + 1, row)
        bar.set_postfix(loss=f"{float(aux['loss']):.3f}", match=f"{float(mr.mean()):.3f}")
      ck.maybe_save(step + 1, state, force=step + 1 == rc.steps)
      bar.update(1)
      if stop_after is not None and step + 1 >= stop_after:
        ck.save(step + 1, state)
        break
    else:
      if pc.beta_max > 0:
        _snapshot(config, workdir, rc.steps, state.pheromone)
  finally:
    envs.close()
  bar.close()
  writer.close()
  ck.close()
  return state


class _CompiledCache:
  """One `Compiled` per distinct pheromone/loss hyper-parameter set (runs differing only in beta, w, the
  curriculum or freezing share one; 'rho0' gets its own, since the update binds rho)."""

  def __init__(self, policy, problem: Problem):
    self.policy, self.problem, self.cache = policy, problem, {}

  @staticmethod
  def _key(cfg) -> str:
    keep = {k: v for k, v in cfg.pheromone.to_dict().items()
            if k not in ("beta_max", "w_max", "freeze_at", "init_graph")}   # init_graph: the start state only
    return json.dumps([keep, cfg.rl.to_dict(), cfg.sampling.to_dict()], sort_keys=True)

  def put(self, cfg, compiled: Compiled) -> None:
    self.cache[self._key(cfg)] = compiled

  def get(self, cfg) -> Compiled:
    key = self._key(cfg)
    if key not in self.cache:
      self.cache[key] = Compiled(cfg, self.policy, self.problem)
    return self.cache[key]


def _strip(res: dict) -> dict:
  """A results dict without its per-task lists (for the summary files)."""
  out = {k: v for k, v in res.items() if k != "per_task"}
  for sub in evaluation.SUB_ROWS:
    if isinstance(out.get(sub), dict):
      out[sub] = _strip(out[sub])
  return out


def _with_policy(config, kind: str) -> ml_collections.ConfigDict:
  """`config` with policy.kind = kind (the warm-up of a run whose RUN_SPECS entry names another policy)."""
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.policy.kind = kind
  cfg.lock()
  return cfg


def regime_gate(config, results: dict) -> str | None:
  """The regime check printed before a seed's RL runs (config `gate`): the trained policy `gate.policy` against
  the training-free row `gate.baseline` on held-out match ratio and exact match (percent).

  PASS when the policy's match ratio is at least the baseline's minus `gate.tolerance` (points): the RL rows
  then start from a policy as good as retrieval, the regime in which "does the pheromone help RL" can be
  answered (issue 24). FAIL says so and that no pheromone row is to be read as an answer; the runs go on.
  Returns None when `gate.policy` is '' (no gate) or either row is not among the results yet.
  """
  g = config.get("gate", None)
  if g is None or not g.policy or g.policy not in results or g.baseline not in results:
    return None
  pol, base = results[g.policy], results[g.baseline]
  d = 100 * (pol["match_ratio"] - base["match_ratio"])
  ok = d >= -float(g.tolerance)
  verdict = ("PASS: RL starts from a policy as good as retrieval" if ok else
             "FAIL: the policy is below retrieval; no pheromone row of this seed answers the question")
  return (f"regime gate: {g.policy} MR {100 * pol['match_ratio']:.2f} (exact {100 * pol['exact_match']:.2f}) vs "
          f"{g.baseline} MR {100 * base['match_ratio']:.2f} (exact {100 * base['exact_match']:.2f}): "
          f"{d:+.2f} points, tolerance {float(g.tolerance):.2f}: {verdict}")


def run_seed(config, problem: Problem, compiled: _CompiledCache | Compiled, workdir: str, *, seed: int,
             progress: bool = True, log: Callable[[str], None] = print) -> dict:
  """The runs of config `runs` for one seed of one split, all RL runs of one policy kind from the same warm-up.

  Each run's held-out metrics and per-task predictions go to `<workdir>/seed_<s>/<run>/results.json`; a
  finished run is not repeated, an unfinished one resumes from its latest checkpoint. A run whose RUN_SPECS
  entry names another `policy` (e.g. 'phgpo_encoder') starts from that policy's own warm-up, kept in
  seed_<s>/warmup_<kind>.

  Returns:
    {run name: metrics dict (`phgpo.evaluation.evaluate`'s, plus 'first_success' and 'train_seconds' for RL
    runs, 'policy_only' for runs decoded with the pheromone, and, with config `eval.test_pheromone`,
    'test_pheromone' for runs trained with beta = 0: the same policy decoded with the config's pheromone)}.
  """
  if isinstance(compiled, _CompiledCache):
    cache = compiled
  else:
    cache = _CompiledCache(compiled.policy, problem)
    cache.put(config, compiled)
  caches = {config.policy.kind: cache}
  warms: dict = {}
  base = os.path.join(workdir, f"seed_{seed}")

  def cache_of(cfg) -> _CompiledCache:
    kind = cfg.policy.kind
    if kind not in caches:
      caches[kind] = _CompiledCache(problem_lib.make_policy(cfg, problem), problem)
    return caches[kind]

  def warm_of(kind: str):
    """(warm-up state, its Compiled) of a policy kind; the config's own kind warms up in seed_<s>/warmup."""
    if kind not in warms:
      cfg = config if kind == config.policy.kind else _with_policy(config, kind)
      comp = cache_of(cfg).get(cfg)
      name = "warmup" if kind == config.policy.kind else f"warmup_{kind}"
      warm = warmup.run_warmup(cfg, problem, comp, os.path.join(base, name), seed=seed, progress=progress)
      warms[kind] = (warm, comp)
    return warms[kind]

  out, gated = {}, False
  for run in config.runs:
    if not gated and RUN_SPECS[run]["kind"] == "rl":
      gated = True
      line = regime_gate(config, out)
      if line is not None:
        log(f"seed {seed}: {line}")
    rdir = os.path.join(base, run)
    res_path = os.path.join(rdir, "results.json")
    if os.path.exists(res_path):
      with open(res_path) as f:
        out[run] = json.load(f)
      continue
    spec = RUN_SPECS[run]
    os.makedirs(rdir, exist_ok=True)
    if spec["kind"] in ("nearest", "vote"):
      if len(problem.train_idx) == 0:
        log(f"seed {seed} {run}: no training query to copy: every held-out task gets the empty prediction")
        res = evaluation.empty_prediction(problem, success_threshold=config.eval.success_threshold)
      elif spec["kind"] == "nearest":
        res = evaluation.nearest_query(problem, success_threshold=config.eval.success_threshold)
      else:
        res = evaluation.vote_query(problem, spec["k"], success_threshold=config.eval.success_threshold)
      _write_json(res_path, res)
      out[run] = res
      continue
    if spec["kind"] == "warmup":
      warm, base_compiled = warm_of(spec.get("policy", config.policy.kind))
      res = evaluation.evaluate(config, base_compiled, warm.params, warm.pheromone, problem, beta=0.0, w=0.0,
                                seed=seed)
    else:
      cfg = run_config(config, run)
      warm, _ = warm_of(cfg.policy.kind)
      comp = cache_of(cfg).get(cfg)
      t0 = time.time()
      st = run_rl(cfg, problem, comp, rdir, seed=seed, init_params=warm.params, progress=progress, desc=run)
      log(f"seed {seed} {run}: pheromone sha256 {pheromone_digest(st.pheromone)[:16]} (process "
          f"{jax.process_index()} of {jax.process_count()})")
      pc = cfg.pheromone
      res = evaluation.evaluate(cfg, comp, st.params, st.pheromone, problem, beta=pc.beta_max, w=pc.w_max,
                                seed=seed)
      if pc.beta_max > 0:
        # The same policy decoded without the pheromone: what the network itself learned.
        res["policy_only"] = evaluation.evaluate(cfg, comp, st.params, st.pheromone, problem, beta=0.0, w=0.0,
                                                 seed=seed)
      elif config.eval.get("test_pheromone", False):
        # The beta = 0 policy decoded with the config's pheromone (updated during its RL, never used there):
        # the prior at decode time only, against PhGPO's prior during RL.
        res["test_pheromone"] = evaluation.evaluate(cfg, comp, st.params, st.pheromone, problem,
                                                    beta=config.pheromone.beta_max, w=config.pheromone.w_max,
                                                    seed=seed)
      distributed.sync(f"phgpo first_success {seed} {run}")   # the primary has written it (run_rl's last step)
      with open(os.path.join(rdir, "first_success.json")) as f:
        fs = json.load(f)
      res["first_success"] = first_success_summary(fs["first"], fs["visited"])
      res["train_seconds"] = time.time() - t0
    _write_json(res_path, res)
    out[run] = res
  return out


def provenance_record(config, problem: Problem) -> dict:
  """What a table was made from: the code's commit (`common.provenance.code_version`), the config, and the data:
  its catalogue format (config `data.format`), the folder of its queries (the one the problem was built from:
  --data_dir / `data.path`, else $TRAJECT_BENCH_DIR, else the shared copy) with a sha256 over every file in it
  (`common.provenance.data_fingerprint`), the graph file read (the catalogue under 'authors_graph', or the prior)
  with its own sha256, and one of the query and tool embeddings used (what the embedding cache gave).

  Returns:
    {'code', 'config', 'data': {'format', 'path', 'sha256', 'embeddings_sha256'[, 'graph_path',
    'graph_sha256', 'graph_source']}}.
  """
  root = problem.data_paths.get("queries") or str(data_lib.find_traject_bench(config.data.path or None))
  emb = hashlib.sha256(np.ascontiguousarray(problem.query_emb, np.float32).tobytes()
                       + np.ascontiguousarray(problem.tool_emb, np.float32).tobytes()).hexdigest()
  out = {"format": problem.data_format, "path": str(root), "sha256": provenance.data_fingerprint([str(root)]),
         "embeddings_sha256": emb}
  if problem.data_paths.get("graph"):
    graph = problem.data_paths["graph"]
    out.update(graph_path=graph, graph_sha256=provenance.data_fingerprint([graph]), graph_source=problem.graph_source)
  return {"code": provenance.code_version(), "config": json.loads(config.to_json_best_effort()), "data": out}


def run(config, workdir: str, *, progress: bool = True, log: Callable[[str], None] = print) -> dict:
  """The job: for each split and seed, the runs of config `runs`; prints and saves the table of config `table`.

  Writes `<workdir>/<split>/seed_<s>/<run>/` (checkpoints, metrics, per-task results), and
  `<workdir>/results_<table>.txt` / `.json` (the tables with paired intervals, the code's commit, the config,
  the data and embedding hashes), plus the pictures of `phgpo.analysis.plot_all`. A subset of the table's
  runs (e.g. --config.runs=warmup,phgpo) writes `results_<table>_<runs>.*` instead.

  Returns:
    {split: {seed: {run: held-out metrics}}}.

  Raises:
    ValueError: a bad config value (`check_config`), named by its key.
  """
  check_config(config)
  t0 = time.time()
  os.makedirs(workdir, exist_ok=True)
  if distributed.is_primary() and not os.path.exists(os.path.join(workdir, "config.json")):
    # the launcher writes it; library callers too
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=1))
  results, tables, paired, prov, tool_names = {}, [], {}, None, None
  for split in config.splits:
    problem = problem_lib.prepare_problem(config, split, log=log)
    if prov is None:
      prov = provenance_record(config, problem)
    log(f"{DATA_NAMES.get(problem.data_format, problem.data_format)}, {split} split: {len(problem.tasks)} tasks "
        f"({len(problem.train_idx)} train, {len(problem.eval_idx)} held out), {len(problem.tool_specs)} tools, "
        f"{int(problem.graph.edge_mask.sum())} graph edges (from "
        f"{'the training split' if problem.graph_source == 'train' else 'the graph prior alone'}); data "
        f"{problem.data_paths['queries']}; ready in {time.time() - t0:.0f}s")
    tool_names = list(problem.graph.tool_names)
    cache = _CompiledCache(problem_lib.make_policy(config, problem), problem)
    sdir = os.path.join(workdir, split)
    results[split] = {seed: run_seed(config, problem, cache, sdir, seed=seed, progress=progress, log=log)
                      for seed in config.seeds}
    ref = config.reference if config.reference in config.runs else None
    title = f"{config.table} table, {split} split: {len(problem.eval_idx)} held-out tasks"
    st = dict(confidence=config.stats.confidence, resamples=config.stats.resamples, method=config.stats.method)
    tables.append(evaluation.format_table(results[split], config.runs, reference=ref, title=title,
                                          primary=config.get("primary", ""), **st))
    paired[split] = evaluation.paired_table_json(results[split], config.runs, reference=ref, **st)
  pictures = []
  if distributed.is_primary():   # several processes: only the primary writes (common/distributed.py)
    from phgpo import analysis  # pylint: disable=g-import-not-at-top  (matplotlib)
    pictures = analysis.plot_all(workdir, splits=list(config.splits), runs=list(config.runs),
                                 seeds=list(config.seeds), tool_names=tool_names)
  code, dp = prov["code"], prov["data"]
  graph = (f"; graph {dp['graph_path']} sha256 {dp['graph_sha256'][:16]}" if dp.get("graph_path") else "")
  head = (f"code: commit {code['commit']}{' (uncommitted changes)' if code['dirty'] else ''}; config "
          f"{config.table}; data format {dp['format']}, {dp['path']} sha256 {dp['sha256'][:16]}{graph}; "
          f"embeddings sha256 {dp['embeddings_sha256'][:16]}")
  text = head + "\n\n" + "\n\n".join(tables)
  name = f"results_{config.table}"
  full = TABLE_RUNS.get(config.table)
  if full is not None and tuple(config.runs) != full:
    name += "_" + "-".join(config.runs)
  if distributed.is_primary():
    with open(os.path.join(workdir, name + ".txt"), "w") as f:
      f.write(text + "\n")
  _write_json(os.path.join(workdir, name + ".json"), {
      **prov, "tables": paired,
      "results": {sp: {str(s): {r: _strip(m) for r, m in rs.items()} for s, rs in by_seed.items()}
                  for sp, by_seed in results.items()}})
  log(text)
  if distributed.is_primary():
    log(f"total {time.time() - t0:.0f}s; {name}.txt/.json and {len(pictures)} pictures in {workdir}")
  else:
    log(f"total {time.time() - t0:.0f}s; process {jax.process_index()}: the primary process wrote the files")
  return results
