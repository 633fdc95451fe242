"""Tests for phgpo/catalogue.py (the catalogue format, its two readers, the named errors), the graph prior
(phgpo.graph.graph_from_counts, phgpo.pheromone.tau_from_counts, pheromone.init_graph) and the user's data
winning over the shared copy (issue 30)."""
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from configs import phgpo_traject
from phgpo import catalogue
from phgpo import data
from phgpo import graph as graph_lib
from phgpo import pheromone
from phgpo import problem as problem_lib
from phgpo import runs
from phgpo import steps

REPO = pathlib.Path(__file__).resolve().parents[1]
_SHARED_GRAPH = catalogue.default_graph_dir() / catalogue.GRAPH_FILE

# A small catalogue in TRAJECT-Bench's layout: two domains, each with its own five tools, and chains of 3-4 calls.
# A tool's argument keys depend on the query (two argument patterns per tool), so the authors' form has variants.
TOOLS = {"Toy": ["Alpha: find", "Alpha: get", "Beta: list", "Beta: show", "Gamma: sum"],
         "Mini": ["Delta: open", "Delta: read", "Eps: scan", "Eps: tally", "Zeta: close"]}


def _call(name, i, k):
  req = {"q": f"v{i}"}
  opt = {"limit": 3} if (i + k) % 3 == 0 else {}
  return {"tool name": name, "tool description": f"{name} (call)", "execution_status": "success",
          "executed_output": f"output of {name} for query {i}",
          "required parameters": [{"name": a, "value": v} for a, v in req.items()],
          "optional parameters": [{"name": a, "value": v} for a, v in opt.items()]}


def write_traject_fixture(root: pathlib.Path, per_domain: int = 8, domains=("Toy", "Mini")) -> pathlib.Path:
  """Writes `per_domain` queries per domain in TRAJECT-Bench's layout under root; returns root."""
  (root / "tools").mkdir(parents=True, exist_ok=True)
  for d in domains:
    names = TOOLS[d]
    (root / "sequential" / d).mkdir(parents=True, exist_ok=True)
    param = lambda n, t: {"name": n, "type": t, "description": f"the {n}", "default": ""}
    cat = [{"tool name": n, "tool description": f"{n} does one thing in {d}.", "domain name": d,
            "required_parameters": [param("q", "STRING")], "optional_parameters": [param("limit", "NUMBER")]}
           for n in names]
    (root / "tools" / f"{d}_tool.json").write_text(json.dumps(cat))
    tasks = []
    for i in range(per_domain):
      chain = [names[(i + k) % len(names)] for k in range(3 + i % 2)]
      tasks.append({"query": f"{d} request {i}: first {chain[0]}, then {chain[1]}", "final_answer": "done",
                    "tool list": [_call(n, i, k) for k, n in enumerate(chain)]})
    (root / "sequential" / d / "traj_query.json").write_text(json.dumps(tasks))
  return root


def authors_records(tasks) -> list[dict]:
  """The authors' mcp_rl_graph.json records of these tasks, built the way their release is (module docstring of
  phgpo.catalogue): one record per (tool, argument pattern), ranked by calls, each tool's successor counts
  repeated on every variant of it."""
  calls = collections.defaultdict(collections.Counter)
  first = {}
  nxt = collections.defaultdict(collections.Counter)
  order = 0
  for t in tasks:
    for a, b in zip(t.calls, t.calls[1:] + (None,)):
      calls[a.name][a.arg_keys] += 1
      first.setdefault((a.name, a.arg_keys), order)
      order += 1
      if b is not None:
        nxt[a.name][b.name] += 1
  recs = []
  for tool in sorted(calls):
    ranked = sorted(calls[tool], key=lambda k: (-calls[tool][k], first[(tool, k)]))
    for r, keys in enumerate(ranked):
      recs.append({"id": len(recs), "name": tool if r == 0 else f"{tool}_v{r}", "original_name": tool,
                   "description": f"{tool} (call)", "domain": tool.split(":")[0], "parent_tool": tool.split(":")[0],
                   "api_name": tool.split(": ")[1],
                   "params": {k: {"type": "string", "required": True, "description": ""} for k in keys},
                   "actual_keys": list(keys), "key_hash": "0" * 12, "call_count": calls[tool][keys],
                   "next_tools": dict(nxt[tool])})
  return recs


