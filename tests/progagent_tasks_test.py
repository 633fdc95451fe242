"""Tests of the ProgAgent task library and ProgTaskEnv: oracles, verifiers, scaling, determinism, env surface.

Every task: both oracles pass at v0 and v3, doing nothing fails at v0 and v3, the plausible wrong solution and
the oracle without any one of the declared conditions fail at v0. Levels v1 and v2 (and the wrong solutions
there) are covered by `python -m progagent.audit`.
"""

import json
import shutil
import sqlite3
import tempfile
import threading

from absl.testing import absltest
from absl.testing import parameterized

import procs
from common import env_server
from common import tool_wire
from progagent import audit
from progagent import harness
from progagent import ptc_env
from progagent import tasks as tasks_lib
from progagent.task_env import ProgTaskEnv, split_instance_id
from progagent.tasks import base
from progagent.tasks import oracle

_CACHE = None


def setUpModule():
  global _CACHE
  _CACHE = tempfile.mkdtemp(prefix="progtasks-test-")


def tearDownModule():
  shutil.rmtree(_CACHE, ignore_errors=True)


def _cheap_tokens(text):   # the accounting is tested in progagent_harness_test; keep these runs fast
  return len(text) // 4


def _dump(env):
  """(database dump, {workspace path: text}) of the current episode."""
  conn = sqlite3.connect(env.db_path)
  try:
    db = "\n".join(conn.iterdump())
  finally:
    conn.close()
  ws = env.workspace_dir
  return db, {str(p.relative_to(ws)): p.read_text() for p in sorted(ws.rglob("*")) if p.is_file()}


