"""Tests for progagent/bench: the Toolathlon adapter on a fixture checkout this test writes in Toolathlon's layout,
the suites, the policies and `python -m progagent.bench.evaluate` printing its table for scripted policies.

The fixture (write_fixture) is a small Toolathlon checkout: configs/mcp_servers/filesystem.yaml (the npm filesystem
server, as Toolathlon configures it), configs/global_configs_example.py, utils/general/helper.py, and one task
folder named like a real local task (privacy-desensitization) with task_config.json, docs/, an initial workspace
packed as files.tar.gz that preprocess/main.py unpacks, a ground truth packed as gt_files.tar.gz that
evaluation/main.py unpacks *into the ground-truth folder* (as the real one does) and compares, importing
utils.general.helper and a module of its own package, and reading --res_log_file. It runs with the benchmark's
interpreter and servers that setup.sh installs (.venv/toolathlon). Nothing fetched is used.
"""

import io as pyio
import json
import os
import shutil
import tarfile
import tempfile
import time
from unittest import mock

import psutil
from absl.testing import absltest

from progagent import harness
from progagent import mcp_servers
from progagent import ptc_env
from progagent.bench import evaluate
from progagent.bench import policies
from progagent.bench import suites
from progagent.bench import toolathlon
from progagent.mcp_task_env import McpTaskEnv
from tests import procs

HAVE_BWRAP = shutil.which("bwrap") is not None
TASK = "privacy-desensitization"

FILESYSTEM_YAML = """# file system server (fixture, Toolathlon's layout)
type: stdio
name: filesystem
params:
  command: npx
  args:
    - "-y"
    - "@modelcontextprotocol/server-filesystem"
    - "${agent_workspace}"
  cwd: "${agent_workspace}"
client_session_timeout_seconds: 300
"""
HELPER = """import json

def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)

def normalize_str(s):
    return "".join(s.split())

from configs.global_configs import global_configs  # as Toolathlon's helper does
"""
PREPROCESS = """from argparse import ArgumentParser
import os, tarfile

if __name__ == "__main__":
    p = ArgumentParser()
    p.add_argument("--agent_workspace", required=True)
    p.add_argument("--launch_time", required=False)
    a = p.parse_args()
    tar = os.path.join(a.agent_workspace, "files.tar.gz")
    with tarfile.open(tar, "r:gz") as t:
        t.extractall(a.agent_workspace, filter="data")
    os.remove(tar)
    os.makedirs(os.path.join(a.agent_workspace, "desensitized_documents"), exist_ok=True)
    print("Preprocessing completed")
"""
CHECK_LOCAL = """import os
from utils.general.helper import normalize_str

def check_local(ws, gt):
    mine = os.path.join(ws, "desensitized_documents")
    want = os.path.join(gt, "tmp", "desensitized_documents")
    if not os.path.isdir(mine) or sorted(os.listdir(mine)) != sorted(os.listdir(want)):
        return False, f"files differ: {sorted(os.listdir(mine)) if os.path.isdir(mine) else None}"
    for name in os.listdir(want):
        if normalize_str(open(os.path.join(mine, name)).read()) != normalize_str(open(os.path.join(want, name)).read()):
            return False, f"content differs: {name}"
    return True, None
"""
EVALUATION = """from argparse import ArgumentParser
import os, shutil, tarfile

from .check_local import check_local
from utils.general.helper import read_json

if __name__ == "__main__":
    p = ArgumentParser()
    p.add_argument("--agent_workspace", required=True)
    p.add_argument("--groundtruth_workspace", required=True)
    p.add_argument("--res_log_file", required=False)
    p.add_argument("--launch_time", required=False)
    a = p.parse_args()
    read_json(a.res_log_file)
    tmp = os.path.join(a.groundtruth_workspace, "tmp")   # written into the ground truth, as upstream does
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(os.path.join(a.groundtruth_workspace, "gt_files.tar.gz"), "r:gz") as t:
        t.extractall(tmp, filter="data")
    ok, why = check_local(a.agent_workspace, a.groundtruth_workspace)
    if not ok:
        print("local check failed:", why)
        exit(1)
    print("All checks passed")
"""
AGENT_PROMPT = ("Accessible workspace directory: !!<<<<||||workspace_dir||||>>>>!!\n"
                "If you believe the task is completed, you can either call the `local-claim_done` tool or respond "
                "without calling any tool to indicate completion.\n")