def write_graph(folder: pathlib.Path, records) -> pathlib.Path:
  folder.mkdir(parents=True, exist_ok=True)
  (folder / catalogue.GRAPH_FILE).write_text(json.dumps({"tools": records, "meta": {"source": "test"}}))
  return folder


def _config(path, **data_kw):
  c = phgpo_traject.get_config("smoke")
  c.data.path = str(path)
  for k, v in data_kw.items():
    c.data[k] = v
  return c


@pytest.mark.fast
class AuthorsGraphReaderTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path) / "tb")
    self.tasks = data.load_tasks(self.root)
    self.gdir = write_graph(pathlib.Path(self.create_tempdir().full_path), authors_records(self.tasks))

  def test_variants_map_to_tools_and_templates(self):
    cat = catalogue.read_authors_graph(self.gdir / catalogue.GRAPH_FILE, self.root)
    self.assertEqual(cat.format, "authors_graph")
    self.assertEqual([s.name for s in cat.tools], sorted(n for ns in TOOLS.values() for n in ns))
    self.assertLen(cat.tasks, 16)
    spec = {s.name: s for s in cat.tools}["Alpha: find"]
    self.assertEqual(spec.required, ("q",))            # in every variant
    self.assertEqual(spec.optional, ("limit",))        # in one variant only
    self.assertEqual(spec.input_schema["properties"]["q"], {"type": "string"})
    # Templates: each variant's key set, ranked as the variants are; counts are the call counts.
    for tool, ranked in cat.prior.templates.items():
      uses = collections.Counter(c.arg_keys for t in self.tasks for c in t.calls if c.name == tool)
      self.assertEqual(dict(ranked), dict(uses))
      self.assertEqual([c for _, c in ranked], sorted(uses.values(), reverse=True))
    # The edges: counted once per tool although every variant repeats them; equal to the trajectories' graph.
    names = [s.name for s in cat.tools]
    counts, dropped = cat.prior.counts(names)
    built = graph_lib.build_tool_graph(names, [[(c.name, c.arg_keys) for c in t.calls] for t in self.tasks])
    np.testing.assert_array_equal(counts[:-1], built.edge_counts[:-1])
    self.assertEqual(int(counts[-1].sum()), 0)           # the authors' graph has no START node
    self.assertEqual(dropped, 0)
    self.assertEqual(cat.paths, {"queries": str(self.root.resolve()),
                                 "graph": str((self.gdir / catalogue.GRAPH_FILE).resolve())})

  def test_scope_domains_and_max_tasks(self):
    cat = catalogue.read_authors_graph(self.gdir / catalogue.GRAPH_FILE, self.root, domains=["Toy"])
    self.assertEqual({s.name for s in cat.tools}, set(TOOLS["Toy"]))
    cat = catalogue.read_authors_graph(self.gdir / catalogue.GRAPH_FILE, self.root, domains=["Toy"],
                                       tool_scope="all")
    self.assertLen(cat.tools, 10)
    cat = catalogue.read_authors_graph(self.gdir / catalogue.GRAPH_FILE, self.root, max_tasks=5, seed=0)
    self.assertLen(cat.tasks, 5)
    self.assertEqual([t.task_id for t in cat.tasks],
                     [t.task_id for t in catalogue.read_traject_bench(self.root, max_tasks=5, seed=0).tasks])

  def test_edge_to_a_variant_name_maps_to_its_tool(self):
    recs = authors_records(self.tasks)
    variant = next(r["name"] for r in recs if r["name"].endswith("_v1"))
    for r in recs:
      if r["original_name"] == "Zeta: close":
        r["next_tools"] = {variant: 2}
    _, prior = catalogue.read_authors_graph_file(write_graph(pathlib.Path(self.create_tempdir().full_path),
                                                             recs) / catalogue.GRAPH_FILE)
    self.assertEqual(prior.edges[("Zeta: close", variant.rsplit("_v", 1)[0])], 2)

  def test_variants_with_different_counts_are_summed(self):
    recs = authors_records(self.tasks)
    tool = next(r["original_name"] for r in recs if r["name"].endswith("_v1"))
    vs = [r for r in recs if r["original_name"] == tool]
    vs[0]["next_tools"], vs[1]["next_tools"] = {"Gamma: sum": 2}, {"Gamma: sum": 3}
    for r in vs[2:]:
      r["next_tools"] = {}
    _, prior = catalogue.read_authors_graph_file(write_graph(pathlib.Path(self.create_tempdir().full_path),
                                                             recs) / catalogue.GRAPH_FILE)
    self.assertEqual(prior.edges[(tool, "Gamma: sum")], 5)

  def test_edge_to_an_unknown_tool_is_named(self):
    recs = authors_records(self.tasks)
    recs[0]["next_tools"]["Alpha: fnd"] = 4
    file = write_graph(pathlib.Path(self.create_tempdir().full_path), recs) / catalogue.GRAPH_FILE
    with self.assertRaises(catalogue.UnknownEdgeTool) as cm:
      catalogue.read_authors_graph(file, self.root)
    msg = str(cm.exception)
    for part in (str(file), "'Alpha: fnd'", f"tool {recs[0]['original_name']!r}", "Close tool names",
                 "'Alpha: find'", "data.graph_path", "next_tools"):
      self.assertIn(part, msg)

  def test_tools_no_query_uses_are_named(self):
    recs = authors_records(self.tasks)
    for r in recs:
      r["original_name"] = "Other " + r["original_name"]
      r["name"] = "Other " + r["name"]
      r["next_tools"] = {"Other " + k: v for k, v in r["next_tools"].items()}
    file = write_graph(pathlib.Path(self.create_tempdir().full_path), recs) / catalogue.GRAPH_FILE
    with self.assertRaises(catalogue.UnusedTools) as cm:
      catalogue.read_authors_graph(file, self.root)
    for part in ("none of the 10 tools", str(file), "16 queries", "joined by tool name", "data.path",
                 "data.graph_path"):
      self.assertIn(part, str(cm.exception))

  def test_malformed_record_names_the_record(self):
    recs = authors_records(self.tasks)
    recs[3]["call_count"] = -1
    file = write_graph(pathlib.Path(self.create_tempdir().full_path), recs) / catalogue.GRAPH_FILE
    with self.assertRaisesRegex(data.DataError, r"record 3: 'call_count' must be an integer >= 0"):
      catalogue.read_authors_graph_file(file)

  def test_missing_graph_file_names_the_key(self):
    with self.assertRaisesRegex(FileNotFoundError, "config data.graph_path"):
      catalogue.find_graph_file(self.create_tempdir().full_path)


