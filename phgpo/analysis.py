"""Looking inside finished PhGPO runs: the learned pheromone, tool plans for typed queries, and plots.

Run directory layout (written by `experiments/train.py` and `phgpo.train.run`):
  <workdir>/config.json                           the config of every run in the workdir (the launcher's)
  <workdir>/<split>/seed_<s>/<run>/checkpoints/   Orbax steps of one `phgpo.steps.TrainState`
  <workdir>/<split>/seed_<s>/<run>/metrics.jsonl  one JSON object per logged step ({'step', 'rl/reward', ...})
  <workdir>/<split>/seed_<s>/<run>/results.json   held-out metrics
  <workdir>/<split>/seed_<s>/<run>/pheromone/tau_step_<k>.npy
      f32[N+1, N], the effective task-agnostic pheromone after k RL updates (row N = START), at the steps of
      the trainer's `logging.pheromone_snapshots` (runs decoded with the pheromone only)
with split in `phgpo.data.SPLITS` ('random', 'chain'). Every function that takes a split also takes
split=None for the older layout without the split level (<workdir>/seed_<s>/<run>/), which holds one
problem, the 'random' split.

Pictures (`plot_all`): `heatmap_<run>_seed<s>.png` for every run with snapshots and `learning_curves.png`
(mean over seeds with a min-max band), in <workdir>/<split>/ (older layout: <workdir>/plots/, so that the
trainer's own <workdir>/learning_curves.png is left alone). Matplotlib is used through `Figure` objects only
(no pyplot, no global backend switch), so this module is safe to call from a notebook kernel.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
import re
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from common import checkpoint as ckpt_lib
from common import io
from phgpo import memory_bank
from phgpo import pheromone as pher_lib
from phgpo import policy as policy_lib
from phgpo import problem as problem_lib
from phgpo import runs as runs_lib
from phgpo import steps
from phgpo.problem import Problem
from phgpo.steps import Compiled, TrainState

START = "START"
SNAPSHOT_DIR = "pheromone"
_SNAPSHOT_RE = re.compile(r"^tau_step_(\d+)\.npy$")
_SEED_RE = re.compile(r"^seed_(\d+)$")
_LAUNCH = "python -m experiments.train --config=configs/phgpo_traject.py --workdir={workdir}"


def _make_hint(workdir: str, *, have_config: bool = True) -> str:
  """The command that writes a run directory, for error messages."""
  cmd = _LAUNCH.format(workdir=workdir)
  if not have_config:
    return f"The launcher writes it: `{cmd}` (or a variant such as `:smoke`)."
  return (f"The launcher writes it: `{cmd}`, with the config variant and overrides recorded in "
          f"{os.path.join(workdir, 'config.json')}.")


def run_dir(workdir: str, *, run: str, seed: int = 0, split: str | None = "random") -> str:
  """<workdir>/<split>/seed_<seed>/<run> (split=None: <workdir>/seed_<seed>/<run>, the older layout)."""
  parts = [workdir] + ([split] if split is not None else []) + [f"seed_{int(seed)}", run]
  return os.path.join(*parts)


def snapshot_path(rdir: str, step: int) -> str:
  """<rdir>/pheromone/tau_step_<step>.npy: where the pheromone after `step` RL updates is saved."""
  return os.path.join(rdir, SNAPSHOT_DIR, f"tau_step_{int(step)}.npy")


def load_snapshots(rdir: str) -> dict[int, np.ndarray]:
  """{RL step k: f32[N+1, N]} from <rdir>/pheromone/tau_step_<k>.npy, sorted by k; {} when there are none."""
  folder = os.path.join(rdir, SNAPSHOT_DIR)
  if not os.path.isdir(folder):
    return {}
  found = {int(m.group(1)): os.path.join(folder, f) for f in os.listdir(folder) if (m := _SNAPSHOT_RE.match(f))}
  return {k: np.load(found[k]).astype(np.float32) for k in sorted(found)}


def _as_tuples(x):
  if isinstance(x, dict):
    return {k: _as_tuples(v) for k, v in x.items()}
  if isinstance(x, list):
    return tuple(_as_tuples(v) for v in x)
  return x


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """<workdir>/config.json as a locked ConfigDict (JSON lists back to tuples, as in the config files).

  Raises:
    FileNotFoundError: no config.json (the message names the path and the command that writes it).
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} not found: {workdir} is not a PhGPO run directory. "
                            f"{_make_hint(workdir, have_config=False)}")
  with open(path) as f:
    cfg = ml_collections.ConfigDict(_as_tuples(json.load(f)))
  cfg.lock()
  return cfg


