"""ProgAgent evaluation: pass@k per scale level and harness on held-out seeds, context cost, program structure.

  res = evaluate(config, policy, params, task_ids, mode="ptc", cache_dir=...)
  format_level_table({"ptc": res}, levels)

Source: ProgAgent (2026), "Training" and the published findings (SPEC.md, ProgAgent): pass rate at v0..v3
per harness, tool calls, tool-output tokens, errors, and the share of programs with control flow ("DTC-style"
programs; try/except in 8-9% of programs).

Protocol: every task of `task_ids` at every level of `eval.levels`, on every environment seed of `eval.seeds`
(held out: check_config refuses seeds that SFT or GSPO trained on), gets `eval.samples` = n rollouts of the
policy at `eval.temperature` under harness `mode`, through the same driver as GSPO (progagent.rollouts). A
unit is one (task, level, seed) instance with c successes out of n; per level:
  pass@1        mean over units of c / n, with a 95% bootstrap interval over units (common.stats, BCa);
  pass@k        mean over units of the unbiased 1 - C(n - c, k) / C(n, k) (common.metrics.pass_at_k), for k in
                `eval.k` (k <= n);
  context_tokens, observation_tokens, tool_calls, errors   means over episodes (progagent.rollouts.episode_stats;
                tokens of the policy's tokenizer);
  programs, loop / branch / try shares   over every programmatic_tool_call program of the level's episodes:
                the share whose syntax tree holds a loop (for, while, a comprehension), a branch (if, a
                conditional expression) or a try statement (program_features); programs that do not parse
                count in the total and in none of the shares;
  overflow      the share of episodes ended by the context window (termination 'length_limit',
                `env.max_context_tokens`): a recorded ending, scored by the verifier like any other;
  cut           the share ended by a reply cut at `env.max_response_tokens` before any tool call (also
                'length_limit', its last turn 'truncated'; common.rollout): not counted as overflow.
Few-shot (config `fewshot.task` set; e.g. configs/progagent.py:paradigms_fewshot): every first prompt holds one
demonstration between the system message and the instruction: the oracle episode of `fewshot.task` at level
`fewshot.level`, seed `fewshot.seed`, under the harness being evaluated (its native tool-call format;
demonstration). Rows that must score 0 (zero_rows): 'no call' and 'seed-0 answer'.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import pickle
import shutil
from typing import Any, Mapping, Sequence

import jax
import ml_collections
import numpy as np

from common import distributed
from common import io
from common import metrics as metrics_lib
from common import stats
from common import trajectory as traj_lib
from common.lm.sampler import LMSampler
from progagent import harness
from progagent import rollouts
from progagent.task_env import split_instance_id

FEATURES = ("loop", "branch", "try")
_LOOP = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_BRANCH = (ast.If, ast.IfExp)
_TRY = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def program_features(code: str) -> dict[str, bool] | None:
  """{'loop', 'branch', 'try': bool} of a program's syntax tree; None when it does not parse."""
  try:
    tree = ast.parse(code)
  except (SyntaxError, ValueError):
    return None
  nodes = list(ast.walk(tree))
  return {"loop": any(isinstance(n, _LOOP) for n in nodes), "branch": any(isinstance(n, _BRANCH) for n in nodes),
          "try": any(isinstance(n, _TRY) for n in nodes)}


def episode_programs(t: traj_lib.Trajectory) -> list[str]:
  """The code of every programmatic_tool_call the rollout ran."""
  out = []
  for tn in t.turns:
    for c in tn.calls or ([tn.call] if tn.call else []):
      if c.get("name") == harness.PROGRAM_TOOL and isinstance((c.get("arguments") or {}).get("code"), str):
        out.append(c["arguments"]["code"])
  return out


def instance_id(task_id: str, level: int) -> str:
  """'domain/name@vK': the task at level K (progagent.task_env.split_instance_id)."""
  return f"{task_id}@v{level}"


def eval_config(config, mode: str) -> ml_collections.ConfigDict:
  """A copy of config whose rollouts are the evaluation's: harness `mode`, G = eval.samples."""
  c = ml_collections.ConfigDict(config.to_dict())
  c.mode = mode
  c.gspo.rollouts_per_task = int(config.eval.samples)
  return c


