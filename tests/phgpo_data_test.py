"""Tests for phgpo/data.py: the real TRAJECT-Bench counts, the catalogue check, the split, the errors."""
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from phgpo import data
from phgpo import long_horizon

DOMAIN_COUNTS = {"Education": 200, "Finance": 135, "Gaming": 185, "Mapping": 200, "Music": 200,
                 "News_Media": 180, "Travel": 170, "Weather": 200, "eCommerce": 200}
CALLS_PER_TASK = {3: 225, 4: 215, 5: 220, 6: 215, 7: 195, 8: 200, 9: 195, 10: 205}


def _real_root():
  try:
    return data.find_traject_bench()
  except FileNotFoundError as e:
    raise absltest.SkipTest(f"TRAJECT-Bench not available: {e}") from None


def _write_toy(root: pathlib.Path, tasks=None):
  """A two-task, one-domain dataset; the second task uses a tool the catalogue lacks."""
  (root / "sequential" / "Toy").mkdir(parents=True)
  (root / "tools").mkdir()
  call = lambda name, req, opt, status="success", out="out": {
      "tool name": name, "tool description": f"use {name}", "execution_status": status, "executed_output": out,
      "required parameters": [{"name": k, "value": v} for k, v in req.items()],
      "optional parameters": [{"name": k, "value": v} for k, v in opt.items()]}
  if tasks is None:
    tasks = [
        {"query": "q0", "final_answer": {"answer": "a0", "reason": "r"},
         "tool list": [call("Api: search", {"q": "x"}, {"limit": 3}), call("Api: get", {"id": "1"}, {}, "failed")]},
        {"query": "q1", "final_answer": "a1",
         "tool list": [call("Other: thing", {"n": 2, "flag": True}, {"extra": "e"})]},
    ]
  (root / "sequential" / "Toy" / "traj_query.json").write_text(json.dumps(tasks))
  param = lambda n, t: {"name": n, "type": t, "description": f"the {n}", "default": ""}
  catalogue = [
      {"tool name": "Api: search", "tool description": "Searches.", "domain name": "Toy",
       "required_parameters": [param("q", "STRING")], "optional_parameters": [param("limit", "NUMBER")]},
      {"tool name": "Api: get", "tool description": "Gets.", "domain name": "Toy",
       "required_parameters": [param("id", "STRING")], "optional_parameters": []},
      {"tool name": "Api: unused", "tool description": "Unused.", "domain name": "Toy",
       "required_parameters": [], "optional_parameters": [param("day", "DATE (YYYY-MM-DD)")]},
  ]
  (root / "tools" / "Toy_tool.json").write_text(json.dumps(catalogue))
  return root


class RealDataTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = _real_root()
    cls.tasks = data.load_tasks(cls.root)
    cls.tools = data.load_tool_catalogue(cls.root, cls.tasks)

  def test_counts(self):
    s = data.dataset_summary(self.tasks, self.tools)
    self.assertEqual(s["num_tasks"], 1670)
    self.assertEqual(s["tasks_per_domain"], DOMAIN_COUNTS)
    self.assertEqual(s["num_calls"], 10695)
    self.assertEqual(s["calls_per_task"], CALLS_PER_TASK)
    self.assertEqual(s["unique_tools_used"], 381)
    self.assertEqual(s["failed_calls"], 1317)
    self.assertEqual(s["num_tools"], 381)
    self.assertEqual(s["tools_from_tasks"], 35)
    self.assertEqual(s["used_tools_missing_from_tools"], 0)

  def test_first_task_fields(self):
    t = next(t for t in self.tasks if t.task_id == "Finance/0")
    self.assertEqual(t.domain, "Finance")
    self.assertTrue(t.query.startswith("I'm looking to do some technical analysis on Apple stock."))
    self.assertTrue(t.final_answer.startswith("I've analyzed Apple's stock data"))
    c = t.calls[0]
    self.assertEqual(c.name, "Alpha Vantage: Search Endpoint")
    self.assertEqual(dict(c.arguments), {"keywords": "apple", "function": "SYMBOL_SEARCH", "datatype": "json"})
    self.assertEqual(c.arg_keys, ("datatype", "function", "keywords"))
    self.assertEqual(c.status, "success")
    self.assertTrue(c.output.startswith("{'bestMatches'"))
    self.assertEqual(len(t.calls), 3)

  def test_task_ids_unique_and_stable(self):
    ids = [t.task_id for t in self.tasks]
    self.assertLen(set(ids), len(ids))
    self.assertEqual(ids[:2], ["Education/0", "Education/1"])
    self.assertEqual(ids, [t.task_id for t in data.load_tasks(self.root)])

  def test_catalogue_covers_gold_and_is_sorted(self):
    names = [s.name for s in self.tools]
    self.assertEqual(names, sorted(names))
    self.assertEqual(set(names), {c.name for t in self.tasks for c in t.calls})
    for s in self.tools:
      schema = s.input_schema
      self.assertEqual(schema["type"], "object")
      self.assertContainsSubset(schema["required"], schema["properties"])
      self.assertEqual(set(s.required) | set(s.optional), set(schema["properties"]))
      self.assertEqual(set(s.mcp()), {"name", "description", "inputSchema"})
      json.dumps(s.mcp())  # serialisable
    # Every gold call's parameter names are accepted by its tool's schema.
    by_name = {s.name: s for s in self.tools}
    for t in self.tasks:
      for c in t.calls:
        self.assertContainsSubset(c.arg_keys, by_name[c.name].input_schema["properties"])
    alpha = by_name["Alpha Vantage: Search Endpoint"]
    self.assertEqual(alpha.source, "catalogue")
    self.assertEqual(alpha.domain, "Finance")
    self.assertEqual(by_name["Chess Puzzles: Puzzles"].source, "tasks")

  def test_scope_all(self):
    all_tools = data.load_tool_catalogue(self.root, self.tasks, scope="all")
    self.assertLen(all_tools, 709)  # 674 catalogue names + 35 task-only ones.
    self.assertContainsSubset([s.name for s in self.tools], [s.name for s in all_tools])

  def test_domains_filter(self):
    fin = data.load_tasks(self.root, domains=["Finance"])
    self.assertLen(fin, 135)
    self.assertEqual({t.domain for t in fin}, {"Finance"})
    with self.assertRaisesRegex(ValueError, r"unknown domain.*Email.*available"):
      data.load_tasks(self.root, domains=["Email"])

  def test_split_stratified_and_deterministic(self):
    train, held = data.split_tasks(self.tasks, held_out_fraction=0.2, seed=0)
    self.assertLen(held, 334)
    self.assertLen(train, 1336)
    held_counts = data.dataset_summary(held)["tasks_per_domain"]
    self.assertEqual(held_counts, {d: int(n * 0.2 + 0.5) for d, n in DOMAIN_COUNTS.items()})
    ids = lambda ts: [t.task_id for t in ts]
    self.assertEmpty(set(ids(train)) & set(ids(held)))
    self.assertCountEqual(ids(train) + ids(held), ids(self.tasks))
    again = data.split_tasks(self.tasks, held_out_fraction=0.2, seed=0)
    self.assertEqual(ids(again[1]), ids(held))
    shuffled = list(self.tasks)
    random.Random(3).shuffle(shuffled)
    self.assertCountEqual(ids(data.split_tasks(shuffled, seed=0)[1]), ids(held))
    other = data.split_tasks(self.tasks, seed=1)[1]
    self.assertNotEqual(set(ids(other)), set(ids(held)))
    # One domain's split does not depend on the others being loaded.
    fin_only = data.split_tasks([t for t in self.tasks if t.domain == "Finance"], seed=0)[1]
    self.assertEqual(ids(fin_only), [i for i in ids(held) if i.startswith("Finance/")])


class LongHorizonTest(absltest.TestCase):
  """The SYNTHETIC 'long' split: composed tasks on real data, rebuilt by the replay environment from their ids."""

  def test_composed_tasks_on_real_data(self):
    root = _real_root()
    tasks = data.load_tasks(root, domains=["Finance"])
    train, held = data.split_tasks(tasks, seed=0)
    long_held = long_horizon.compose_long_horizon(held, seed=0)
    self.assertEqual(long_horizon.compose_long_horizon(held, seed=0), long_held)          # deterministic
    held_ids = {t.task_id for t in held}
    lengths = [len(t.calls) for t in long_held]
    self.assertTrue(all(6 <= n <= 20 for n in lengths))
    self.assertTrue(any(n > 10 for n in lengths), "the >10-calls bucket must not be empty")
    by_id = {t.task_id: t for t in tasks}
    for t in long_held:
      a, b = long_horizon.long_task_parts(t.task_id)
      self.assertIn(a, held_ids)
      self.assertIn(b, held_ids)                       # both halves from the held-out side
      self.assertEqual(t.calls, by_id[a].calls + by_id[b].calls)
      self.assertIn(long_horizon.LONG_JOIN, t.query)
    self.assertIsNone(long_horizon.long_task_parts("Finance/3"))
    from phgpo import replay_env
    env = replay_env.make_replay_env(data_root=str(root), domains=["Finance"],
                                     task_ids=[t.task_id for t in held] + [long_held[0].task_id])
    obs = env.reset(long_held[0].task_id, 0)
    self.assertIn(long_held[0].query, obs)


class ToyDataTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.root = _write_toy(pathlib.Path(self.create_tempdir().full_path))

  def test_toy_tasks_and_task_only_tool(self):
    tasks = data.load_tasks(self.root)
    self.assertEqual([t.task_id for t in tasks], ["Toy/0", "Toy/1"])
    self.assertEqual(tasks[0].final_answer, "a0")
    self.assertEqual(tasks[1].final_answer, "a1")
    self.assertEqual(tasks[0].calls[1].status, "failed")
    tools = data.load_tool_catalogue(self.root, tasks)
    self.assertEqual([s.name for s in tools], ["Api: get", "Api: search", "Other: thing"])
    other = tools[2]
    self.assertEqual(other.source, "tasks")
    self.assertEqual(other.description, "use Other: thing")
    self.assertEqual(other.required, ("n", "flag"))
    self.assertEqual(other.optional, ("extra",))
    self.assertEqual(other.input_schema["properties"],
                     {"n": {"type": "number"}, "flag": {"type": "boolean"}, "extra": {"type": "string"}})
    search = tools[1].input_schema
    self.assertEqual(search["properties"]["limit"], {"type": "number", "description": "the limit"})
    self.assertEqual(search["required"], ["q"])
    all_tools = data.load_tool_catalogue(self.root, tasks, scope="all")
    unused = next(s for s in all_tools if s.name == "Api: unused")
    self.assertEqual(unused.input_schema["properties"]["day"]["format"], "date")
    with self.assertRaisesRegex(ValueError, "data.tool_scope"):
      data.load_tool_catalogue(self.root, tasks, scope="some")

  @parameterized.named_parameters(
      ("no_query", {"final_answer": "a", "tool list": []}, r"task 1: missing or empty 'query'"),
      ("empty_calls", {"query": "q", "final_answer": "a", "tool list": []}, r"task 1: missing or empty 'tool list'"),
      ("bad_params", {"query": "q", "final_answer": "a", "tool list": [
          {"tool name": "Api: get", "required parameters": "id=1", "optional parameters": []}]},
       r"task 1: call 0: 'required parameters' must be a list"),
      ("no_tool_name", {"query": "q", "final_answer": "a", "tool list": [{"required parameters": []}]},
       r"task 1: call 0 has no 'tool name'"),
  )
  def test_malformed_file_names_file_and_index(self, bad_task, pattern):
    root = pathlib.Path(self.create_tempdir().full_path)
    good = {"query": "q", "final_answer": "a", "tool list": [
        {"tool name": "Api: get", "required parameters": [{"name": "id", "value": "1"}],
         "optional parameters": [], "execution_status": "success", "executed_output": "o"}]}
    _write_toy(root, [good, bad_task])
    with self.assertRaisesRegex(data.DataError, r"Toy/traj_query\.json, " + pattern):
      data.load_tasks(root)

  def test_split_errors_and_edges(self):
    tasks = data.load_tasks(self.root)
    with self.assertRaisesRegex(ValueError, "data.held_out_fraction"):
      data.split_tasks(tasks, held_out_fraction=1.0)
    with self.assertRaisesRegex(ValueError, "duplicate task ids"):
      data.split_tasks(tasks + tasks)
    train, held = data.split_tasks(tasks, held_out_fraction=0.0)
    self.assertEqual((len(train), len(held)), (2, 0))
    train, held = data.split_tasks(tasks, held_out_fraction=0.5)
    self.assertEqual((len(train), len(held)), (1, 1))