def _run_config(config: ml_collections.ConfigDict, run: str) -> ml_collections.ConfigDict:
  """What the run trained with: phgpo.runs.run_config(config, run) for RL runs, else the workdir's config."""
  if runs_lib.RUN_SPECS.get(run, {}).get("kind", "rl") != "rl":
    return config
  return runs_lib.run_config(config, run)


@dataclasses.dataclass
class RunView:
  """One trained run, restored for inspection.

  Attributes:
    workdir: the run directory's root (holds config.json).
    run_dir: <workdir>/<split>/seed_<seed>/<run>.
    run, seed, split: which run (split None: the older layout, the 'random' problem).
    config: what the run trained with (phgpo.runs.run_config of the workdir's config, for RL runs).
    problem: `phgpo.problem.Problem` of the split, as the trainer built it.
    compiled: `phgpo.steps.Compiled` for the run's config and policy.
    state: the `TrainState` of the latest checkpoint.
    step: that checkpoint's step (RL steps for RL runs, warm-up steps for 'warmup').
  """
  workdir: str
  run_dir: str
  run: str
  seed: int
  split: str | None
  config: ml_collections.ConfigDict
  problem: Problem
  compiled: Compiled
  state: TrainState
  step: int

  @property
  def tool_names(self) -> list[str]:
    """The N tool names in graph order (column n of a tau table is tool_names[n])."""
    return list(self.problem.graph.tool_names)

  @property
  def tau(self) -> np.ndarray:
    """f32[N+1, N], the checkpoint's effective task-agnostic pheromone (`phgpo.pheromone.effective_tau`)."""
    return np.asarray(pher_lib.effective_tau(self.state.pheromone, tau_min=self.config.pheromone.tau_min))

  @property
  def weights(self) -> tuple[float, float]:
    """(beta, w) the run is evaluated with: pheromone.beta_max and pheromone.w_max of its config for runs
    decoded with the pheromone, (0, 0) for the others ('warmup', 'grpo', ...)."""
    if runs_lib.RUN_SPECS.get(self.run, {}).get("kind", "rl") != "rl":
      return 0.0, 0.0
    return float(self.config.pheromone.beta_max), float(self.config.pheromone.w_max)

  def snapshots(self) -> dict[int, np.ndarray]:
    """{RL step: f32[N+1, N]} saved during training (`load_snapshots`); {} for runs without any."""
    return load_snapshots(self.run_dir)

  @functools.cached_property
  def encoder(self):
    """The run's sentence encoder (`common.encoder.SentenceEncoder`, config encoder.max_length), loaded once."""
    from common import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
    return encoder_lib.SentenceEncoder.from_package(max_length=self.config.encoder.max_length)