def demonstration(config, mode: str, *, cache_dir: str | None = None) -> list[dict]:
  """The one-shot demonstration of harness `mode` (config `fewshot`): the oracle episode of `fewshot.task` at
  level `fewshot.level` on environment seed `fewshot.seed` (a training seed: check_config keeps it out of
  eval.seeds), its messages after the system message (instruction, calls in the harness's tools, results cut
  to `env.max_observation_chars` as the driver cuts them). [] when `fewshot.task` is empty.

  Raises:
    RuntimeError: the oracle does not pass that instance (a demonstration must be right).
  """
  fs = config.get("fewshot", None)
  if fs is None or not fs.get("task", ""):
    return []
  from progagent import sft_data  # pylint: disable=g-import-not-at-top
  conv = sft_data.oracle_conversations([str(fs.task)], modes=(mode,), scales=(int(fs.level),),
                                       seeds=(int(fs.seed),), cache_dir=cache_dir)[0]
  if conv["reward"] < 1.0:
    raise RuntimeError(f"config `fewshot.task` {fs.task!r}: its {mode} oracle fails at level {fs.level}, seed "
                       f"{fs.seed}; choose another demonstration task")
  out = []
  for m in conv["messages"]:
    if m["role"] == "system":
      continue
    m = dict(m)
    if m["role"] == "tool":
      m["content"] = sft_data.clip_observation(str(m["content"]), int(config.env.max_observation_chars))
    out.append(m)
  return out


def zero_rows(task_ids: Sequence[str], levels: Sequence[int], seeds: Sequence[int], *,
              cache_dir: str | None = None) -> dict[str, dict[int, dict]]:
  """Two policies that must score 0 on every held-out instance, per level: 'no call' (a reply without a tool
  call ends the episode: the verifier on the untouched instance) and 'seed-0 answer' (the task's answer at the
  same level on environment seed 0, a training seed, submitted at once: what a policy that memorised its
  training instance gives; a task with a state check replays seed 0's DTC oracle calls instead,
  progagent.audit.carries_over).

  Returns:
    {row: {level: {'pass@1': mean over (task, seed) units, 'units': n}}}.
  """
  from progagent import audit  # pylint: disable=g-import-not-at-top
  from progagent.task_env import ProgTaskEnv  # pylint: disable=g-import-not-at-top
  out: dict[str, dict[int, dict]] = {"no call": {}, "seed-0 answer": {}}
  for lvl in levels:
    wins = {"no call": [], "seed-0 answer": []}
    for tid in task_ids:
      env = ProgTaskEnv(tid, lvl, cache_dir=cache_dir)
      try:
        harness.run_oracle(env, "ptc", seed=0)
        reference = {"answer": env.submitted_answer}
        reference["dtc_calls"] = audit.episode_calls(harness.run_oracle(env, "dtc", seed=0))
        for seed in seeds:
          env.reset(tid, int(seed))
          wins["no call"].append(float(env.verify() == 1))
          wins["seed-0 answer"].append(float(audit.carries_over(env, reference, int(seed))))
      finally:
        env.close()
    for row, v in wins.items():
      out[row][int(lvl)] = {"pass@1": float(np.mean(v)) if v else float("nan"), "units": len(v)}
  return out


def run_eval_rollouts(config, policy, params, task_ids: Sequence[str], *, mode: str, key: jax.Array,
                      cache_dir: str | None = None, resume_dir: str | None = None) -> list[traj_lib.Trajectory]:
  """eval.samples rollouts of every (task, level) instance on every seed of eval.seeds (module docstring), each
  first prompt holding the harness's one-shot demonstration when `fewshot.task` is set (demonstration).
  `eval.batch_instances` > 0 runs the instances of a seed in batches of that many (each its own sampler, so
  the KV cache holds batch_instances x eval.samples rows; 0 = all at once). Several processes: the (seed, batch)
  units are shared out (common.distributed.run_sliced) and every process returns every trajectory, as one
  process would (a unit's key folds in its seed and batch indices only).

  resume_dir: a single-process run keeps each finished unit's trajectories there (unit_<u>.pkl, written
  atomically), so a run killed during a long evaluation resumes from the units it finished instead of from
  nothing (a unit's samples depend only on its key, so a resumed evaluation equals an uninterrupted one).
  The folder holds the settings it was written with (units.json: the eval, env, fewshot, gspo sampling and model
  attention config); other settings clear it (the weights are not part of them: a workdir holds one policy).
  Multi-process runs do not use it (only the primary process writes).
  Pickle: only files this program wrote in the run's own workdir are read back."""
  ev = config.eval
  ec = eval_config(config, mode)
  demo = demonstration(config, mode, cache_dir=cache_dir)
  instances = [instance_id(t, lvl) for lvl in ev.levels for t in task_ids]
  per = int(ev.get("batch_instances", 0) or 0) or len(instances)
  chunks = [instances[j:j + per] for j in range(0, len(instances), per)]
  pad = policy.model.pad_token_id or 0
  units = [(i, seed, j, chunk) for i, seed in enumerate(ev.seeds) for j, chunk in enumerate(chunks)]

  resume = _UnitStore(resume_dir, config, mode, len(units)) if resume_dir and jax.process_count() == 1 else None

  def run_unit(u: int) -> list[traj_lib.Trajectory]:
    if resume is None:
      return run_unit_rollouts(u)
    done = resume.load(u)
    if done is None:
      done = run_unit_rollouts(u)
      resume.save(u, done)
    return done

  def run_unit_rollouts(u: int) -> list[traj_lib.Trajectory]:
    # one (seed, batch) unit; in a multi-process run each process runs its slice of the units
    # (common.distributed.run_sliced) and every process gets all the trajectories, in this order
    i, seed, j, chunk = units[u]
    rows = len(chunk) * int(ev.samples)
    k = jax.random.fold_in(key, i) if len(chunks) == 1 else jax.random.fold_in(jax.random.fold_in(key, i), j)
    sampler = LMSampler(params, policy.model, key=k, rows=rows,
                        max_new_tokens=ec.env.max_response_tokens, temperature=float(ev.temperature),
                        top_k=ec.gspo.top_k, top_p=ec.gspo.top_p,
                        stop_tokens=tuple(policy.model.eos_token_ids) + tuple(policy.chat.stop_ids),
                        pad_id=pad, buckets=tuple(config.lengths.buckets),
                        chunk_rows=config.gspo.generate_batch_size,
                        **rollouts.sampler_options(ec, policy.model, rows))
    seed_cache = None if cache_dir is None else os.path.join(cache_dir, f"eval-{mode}-{seed}-{j}")
    workers = rollouts.make_pool(ec, rows, cache_dir=seed_cache)
    try:
      return rollouts.run_rollouts(workers, sampler, policy.chat, chunk, config=ec, seed=int(seed),
                                   demonstration=demo)
    finally:
      workers.close()
      if seed_cache is not None:
        shutil.rmtree(seed_cache, ignore_errors=True)

  return distributed.run_sliced(len(units), run_unit)