def _targz(path, files):
  with tarfile.open(path, "w:gz") as t:
    for name, text in files.items():
      data = text.encode()
      info = tarfile.TarInfo(name)
      info.size = len(data)
      t.addfile(info, pyio.BytesIO(data))


def _write(root, rel, text):
  path = os.path.join(root, rel)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def write_fixture(root):
  """A Toolathlon checkout in miniature (module docstring); returns root."""
  _write(root, "configs/mcp_servers/filesystem.yaml", FILESYSTEM_YAML)
  _write(root, "configs/global_configs_example.py", "global_configs = {'podman_or_docker': 'podman'}\n")
  _write(root, "utils/__init__.py", "")
  _write(root, "utils/general/helper.py", HELPER)
  t = f"tasks/finalpool/{TASK}"
  _write(root, f"{t}/task_config.json", json.dumps({"needed_mcp_servers": ["filesystem"],
                                                   "needed_local_tools": ["claim_done", "python_execute"]}))
  _write(root, f"{t}/docs/task.md", "Replace every email address in the files with /hidden/ and save copies as "
         "desensitized_documents/<name>_desensitized.<ext>.")
  _write(root, f"{t}/docs/agent_system_prompt.md", AGENT_PROMPT)
  _write(root, f"{t}/preprocess/main.py", PREPROCESS)
  _write(root, f"{t}/evaluation/__init__.py", "")
  _write(root, f"{t}/evaluation/check_local.py", CHECK_LOCAL)
  _write(root, f"{t}/evaluation/main.py", EVALUATION)
  os.makedirs(os.path.join(root, t, "initial_workspace"))
  os.makedirs(os.path.join(root, t, "groundtruth_workspace"))
  _targz(os.path.join(root, t, "initial_workspace", "files.tar.gz"), {"contact.txt": "Mail ann@example.com today.\n"})
  _targz(os.path.join(root, t, "groundtruth_workspace", "gt_files.tar.gz"),
         {"desensitized_documents/contact_desensitized.txt": "Mail /hidden/ today.\n"})
  for dirpath, _, _ in os.walk(root):
    os.chmod(dirpath, 0o755)
  return root