@absltest.skipUnless(_SHARED_GRAPH.is_file(), "the authors' graph (../shared/data/phgpo_graphs) not found")
class RealAuthorsGraphTest(absltest.TestCase):

  def test_release_reads_into_the_catalogue(self):
    try:
      root = data.find_traject_bench()
    except FileNotFoundError as e:
      raise absltest.SkipTest(str(e)) from None
    cat = catalogue.read_authors_graph(_SHARED_GRAPH, root, tool_scope="all")
    self.assertLen(cat.tasks, 1670)
    self.assertLen(cat.tools, 381)
    self.assertEqual(sum(s.source == "tasks" for s in cat.tools), 0)
    self.assertLen(cat.prior.edges, 801)
    self.assertEqual(sum(len(v) for v in cat.prior.templates.values()), 715)
    # The same tool set as the TRAJECT-Bench reader's 'used' scope over every query.
    self.assertEqual([s.name for s in cat.tools],
                     [s.name for s in data.load_tool_catalogue(root, list(cat.tasks))])


class SplitErrorsTest(absltest.TestCase):
  """The named errors of prepare_problem: raised before any embedding or training."""

  def test_too_few_queries(self):
    root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path), per_domain=1, domains=("Toy",))
    with self.assertRaises(catalogue.TooFewQueries) as cm:
      problem_lib.prepare_problem(_config(root))
    for part in ("needs at least 2 queries", "found 1", str(root.resolve()), "data.domains", "data.max_tasks"):
      self.assertIn(part, str(cm.exception))
    with self.assertRaisesRegex(catalogue.TooFewQueries, "distinct gold chains"):
      catalogue.check_enough_queries([data.load_tasks(root)[0]] * 3, split="chain", where="x")

  def test_empty_held_out_set(self):
    # 2 queries in each of 2 domains: round(0.2 * 2) = 0 held out everywhere (was a bare numpy error).
    root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path), per_domain=2)
    with self.assertRaises(catalogue.EmptyHeldOut) as cm:
      problem_lib.prepare_problem(_config(root))
    for part in ("holds no query out", "data.held_out_fraction=0.2", "{'Mini': 2, 'Toy': 2}", "4 would train"):
      self.assertIn(part, str(cm.exception))

  def test_unknown_format_is_named(self):
    root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path))
    with self.assertRaisesRegex(ValueError, "data.format='csv'"):
      problem_lib.prepare_problem(_config(root, format="csv"))