class _UnitStore:
  """The finished evaluation units of one run_eval_rollouts call, on disk (its `resume_dir` docstring)."""

  def __init__(self, folder: str, config, mode: str, num_units: int):
    self.folder = folder
    fewshot = config.get("fewshot", None)
    settings = json.loads(json.dumps({
        "mode": mode, "units": num_units, "seed": config.get("seed", None), "eval": config.eval.to_dict(),
        "env": config.env.to_dict(), "fewshot": fewshot.to_dict() if fewshot is not None else None,
        "sampling": {k: config.gspo.get(k, None) for k in ("top_k", "top_p", "generate_batch_size", "kv_reuse",
                                                          "kv_cache_max_gb", "sample_keys")},
        "model": {k: config.model.get(k, None) for k in ("checkpoint", "dtype", "param_dtype", "attention_impl",
                                                         "decode_attention")}}, default=str))
    path = os.path.join(folder, "units.json")
    saved = io.read_json(path) if os.path.exists(path) else None
    if saved != settings:
      shutil.rmtree(folder, ignore_errors=True)
      os.makedirs(folder, exist_ok=True)
      io.write_json(path, settings)

  def _path(self, u: int) -> str:
    return os.path.join(self.folder, f"unit_{u:05d}.pkl")

  def load(self, u: int) -> list[traj_lib.Trajectory] | None:
    """The unit's trajectories when it finished before (None: run it); an unreadable file is run again."""
    path = self._path(u)
    if not os.path.exists(path):
      return None
    try:
      with open(path, "rb") as f:
        return pickle.load(f)
    except Exception as e:  # pylint: disable=broad-except  # a torn or foreign file: run the unit again
      logging.warning("evaluation unit %s unreadable (%s); running it again", path, e)
      return None

  def save(self, u: int, trajs: list[traj_lib.Trajectory]) -> None:
    with io.atomic_write(self._path(u), "wb") as f:
      pickle.dump(trajs, f, protocol=pickle.HIGHEST_PROTOCOL)