def load_run(workdir: str, *, run: str, seed: int = 0, split: str | None = "random") -> RunView:
  """Restores the latest checkpoint of one run, with the problem, policy and compiled functions it used.

  Rebuilds the problem from <workdir>/config.json (`phgpo.problem.prepare_problem(config, split)`: the data
  and the embedding cache must be where the run found them), builds the policy and `Compiled` for what the
  run trained with (phgpo.runs.run_config), and restores the whole `TrainState` into the structure of a fresh
  `steps.init_state` (the structure check of `common.checkpoint.Checkpointer.restore` applies).

  Args:
    workdir: the folder given to the launcher as --workdir.
    run: run name ('warmup', 'grpo', 'phgpo', 'rho0', ...; 'nearest' trains nothing and has no checkpoint).
    seed: the seed folder.
    split: 'random' or 'chain'; None for the older layout without split folders.
  Returns:
    `RunView`.
  Raises:
    FileNotFoundError: config.json, the run folder or its checkpoints are missing; the message names the
      missing path, what exists instead, and the command that writes it.
    common.checkpoint.CheckpointMismatchError: the checkpoint does not fit the config's train state.
  """
  workdir = os.path.abspath(os.fspath(workdir))
  config = load_config(workdir)
  rdir = run_dir(workdir, run=run, seed=seed, split=split)
  if not os.path.isdir(rdir):
    parent = os.path.dirname(rdir)
    have = sorted(os.listdir(parent)) if os.path.isdir(parent) else []
    where = f"{parent} holds {have}" if have else f"{parent} does not exist either"
    layout = ("; split=None reads the older layout <workdir>/seed_<s>/<run>" if split is not None
              else "; split='random' or 'chain' reads <workdir>/<split>/seed_<s>/<run>")
    raise FileNotFoundError(f"run folder {rdir} not found ({where}{layout}). {_make_hint(workdir)} The run, "
                            f"seed and split must be among config runs, seeds and splits.")
  ck_dir = os.path.join(rdir, "checkpoints")
  if runs_lib.RUN_SPECS.get(run, {}).get("kind") in ("nearest", "vote"):
    raise FileNotFoundError(f"run {run!r} trains no policy (it copies or votes the chains of the most similar "
                            f"training queries), so {ck_dir} does not exist; load 'warmup' or an RL run instead.")
  if not os.path.isdir(ck_dir) or not any(n.isdigit() for n in os.listdir(ck_dir)):
    raise FileNotFoundError(f"no checkpoint in {ck_dir}: the run has not saved a step yet. {_make_hint(workdir)}")
  cfg = _run_config(config, run)
  problem = problem_lib.prepare_problem(cfg, split or "random")
  policy = problem_lib.make_policy(cfg, problem)
  compiled = Compiled(cfg, policy, problem)
  lr = cfg.warmup.learning_rate if run == "warmup" else cfg.rl.learning_rate
  target = steps.init_state(cfg, policy, problem, seed=seed, learning_rate=lr)
  ck = ckpt_lib.Checkpointer(ck_dir, max_to_keep=cfg.checkpoint.max_to_keep)
  try:
    step = ck.latest_step()
    if step is None:
      raise FileNotFoundError(f"no readable checkpoint step in {ck_dir}. {_make_hint(workdir)}")
    state = ck.restore(step, target)
  finally:
    ck.close()
  return RunView(workdir=workdir, run_dir=rdir, run=run, seed=int(seed), split=split, config=cfg,
                 problem=problem, compiled=compiled, state=state, step=int(step))