@pytest.mark.fast
class GraphPriorTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_tau_from_counts(self):
    counts = np.array([[0, 4, 1], [0, 0, 0], [9, 0, 9], [2, 0, 0]], np.int32)   # N = 3, row 3 = START
    fn = self.variant(lambda c: pheromone.tau_from_counts(c, tau_min=0.1, tau_max=1.0))
    got = np.asarray(fn(jnp.asarray(counts)))
    want = np.full(counts.shape, 0.1)
    for i, row in enumerate(counts):
      if row.max() > 0:
        want[i] = 0.1 + 0.9 * np.log1p(row) / np.log1p(row.max())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    self.assertEqual(got.dtype, np.float32)
    self.assertEqual(got[0, 1], np.float32(1.0))       # a row's most frequent successor starts at tau_max
    self.assertEqual(got[0, 0], np.float32(0.1))       # an unseen one at tau_min

  def test_init_pheromone_rows_with_counts_only(self):
    counts = np.array([[0, 4], [0, 0], [1, 0]], np.int32)
    mask = np.array([[True, True], [True, False], [False, False]])
    st = pheromone.init_pheromone(2, 1, tau_init=0.5, tau_min=0.1, tau_max=1.0, bank_per_edge=2,
                                  edge_mask=mask, edge_counts=counts)
    tau = np.asarray(pheromone.effective_tau(st, tau_min=0.1))
    np.testing.assert_allclose(tau, [[0.1, 1.0], [0.5, 0.1], [1.0, 0.1]], rtol=1e-6)
    plain = pheromone.init_pheromone(2, 1, tau_init=0.5, tau_min=0.1, tau_max=1.0, bank_per_edge=2, edge_mask=mask)
    np.testing.assert_array_equal(np.asarray(plain.tau)[1], tau[1])   # the row without counts: as before
    with self.assertRaisesRegex(ValueError, "edge_counts must have shape"):
      pheromone.init_pheromone(2, 1, tau_init=0.5, tau_min=0.1, tau_max=1.0, bank_per_edge=2,
                               edge_counts=np.zeros((2, 2)))

  def test_graph_from_counts(self):
    counts = np.array([[0, 3, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]], np.int32)
    templates = {"a": ((("x",), 5), (("x", "y"), 2)), "b": ((("z",), 1),), "elsewhere": ((("w",), 9),)}
    g = graph_lib.graph_from_counts(["a", "b", "c"], counts, templates, max_templates=1,
                                    fallback_templates={"c": ("k",)})
    np.testing.assert_array_equal(g.edge_counts, counts)
    np.testing.assert_array_equal(g.edge_mask, counts > 0)
    self.assertEqual(g.templates, [(("x",),), (("z",),), (("k",),)])
    np.testing.assert_array_equal(g.template_counts, [[5], [1], [0]])
    with self.assertRaisesRegex(ValueError, "edge_counts must have shape"):
      graph_lib.graph_from_counts(["a"], counts, {})

  def test_init_graph_is_an_ablation_row(self):
    self.assertIn("init_graph", phgpo_traject.ABLATION_RUNS)
    self.assertEqual(runs.TABLE_RUNS["ablation"], phgpo_traject.ABLATION_RUNS)
    c = phgpo_traject.get_config("ablation")
    self.assertEqual(c.pheromone.init_graph, "")                           # default: today's empty start
    self.assertEqual(runs.run_config(c, "init_graph").pheromone.init_graph, "prior")
    self.assertEqual(runs.run_config(c, "phgpo").pheromone.init_graph, "")
    c.ablation.init_graph = "train"
    self.assertEqual(runs.run_config(c, "init_graph").pheromone.init_graph, "train")
    self.assertTrue(problem_lib.wants_prior(phgpo_traject.get_config("ablation")))
    self.assertFalse(problem_lib.wants_prior(phgpo_traject.get_config("smoke")))