class LibraryTest(parameterized.TestCase):

  def test_size_of_the_library(self):
    self.assertGreaterEqual(len(tasks_lib.DOMAINS), 23)
    self.assertGreaterEqual(len(tasks_lib.TASKS), 120)
    for name, dom in tasks_lib.DOMAINS.items():
      self.assertGreaterEqual(len(dom.tools), 5, name)
      self.assertGreaterEqual(len(tasks_lib.task_ids(name)), 3, name)
      names = [t.name for t in dom.tools]
      self.assertLen(set(names), len(names))
      self.assertNotIn("submit_answer", names)

  def test_unknown_ids_give_helpful_errors(self):
    with self.assertRaisesRegex(KeyError, "retail/"):
      tasks_lib.get_task("retail/nope")
    with self.assertRaisesRegex(KeyError, "unknown domain"):
      tasks_lib.task_ids("nope")
    with self.assertRaisesRegex(ValueError, "scale level"):
      ProgTaskEnv("retail/pending_over_500", scale=4)

  @parameterized.named_parameters((t.replace("/", "__"), t) for t in tasks_lib.task_ids())
  def test_task(self, task_id):
    for level in (0, 3):
      env = ProgTaskEnv(task_id, level, cache_dir=_CACHE)
      try:
        prompt = env.reset(seed=0)
        self.assertEqual(prompt, env.task.prompt)
        self.assertEqual(env.verify(), 0, f"{task_id}@v{level}: doing nothing passes")
        ptc = harness.run_oracle(env, "ptc", tokenizer=_cheap_tokens)
        self.assertEqual(ptc.stats.reward, 1.0, f"{task_id}@v{level}: PTC oracle fails: {ptc.messages[3:]}")
        self.assertTrue(audit.clean(env.task, ptc.stats), ptc.stats)
        self.assertEqual(ptc.stats.end, "done")
        answer = env.submitted_answer
        dtc = harness.run_oracle(env, "dtc", tokenizer=_cheap_tokens)
        self.assertEqual(dtc.stats.reward, 1.0, f"{task_id}@v{level}: DTC oracle fails")
        self.assertTrue(audit.clean(env.task, dtc.stats), dtc.stats)
        # The DTC oracle makes the same calls as the program, one per turn (plus nothing else).
        self.assertEqual(dtc.stats.tool_calls, ptc.stats.tool_calls)
        self.assertEqual(dtc.stats.turns, dtc.stats.tool_calls)
        self.assertEqual(env.submitted_answer, answer)
        if level == 0:
          self.assertEqual(audit.run_wrong(env, answer), 0, f"{task_id}: the wrong solution passes")
          for name in env.task.condition_names:   # dropping any one condition of the instruction fails
            self.assertEqual(audit.run_condition(env, name), (0, None), f"{task_id}: without {name!r}")
      finally:
        env.close()

  def test_instruction_and_tools_identical_across_levels(self):
    for tid in tasks_lib.task_ids():
      envs = [ProgTaskEnv(f"{tid}@v{k}") for k in base.LEVELS]
      try:
        self.assertEqual([e.scale for e in envs], list(base.LEVELS))
        for e in envs[1:]:
          self.assertEqual(e.tools(), envs[0].tools(), tid)
          self.assertEqual(e.task.prompt, envs[0].task.prompt, tid)
          self.assertIs(e.task.verify.__func__, envs[0].task.verify.__func__)
      finally:
        for e in envs:
          e.close()

  def test_scale_doubles_rows_and_grows_files(self):
    kb = {k: [] for k in base.LEVELS}
    for dom in tasks_lib.DOMAINS:
      tid = tasks_lib.task_ids(dom)[0]
      sizes = []
      for k in base.LEVELS:
        env = ProgTaskEnv(tid, k, cache_dir=_CACHE)
        env.reset(seed=0)
        sizes.append(env.state_size())
        kb[k].append(sizes[-1]["db_kb"])
        env.close()
      for k in (1, 2, 3):
        ratio = sizes[k]["rows"] / sizes[k - 1]["rows"]
        self.assertBetween(ratio, 1.85, 2.1, f"{dom}: rows v{k - 1}->v{k} grow x{ratio:.2f}")
        self.assertEqual(sizes[k]["files"] - sizes[k - 1]["files"], base.DATA_FILES_PER_UNIT * 2 ** (k - 1), dom)
      self.assertBetween(sizes[0]["files"], 12, 13)
    mean = {k: sum(v) / len(v) for k, v in kb.items()}
    self.assertBetween(mean[0], 80, 130)    # published pool: 99 KB at v0 ...
    self.assertBetween(mean[3], 550, 850)   # ... and 711 KB at v3

  def test_determinism_by_seed(self):
    for dom in tasks_lib.DOMAINS:
      tid = tasks_lib.task_ids(dom)[0]
      a, b = ProgTaskEnv(tid), ProgTaskEnv(tid)
      try:
        a.reset(seed=7)
        b.reset(seed=7)
        self.assertEqual(_dump(a), _dump(b), dom)
        b.reset(seed=8)
        self.assertNotEqual(_dump(a)[0], _dump(b)[0], dom)
        # The cache hands out byte-identical copies of a fresh generation.
        c = ProgTaskEnv(tid, cache_dir=_CACHE)
        c.reset(seed=7)
        self.assertEqual(_dump(c), _dump(a), dom)
        c.close()
      finally:
        a.close()
        b.close()


class EnvSurfaceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.env = ProgTaskEnv("retail/pending_over_500", cache_dir=_CACHE)
    self.env.reset(seed=0)

  def tearDown(self):
    self.env.close()
    super().tearDown()

  def test_statuses_and_observations(self):
    r = self.env.step({"name": "list_orders", "arguments": {"status": "pending"}})
    self.assertEqual(r.status, "ok")
    page = json.loads(r.observation)   # list tools return one page of rows
    self.assertEqual(set(page), {"items", "total", "offset", "next_offset"})
    rows = page["items"]
    self.assertTrue(rows and set(rows[0]) == {"id", "customer_id", "status", "total", "created"})
    self.assertEqual((len(rows), page["offset"], page["next_offset"]), (base.DEFAULT_LIMIT, 0, base.DEFAULT_LIMIT))
    self.assertGreater(page["total"], base.DEFAULT_LIMIT)
    r = self.env.step({"name": "list_orders", "arguments": {"status": "lost"}})
    self.assertEqual(r.status, "failed")
    self.assertTrue(r.observation.startswith("Error: unknown status 'lost'"))
    r = self.env.step({"name": "no_such_tool", "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("the tools are", r.observation)
    r = self.env.step({"name": "get_order", "arguments": {"order": 5}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown parameter(s) ['order']", r.observation)
    r = self.env.step({"name": "get_order", "arguments": {"order_id": "5"}})
    self.assertIn("must be of JSON type integer", r.observation)
    r = self.env.step({"name": "read_file", "arguments": {"path": "../state/db.sqlite"}})
    self.assertEqual(r.status, "failed")
    self.assertIn("outside the workspace", r.observation)
    r = self.env.step("not a call")
    self.assertEqual(r.status, "invalid")
    self.assertEqual(self.env.episode_counts(), {"tool_calls": 7, "tool_errors": 6})
    self.assertFalse(r.done)

  def test_call_tool_is_mcp_shaped(self):
    res = self.env.call_tool("get_order", {"order_id": 1001})
    self.assertFalse(res["isError"])
    self.assertEqual(res["structuredContent"]["id"], 1001)
    self.assertEqual(json.loads(res["content"][0]["text"]), res["structuredContent"])
    res = self.env.call_tool("list_orders", {"status": "pending"})   # a page is an object: structured too
    self.assertEqual(json.loads(res["content"][0]["text"]), res["structuredContent"])
    self.assertIsInstance(tool_wire.decode_result(res)["items"], list)
    res = self.env.call_tool("list_files", {})   # list_files still returns a bare list
    self.assertNotIn("structuredContent", res)   # a list: decode the text
    self.assertIsInstance(tool_wire.decode_result(res), list)
    res = self.env.call_tool("get_order", {"order_id": 1})
    self.assertTrue(res["isError"])
    with self.assertRaisesRegex(tool_wire.ToolError, "no order with id 1"):
      tool_wire.decode_result(res, "get_order")

  def test_submit_ends_the_episode_with_reward(self):
    n = self.env.task.expected(self.env._ctx)   # pylint: disable=protected-access
    self.assertEqual(self.env.verify(n), 1)
    self.assertEqual(self.env.verify(n + 1), 0)
    r = self.env.step({"name": "submit_answer", "arguments": {"answer": str(n)}})
    self.assertTrue(r.done)
    self.assertEqual(r.info["reward"], 1.0)
    self.assertTrue(self.env.done)
    r = self.env.step({"name": "list_orders", "arguments": {"status": "pending"}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("episode is over", r.observation)
    self.env.reset(seed=0)
    self.assertFalse(self.env.done)
    self.assertEqual(self.env.verify(), 0)

  def test_step_limit_ends_the_episode(self):
    env = ProgTaskEnv("retail/pending_over_500", max_steps=2, cache_dir=_CACHE)
    try:
      env.reset(seed=0)
      self.assertFalse(env.step({"name": "get_order", "arguments": {"order_id": 1001}}).done)
      r = env.step({"name": "get_order", "arguments": {"order_id": 1001}})
      self.assertTrue(r.done)
      self.assertEqual(r.info["reward"], 0.0)
    finally:
      env.close()

  def test_reset_rules(self):
    with self.assertRaisesRegex(ValueError, "belongs to domain 'hr'"):
      self.env.reset("hr/avg_salary_engineering", 0)
    self.assertEqual(split_instance_id("retail/x@v2"), ("retail/x", 2))
    self.env.reset("retail/top_gold_customer@v1", 0)
    self.assertEqual(self.env.scale, 1)
    self.assertEqual(self.env.task.task_id, "retail/top_gold_customer")
    old = self.env.workspace_dir
    self.env.reset(seed=0)
    self.assertFalse(old.exists())   # the previous episode's directory is gone

  def test_hidden_state_is_outside_the_workspace(self):
    ws = self.env.workspace_dir.resolve()
    self.assertNotIn(ws, self.env.db_path.resolve().parents)
    self.assertFalse(any(p.suffix in (".py", ".sqlite") for p in ws.rglob("*")))

  def test_served_by_the_env_server_host(self):
    host = env_server.EnvHost(ProgTaskEnv("retail/pending_over_500", cache_dir=_CACHE))
    try:
      out = host.handle("env_reset", {"task_id": "retail/pending_over_500", "seed": 0})
      self.assertIn("pending orders", out["text"])
      out = host.handle("list_orders", {"status": "pending"})
      self.assertEqual(out["structured"]["status"], "ok")
      out = host.handle("env_query", {"method": "episode_counts"})
      self.assertEqual(out["structured"]["result"], {"tool_calls": 1, "tool_errors": 0})
    finally:
      host.close()

  def test_abandoned_dtc_oracle_leaves_no_thread(self):
    gen = oracle.dtc_oracle(self.env.task.ptc, [t["name"] for t in self.env.tools()])
    call = next(gen)
    self.assertEqual(call, {"name": "list_orders", "arguments": {"status": "pending", "total_above": 500, "limit": 1}})
    gen.close()
    self.assertFalse(any(t.name == "dtc-oracle" and t.is_alive() for t in threading.enumerate()))


class ProgEnvTest(absltest.TestCase):
  """progagent.ptc_env.ProgEnv: the mode's tools, statuses, the end of an episode, its reward."""

  TASK = "retail/pending_over_500"

  def env(self, **kw):
    env = ptc_env.ProgEnv(runtime=kw.pop("runtime", "inprocess"), cache_dir=_CACHE, **kw)
    self.addCleanup(env.close)
    return env

  @staticmethod
  def program(code):
    return {"name": ptc_env.PROGRAM_TOOL, "arguments": {"code": code}}

  def test_ptc_episode(self):
    env = self.env(mode="ptc")
    self.assertEqual(env.tools(), [])  # the tools depend on the task's domain: listed after reset
    self.assertEqual(env.reset(self.TASK, 0), tasks_lib.get_task(self.TASK).prompt)
    (tool,) = env.tools()
    self.assertEqual(tool["name"], "programmatic_tool_call")
    self.assertEqual(tool["inputSchema"]["required"], ["code"])
    self.assertIn("list_orders(", tool["description"])
    r = env.step({"name": "list_orders", "arguments": {"status": "pending"}})
    self.assertEqual((r.status, r.done), ("invalid", False))
    self.assertIn("from a program", r.observation)
    r = env.step({"name": ptc_env.PROGRAM_TOOL, "arguments": {}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("string argument 'code'", r.observation)
    r = env.step(self.program("rows = tools['list_orders'](status='pending')['items']\nlen(rows) > 0"))
    self.assertEqual((r.observation, r.status, r.done), ("True\n", "ok", False))
    self.assertEqual((r.info["program_tool_calls"], r.info["tool_calls"], r.info["programs"]), (1, 1, 1))
    r = env.step(self.program("tools['get_order'](order_id=1)"))
    self.assertEqual(r.status, "failed")
    self.assertTrue(r.observation.endswith("ToolError: tool 'get_order' failed: Error: no order with id 1\n"))
    self.assertEqual(r.info["program_error"], "ToolError: tool 'get_order' failed: Error: no order with id 1")
    r = env.step(self.program(env.task.ptc[0]))
    self.assertEqual((r.status, r.done, r.info["reward"]), ("ok", True, 1.0))
    self.assertEqual(env.verify(), 1)
    r = env.step(self.program("print(1)"))
    self.assertEqual((r.status, r.done, r.info["reward"]), ("invalid", True, 1.0))
    self.assertEqual(env.episode_counts(), {"tool_calls": 4, "tool_errors": 1, "programs": 3, "program_errors": 1})

  def test_dtc_and_hybrid(self):
    dtc = self.env(mode="dtc")
    dtc.reset(self.TASK, 0)
    self.assertNotIn(ptc_env.PROGRAM_TOOL, [t["name"] for t in dtc.tools()])
    self.assertEqual(dtc.step(self.program("print(1)")).status, "invalid")
    r = dtc.step({"name": "submit_answer", "arguments": {"answer": -1}})
    self.assertEqual((r.status, r.done, r.info["reward"]), ("ok", True, 0.0))
    hyb = self.env(mode="hybrid")
    hyb.reset(self.TASK, 0)
    self.assertEqual(hyb.step({"name": "list_orders", "arguments": {"status": "pending"}}).status, "ok")
    r = hyb.step(self.program("print(len(tools['list_orders'](status='pending')['items']) > 0)"))
    self.assertEqual(r.observation, "True\n")
    self.assertEqual(hyb.episode_counts()["tool_calls"], 2)

  def test_reset_to_another_domain_and_external_env(self):
    env = self.env(mode="dtc")
    env.reset(self.TASK, 0)
    env.reset("hr/" + tasks_lib.task_ids("hr")[0].split("/")[1], 0)
    self.assertIn("list_employees", [t["name"] for t in env.tools()])
    inner = ProgTaskEnv(self.TASK, cache_dir=_CACHE)
    self.addCleanup(inner.close)
    outer = ptc_env.ProgEnv(inner, mode="ptc", runtime="inprocess")
    outer.reset(self.TASK, 0)
    outer.step(self.program("x = 1"))
    outer.close()
    self.assertEqual(inner.reset(self.TASK, 0), tasks_lib.get_task(self.TASK).prompt)  # not closed by outer

  @absltest.skipUnless(shutil.which("bwrap"), "bubblewrap not installed")
  def test_kernel_runtime_stops_with_the_episode(self):
    import psutil
    kids = lambda: {p.pid for p in psutil.Process().children(recursive=True)
                    if procs.alive(p)}
    before = kids()
    env = self.env(mode="ptc", runtime="kernel")
    env.reset(self.TASK, 0)
    r = env.step(self.program("import os\nos.path.isdir('/workspace')"))
    self.assertEqual((r.observation, r.status), ("True\n", "ok"))
    self.assertGreater(len(kids() - before), 0)
    env.reset(self.TASK, 0)           # a new episode stops the old kernel
    self.assertEqual(kids() - before, set())
    env.step(self.program("pass"))
    env.close()
    self.assertEqual(kids() - before, set())


class AnswerTest(absltest.TestCase):

  def test_answer_rules(self):
    m = base.answer_matches
    self.assertTrue(m("int", "12", 12))
    self.assertTrue(m("int", 12.0, 12))
    self.assertFalse(m("int", 12.5, 12))
    self.assertFalse(m("int", "twelve", 12))
    self.assertTrue(m("number", 10.004, 10.0))
    self.assertFalse(m("number", 10.02, 10.0))
    self.assertFalse(m("number", float("nan"), 10.0))
    self.assertTrue(m("text", "  Ada   LOPEZ ", "Ada Lopez"))
    self.assertFalse(m("text", ["Ada Lopez"], "Ada Lopez"))
    self.assertTrue(m("set", [3, "1", 2], [1, 2, 3]))
    self.assertFalse(m("set", [1, 1, 2, 3], [1, 2, 3]))
    self.assertFalse(m("set", [1, 2], [1, 2, 3]))
    self.assertFalse(m("set", "1,2,3", [1, 2, 3]))
    self.assertTrue(m("list", ["a", "B"], ["A", "b"]))
    self.assertFalse(m("list", ["b", "a"], ["a", "b"]))
    self.assertFalse(m("int", None, 0))
    with self.assertRaisesRegex(ValueError, "unknown answer kind"):
      m("float", 1, 1)

  def test_perturb_changes_the_answer(self):
    for kind, ans in (("int", 4), ("number", 0.0), ("set", [1, 2]), ("set", []), ("text", "x")):
      self.assertFalse(base.answer_matches(kind, base.perturb(kind, ans), ans), (kind, ans))

  def test_one_tool_error_class(self):
    # the class tool implementations raise is the one programs catch (common.tool_wire.ToolError)
    self.assertIs(base.ToolError, tool_wire.ToolError)
    self.assertIs(oracle.ToolError, tool_wire.ToolError)
    self.assertEqual(str(base.ToolError("no order with id 7")), "no order with id 7")


if __name__ == "__main__":
  absltest.main()
