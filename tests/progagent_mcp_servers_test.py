"""Tests for progagent/mcp_servers.py and progagent/evaluator.py: real MCP servers over stdio in the sandbox.

The servers: tests/mcp_fixture_server.py (the python `mcp` SDK; `stats` returns structuredContent with an
outputSchema, or text only with --text-only; `read` opens any path it is given, so that only the sandbox limits
what it sees) and, where setup.sh installed it, the real `@modelcontextprotocol/server-filesystem` from npm,
run by node. One group of three servers is shared by the checks of GroupTest (a server start costs 1-3 s).
"""

import json
import os
import shutil
import sys
import tempfile
import time

import psutil
from absl.testing import absltest

import procs
from progagent import mcp_servers as ms
from progagent.evaluator import Evaluator

HAVE_BWRAP = shutil.which("bwrap") is not None
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "mcp_fixture_server.py")
FS_PACKAGE = "@modelcontextprotocol/server-filesystem"


def have_fs_server() -> bool:
  """Whether setup.sh's filesystem server (npm) and node are installed."""
  return shutil.which("node") is not None and any(
      os.path.isfile(os.path.join(p, "lib", "node_modules", FS_PACKAGE, "package.json")) for p in ms.node_prefixes())


def tmpdir(test, mode=0o755) -> str:
  d = tempfile.mkdtemp(prefix="pa-mcp-")
  os.chmod(d, mode)
  test.addCleanup(shutil.rmtree, d, ignore_errors=True)
  return d


def descendants() -> set:
  return {p.pid for p in psutil.Process().children(recursive=True) if procs.alive(p)}


def text_of(wire: dict) -> str:
  return "".join(c.get("text", "") for c in wire.get("content") or [])