class FewTrajectoriesTest(absltest.TestCase):
  """A catalogue with tools but few (or no) training trajectories takes the graph prior alone, and says so."""

  def setUp(self):
    super().setUp()
    self.root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path) / "tb")
    tasks = data.load_tasks(self.root)
    self.gdir = write_graph(pathlib.Path(self.create_tempdir().full_path), authors_records(tasks))
    self.cache = os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache", "phgpo_catalogue_test")

  def _problem(self, **kw):
    c = _config(self.root, graph_path=str(self.gdir), **kw.pop("data", {}))
    c.encoder.cache_dir = self.cache
    for k, v in kw.items():
      section, key = k.split(".")
      c[section][key] = v
    lines = []
    return problem_lib.prepare_problem(c, log=lines.append), lines, c

  def test_enough_trajectories_build_from_the_training_split(self):
    p, lines, _ = self._problem(**{"graph.min_trajectories": 4})
    self.assertEqual(p.graph_source, "train")
    self.assertLen(p.train_idx, 12)
    self.assertIsNotNone(p.prior_counts)               # data.graph_path given: the prior is read
    self.assertTrue(any("graph prior" in l for l in lines), lines)

  def test_few_trajectories_take_the_prior_alone(self):
    p, lines, c = self._problem(**{"graph.min_trajectories": 100})
    self.assertEqual(p.graph_source, "prior")
    np.testing.assert_array_equal(p.graph.edge_counts, p.prior_counts)
    line = next(l for l in lines if "graph prior alone" in l)
    self.assertIn("holds 12 gold trajectories (< graph.min_trajectories = 100)", line)
    # The pheromone starts from the prior's counts with init_graph 'prior' (and 'train' = the same graph here).
    c.pheromone.init_graph = "prior"
    tau = np.asarray(pheromone.effective_tau(steps.init_pheromone(c, p), tau_min=c.pheromone.tau_min))
    want = np.asarray(pheromone.tau_from_counts(p.prior_counts, tau_min=0.1, tau_max=1.0))
    rows = p.prior_counts.sum(axis=1) > 0
    np.testing.assert_allclose(tau[rows], want[rows], rtol=1e-6)

  def test_no_training_trajectory(self):
    # Every query held out (round(0.6 * 1) = 1 per domain): the graph prior alone, no crash.
    root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path), per_domain=1)
    c = _config(root, graph_path=str(self.gdir), held_out_fraction=0.6)
    c.encoder.cache_dir = self.cache
    lines = []
    p = problem_lib.prepare_problem(c, log=lines.append)
    self.assertEqual((len(p.train_idx), len(p.eval_idx)), (0, 2))
    self.assertEqual(p.graph_source, "prior")
    self.assertTrue(any("no training trajectory: the warm-up and RL take no step" in l for l in lines), lines)

  @pytest.mark.slow   # ~2 min on the loaded 2-core machine (the decoders' compilation); the problem is checked above
  def test_no_training_trajectory_trains_and_evaluates(self):
    from phgpo import train  # pylint: disable=g-import-not-at-top
    root = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path), per_domain=1)
    c = _config(root, graph_path=str(self.gdir), held_out_fraction=0.6)
    c.encoder.cache_dir = self.cache
    c.env.sandboxed = False
    c.runs = ("nearest", "warmup", "phgpo", "init_graph")
    lines = []
    results = train.run(c, self.create_tempdir().full_path, progress=False, log=lines.append)["random"][0]
    self.assertEqual(set(results), set(c.runs))
    for r in results.values():
      self.assertEqual(r["num_tasks"], 2)
    self.assertEqual(results["nearest"]["match_ratio"], 0.0)
    self.assertEqual(results["phgpo"]["first_success"]["visited"], 0)
    self.assertTrue(any("no training query to copy" in l for l in lines), lines)
    self.assertTrue(any("(from the graph prior alone)" in l for l in lines), lines)


