"""Tests for progagent/bench/loca.py (LOCA-bench over a checkout) on the fixture checkout of tests/loca_fixture.py.

The fast tests check the named errors and how server commands are built (no process starts). The sandbox tests
generate the fixture's states in the sandbox with LOCA's interpreter (.venv/loca, made by setup.sh), serve its
v1-style mock server and claim_done sandboxed, and score episodes with the fixture's own evaluator (its env
class's step()), as for the real benchmark; they never read a fetched checkout.
"""

import json
import os
import shutil
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import pytest

from progagent import mcp_servers
from progagent.bench import loca

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loca_fixture  # noqa: E402  pylint: disable=wrong-import-position

HAVE_BWRAP = shutil.which("bwrap") is not None
LOCA_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "loca", "bin",
                           "python")


class ErrorsTest(absltest.TestCase):
  """Bad input gets a named error that says what to fix."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = loca_fixture.write_checkout(tempfile.mkdtemp(prefix="pa-loca-"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  @pytest.mark.fast
  def test_missing_checkout_names_what_to_fetch_and_where(self):
    with mock.patch.dict(os.environ, {}, clear=False):
      os.environ.pop(loca.ENV_DIR, None)
      with self.assertRaises(loca.LocaCheckoutError) as cm:
        loca.find_checkout(None)
    msg = str(cm.exception)
    self.assertIn("git clone https://github.com/hkust-nlp/LOCA-bench", msg)
    self.assertIn("--loca_dir", msg)
    self.assertIn("$LOCA_BENCH_DIR", msg)
    with self.assertRaisesRegex(loca.LocaCheckoutError, "not a LOCA-bench checkout.*gem/envs"):
      loca.find_checkout(os.path.join(self.root, "task-configs"))
    with mock.patch.dict(os.environ, {loca.ENV_DIR: self.root}):
      self.assertEqual(loca.find_checkout(None), self.root)
    self.assertIsInstance(cm.exception, ValueError)

  @pytest.mark.fast
  def test_size_type_and_seed_are_checked(self):
    with self.assertRaisesRegex(loca.UnknownSizeError, "'12k'.*8k, 16k, 32k, 64k, 96k, 128k, 256k"):
      loca.select(self.root, "12k")
    with self.assertRaisesRegex(loca.LocaCheckoutError, "final_32k_set_config.json is missing"):
      loca.select(self.root, "32k")
    with self.assertRaisesRegex(loca.UnknownTaskTypeError, "'NoSuchEnv'.*it holds NotesS2LEnv"):
      loca.select(self.root, "8k", ["NoSuchEnv"])
    with self.assertRaisesRegex(loca.UnknownSeedError, r"\['5'\].*\['42', '7'\]"):
      loca.select(self.root, "8k", None, [5])
    chosen = loca.select(self.root, "8k", ["NotesS2LEnv"], [7])
    self.assertEqual([(n, i) for n, i, _ in chosen], [("NotesS2LEnv", 1)])   # state1: its rank in the type
    self.assertEqual([(n, i) for n, i, _ in loca.select(self.root, "64k")], [("NotesS2LEnv", 0)])

  @pytest.mark.fast
  def test_missing_interpreter_names_setup(self):
    with self.assertRaisesRegex(loca.LocaCheckoutError, "run setup.sh"):
      loca.find_python("/nonexistent/loca/bin/python")

  @pytest.mark.fast
  def test_cli_reports_bad_input_with_status_2(self):
    with mock.patch.dict(os.environ, {}, clear=False):
      os.environ.pop(loca.ENV_DIR, None)
      self.assertEqual(loca.main(["--size", "8k"]), 2)
    self.assertEqual(loca.main(["--loca_dir", self.root, "--size", "3k"]), 2)

  @pytest.mark.fast
  def test_ground_truth_copy_is_refused_where_there_is_none(self):
    task = loca.LocaTask("loca/8k/NotesS2LEnv/state0", "", None, None, None, "8k", "NotesS2LEnv", 0, 42, {}, "",
                         (), self.root)
    with self.assertRaisesRegex(loca.LocaError, "NotesS2LEnv has no ground truth"):
      loca.copy_ground_truth(None, task)
    self.assertFalse(set(loca.GROUND_TRUTH_COPIES) & set(loca.NO_FILE_GROUND_TRUTH))
    self.assertEqual(set(loca.GROUND_TRUTH_COPIES) | set(loca.NO_FILE_GROUND_TRUTH), set(loca.TASK_TYPES))
    self.assertLessEqual(set(loca.GROUND_TRUTH_CALLS), set(loca.GROUND_TRUTH_COPIES))

  @pytest.mark.fast
  def test_server_commands(self):
    """Mock servers run their script with LOCA's interpreter (no `uv`), get the task state read-write at
    TASK_INSIDE only when they name it; programs of LOCA's environment stand for `uvx`; npx keeps its package."""
    py = sys.executable  # stands for LOCA's interpreter (only its folder is read)
    state = tempfile.mkdtemp(prefix="pa-loca-state-")
    self.addCleanup(shutil.rmtree, state)
    mock_server = {"name": "notes", "type": "notes", "command": "uv",
                   "args": ["--directory", "/ck/mcp_convert", "run", "python", "/ck/mcp_convert/mcps/notes/server.py",
                            "--user", "ann"], "env": {"NOTES_DATA_DIR": "/loca/task/local_db/notes"}}
    spec = loca.server_spec(mock_server, loca_dir=self.root, python=py, state=state)
    self.assertEqual(spec.argv, (py, "/ck/mcp_convert/mcps/notes/server.py", "--user", "ann"))
    self.assertIn(("NOTES_DATA_DIR", "/loca/task/local_db/notes"), spec.env)
    self.assertIn((state, loca.TASK_INSIDE, False), spec.binds)
    self.assertIn((self.root, self.root, True), spec.binds)
    terminal = {"name": "terminal", "type": "terminal", "command": "uvx", "args": ["pip"],
                "env": {"ALLOWED_DIR": "/workspace"}}
    spec = loca.server_spec(terminal, loca_dir=self.root, python=py, state=state)
    self.assertEqual(spec.argv, (os.path.join(os.path.dirname(py), "pip"),))
    self.assertNotIn(loca.TASK_INSIDE, [b[1] for b in spec.binds])   # a server that runs commands: no state
    with self.assertRaisesRegex(loca.LocaCheckoutError, "'no-such-mcp-server', which is not installed"):
      loca.server_spec(dict(terminal, args=["no-such-mcp-server"]), loca_dir=self.root, python=py, state=state)
    fs = {"name": "filesystem", "type": "filesystem", "command": "npx",
          "args": ["@modelcontextprotocol/server-filesystem", "/workspace"], "env": {}}
    self.assertEqual(loca.server_spec(fs, loca_dir=self.root, python=py, state=state).argv,
                     ("npx", "-y", "@modelcontextprotocol/server-filesystem", "/workspace"))
    self.assertEqual(loca._staged_entries([mock_server, terminal]), ["local_db"])