class ParseTest(absltest.TestCase):
  """Server commands are checked before anything starts; every error names the flag and the expected form."""

  def test_malformed_commands_name_the_flag(self):
    for text, why in [("fs npx", "no '='"), ("=python x.py", "server name"), ("1fs=python x.py", "server name"),
                      ("fs=", "command is empty"), ("fs=python 'unclosed", "cannot be split")]:
      with self.assertRaisesRegex(ms.McpServerError, why) as cm:
        ms.parse_server(text)
      self.assertIn("--mcp-server", str(cm.exception))
      self.assertIn("NAME=COMMAND", str(cm.exception))
    with self.assertRaisesRegex(ms.McpServerError, "config env.mcp.servers.*no '='"):
      ms.parse_server("nonsense", flag="config env.mcp.servers")
    with self.assertRaisesRegex(ms.McpServerError, "given twice"):
      ms.parse_servers(["a=python x.py", "a=python y.py"])

  def test_programs_that_cannot_run_are_named(self):
    ws = tmpdir(self)
    with self.assertRaisesRegex(ms.McpServerError, "--mcp-server x=no-such-program.*not on the sandbox's PATH"):
      ms.resolve_command(ms.parse_server("x=no-such-program --flag"), workspace=ws)
    with self.assertRaisesRegex(ms.McpServerError, "not installed where the sandbox can run it.*npm install -g"):
      ms.resolve_command(ms.parse_server("x=npx -y @example/not-installed-anywhere"), workspace=ws)
    with self.assertRaisesRegex(ms.McpServerError, "may not bring into the sandbox"):
      ms.resolve_command(ms.parse_server("x=python server.py /"), workspace=ws)
    with self.assertRaisesRegex(ms.McpServerError, "may not bring into the sandbox"):
      ms.resolve_command(ms.parse_server("x=python server.py /proc/1"), workspace=ws)

  def test_one_workspace_one_path(self):
    """{workspace}, the host workspace and paths beneath it all become /workspace; python is this interpreter;
    other existing host paths are mounted read-only, at the same place."""
    ws, data = tmpdir(self), tmpdir(self)
    spec = ms.parse_server(f"x=python {FIXTURE} --root {{workspace}} --out={{workspace}}/o --in {ws}/a.csv "
                           f"--data {data} --literal /workspace/b")
    argv, ro = ms.resolve_command(spec, workspace=ws)
    self.assertEqual(argv, [sys.executable, FIXTURE, "--root", "/workspace", "--out=/workspace/o", "--in",
                            "/workspace/a.csv", "--data", data, "--literal", "/workspace/b"])
    self.assertEqual(ro, sorted([FIXTURE, data]))
    argv, ro = ms.resolve_command(spec, workspace=ws, sandboxed=False)
    self.assertEqual(argv[2:4], ["--root", ws])
    self.assertEqual(ro, [])

  @absltest.skipUnless(have_fs_server(), "the npm filesystem server is not installed (setup.sh)")
  def test_npx_runs_the_installed_package(self):
    ws = tmpdir(self)
    argv, _ = ms.resolve_command(ms.parse_server(f"fs=npx -y {FS_PACKAGE} {ws}"), workspace=ws)
    self.assertTrue(argv[0].endswith("/node"))
    self.assertTrue(argv[1].endswith("/dist/index.js"), argv)
    self.assertEqual(argv[2:], ["/workspace"])
    with self.assertRaisesRegex(ms.McpServerError, "is installed in .*not 0.0.1"):
      ms.resolve_command(ms.parse_server(f"fs=npx {FS_PACKAGE}@0.0.1 {ws}"), workspace=ws)


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class GroupTest(absltest.TestCase):
  """Three servers in one group: the fixture server twice (every tool name clashes) and, if installed, the npm
  filesystem server (no clash). Each in its own sandbox with only the workspace and its own script."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.ws = tempfile.mkdtemp(prefix="pa-mcp-ws-")
    os.chmod(cls.ws, 0o755)
    with open(os.path.join(cls.ws, "notes.txt"), "w") as f:
      f.write("in the workspace\n")
    cls.secret_dir = tempfile.mkdtemp(prefix="pa-mcp-secret-")
    os.chmod(cls.secret_dir, 0o755)  # readable by anyone on the host: only the sandbox keeps it out
    cls.secret = os.path.join(cls.secret_dir, "secret.txt")
    with open(cls.secret, "w") as f:
      f.write("TOP-SECRET\n")
    os.chmod(cls.secret, 0o644)
    specs = [f"a=python {FIXTURE} --name a", f"b=python {FIXTURE} --name b --text-only"]
    if have_fs_server():
      specs.append(f"fs=npx -y {FS_PACKAGE} {{workspace}}")
    t0 = time.monotonic()
    cls.group = ms.McpServerGroup(ms.parse_servers(specs), workspace=cls.ws)
    cls.start_s = time.monotonic() - t0

  @classmethod
  def tearDownClass(cls):
    cls.group.close()
    shutil.rmtree(cls.ws, ignore_errors=True)
    shutil.rmtree(cls.secret_dir, ignore_errors=True)
    super().tearDownClass()

  def test_names_are_namespaced_on_a_clash_only(self):
    names = [t["name"] for t in self.group.tools()]
    self.assertEqual(names[:10], ["a__stats", "a__shout", "a__read", "a__write", "a__pid",
                                  "b__stats", "b__shout", "b__read", "b__write", "b__pid"])
    self.assertEqual(self.group.route("b__stats"), ("b", "stats"))
    if have_fs_server():
      self.assertIn("read_text_file", names)   # offered by one server only: its own name
      self.assertNotIn("fs__read_text_file", names)

  def test_always_namespace(self):
    g = ms.McpServerGroup([ms.parse_server(f"solo=python {FIXTURE}")], workspace=tmpdir(self), namespace="always")
    try:
      self.assertEqual([t["name"] for t in g.tools()], ["solo__stats", "solo__shout", "solo__read", "solo__write",
                                                       "solo__pid"])
    finally:
      g.close()

  def test_structured_and_text_results(self):
    tools = {t["name"]: t for t in self.group.tools()}
    self.assertEqual(tools["a__stats"]["outputSchema"]["properties"]["mean"], {"type": "number"})
    self.assertNotIn("outputSchema", tools["b__stats"])
    a = self.group.call_tool("a__stats", {"numbers": [1, 2, 6]})
    self.assertEqual(a["structuredContent"], {"count": 3, "mean": 3.0})
    b = self.group.call_tool("b__stats", {"numbers": [1, 2, 6]})
    self.assertNotIn("structuredContent", b)
    self.assertEqual(text_of(b), "3 numbers, mean 3.0")
    self.assertEqual(ms.result_text(a), '{"count": 3, "mean": 3.0}')

  def test_attack_a_server_cannot_read_a_folder_it_was_not_given(self):
    """The fixture's `read` opens any path with plain open(): the host's secret folder, the project's task
    verifiers and /etc/passwd do not exist in its sandbox; the workspace does."""
    self.assertEqual(text_of(self.group.call_tool("a__read", {"path": "/workspace/notes.txt"})), "in the workspace\n")
    for path in (self.secret, self.secret_dir, os.path.join(os.path.dirname(HERE), "progagent", "tasks",
                                                            "__init__.py"), "/etc/passwd", "/etc/shadow"):
      r = self.group.call_tool("a__read", {"path": path})
      self.assertTrue(r.get("isError"), (path, r))
      self.assertRegex(text_of(r), "FileNotFoundError|No such file")
      self.assertNotIn("TOP-SECRET", text_of(r))
    r = self.group.call_tool("a__write", {"path": "/usr/pwned", "text": "x"})  # read-only outside the workspace
    self.assertTrue(r.get("isError") or "Error" in text_of(r), r)
    self.assertFalse(os.path.exists("/usr/pwned"))

  @absltest.skipUnless(have_fs_server(), "the npm filesystem server is not installed (setup.sh)")
  def test_filesystem_server_shares_the_workspace_path(self):
    r = self.group.call_tool("list_allowed_directories", {})
    self.assertIn("/workspace", text_of(r))
    r = self.group.call_tool("write_file", {"path": "/workspace/from_fs.txt", "content": "written by node"})
    self.assertFalse(r.get("isError"), r)
    self.assertEqual(text_of(self.group.call_tool("a__read", {"path": "/workspace/from_fs.txt"})), "written by node")
    self.assertEqual(self.group.call_tool("read_text_file", {"path": "/workspace/notes.txt"})["structuredContent"],
                     {"content": "in the workspace\n"})
    r = self.group.call_tool("read_text_file", {"path": self.secret})
    self.assertTrue(r.get("isError"))
    self.assertNotIn("TOP-SECRET", text_of(r))

  def test_restart_gives_a_fresh_process(self):
    before = {n: self.group.server_pids()[n] for n in ("a", "b")}
    self.group.restart(["b"])
    after = {n: self.group.server_pids()[n] for n in ("a", "b")}
    self.assertEqual(text_of(self.group.call_tool("b__shout", {"text": "again"})), "AGAIN!")
    self.assertEqual(after["a"], before["a"])
    self.assertNotEqual(after["b"], before["b"])

  def test_a_dead_server_is_started_again(self):
    g = ms.McpServerGroup([ms.parse_server(f"solo=python {FIXTURE}")], workspace=tmpdir(self))
    try:
      pid = g.server_pids()["solo"]   # the host's pid (inside its PID namespace every server is pid 2)
      for p in [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True):
        try:
          p.kill()
        except psutil.NoSuchProcess:   # the namespace went down with its first process: a child may be gone
          pass
      time.sleep(0.3)
      self.assertEqual(text_of(g.call_tool("shout", {"text": "back"})), "BACK!")
      self.assertNotEqual(g.server_pids()["solo"], pid)
    finally:
      g.close()

  def test_start_failure_names_the_server_and_the_flag(self):
    spec = ms.parse_server('bad=python -c "import sys; print(\'no mcp here\', file=sys.stderr); sys.exit(3)"')
    before = descendants()
    with self.assertRaisesRegex(ms.McpServerError, r"(?s)--mcp-server bad=.*did not start.*exit code 3.*no mcp here"):
      ms.McpServerGroup([spec], workspace=tmpdir(self), start_timeout_s=20)
    self.assertEqual({p for p in descendants() - before if procs.alive(p)}, set())

  def test_no_process_left_after_close(self):
    g = ms.McpServerGroup([ms.parse_server(f"solo=python {FIXTURE}")], workspace=tmpdir(self))
    pid = g.server_pids()["solo"]
    started = {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
    self.assertGreaterEqual(len(started), 2)  # bubblewrap and the server at least
    g.close()
    time.sleep(0.3)
    self.assertEqual({p for p in started if procs.alive(p)}, set())


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class EvaluatorTest(absltest.TestCase):
  """The evaluator runs in a sandbox of its own: the workspace read-only, the ground truth (even a folder only
  root may read) at /groundtruth; exit 0 passes."""

  def setUp(self):
    super().setUp()
    self.ws, self.gt, code = tmpdir(self), tmpdir(self, 0o700), tmpdir(self)
    with open(os.path.join(self.gt, "answer.txt"), "w") as f:
      f.write("42")
    self.script = os.path.join(code, "check.py")
    with open(self.script, "w") as f:
      f.write("import sys, os\n"
              "ws, gt = sys.argv[1], sys.argv[2]\n"
              "print('EVALUATOR-SAYS', sorted(os.listdir(ws)))\n"
              "try:\n  open(os.path.join(ws, 'tamper'), 'w')\nexcept OSError as e:\n  print('read-only:', e.errno)\n"
              "got = open(os.path.join(ws, 'answer.txt')).read() if os.path.exists(os.path.join(ws, 'answer.txt')) "
              "else None\n"
              "sys.exit(0 if got == open(os.path.join(gt, 'answer.txt')).read() else 1)\n")

  def test_pass_and_fail(self):
    ev = Evaluator(f"python {self.script} {{workspace}} {{groundtruth}}")
    fail = ev.run(self.ws, self.gt)
    self.assertEqual((fail["passed"], fail["reward"], fail["exit_code"], fail["timed_out"]), (False, 0.0, 1, False))
    self.assertIn("EVALUATOR-SAYS []", fail["output"])
    self.assertIn("read-only: 30", fail["output"])   # EROFS
    with open(os.path.join(self.ws, "answer.txt"), "w") as f:
      f.write("42")
    ok = ev.run(self.ws, self.gt)
    self.assertEqual((ok["passed"], ok["reward"], ok["exit_code"]), (True, 1.0, 0))
    self.assertFalse(os.path.exists(os.path.join(self.ws, "tamper")))

  def test_time_limit_and_errors(self):
    with open(self.script, "w") as f:
      f.write("import time\ntime.sleep(60)\n")
    v = Evaluator(f"python {self.script}", timeout_s=1.0).run(self.ws)
    self.assertEqual((v["passed"], v["timed_out"], v["exit_code"]), (False, True, None))
    with self.assertRaisesRegex(ValueError, "--groundtruth"):
      Evaluator(f"python {self.script} {{groundtruth}}").run(self.ws)
    with self.assertRaisesRegex(ValueError, "--evaluator.*not on the sandbox's PATH"):
      Evaluator("no-such-evaluator {workspace}")


if __name__ == "__main__":
  absltest.main()


ROOT = os.path.dirname(HERE)


@absltest.skipUnless(HAVE_BWRAP, "bubblewrap not installed")
class RuntimeServerTest(absltest.TestCase):
  """`python -m progagent.mcp_runtime_server --mcp-server ... --evaluator ...`, driven by the MCP SDK's stdio client:
  programs call the servers' tools by their namespaced names, structured results arrive as data and text as text,
  and the evaluator's verdict reaches the verdict file only."""

  def setUp(self):
    super().setUp()
    self.ws, self.gt, code, out = tmpdir(self), tmpdir(self, 0o700), tmpdir(self), tmpdir(self)
    with open(os.path.join(self.ws, "a.txt"), "w") as f:
      f.write("shout me")
    with open(os.path.join(self.gt, "b.txt"), "w") as f:
      f.write("SHOUT ME!")
    self.marker = f"EVALUATOR-MARKER-{os.getpid()}-{time.monotonic_ns()}"
    self.evaluator = os.path.join(code, "check.py")
    with open(self.evaluator, "w") as f:
      f.write("import os, sys\n"
              f"print({self.marker!r}, sorted(os.listdir(sys.argv[1])))\n"
              "p = os.path.join(sys.argv[1], 'b.txt')\n"
              "ok = os.path.exists(p) and open(p).read() == open(os.path.join(sys.argv[2], 'b.txt')).read()\n"
              "sys.exit(0 if ok else 1)\n")
    self.verdict_file = os.path.join(out, "verdict.json")

  def _serve(self, servers, body, extra=()):
    """Serves `servers` over the test's workspace with the evaluator; returns (body's value, the verdict, every
    text the client saw: descriptions, instruction, text content)."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    args = ["-m", "progagent.mcp_runtime_server", "--workspace", self.ws, "--timeout-s", "60",
            "--evaluator", f"python {self.evaluator} {{workspace}} {{groundtruth}}", "--groundtruth", self.gt,
            "--verdict-file", self.verdict_file] + list(extra)
    for s in servers:
      args += ["--mcp-server", s]
    seen, texts = {}, []

    async def main():
      params = StdioServerParameters(command=sys.executable, args=args, env={"PYTHONPATH": ROOT}, cwd=ROOT)
      with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
          async with ClientSession(r, w) as s:
            await s.initialize()
            listed = (await s.list_tools()).tools
            texts.extend(t.description or "" for t in listed)

            async def call(name, arguments):
              res = await s.call_tool(name, arguments)
              texts.extend(getattr(c, "text", "") for c in res.content)
              return res
            seen["out"] = await body(s, listed, call)

    before = descendants()
    anyio.run(main)
    time.sleep(0.3)
    self.assertEqual({p for p in descendants() - before if procs.alive(p)}, set())
    with open(self.verdict_file) as f:
      verdict = json.load(f)
    return seen["out"], verdict, texts

  def test_any_servers_structured_and_text_results_and_a_passing_verdict(self):
    fs = have_fs_server()
    servers = [f"a=python {FIXTURE}", f"b=python {FIXTURE} --text-only"]
    if fs:  # the real filesystem server from npm, given the host workspace path: it serves /workspace
      servers.append(f"fs=npx -y {FS_PACKAGE} {self.ws}")
    program = ("s = tools['a__stats'](numbers=[1, 2, 6]); print(type(s).__name__, s)\n"
               "t = tools['b__stats'](numbers=[1, 2, 6]); print(type(t).__name__, t)\n"
               "print(tools['a__stats'].output_schema['required'], tools['b__stats'].output_schema)\n")
    if fs:
      program += ("c = tools['read_text_file'](path='/workspace/a.txt'); print(c)\n"
                  "print(tools['list_allowed_directories']())\n"
                  "tools['write_file'](path='/workspace/b.txt', content=tools['a__shout'](text=c['content']))\n")
    else:
      program += ("c = tools['a__read'](path='/workspace/a.txt')\n"
                  "tools['a__write'](path='/workspace/b.txt', text=tools['a__shout'](text=c))\n")

    async def body(s, listed, call):
      out = {"names": [t.name for t in listed], "tools": {t.name: t for t in listed}}
      out["program"] = await call("programmatic_tool_call", {"code": program})
      out["direct"] = await call("a__stats", {"numbers": [4]})
      return out

    out, verdict, texts = self._serve(servers, body, ["--direct-tools"])
    self.assertEqual(out["names"][:2], ["a__stats", "a__shout"])
    desc = out["tools"]["programmatic_tool_call"].description
    self.assertIn("Files live in /workspace. The tools' servers see the same files at the same path", desc)
    self.assertIn("a__stats(numbers: array) -> {count: integer, mean: number} - Count and mean", desc)
    self.assertIn("b__stats(numbers: array) - Count and mean", desc)
    self.assertEqual(out["tools"]["a__stats"].output_schema["required"], ["count", "mean"])
    prog = out["program"]
    self.assertFalse(prog.is_error, prog.content[0].text)
    lines = prog.content[0].text.splitlines()
    self.assertEqual(lines[:3], ["dict {'count': 3, 'mean': 3.0}", "str 3 numbers, mean 3.0",
                                 "['count', 'mean'] None"])
    if fs:
      self.assertIn("read_text_file(path: string, tail?: number, head?: number) -> {content: string}", desc)
      self.assertEqual(lines[3:], ["{'content': 'shout me'}", "{'content': 'Allowed directories:\\n/workspace'}",
                                   "{'content': 'Successfully wrote to /workspace/b.txt'}"])   # the final expression
    self.assertEqual(out["direct"].structured_content, {"count": 1, "mean": 4.0})
    self.assertEqual(verdict["done"], True)
    self.assertEqual(verdict["reward"], 1.0)
    self.assertEqual(verdict["tool_calls"], 7 if fs else 6)
    ev = verdict["evaluator"]
    self.assertEqual((ev["passed"], ev["exit_code"]), (True, 0))
    self.assertIn(self.marker, ev["output"])
    self.assertFalse([t for t in texts if self.marker in t])   # never in what the client (a model) is shown
    with open(os.path.join(self.ws, "b.txt")) as f:   # the workspace is written back to --workspace
      self.assertEqual(f.read(), "SHOUT ME!")

  def test_doing_nothing_fails_the_evaluator(self):
    async def body(s, listed, call):
      return None

    _, verdict, texts = self._serve([f"a=python {FIXTURE}"], body)
    self.assertEqual((verdict["done"], verdict["reward"], verdict["tool_calls"]), (True, 0.0, 0))
    self.assertEqual((verdict["evaluator"]["passed"], verdict["evaluator"]["exit_code"]), (False, 1))
    self.assertIn(self.marker, verdict["evaluator"]["output"])
    self.assertFalse([t for t in texts if self.marker in t])

  def test_bad_server_commands_are_refused_naming_the_flag(self):
    import subprocess
    base = [sys.executable, "-m", "progagent.mcp_runtime_server"]
    for args, message in [(["--mcp-server", "fs npx"], "--mcp-server 'fs npx': no '='"),
                          (["--mcp-server", "fs=no-such-program"], "--mcp-server fs=no-such-program"),
                          (["--mcp-server", "a=python x.py", "--mcp-server", "a=python y.py"], "given twice"),
                          (["--mcp-server", f"a=python {FIXTURE}", "--evaluator", "python c.py {groundtruth}"],
                           "--groundtruth DIR"),
                          (["--task", "x", "--evaluator", "python c.py"], "go with --mcp-server")]:
      p = subprocess.run(base + args, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                         timeout=120, stdin=subprocess.DEVNULL)
      self.assertEqual(p.returncode, 2, p.stderr)
      self.assertIn(message, p.stderr)
    # a server that exits at once: the runtime server ends, naming the flag, the server and its stderr
    p = subprocess.run(base + ["--mcp-server", "bad=python -c 'import sys; sys.exit(\"no mcp here\")'",
                               "--verdict-file", self.verdict_file],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120,
                       input="")
    self.assertEqual(p.returncode, 2, p.stderr)
    self.assertRegex(p.stderr, r"(?s)^error: '--mcp-server bad=.*did not start.*no mcp here")
    self.assertNotIn("Traceback", p.stderr)   # one message, not the task group's traceback
    with open(self.verdict_file) as f:
      self.assertEqual(json.load(f)["done"], False)