def top_edges(tau, tool_names: Sequence[str], k: int = 20, *,
              tau_min: float | None = None) -> list[tuple[str, str, float]]:
  """The k strongest transitions of a task-agnostic pheromone table, strongest first.

  Args:
    tau: f32[N+1, N], tau[i, j] = pheromone of calling tool j after tool i; row N is START (the first call).
    tool_names: the N tool names (column order).
    k: how many edges (>= 0); fewer come back when fewer qualify.
    tau_min: if given, edges at this floor (off the graph and never traversed, or evaporated back down; config
      `pheromone.tau_min`) are left out. NaN entries are always left out.
  Returns:
    [(from name or 'START', to name, value)], sorted by value descending; ties by row then column.
  Raises:
    ValueError: tau is not [len(tool_names) + 1, len(tool_names)], or k < 0.
  """
  tau = np.asarray(tau)
  n = len(tool_names)
  if tau.shape != (n + 1, n):
    raise ValueError(f"tau must be [N+1, N] = {(n + 1, n)} for {n} tool names, got {tau.shape}")
  if k < 0:
    raise ValueError(f"k must be >= 0, got {k}")
  vals = tau.astype(np.float64).reshape(-1)
  keep = ~np.isnan(vals)
  if tau_min is not None:
    keep &= vals > float(np.float32(tau_min)) * (1 + 1e-6)
  idx = np.nonzero(keep)[0]
  idx = idx[np.lexsort((idx, -vals[idx]))][:k]
  names = list(tool_names) + [START]
  return [(names[i // n], names[i % n], float(vals[i])) for i in idx]


def embed_query(view: RunView, query: str) -> np.ndarray:
  """f32[D] embedding of a typed query, through the run's encoder settings and embedding cache.

  The same path as the problem's query embeddings (`phgpo.features.embed_texts` with config
  encoder.max_length, encoder.cache_dir and encoder.batch_size), so a training query gets exactly its row of
  `problem.query_emb`. A new text is added to the cache.
  """
  from phgpo import features  # pylint: disable=g-import-not-at-top
  cfg = view.config.encoder
  return features.embed_texts(view.encoder, [query], cache_dir=cfg.cache_dir or None,
                              batch_size=cfg.batch_size)[0]


def _policy_with_query(policy, query: str, query_emb: np.ndarray):
  """A shallow copy of `policy` that also knows the typed query as one more task row; returns (copy, row).

  The policies featurize a decision state from a task row (`ToolPolicy.featurize(task_idx, ...)`): the
  encoder MLP reads `policy.query_emb[task_idx]`, the language-model policy `policy.queries[task_idx]`. The
  copy gets that table with the typed query appended, so its featurize gives the typed query's states;
  parameters, `apply` and the compiled functions are shared with the original (neither reads the table).
  """
  if hasattr(policy, "with_query"):   # the retrieval policy also needs the typed query's neighbours
    return policy.with_query(query_emb)
  pol = copy.copy(policy)
  if hasattr(policy, "query_emb"):
    pol.query_emb = np.concatenate([np.asarray(policy.query_emb, np.float32),
                                    np.asarray(query_emb, np.float32)[None]], axis=0)
    return pol, len(pol.query_emb) - 1
  if hasattr(policy, "queries"):
    pol.queries = list(policy.queries) + [query]
    return pol, len(pol.queries) - 1
  raise TypeError(f"{type(policy).__name__} has neither query_emb nor queries; plan() cannot give it a typed "
                  "query")


def plan(view: RunView, query: str, *, beta: float | None = None, w: float | None = None,
         max_steps: int | None = None) -> list[str]:
  """Greedy tool plan of the run's policy and pheromone for a typed query, without an environment.

  Each step t featurizes the state (typed query, tools chosen so far, every observation status 'ok', empty
  observation texts for policies that read them) and takes the argmax of the guided score over the policy's
  top-K tools, log pi(a | s_t) + beta log tau(a_{t-1}, a | x) (`phgpo.objective.decide` through
  `view.compiled.decide` at temperature 0, as the held-out evaluation decodes). The fused pheromone uses
  the typed query's cosine similarity to every task's query (`phgpo.memory_bank.bank_similarity` against
  `problem.query_emb`, as `Compiled.task_similarity` does for a task row).

  A query that is no task row: the policies featurize states by task row (`EncoderMLPPolicy.featurize` reads
  `query_emb[task_idx]`, the language-model policy `queries[task_idx]`), so the states are featurized by a
  shallow copy of the policy whose table has the typed query appended as one more row (`_policy_with_query`).
  The parameters, `apply` and `view.compiled.decide` are the run's own: neither reads that table.

  The classifier has no stop action (a training episode lasts the gold chain's length), so a plan runs to
  max_steps unless no tool is left to choose.

  Args:
    view: `load_run`'s result.
    query: the request, free text.
    beta, w: pheromone weights; None: the run's own (`RunView.weights`: pheromone.beta_max and
      pheromone.w_max for runs decoded with the pheromone, 0 otherwise).
    max_steps: plan length limit in [1, env.max_steps]; None: env.max_steps.
  Returns:
    Tool names, at most max_steps of them.
  Raises:
    ValueError: an empty query or max_steps out of range.
  """
  if not isinstance(query, str) or not query.strip():
    raise ValueError(f"query must be a non-empty string, got {query!r}")
  horizon = int(view.config.env.max_steps)
  max_steps = horizon if max_steps is None else int(max_steps)
  if not 1 <= max_steps <= horizon:
    raise ValueError(f"max_steps must lie in [1, env.max_steps = {horizon}], got {max_steps}")
  d_beta, d_w = view.weights
  beta = d_beta if beta is None else float(beta)
  w = d_w if w is None else float(w)
  compiled, problem = view.compiled, view.problem
  q = embed_query(view, query)
  policy, row = _policy_with_query(compiled.policy, query, q)
  task_sim = memory_bank.bank_similarity(jnp.asarray(problem.query_emb, jnp.float32), jnp.asarray(q[None]))
  tools = np.full((1, horizon), -1, np.int32)
  status = np.full((1, horizon), policy_lib.STATUS_CODES["ok"], np.int32)
  observations = [[]] if policy.uses_observations else None
  key = jax.random.key(view.seed)
  names = view.tool_names
  out = []
  for t in range(max_steps):
    key, sub = jax.random.split(key)
    batch = policy.featurize(np.array([row]), tools, status, np.array([t], np.int32), observations)
    prev = np.array([tools[0, t - 1] if t > 0 else compiled.start], np.int32)
    dec = jax.device_get(compiled.decide(view.state.params, view.state.pheromone, batch, jnp.asarray(prev),
                                         task_sim, sub, beta, w, 0.0))
    if not bool(dec.has_candidate[0]):
      break
    tools[0, t] = int(dec.tools[0])
    out.append(names[tools[0, t]])
    if observations is not None:
      observations[0].append("")
  return out


def _short(name: str, width: int = 28) -> str:
  return name if len(name) <= width else name[:width - 1] + "~"


def heatmap(tau_snapshots: Mapping[int, Any], tool_names: Sequence[str], path: str, *, top: int = 40,
            title: str = "") -> str:
  """Side-by-side heat maps of the task-agnostic pheromone at several RL steps, log-scale colour, as a PNG.

  Shows the `top` tools with the largest total pheromone (outgoing row plus incoming column, START -> tool
  included) at the last snapshot, in that order, as columns and rows, plus the START row. One colour scale
  (matplotlib LogNorm over every panel) so the panels compare.

  Args:
    tau_snapshots: {RL step: f32[N+1, N]} (row N = START), e.g. `load_snapshots(run_dir)`; >= 1 entry.
    tool_names: the N tool names.
    path: the PNG to write (its folder is created).
    top: tools shown (>= 1; all N when N is smaller).
    title: figure title.
  Returns:
    path.
  Raises:
    ValueError: no snapshots, a table of the wrong shape, or top < 1.
  """
  from matplotlib import colors  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  if not tau_snapshots:
    raise ValueError("heatmap needs at least one snapshot")
  if top < 1:
    raise ValueError(f"top must be >= 1, got {top}")
  n = len(tool_names)
  snaps = {int(s): np.asarray(t, np.float64) for s, t in sorted(tau_snapshots.items())}
  for s, t in snaps.items():
    if t.shape != (n + 1, n):
      raise ValueError(f"snapshot of step {s} must be [N+1, N] = {(n + 1, n)} for {n} tool names, got {t.shape}")
  last = snaps[max(snaps)]
  total = np.nansum(last[:n], axis=1) + np.nansum(last, axis=0)
  sel = np.argsort(-total, kind="stable")[:min(top, n)]
  rows = np.concatenate([sel, [n]])
  panels = {s: t[np.ix_(rows, sel)] for s, t in snaps.items()}
  finite = np.concatenate([p[np.isfinite(p) & (p > 0)] for p in panels.values()])
  vmin = float(finite.min()) if finite.size else 1e-3
  vmax = float(finite.max()) if finite.size else 1.0
  vmax = max(vmax, vmin * (1 + 1e-3))
  norm = colors.LogNorm(vmin=vmin, vmax=vmax)

  k = len(sel)
  side = 2.0 + 0.13 * k
  fig = Figure(figsize=(side * len(panels) + 1.2, side + 1.0), layout="constrained")
  axes = fig.subplots(1, len(panels), squeeze=False)[0]
  labels = [_short(tool_names[i]) for i in sel]
  fs = max(4, min(8, int(300 / max(k, 1))))
  image = None
  for ax, (s, p) in zip(axes, panels.items()):
    image = ax.imshow(np.where(p > 0, p, np.nan), norm=norm, cmap="viridis", aspect="auto",
                      interpolation="nearest")
    ax.set_title(f"RL step {s}")
    ax.set_xticks(range(k), labels, rotation=90, fontsize=fs)
    ax.set_yticks(range(k + 1), labels + [START], fontsize=fs)
    ax.set_xlabel("next tool")
  axes[0].set_ylabel("previous tool")
  fig.colorbar(image, ax=list(axes), label="tau (log scale)", shrink=0.8)
  fig.suptitle(title or f"task-agnostic pheromone, top {k} tools by total at step {max(snaps)}")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110)
  return path


def _split_root(workdir: str, split: str | None) -> str:
  return os.path.join(workdir, split) if split is not None else workdir


def _seeds_in(root: str) -> list[int]:
  if not os.path.isdir(root):
    return []
  return sorted(int(m.group(1)) for f in os.listdir(root) if (m := _SEED_RE.match(f)))


def learning_curves(workdir: str, runs: Sequence[str], path: str, *, split: str | None = "random",
                    key: str = "rl/reward") -> str:
  """One metric against the training step for several runs: the mean over seeds and a min-max band, as a PNG.

  Reads every <workdir>/<split>/seed_*/<run>/metrics.jsonl (`common.io.read_jsonl`); a step
  that only some seeds logged is averaged over those. Runs without the metric (e.g. 'nearest', 'warmup' for
  an 'rl/' key) are left out.

  Args:
    workdir: the run directory's root.
    runs: run names, in legend order.
    path: the PNG to write (its folder is created).
    split: the split folder; None for the older layout.
    key: the metric ('rl/reward' = mean training match ratio of the batch, 'rl/loss', ...).
  Returns:
    path.
  Raises:
    FileNotFoundError: no run of `runs` logged `key` (the message names the folder searched).
  """
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  root = _split_root(workdir, split)
  curves = {}
  for run in runs:
    per_seed = []
    for seed in _seeds_in(root):
      mpath = os.path.join(run_dir(workdir, run=run, seed=seed, split=split), "metrics.jsonl")
      if os.path.isfile(mpath):
        pts = {int(r["step"]): float(r[key]) for r in io.read_jsonl(mpath)
               if isinstance(r.get(key), (int, float)) and "step" in r}
        if pts:
          per_seed.append(pts)
    if per_seed:
      steps_ = sorted(set().union(*per_seed))
      mat = np.array([[p.get(s, np.nan) for s in steps_] for p in per_seed], np.float64)
      curves[run] = (np.array(steps_), mat)
  if not curves:
    raise FileNotFoundError(f"no metrics.jsonl under {root}/seed_*/<run>/ has {key!r} for runs {list(runs)}")
  fig = Figure(figsize=(6.4, 4.0), layout="constrained")
  ax = fig.subplots()
  for run, (xs, mat) in curves.items():
    with np.errstate(invalid="ignore"):
      ok = ~np.all(np.isnan(mat), axis=0)
      xs, mat = xs[ok], mat[:, ok]
      mean = np.nanmean(mat, axis=0)
    line, = ax.plot(xs, mean, label=f"{run} (n={mat.shape[0]})")
    if mat.shape[0] > 1:
      ax.fill_between(xs, np.nanmin(mat, axis=0), np.nanmax(mat, axis=0), color=line.get_color(), alpha=0.2,
                      linewidth=0)
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.set_xlabel("step")
  ax.set_ylabel(key)
  ax.set_title(f"{key}: mean over seeds, min-max band" + (f" ({split} split)" if split else ""))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110)
  return path


def find_runs(workdir: str) -> list[tuple[str | None, int, str]]:
  """Every (split, seed, run) folder under workdir: <workdir>/<split>/seed_<s>/<run>/, and
  (None, s, run) for the older layout <workdir>/seed_<s>/<run>/; sorted."""
  out = set()
  if not os.path.isdir(workdir):
    return []
  splits = [None] + sorted(d for d in os.listdir(workdir) if _seeds_in(os.path.join(workdir, d)))
  for split in splits:
    root = _split_root(workdir, split)
    for seed in _seeds_in(root):
      sdir = os.path.join(root, f"seed_{seed}")
      out.update((split, seed, r) for r in os.listdir(sdir) if os.path.isdir(os.path.join(sdir, r)))
  return sorted(out, key=lambda x: (x[0] or "", x[1], x[2]))


def _output_dir(workdir: str, split: str | None) -> str:
  return os.path.join(workdir, split) if split is not None else os.path.join(workdir, "plots")


def plot_all(workdir: str, *, splits: Sequence[str | None], runs: Sequence[str], seeds: Sequence[int],
             tool_names: Sequence[str] | None = None) -> list[str]:
  """Every picture of a workdir: pheromone heat maps of the runs with snapshots, and the learning curves.

  For each split: <workdir>/<split>/heatmap_<run>_seed<s>.png (`heatmap` of the run's snapshots) for every
  (run, seed) folder that has pheromone snapshots, and <workdir>/<split>/learning_curves.png
  (`learning_curves` of 'rl/reward' over the runs that logged it). Missing runs, seeds and metrics are
  skipped, so a workdir with only 'nearest' and 'warmup' gives no picture. Split None (the older layout)
  writes into <workdir>/plots/.

  Args:
    workdir: the run directory's root.
    splits, runs, seeds: what to look for (e.g. config splits, runs and seeds).
    tool_names: the N tool names of the snapshots' columns; None reads them from the problem of
      <workdir>/config.json (`phgpo.problem.prepare_problem`, only when a heat map is drawn; the tool
      catalogue, hence the names, is the same for every split).
  Returns:
    The written paths.
  """
  written = []
  for split in splits:
    out_dir = _output_dir(workdir, split)
    for run in runs:
      for seed in seeds:
        snaps = load_snapshots(run_dir(workdir, run=run, seed=seed, split=split))
        if not snaps:
          continue
        if tool_names is None:
          tool_names = list(problem_lib.prepare_problem(load_config(workdir), split or "random").graph.tool_names)
        written.append(heatmap(snaps, tool_names, os.path.join(out_dir, f"heatmap_{run}_seed{seed}.png"),
                               title=f"{run}, seed {seed}" + (f", {split} split" if split else "")
                               + ": task-agnostic pheromone"))
    try:
      written.append(learning_curves(workdir, runs, os.path.join(out_dir, "learning_curves.png"), split=split))
    except FileNotFoundError as e:
      logging.info("no learning curves for split %s: %s", split, e)
  return written
