"""phgpo.analysis, experiments/phgpo_plots.py and experiments/phgpo_notebook.ipynb, on a smoke run.

The smoke run (configs/phgpo_traject.py:smoke, its four runs, sandboxed environments) is trained once per test
session by the launcher in a subprocess, exactly as a user would (tests/shared_runs.py; phgpo_train_test reads
it too); this module works on its own copy. The notebook is executed top to bottom by nbclient on the venv's
python3 kernel with PHGPO_RUN_DIR pointing at it.
"""

import os
import pathlib
import shutil

import nbclient
import nbformat
import numpy as np
import psutil
import pytest

import procs
import shared_runs
from experiments import phgpo_plots
from phgpo import analysis

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "experiments" / "phgpo_notebook.ipynb"
CACHE = shared_runs.CACHE
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
  with open(path, "rb") as f:
    return f.read(8) == PNG_MAGIC and os.path.getsize(path) > 1000


@pytest.fixture(scope="module")
def env_cache():
  """The embedding cache of the test runs, for this process and the processes it starts."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("AGENTIC_RL_CACHE", CACHE)
    yield CACHE


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, env_cache):
  """A copy of the launcher's smoke run (tests/shared_runs.py, made once per session and shared with
  phgpo_train_test): <workdir>/random/seed_0/{nearest,warmup,grpo,phgpo}/ with pheromone snapshots."""
  del env_cache
  return shared_runs.copy_of(shared_runs.phgpo_smoke(), tmp_path_factory.mktemp("phgpo_run"))


@pytest.fixture(scope="module")
def view(smoke_run):
  return analysis.load_run(smoke_run, run="phgpo", seed=0, split="random")


# ---------------------------------------------------------------------------------------------
# Pure helpers on hand-made tables.


def test_top_edges_orders_names_and_filters():
  names = ["a", "b", "c"]
  tau = np.array([[0.1, 0.9, 0.1],
                  [0.5, 0.1, 0.5],
                  [0.1, np.nan, 0.1],
                  [0.7, 0.1, 0.1]], np.float32)   # row 3 = START
  got = analysis.top_edges(tau, names, k=4)
  assert [(s, d) for s, d, _ in got] == [("a", "b"), ("START", "a"), ("b", "a"), ("b", "c")]  # tie: row order
  np.testing.assert_allclose([v for _, _, v in got], [0.9, 0.7, 0.5, 0.5], rtol=1e-6)
  assert len(analysis.top_edges(tau, names, k=100)) == 11   # everything but the NaN
  floor = analysis.top_edges(tau, names, k=100, tau_min=0.1)
  assert [(s, d) for s, d, _ in floor] == [("a", "b"), ("START", "a"), ("b", "a"), ("b", "c")]
  assert analysis.top_edges(tau, names, k=0) == []
  with pytest.raises(ValueError, match=r"\[N\+1, N\]"):
    analysis.top_edges(tau[:3], names)
  with pytest.raises(ValueError, match="k must be"):
    analysis.top_edges(tau, names, k=-1)


def test_heatmap_writes_png(tmp_path):
  n = 50
  rng = np.random.default_rng(0)
  names = [f"tool_{i}" for i in range(n)]
  snaps = {0: np.full((n + 1, n), 0.5, np.float32), 7: rng.uniform(0.1, 1.0, (n + 1, n)).astype(np.float32)}
  path = analysis.heatmap(snaps, names, str(tmp_path / "sub" / "h.png"), top=12)
  assert path == str(tmp_path / "sub" / "h.png") and _is_png(path)
  one = analysis.heatmap({3: snaps[0]}, names[:5] + names[5:], str(tmp_path / "one.png"), top=200)
  assert _is_png(one)
  with pytest.raises(ValueError, match="at least one"):
    analysis.heatmap({}, names, str(tmp_path / "x.png"))
  with pytest.raises(ValueError, match="step 7"):
    analysis.heatmap({7: snaps[7][:, :3]}, names, str(tmp_path / "x.png"))


def test_policy_with_query_leaves_the_original_alone():

  class _TextPolicy:
    def __init__(self):
      self.queries = ["q0", "q1"]

  pol = _TextPolicy()
  copy_, row = analysis._policy_with_query(pol, "typed", np.zeros(4, np.float32))
  assert (copy_.queries, row, pol.queries) == (["q0", "q1", "typed"], 2, ["q0", "q1"])
  with pytest.raises(TypeError, match="neither"):
    analysis._policy_with_query(object(), "typed", np.zeros(4, np.float32))


def test_load_run_errors_name_path_and_command(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json not found.*experiments.train"):
    analysis.load_run(tmp_path, run="phgpo")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    phgpo_plots.plot_workdir(str(tmp_path / "nothing"))
  with pytest.raises(FileNotFoundError, match="holds no"):
    phgpo_plots.plot_workdir(str(tmp_path))


# ---------------------------------------------------------------------------------------------
# On the smoke run.


def test_load_run_restores_the_latest_checkpoint(view, smoke_run):
  n = len(view.tool_names)
  assert view.step == view.config.rl.steps
  assert view.tau.shape == (n + 1, n) and view.tau.dtype == np.float32
  assert view.weights == (view.config.pheromone.beta_max, view.config.pheromone.w_max)
  snaps = view.snapshots()
  assert sorted(snaps) == sorted(view.config.logging.pheromone_snapshots)
  np.testing.assert_array_equal(snaps[view.step], view.tau)   # the last snapshot is the final state's tau
  with pytest.raises(FileNotFoundError, match=r"seed_0/rho0 not found.*holds \['grpo', 'nearest', 'phgpo', 'warmup'\]"):
    analysis.load_run(smoke_run, run="rho0")
  with pytest.raises(FileNotFoundError, match="seed_0/phgpo not found.*older layout"):
    analysis.load_run(smoke_run, run="phgpo", split="chain")


def test_embed_query_matches_the_problem_row(view):
  i = int(view.problem.train_idx[0])
  np.testing.assert_array_equal(analysis.embed_query(view, view.problem.tasks[i].query), view.problem.query_emb[i])


def test_plan_returns_valid_tool_names(view):
  query = "Find hotels in Lisbon for three nights and show me the reviews of the best-rated one."
  names = set(view.tool_names)
  rows = view.compiled.policy.query_emb.shape
  for kw in (dict(max_steps=3), dict(max_steps=1, beta=0.0, w=0.0), dict(max_steps=2, beta=2.0, w=1.0)):
    got = analysis.plan(view, query, **kw)
    assert 1 <= len(got) <= kw["max_steps"] and set(got) <= names, (kw, got)
  assert analysis.plan(view, query, max_steps=3) == analysis.plan(view, query, max_steps=3)  # greedy
  full = analysis.plan(view, query)
  assert len(full) <= view.config.env.max_steps and set(full) <= names
  assert view.compiled.policy.query_emb.shape == rows   # the typed query went into a copy of the policy
  with pytest.raises(ValueError, match="max_steps"):
    analysis.plan(view, query, max_steps=0)
  with pytest.raises(ValueError, match="non-empty"):
    analysis.plan(view, "  ")


def test_plot_app_writes_the_pictures(smoke_run):
  split_dir = smoke_run / "random"
  for f in ("heatmap_phgpo_seed0.png", "learning_curves.png"):   # the trainer drew them already
    (split_dir / f).unlink(missing_ok=True)
  paths = phgpo_plots.plot_workdir(str(smoke_run))
  assert sorted(paths) == [str(split_dir / "heatmap_phgpo_seed0.png"), str(split_dir / "learning_curves.png")]
  assert all(_is_png(p) for p in paths)


def test_older_layout_without_split_folders(smoke_run, view, tmp_path):
  old = tmp_path / "old"
  old.mkdir()
  shutil.copy(smoke_run / "config.json", old / "config.json")
  (old / "seed_0").symlink_to(smoke_run / "random" / "seed_0")
  assert analysis.find_runs(str(old)) == [(None, 0, r) for r in ("grpo", "nearest", "phgpo", "warmup")]
  paths = analysis.plot_all(str(old), splits=[None], runs=["warmup", "phgpo"], seeds=[0],
                            tool_names=view.tool_names)
  assert sorted(paths) == [str(old / "plots" / "heatmap_phgpo_seed0.png"), str(old / "plots" / "learning_curves.png")]
  old_view = analysis.load_run(old, run="phgpo", seed=0, split=None)
  np.testing.assert_array_equal(old_view.tau, view.tau)


def test_committed_notebook_has_no_outputs():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code and all(c.outputs == [] and c.execution_count is None for c in code)


def test_notebook_runs_top_to_bottom(smoke_run, monkeypatch):
  monkeypatch.setenv("PHGPO_RUN_DIR", str(smoke_run))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  before = {p.pid for p in psutil.Process().children(recursive=True)}
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOK.parent)}})
  client.execute()   # raises CellExecutionError with the traceback on any failing cell
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  assert " 1. " in text and "->" in text and "PhGPO plan" in text, text[-3000:]
  assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
  left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and procs.alive(p)]
  assert not left, f"kernel processes left behind: {[procs.cmdline(p) for p in left]}"