class CheckoutTest(absltest.TestCase):
  """What needs no sandbox: finding the checkout, translating server configurations, parsing policies."""

  def test_no_checkout_names_what_to_fetch(self):
    with mock.patch.dict(os.environ, {toolathlon.ENV_VAR: ""}):
      with self.assertRaises(toolathlon.ToolathlonError) as cm:
        toolathlon.find_checkout(None)
    self.assertIn("hkust-nlp/Toolathlon", str(cm.exception))
    self.assertIn("--toolathlon_dir", str(cm.exception))
    self.assertIn(toolathlon.ENV_VAR, str(cm.exception))
    with self.assertRaisesRegex(toolathlon.ToolathlonError, "not a Toolathlon checkout"):
      toolathlon.find_checkout(tempfile.mkdtemp())

  def test_bad_arguments_exit_2(self):
    with mock.patch.dict(os.environ, {toolathlon.ENV_VAR: ""}):
      self.assertEqual(evaluate.main(["--suite", "toolathlon_local", "--policy", "scripted:do_nothing"]), 2)
    self.assertEqual(evaluate.main(["--suite", "nope", "--policy", "scripted:do_nothing"]), 2)
    self.assertEqual(evaluate.main(["--suite", "progagent", "--harness", "xtc", "--policy", "scripted:do_nothing"]), 2)
    self.assertEqual(evaluate.main(["--suite", "progagent", "--policy", "scripted:oracle"]), 2)
    with self.assertRaises(suites.SuiteError):
      suites.get_suites("progagent,loca_unknown")

  def test_a_policy_that_cannot_be_made_is_one_line_and_exit_2(self):
    common = ["--suite", "progagent", "--progagent_tasks", "retail/pending_over_500", "--harness", "ptc"]
    for policy, says in ((["--policy", "endpoint:http://127.0.0.1:1"], "--model"),
                         (["--policy", "checkpoint:/nonexistent/ckpt"], "/nonexistent/ckpt")):
      with mock.patch("sys.stderr", new_callable=pyio.StringIO) as err:
        self.assertEqual(evaluate.main(common + policy), 2)
      self.assertTrue(err.getvalue().startswith("error: "), err.getvalue())
      self.assertIn(says, err.getvalue())

  def test_an_endpoint_that_stops_answering_keeps_what_ran(self):
    """No server at the URL: the run stops with exit 3 and the URL to check; the JSON is still written, with
    the reason (nothing that ran is lost)."""
    tmp = tempfile.mkdtemp(prefix="pa-bench-gone-")
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    port = procs.free_port()
    argv = ["--suite", "progagent", "--progagent_tasks", "retail/pending_over_500", "--harness", "ptc",
            "--runtime", "inprocess", "--policy", f"endpoint:http://127.0.0.1:{port}", "--model", "m",
            "--workdir", tmp, "--quiet"]
    with mock.patch("sys.stderr", new_callable=pyio.StringIO) as err, mock.patch("sys.stdout", new_callable=pyio.StringIO):
      self.assertEqual(evaluate.main(argv), 3)
    self.assertIn(f"curl http://127.0.0.1:{port}/v1/models", err.getvalue())
    self.assertNotIn("{base_url}", err.getvalue())
    with open(os.path.join(tmp, "results.json")) as f:
      res = json.load(f)
    self.assertIn("TeacherError in progagent/retail/pending_over_500@v0", res["stopped"])
    self.assertEqual(res["episodes"], [])

  def test_a_bad_endpoint_timeout_is_refused(self):
    argv = ["--suite", "progagent", "--progagent_tasks", "retail/pending_over_500", "--harness", "ptc",
            "--policy", "endpoint:http://127.0.0.1:1", "--model", "m", "--timeout_s", "0"]
    with mock.patch("sys.stderr", new_callable=pyio.StringIO) as err:
      self.assertEqual(evaluate.main(argv), 2)
    self.assertIn("--timeout_s 0.0: must be > 0 seconds", err.getvalue())

  def test_one_task_has_no_interval_and_the_summary_is_strict_json(self):
    recs = [{"suite": "loca", "task_id": "loca/8k/X/state0", "mode": "ptc", "passed": p, "eval_error": False,
             "context_tokens": 10, "tool_calls": 1, "errors": 0, "turns": 2} for p in (True, False)]
    summary = evaluate.summarize(recs, resamples=200)
    row = summary["loca"]["ptc"]
    self.assertEqual(row["pass@1"], 0.5)
    self.assertIsNone(row["pass@1_low"])
    self.assertIsNone(row["pass@1_high"])
    json.dumps(summary, allow_nan=False)       # raises on a NaN
    self.assertIn("50.0 [n/a, n/a]", evaluate.format_table(summary))

  def test_per_task_labels_do_not_repeat_the_suite(self):
    recs = [{"suite": "loca", "task_id": "loca/8k/X/state0", "mode": "ptc", "passed": False},
            {"suite": "toolathlon_local", "task_id": "paper-checker", "mode": "ptc", "passed": True}]
    table = evaluate.format_per_task(recs, ["ptc"])
    self.assertIn("\nloca/8k/X/state0 ", table)
    self.assertIn("toolathlon_local/paper-checker", table)
    self.assertNotIn("loca/loca", table)

  def test_policy_specs(self):
    self.assertEqual(policies.parse_policy("checkpoint:gguf:smollm2"), ("checkpoint", "gguf:smollm2"))
    self.assertEqual(policies.parse_policy("endpoint:http://127.0.0.1:8000"), ("endpoint", "http://127.0.0.1:8000"))
    for bad in ("scripted:oracle", "model:x", "checkpoint:", "groundtruth"):
      with self.assertRaises(policies.PolicyError):
        policies.parse_policy(bad)
    with self.assertRaisesRegex(policies.PolicyError, "--model"):
      policies.make_policy("endpoint:http://127.0.0.1:1")

  def test_server_translation(self):
    root = tempfile.mkdtemp(prefix="tl-fix-")
    prefix = tempfile.mkdtemp(prefix="tl-prefix-")
    pkg = os.path.join(prefix, "node", "node_modules", "@scope", "srv")
    _write(pkg, "package.json", json.dumps({"name": "@scope/srv", "bin": {"srv": "dist/index.js"}}))
    _write(pkg, "dist/index.js", "")
    for venv, prog in (("office-word-mcp-server", "word_mcp_server"), ("cli-mcp-server", "cli-mcp-server"),
                       ("excel-mcp-server", "excel-mcp-server")):
      _write(prefix, f"servers/{venv}/bin/{prog}", "")
    _write(root, "configs/mcp_servers/a.yaml", "name: fs\ntype: stdio\nparams:\n  command: npx\n  args: ['-y', "
           "'@scope/srv', '${agent_workspace}']\n  env:\n    MEMORY_FILE_PATH: '${agent_workspace}/m.json'\n")
    _write(root, "configs/mcp_servers/word.yaml", "name: word\nparams:\n  command: uvx\n  args: ['--from', "
           "'office-word-mcp-server', 'word_mcp_server']\n")
    _write(root, "configs/mcp_servers/terminal.yaml", "name: terminal\nparams:\n  command: uvx\n  args: "
           "['cli-mcp-server']\n  env:\n    ALLOWED_DIR: '${agent_workspace}'\n")
    _write(root, "configs/mcp_servers/excel.yaml", "name: excel\nparams:\n  command: uv\n  args: ['run', "
           "'excel-mcp-server', 'stdio']\n")
    _write(root, "configs/mcp_servers/remote.yaml", "name: remote\nparams:\n  command: npx\n  args: ['-y', "
           "'@scope/srv']\n  env:\n    TOKEN: '${token.api}'\n")
    _write(root, "configs/mcp_servers/k8s.yaml", "name: k8s\nparams:\n  command: docker\n  args: ['run']\n")
    with mock.patch.dict(os.environ, {toolathlon.PREFIX_ENV: prefix}):
      fs = mcp_servers.parse_server(toolathlon.server_command(root, "fs"))
      self.assertEqual(fs.name, "fs")
      self.assertEqual(fs.argv[0], "env")
      self.assertIn("MEMORY_FILE_PATH={workspace}/m.json", fs.argv)
      self.assertEqual(fs.argv[-3:], ("node", os.path.realpath(os.path.join(pkg, "dist/index.js")), "{workspace}"))
      word = mcp_servers.parse_server(toolathlon.server_command(root, "word"))
      self.assertEqual(word.argv[-1], os.path.join(prefix, "servers/office-word-mcp-server/bin/word_mcp_server"))
      term = mcp_servers.parse_server(toolathlon.server_command(root, "terminal"))
      self.assertIn("ALLOWED_DIR={workspace}", term.argv)
      self.assertTrue(term.argv[1].startswith(f"PATH={prefix}/eval/bin:"))
      excel = mcp_servers.parse_server(toolathlon.server_command(root, "excel"))
      self.assertEqual(excel.argv[-2:], (os.path.join(prefix, "servers/excel-mcp-server/bin/excel-mcp-server"),
                                         "stdio"))
      with self.assertRaisesRegex(toolathlon.ToolathlonError, "not a local setting"):
        toolathlon.server_command(root, "remote")
      with self.assertRaisesRegex(toolathlon.ToolathlonError, "not npx, uvx"):
        toolathlon.server_command(root, "k8s")
      with self.assertRaisesRegex(toolathlon.ToolathlonError, "no file"):
        toolathlon.server_command(root, "pptx")

  def test_groundtruth_program_unpacks_archives(self):
    gt, ws = tempfile.mkdtemp(), tempfile.mkdtemp()
    _targz(os.path.join(gt, "gt.tar.gz"), {"d/x.txt": "X"})
    _write(gt, "sub/y.bin", "Y")
    exec(compile(policies.groundtruth_program(gt, ws), "<gt>", "exec"), {})  # pylint: disable=exec-used
    self.assertEqual(sorted(os.listdir(ws)), ["d", "sub"])
    with open(os.path.join(ws, "d", "x.txt")) as f:
      self.assertEqual(f.read(), "X")


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class FixtureCheckoutTest(absltest.TestCase):
  """The adapter end to end on the fixture: state, servers in the sandbox, the task's own evaluator."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(prefix="tl-bench-")
    os.chmod(cls.tmp, 0o755)
    cls.root = write_fixture(os.path.join(cls.tmp, "Toolathlon"))
    cls.rec = toolathlon.load_task(cls.root, TASK, state_dir=os.path.join(cls.tmp, "states"),
                                   launch_time="2026-01-02 03:04:05 Friday")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_state_instruction_and_evaluator(self):
    ws = self.rec.task.workspace
    self.assertEqual(sorted(os.listdir(ws)), ["contact.txt", "desensitized_documents"])   # preprocess ran
    with open(os.path.join(os.path.dirname(ws), "state.json")) as f:
      state = json.load(f)
    self.assertEqual(state["preprocess"]["exit_code"], 0)
    self.assertIn("Preprocessing completed", state["preprocess"]["output"])
    text = self.rec.task.instruction
    self.assertIn("Accessible workspace directory: /workspace", text)
    self.assertNotIn("claim_done", text)
    self.assertIn("respond without calling any tool", text)
    self.assertIn("--writable-copy groundtruth_workspace", self.rec.task.evaluator)

  def test_do_nothing_fails_groundtruth_passes(self):
    env = McpTaskEnv(self.rec.servers, [self.rec.task])
    try:
      self.assertIn("write_file", {t["name"] for t in env.tools()})   # listed from inside the sandbox
      # DTC cannot write a packed ground truth through write_file: it fails, as the policy's docstring says
      for script, mode, want in (("do_nothing", "ptc", 0.0), ("groundtruth", "ptc", 1.0),
                                 ("groundtruth", "hybrid", 1.0), ("groundtruth", "dtc", 0.0)):
        pol = policies.make_policy(f"scripted:{script}").for_episode(self.rec, mode, env.workspace_inside)
        prog = ptc_env.ProgEnv(env, mode=mode)
        try:
          ep = harness.run_episode(prog, pol, mode=mode, task_id=TASK,
                                   system=harness.system_prompt(mode, submit=False))
        finally:
          prog.close()
        self.assertEqual(ep.stats.reward, want, (script, mode, env.last_verdict))
        # the task's own check decided, not a launcher or import error
        self.assertIn("All checks passed" if want else "local check failed", env.last_verdict["output"])
    finally:
      env.close()

  def test_evaluate_cli_prints_its_table(self):
    out = os.path.join(self.tmp, "results.json")
    argv = ["--suite", "toolathlon_local,progagent", "--harness", "ptc,dtc", "--policy", "scripted:groundtruth",
            "--toolathlon_dir", self.root, "--toolathlon_tasks", TASK, "--progagent_tasks", "retail/pending_over_500",
            "--workdir", self.tmp, "--out", out, "--per_task", "--quiet"]
    self.assertEqual(evaluate.main(argv + ["--runtime", "inprocess"]), 2)   # no /workspace in this process
    with mock.patch("sys.stdout", new_callable=pyio.StringIO) as stdout:
      self.assertEqual(evaluate.main(argv), 0)
    printed = stdout.getvalue()
    self.assertIn("pass@1 [95% CI]", printed)
    self.assertIn("toolathlon_local ptc", printed)
    self.assertIn("progagent        dtc", printed)
    with open(out) as f:
      res = json.load(f)
    self.assertEqual(len(res["code"]["commit"]), 40)
    s = res["summary"]
    self.assertEqual(s["toolathlon_local"]["ptc"]["pass@1"], 1.0)
    self.assertEqual(s["toolathlon_local"]["dtc"]["pass@1"], 0.0)
    self.assertEqual(s["progagent"]["ptc"]["pass@1"], 1.0)
    self.assertEqual(s["progagent"]["dtc"]["pass@1"], 1.0)
    ep = [r for r in res["episodes"] if r["suite"] == "toolathlon_local" and r["mode"] == "ptc"][0]
    self.assertTrue(ep["verdict"]["passed"])
    self.assertGreater(ep["context_tokens"], 0)
    left = [p for p in psutil.Process().children(recursive=True) if procs.alive(p)
            and ("bwrap" in procs.cmdline(p) or "server-filesystem" in procs.cmdline(p))]
    self.assertEqual(left, [])



  def test_one_command_serves_the_task_over_mcp(self):
    """`python -m progagent.bench.toolathlon serve TASK`: a generic MCP client lists the program tool, runs the
    ground-truth program or nothing, closes; the verdict file holds the task's own evaluator's verdict."""
    import sys  # pylint: disable=g-import-not-at-top
    import anyio  # pylint: disable=g-import-not-at-top
    from mcp.client.session import ClientSession  # pylint: disable=g-import-not-at-top
    from mcp.client.stdio import StdioServerParameters, stdio_client  # pylint: disable=g-import-not-at-top
    root_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with mock.patch("sys.stdout", new_callable=pyio.StringIO) as stdout:
      self.assertEqual(toolathlon.main(["command", TASK, "--toolathlon_dir", self.root, "--workdir", self.tmp]), 0)
    self.assertIn("progagent.mcp_runtime_server", stdout.getvalue())
    self.assertIn("--mcp-server filesystem=", stdout.getvalue().replace("'", ""))
    for label, program, want in (("nothing", None, False),
                                 ("gt", policies.groundtruth_program(self.rec.task.groundtruth, "/workspace"), True)):
      verdict = os.path.join(self.tmp, f"{label}.verdict.json")
      args = ["-m", "progagent.bench.toolathlon", "serve", TASK, "--toolathlon_dir", self.root, "--workdir",
              self.tmp, "--verdict-file", verdict]
      seen = {}

      async def main():
        params = StdioServerParameters(command=sys.executable, args=args, env={"PYTHONPATH": root_dir}, cwd=root_dir)
        with open(os.devnull, "w") as errlog:
          async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
              await s.initialize()
              seen["tools"] = [t.name for t in (await s.list_tools()).tools]
              if program:
                await s.call_tool("programmatic_tool_call", {"code": program})  # pylint: disable=cell-var-from-loop

      anyio.run(main)
      self.assertEqual(seen["tools"], ["programmatic_tool_call"])
      for _ in range(100):
        if os.path.exists(verdict):
          break
        time.sleep(0.1)
      with open(verdict) as f:
        ev = json.load(f)["evaluator"]
      self.assertEqual(ev["passed"], want, ev)

class ModelPoliciesTest(absltest.TestCase):
  """A checkpoint policy and the same model behind the local OpenAI-compatible endpoint (progagent.bench.serve),
  each through the evaluation command on one library task (a tiny random model: the path, not the score)."""

  def test_checkpoint_and_endpoint(self):
    import threading  # pylint: disable=g-import-not-at-top
    from progagent.bench import serve  # pylint: disable=g-import-not-at-top
    tmp = tempfile.mkdtemp(prefix="pa-bench-model-")
    common = ["--suite", "progagent", "--progagent_tasks", "retail/pending_over_500", "--harness", "ptc",
              "--runtime", "inprocess", "--max_turns", "1", "--max_new_tokens", "8", "--workdir", tmp, "--quiet"]
    with mock.patch("sys.stdout", new_callable=pyio.StringIO) as stdout:
      self.assertEqual(evaluate.main(common + ["--policy", "checkpoint:tiny:qwen2", "--out", f"{tmp}/ckpt.json"]), 0)
    self.assertIn("progagent ptc", stdout.getvalue())
    with open(f"{tmp}/ckpt.json") as f:
      ep = json.load(f)["episodes"][0]
    self.assertEqual((ep["turns"], ep["reward"]), (1, 0.0))
    model = policies.ModelPolicy("tiny:qwen2", max_new_tokens=8, corpus=evaluate._corpus([]))  # pylint: disable=protected-access
    server = serve.make_server(serve.Endpoint(model, "tiny"), "127.0.0.1", procs.free_port())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
      url = f"http://127.0.0.1:{server.server_address[1]}"
      with mock.patch("sys.stdout", new_callable=pyio.StringIO) as stdout:
        self.assertEqual(evaluate.main(common + ["--policy", f"endpoint:{url}", "--model", "tiny",
                                                 "--out", f"{tmp}/endpoint.json"]), 0)
      self.assertIn("progagent ptc", stdout.getvalue())
      with open(f"{tmp}/endpoint.json") as f:
        ep = json.load(f)["episodes"][0]
      self.assertEqual(ep["usage"]["requests"], 1)
      self.assertGreater(ep["usage"]["prompt_tokens"], 0)
      with self.assertRaises(ValueError):
        serve.harness_messages([{"content": "no role"}])
    finally:
      server.shutdown()
      server.server_close()
      thread.join(5)
      shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
  absltest.main()