def summarize(trajs: Sequence[traj_lib.Trajectory], *, ks: Sequence[int], confidence: float = 0.95,
              resamples: int = 10_000) -> dict:
  """{level: metrics} (module docstring) from evaluation rollouts whose task ids are 'task@vK'."""
  by_unit: dict[tuple, list[float]] = {}
  by_level: dict[int, list[traj_lib.Trajectory]] = {}
  for t in trajs:
    tid, lvl = split_instance_id(t.task_id)
    by_unit.setdefault((lvl, tid, t.seed), []).append(float(t.reward >= 1.0))
    by_level.setdefault(lvl, []).append(t)
  out: dict[int, dict] = {}
  for lvl in sorted(by_level):
    units = [v for (l, _, _), v in sorted(by_unit.items()) if l == lvl]
    rate = np.array([np.mean(v) for v in units])
    ci = stats.paired_difference(rate, np.zeros_like(rate), confidence=confidence, resamples=resamples)
    row: dict[str, Any] = {"units": len(units), "episodes": len(by_level[lvl]), "pass@1": float(rate.mean()),
                           "pass@1_low": ci.low, "pass@1_high": ci.high}
    for k in ks:
      if all(len(v) >= k for v in units):
        row[f"pass@{k}"] = float(np.mean([metrics_lib.pass_at_k(len(v), int(sum(v)), k) for v in units]))
    st = [rollouts.episode_stats(t) for t in by_level[lvl]]
    for f in ("turns", "context_tokens", "observation_tokens", "tool_calls", "errors"):
      row[f] = float(np.mean([s[f] for s in st]))
    feats = [program_features(p) for t in by_level[lvl] for p in episode_programs(t)]
    row["programs"] = len(feats)
    for f in FEATURES:
      row[f"{f}_share"] = (sum(bool(x and x[f]) for x in feats) / len(feats)) if feats else float("nan")
    row["terminations"] = {term: int(sum(t.termination == term for t in by_level[lvl]))
                           for term in traj_lib.TERMINATIONS}
    cut = sum(t.termination == "length_limit" and bool(t.turns) and t.turns[-1].status == "truncated"
              for t in by_level[lvl])
    row["cut_share"] = cut / len(by_level[lvl])
    row["overflow_share"] = (row["terminations"].get("length_limit", 0) - cut) / len(by_level[lvl])
    out[lvl] = row
  return out


def episode_rows(trajs: Sequence[traj_lib.Trajectory]) -> list[dict]:
  """One JSON row per evaluation rollout: instance, seed, sample, reward, termination, stats, programs."""
  rows = []
  for t in trajs:
    tid, lvl = split_instance_id(t.task_id)
    rows.append({"task_id": tid, "level": lvl, "seed": t.seed, "sample": t.sample, "reward": t.reward,
                 "termination": t.termination, "stats": rollouts.episode_stats(t),
                 "programs": episode_programs(t),
                 "responses": [tn.response_text[:2000] for tn in t.turns]})
  return rows


def _fmt(x: float, pct: bool = True) -> str:
  if x is None or (isinstance(x, float) and np.isnan(x)):
    return "n/a"
  return f"{100 * x:.1f}" if pct else f"{x:.0f}"


def format_level_table(results: Mapping[str, Mapping[int, dict]], levels: Sequence[int], ks: Sequence[int]) -> str:
  """The table: one block per level, one row per harness (pass@1 [interval], pass@k, costs, program shares)."""
  width = max([8] + [len(m) for m in results])
  head = (f"{'harness':{width}} {'level':5} {'pass@1 [95% CI]':>22} "
          + " ".join(f"{f'pass@{k}':>7}" for k in ks if k != 1)
          + f" {'ctx_tok':>8} {'obs_tok':>8} {'calls':>6} {'errors':>6} {'turns':>5} {'overflow%':>9} {'cut%':>5}"
          f" {'programs':>8} {'loop%':>6} {'branch%':>7} {'try%':>5}")
  lines = [head, "-" * len(head)]
  for lvl in levels:
    for mode, res in results.items():
      r = res.get(lvl)
      if r is None:
        continue
      ci = f"{_fmt(r['pass@1'])} [{_fmt(r['pass@1_low'])}, {_fmt(r['pass@1_high'])}]"
      lines.append(f"{mode:{width}} v{lvl:<4} {ci:>22} "
                   + " ".join(f"{_fmt(r.get(f'pass@{k}')):>7}" for k in ks if k != 1)
                   + f" {r['context_tokens']:8.0f} {r['observation_tokens']:8.0f} {r['tool_calls']:6.1f}"
                   f" {r['errors']:6.2f} {r['turns']:5.1f} {_fmt(r.get('overflow_share', float('nan'))):>9}"
                   f" {_fmt(r.get('cut_share', float('nan'))):>5}"
                   f" {r['programs']:8d} {_fmt(r['loop_share']):>6}"
                   f" {_fmt(r['branch_share']):>7} {_fmt(r['try_share']):>5}")
    lines.append("")
  return "\n".join(lines).rstrip()


def format_zero_rows(rows: Mapping[str, Mapping[int, dict]], levels: Sequence[int]) -> str:
  """The rows that must score 0 (zero_rows): pass@1 per level, percent."""
  head = f"{'must score 0':14} " + " ".join(f"{f'v{lvl}':>7}" for lvl in levels) + "   units per level"
  lines = [head, "-" * len(head)]
  for name, res in rows.items():
    lines.append(f"{name:14} " + " ".join(f"{_fmt(res[lvl]['pass@1']) if lvl in res else 'n/a':>7}" for lvl in levels)
                 + f"   {max((r['units'] for r in res.values()), default=0)}")
  return "\n".join(lines)