class FindDataTest(absltest.TestCase):

  def test_missing_data_message(self):
    missing = pathlib.Path(tempfile.gettempdir()) / "no-such-traject-bench-here"
    with mock.patch.object(data, "_default_shared_dir", return_value=missing), mock.patch.dict(os.environ):
      os.environ.pop(data.ENV_VAR, None)
      with self.assertRaises(FileNotFoundError) as cm:
        data.find_traject_bench()
    msg = str(cm.exception)
    self.assertIn(f"shared data folder: {missing} (no such folder)", msg)  # the missing-data path ran
    self.assertIn("To fix: download", msg)
    self.assertIn("https://github.com/PengfeiHePower/TRAJECT-Bench", msg)
    self.assertIn("sequential/<Domain>/traj_query.json", msg)
    self.assertIn("public_data/tools/", msg)
    self.assertIn(str(missing), msg)
    self.assertIn("TRAJECT_BENCH_DIR", msg)

  def test_launcher_without_data_says_what_to_download(self):
    # The main job's command with the shared folder hidden (as on a fresh checkout without ../shared), a
    # wrong --data_dir and no $TRAJECT_BENCH_DIR: it stops before training with the download instructions.
    missing = pathlib.Path(self.create_tempdir().full_path) / "no-shared-data"
    workdir = self.create_tempdir().full_path
    launcher = ("import pathlib, runpy, sys\n"
                "from phgpo import data\n"
                f"data._default_shared_dir = lambda: pathlib.Path({str(missing)!r})\n"
                "sys.argv = ['experiments.train'] + sys.argv[1:]\n"
                "runpy.run_module('experiments.train', run_name='__main__', alter_sys=True)\n")
    env = {k: v for k, v in os.environ.items() if k != data.ENV_VAR}
    out = subprocess.run(
        [sys.executable, "-c", launcher, "--config=configs/phgpo_traject.py:smoke", f"--workdir={workdir}",
         "--data_dir=/nonexistent/traject"],
        cwd=data.repo_root(), env=env, capture_output=True, text=True, timeout=600)
    self.assertNotEqual(out.returncode, 0, out.stdout)
    err = out.stderr
    self.assertIn("FileNotFoundError: TRAJECT-Bench data not found", err)
    # The given folder is used as given: the error names it, and says the shared copy is only the default.
    self.assertIn("given path (--data_dir, config data.path): /nonexistent/traject (no such folder)", err)
    self.assertIn(f"the shared copy {missing} is the default only when", err)
    self.assertIn("https://github.com/PengfeiHePower/TRAJECT-Bench", err)
    self.assertIn("public_data/sequential/<Domain>/traj_query.json", err)
    self.assertIn("to /nonexistent/traject/", err)
    self.assertIn("TRAJECT_BENCH_DIR", err)
    self.assertFalse(os.path.exists(os.path.join(workdir, "seed0")), os.listdir(workdir))

  def test_given_path_then_env(self):
    toy = _write_toy(pathlib.Path(self.create_tempdir().full_path))
    missing = toy / "absent"
    with mock.patch.object(data, "_default_shared_dir", return_value=missing), mock.patch.dict(os.environ):
      os.environ.pop(data.ENV_VAR, None)
      self.assertEqual(data.find_traject_bench(toy), toy.resolve())
      os.environ[data.ENV_VAR] = str(toy)
      self.assertEqual(data.find_traject_bench(), toy.resolve())
      os.environ.pop(data.ENV_VAR)
      with self.assertRaisesRegex(FileNotFoundError, r"given path \(--data_dir, config data.path\): .*absent "
                                  r"\(no such folder\)"):
        data.find_traject_bench(missing)

  def test_user_data_wins_over_the_shared_copy(self):
    # Issue 30: the shared copy used to come first, so a run meant for other data trained on it.
    shared = _write_toy(pathlib.Path(self.create_tempdir().full_path))
    other = _write_toy(pathlib.Path(self.create_tempdir().full_path))
    env_dir = _write_toy(pathlib.Path(self.create_tempdir().full_path))
    with mock.patch.object(data, "_default_shared_dir", return_value=shared), mock.patch.dict(os.environ):
      os.environ.pop(data.ENV_VAR, None)
      self.assertEqual(data.find_traject_bench(), shared.resolve())          # nothing given: the shared copy
      self.assertEqual(data.find_traject_bench(""), shared.resolve())        # config data.path '' = not given
      self.assertEqual(data.find_traject_bench(other), other.resolve())      # --data_dir / data.path
      os.environ[data.ENV_VAR] = str(env_dir)
      self.assertEqual(data.find_traject_bench(), env_dir.resolve())         # $TRAJECT_BENCH_DIR
      self.assertEqual(data.find_traject_bench(other), other.resolve())      # the given path before the variable
      # A given folder without the data is an error, never a silent fall-back to the shared copy.
      with self.assertRaisesRegex(FileNotFoundError, "no such folder"):
        data.find_traject_bench(other / "absent")
      os.environ[data.ENV_VAR] = str(other / "absent")
      with self.assertRaisesRegex(FileNotFoundError, r"\$TRAJECT_BENCH_DIR: .*absent \(no such folder\)"):
        data.find_traject_bench()


if __name__ == "__main__":
  absltest.main()