@absltest.skipUnless(HAVE_BWRAP and os.path.isfile(LOCA_PYTHON), "bubblewrap or .venv/loca (setup.sh) missing")
class FixtureSuiteTest(absltest.TestCase):
  """The fixture's task set end to end: state, sandboxed servers, the evaluator as reward."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = loca_fixture.write_checkout(tempfile.mkdtemp(prefix="pa-loca-"))
    cls.states = tempfile.mkdtemp(prefix="pa-loca-states-")
    cls.tasks = loca.suite(cls.root, "8k", state_dir=cls.states)
    cls.env = loca.make_env(cls.tasks, max_steps=20)

  @classmethod
  def tearDownClass(cls):
    pids = [p for p in cls.env.group.server_pids().values() if p]
    cls.env.close()
    for pid in pids:   # no server process is left behind
      assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid
    shutil.rmtree(cls.root, ignore_errors=True)
    shutil.rmtree(cls.states, ignore_errors=True)
    super().tearDownClass()

  def _notes(self):
    return json.loads(self.env.step({"name": "list_notes", "arguments": {}}).observation)

  def test_states_generated_once_in_the_sandbox(self):
    self.assertEqual([t.task_id for t in self.tasks], ["loca/8k/NotesS2LEnv/state0", "loca/8k/NotesS2LEnv/state1"])
    self.assertEqual([t.seed for t in self.tasks], [42, 7])
    t = self.tasks[0]
    self.assertIn("There are 3 notes", t.instruction)
    self.assertTrue(os.path.isfile(os.path.join(t.task_dir, "local_db", "notes", "notes.json")))
    self.assertTrue(os.path.isfile(os.path.join(t.groundtruth, "answer.txt")))
    stamp = os.path.join(os.path.dirname(t.task_dir), "stamp.json")
    before = os.stat(stamp).st_mtime_ns
    again = loca.suite(self.root, "8k", seeds=[42], state_dir=self.states)   # a matching state is reused
    self.assertEqual(again[0].task_dir, t.task_dir)
    self.assertEqual(os.stat(stamp).st_mtime_ns, before)
    with self.assertRaisesRegex(loca.LocaStateError, "logged errors.*Preprocessing failed"):
      loca.suite(self.root, "16k", state_dir=self.states)

  def test_servers_list_their_tools_in_the_sandbox(self):
    names = {t["name"] for t in self.env.tools()}
    self.assertEqual(names, {"list_notes", "archive_note", "whoami", "can_read", "claim_done"})  # no python_execute
    self.env.reset(self.tasks[0].task_id)
    who = json.loads(self.env.step({"name": "whoami", "arguments": {}}).observation)
    self.assertEqual(who["user"], "ann")
    self.assertTrue(who["mcp"].startswith("1."), who)   # the mock server runs in LOCA's own environment

  def test_mock_server_sees_its_state_but_not_the_ground_truth(self):
    self.env.reset(self.tasks[0].task_id)
    read = lambda p: self.env.step({"name": "can_read", "arguments": {"path": p}}).observation
    self.assertEqual(read("/loca/task/local_db/notes/notes.json"), "true")
    self.assertEqual(read(os.path.join(self.tasks[0].groundtruth, "answer.txt")), "false")
    self.assertEqual(read(os.path.join(self.tasks[0].task_dir, "local_db", "notes", "notes.json")), "false")

  def test_do_nothing_fails_the_solution_passes_and_reset_restores_the_state(self):
    for task in self.tasks:
      self.env.reset(task.task_id)
      self.assertEqual(self.env.verify(), 0)
      self.assertFalse(self.env.last_verdict["passed"])
      notes = self._notes()
      top = max(notes, key=lambda n: n["value"])
      with open(os.path.join(self.env.workspace_dir, "answer.txt"), "w") as f:
        f.write(str(sum(n["value"] for n in notes)))
      self.assertEqual(self.env.verify(), 0)   # the note is not archived yet
      self.env.step({"name": "archive_note", "arguments": {"note_id": top["id"]}})
      self.assertEqual(self.env.verify(), 1, self.env.last_verdict)   # a change of service state only
      res = self.env.step({"name": "claim_done", "arguments": {}})   # LOCA's claim_done ends the episode
      self.assertTrue(res.done)
      self.assertEqual(res.info["reward"], 1.0)
    self.env.reset(self.tasks[0].task_id)   # the service state is the generated one again
    self.assertFalse(any(n["archived"] for n in self._notes()))
    self.assertEqual(self.env.verify(), 0)

  def test_ptc_program_in_the_kernel_solves_it(self):
    """LOCA's python_execute is left out: the model's code runs in ProgAgent's sandboxed kernel, which calls the
    mock service's tools and writes the workspace the evaluator reads; claim_done ends the episode."""
    from progagent import harness
    from progagent import ptc_env
    code = ("import json\n"
            "notes = json.loads(tools['list_notes']()) if isinstance(tools['list_notes'](), str) "
            "else tools['list_notes']()\n"
            "top = max(notes, key=lambda n: n['value'])\n"
            "tools['archive_note'](note_id=top['id'])\n"
            "open('/workspace/answer.txt', 'w').write(str(sum(n['value'] for n in notes)))\n"
            "print(tools['claim_done']())\n"
            "import os; print(os.path.exists('/loca/task'))\n")
    state = {"i": 0}

    def policy(messages, tools):
      state["i"] += 1
      if state["i"] > 1:
        return harness.assistant_message("Done.")
      return harness.assistant_message("", [{"name": harness.PROGRAM_TOOL, "arguments": {"code": code}}])
    prog = ptc_env.ProgEnv(self.env, mode="ptc", runtime="kernel", timeout_s=60)
    try:
      ep = harness.run_episode(prog, policy, mode="ptc", task_id=self.tasks[1].task_id)
    finally:
      prog.close()
    self.assertEqual(ep.stats.reward, 1.0, self.env.last_verdict)
    self.assertTrue(self.env.done)
    out = [m["content"] for m in ep.messages if m["role"] == "tool"][0]
    self.assertIn("you have claimed the task is done!", out)
    self.assertIn("False", out)   # the kernel does not see the services' state

  def test_evaluation_command_runs_the_suite(self):
    """python -m progagent.bench.evaluate --suite loca: each task in its own environment (its mock service over its
    state), the env class's verdict recorded; scripted:groundtruth is refused with the reason."""
    import io as pyio
    from progagent.bench import evaluate
    tmp = tempfile.mkdtemp(prefix="pa-loca-eval-")
    try:
      argv = ["--suite", "loca", "--loca_dir", self.root, "--loca_size", "8k", "--loca_state_dir", self.states,
              "--harness", "ptc,dtc", "--workdir", tmp, "--quiet"]
      with mock.patch("sys.stderr", new_callable=pyio.StringIO) as err:
        self.assertEqual(evaluate.main(argv + ["--policy", "scripted:groundtruth"]), 2)
        self.assertIn("progagent.bench.loca --loca_dir DIR --check", err.getvalue())
      with mock.patch("sys.stdout", new_callable=pyio.StringIO) as out:
        self.assertEqual(evaluate.main(argv + ["--policy", "scripted:do_nothing"]), 0)
      self.assertIn("loca", out.getvalue())
      with open(os.path.join(tmp, "results.json")) as f:
        res = json.load(f)
      eps = res["episodes"]
      self.assertEqual(sorted((e["task_id"], e["mode"]) for e in eps),
                       [(t.task_id, m) for t in self.tasks for m in ("dtc", "ptc")])
      for e in eps:
        self.assertEqual(e["reward"], 0.0)
        self.assertFalse(e["verdict"]["passed"])
        self.assertEqual(e["server_tools"], {"notes": 4, "claim_done": 1})
      self.assertEqual(res["summary"]["loca"]["ptc"]["pass@1"], 0.0)
    finally:
      shutil.rmtree(tmp, ignore_errors=True)

  def test_load_suite_reads_its_flags(self):
    import argparse
    p = argparse.ArgumentParser()
    loca.add_args(p)
    args = p.parse_args(["--loca_dir", self.root, "--loca_size", "8k", "--loca_seeds", "7",
                         "--loca_state_dir", self.states])
    self.assertEqual([t.task_id for t in loca.load_suite(args)], ["loca/8k/NotesS2LEnv/state1"])

  def test_mcp_task_fields(self):
    """The records carry McpTask's fields first, so they read as McpTask records."""
    from progagent.mcp_task_env import McpTask
    self.assertEqual(loca.LocaTask._fields[:len(McpTask._fields)], McpTask._fields)
    self.assertIn("evaluate", self.env.tasks[self.tasks[0].task_id].evaluator)
    self.assertEqual(mcp_servers.WORKSPACE_INSIDE, self.env.workspace_inside)


if __name__ == "__main__":
  absltest.main()