@absltest.skipUnless(data._check_layout(data._default_shared_dir()) is None,  # pylint: disable=protected-access
                     "the shared TRAJECT-Bench copy is not present")
class DataDirWinsTest(absltest.TestCase):
  """Issue 30: with the shared copy present, --data_dir=OTHER trains on OTHER (it used to train on the shared
  copy and exit 0). The launcher's smoke run, cut to one warm-up step and one RL step, in the sandboxed replay
  workers (which must read OTHER too: they are handed the problem's folder)."""

  def test_launcher_trains_on_the_given_folder(self):
    other = write_traject_fixture(pathlib.Path(self.create_tempdir().full_path) / "other")
    workdir = self.create_tempdir().full_path
    env = {k: v for k, v in os.environ.items() if k != data.ENV_VAR}
    env["AGENTIC_RL_CACHE"] = os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache")
    out = subprocess.run(
        [sys.executable, "-m", "experiments.train", "--config=configs/phgpo_traject.py:smoke",
         f"--workdir={workdir}", f"--data_dir={other}", "--noprogress", "--config.runs=nearest,phgpo",
         "--config.warmup.steps=1", "--config.rl.steps=1", "--config.curriculum.steps=1",
         "--config.logging.pheromone_snapshots=0,1", "--config.env.num_workers=1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn(f"TRAJECT-Bench, random split: 16 tasks (12 train, 4 held out), 10 tools", out.stdout)
    saved = json.load(open(os.path.join(workdir, "results_main_nearest-phgpo.json")))
    self.assertEqual(saved["data"]["path"], str(other.resolve()))
    self.assertEqual(saved["data"]["format"], "traject_bench")
    self.assertNotIn("graph_path", saved["data"])
    from common import provenance  # pylint: disable=g-import-not-at-top
    self.assertEqual(saved["data"]["sha256"], provenance.data_fingerprint([str(other)]))
    for run in ("nearest", "phgpo"):
      ids = saved["results"]["random"]["0"][run]
      self.assertEqual(ids["num_tasks"], 4)
    per_task = json.load(open(os.path.join(workdir, "random", "seed_0", "phgpo", "results.json")))["per_task"]
    self.assertEqual({t.split("/")[0] for t in per_task["task_id"]}, {"Toy", "Mini"})
    head = open(os.path.join(workdir, "results_main_nearest-phgpo.txt")).readline()
    self.assertIn(f"data format traject_bench, {other.resolve()} sha256", head)


if __name__ == "__main__":
  absltest.main()
