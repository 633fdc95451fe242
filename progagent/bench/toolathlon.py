"""Toolathlon's local tasks as ProgAgent tasks: read from a checkout the user supplies, run over sandboxed servers.

  root = find_checkout(None)                      # --toolathlon_dir, else $TOOLATHLON_DIR
  rec = load_task(root, "privacy-desensitization", state_dir="runs/bench/toolathlon")
  env = McpTaskEnv(rec.servers, [rec.task])       # its servers, its instruction, its workspace, its own evaluator
  ProgEnv(env, mode="ptc")                        # any harness

  python -m progagent.bench.evaluate --suite toolathlon_local --toolathlon_dir DIR --policy scripted:groundtruth

Source: Toolathlon (Li et al. 2025, "The Tool Decathlon: Benchmarking Language Agents for Diverse, Realistic, and
Long-Horizon Task Execution", arXiv:2510.25726; GitHub hkust-nlp/Toolathlon). Nothing of it is copied into this
project: the tasks, the server configurations and the evaluators are read in place from the checkout.

Tasks (LOCAL_TASKS): the ten whose servers are all local programs and whose files are all in the repository
(courses-ta-hws, detect-revised-terms, excel-data-transformation, excel-market-research, interview-report,
paper-checker, ppt-analysis, privacy-desensitization, reimbursement-form-filler, sales-accounting). A task is the
folder tasks/finalpool/<name>/ of the checkout, in Toolathlon's layout (its utils/data_structures/task_config.py):
  task_config.json          {"needed_mcp_servers": [...], "needed_local_tools": [...]}
  docs/task.md              the instruction;  docs/agent_system_prompt.md  the agent's system prompt
  initial_workspace/        copied into the agent's workspace;  preprocess/main.py  then stages it (optional)
  groundtruth_workspace/    what the evaluator compares with (optional: ppt-analysis has none)
  evaluation/main.py        --agent_workspace --groundtruth_workspace --res_log_file --launch_time; exit 0 = pass
and the servers are configs/mcp_servers/<file>.yaml ({name, params: {command, args, env, cwd}}).

State (generate_state, once per state folder): initial_workspace is copied to <state_dir>/<name>/workspace, the
task's preprocess/main.py runs on it in a sandbox (workspace writable at /workspace, the checkout read-only, the
benchmark's interpreter; `--agent_workspace /workspace --launch_time T`), and the folders Toolathlon makes for
some servers are made (memory/ for the memory server; its helper.specifical_inialize_for_mcp). A finished state
is marked by <state_dir>/<name>/state.json (the launch time, the preprocess output) and reused.

Servers (server_command): each of the task's `needed_mcp_servers` from the checkout's yaml, translated to a
'NAME=COMMAND' for progagent.mcp_servers with ${agent_workspace} as {workspace} (/workspace in every sandbox):
  npx -y PKG ARGS                 -> node <prefix>/node/node_modules/PKG/<its bin> ARGS
  uvx PKG ARGS | uvx --from PKG PROG ARGS | uv run PROG ARGS
                                  -> <prefix>/servers/<package>/bin/<program> ARGS
  env {K: V}                      -> `env K=V ... PROGRAM`, and PATH=<prefix>/eval/bin:/usr/local/bin:/usr/bin:/bin
                                     (the terminal server's `python` is the benchmark's interpreter, as Toolathlon's
                                     is its own environment's)
where <prefix> is toolathlon_prefix() (<venv>/toolathlon, installed by setup.sh at the versions Toolathlon pins:
its global_preparation/install_env.sh `uv tool install` lines, its uv.lock and its package-lock.json, whose
versions of zod, zod-to-json-schema and the filesystem server's SDK matter: with today's zod 4 the filesystem
server 2025.7.1 lists its tools with empty input schemas, which the MCP SDK refuses). A yaml
naming any other ${...} value (a token, a port) is not a local server: ToolathlonError.

Instruction: docs/task.md, then docs/agent_system_prompt.md with Toolathlon's placeholders filled (workspace
folder /workspace, launch time T). Toolathlon's local tools are not offered: `claim_done` is a reply without a
tool call (the harness ends the episode), so the prompt's sentence naming `local-claim_done` is shortened to the
other way it names (CLAIM_DONE); `python_execute` is the program tool of PTC and Hybrid (the sandboxed kernel);
the context tools (`handle_overlong_tool_outputs`, `manage_context`, `history`) have no counterpart (the harness
cuts long observations, common.tool_wire).

Evaluator (evaluator_command): the task's evaluation/main.py, run by the benchmark's interpreter through
toolathlon_launcher.py (as `uv run -m tasks.finalpool.<name>.evaluation.main` from the checkout's root, with the
ground truth copied where the script may write), in progagent.evaluator's sandbox; exit status 0 = reward 1.

Interpreter: Toolathlon pins Python 3.12 (pyproject `requires-python`), and some of its scripts need it
(privacy-desensitization's evaluator uses a backslash in an f-string expression; pdf-tools-mcp requires >= 3.12).
setup.sh builds CPython 3.13 from Debian's source package once per machine (/usr/local/bin/python3.13) and makes
<prefix>/eval (the evaluators' imports, requirements-toolathlon.txt, at the versions of Toolathlon's uv.lock,
constraints-toolathlon-env.txt) and one environment per Python server under <prefix>/servers: excel-mcp-server
with Toolathlon's own lock (it runs from Toolathlon's environment there), the others held at the MCP SDK generation
they were released for (constraints-toolathlon-servers.txt); cli-mcp-server is the PyPI release of Toolathlon's
uv.lock (0.2.4), Toolathlon itself installing a fork that no registry has. `$PROGAGENT_TOOLATHLON_PREFIX` points
elsewhere.

One task over MCP without the evaluation command: `python -m progagent.bench.toolathlon serve TASK` serves it
through progagent.mcp_runtime_server (main; `command` prints that server's command line).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any, Sequence

import yaml

from common import sandbox_guard
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_launch
from progagent import mcp_servers
from progagent.bench.base import BenchTask, SuiteError
from progagent.mcp_task_env import McpTask

SUITE = "toolathlon_local"
ENV_VAR = "TOOLATHLON_DIR"
PREFIX_ENV = "PROGAGENT_TOOLATHLON_PREFIX"
TASKS_SUBDIR = os.path.join("tasks", "finalpool")
SERVERS_SUBDIR = os.path.join("configs", "mcp_servers")
LOCAL_TASKS = ("courses-ta-hws", "detect-revised-terms", "excel-data-transformation", "excel-market-research",
               "interview-report", "paper-checker", "ppt-analysis", "privacy-desensitization",
               "reimbursement-form-filler", "sales-accounting")
FETCH_HINT = ("fetch Toolathlon (GitHub hkust-nlp/Toolathlon; git clone it anywhere, e.g. ~/Toolathlon) and pass "
              f"--toolathlon_dir DIR or set ${ENV_VAR}=DIR: the folder holding tasks/finalpool/ and configs/mcp_servers/")
# Python servers: the program a yaml launches -> the environment setup.sh installs it in (its PyPI package).
PY_PROGRAMS = {"cli-mcp-server": "cli-mcp-server", "excel-mcp-server": "excel-mcp-server",
               "pdf-tools-mcp": "pdf-tools-mcp", "word_mcp_server": "office-word-mcp-server",
               "ppt_mcp_server": "office-powerpoint-mcp-server"}
WORKSPACE_VAR = "${agent_workspace}"
CLAIM_DONE = ("you can either call the `local-claim_done` tool or respond without calling any tool",
              "you can respond without calling any tool")
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toolathlon_launcher.py")
PREPROCESS_TIMEOUT_S = 300.0


class ToolathlonError(ValueError):
  """No checkout, a task or server file missing from it, a server that is not local, or the benchmark's
  interpreter or servers not installed; the message names what to fetch or install and where."""


# ------------------------------------------------------------------------------------------------ checkout


def find_checkout(path: str | None = None) -> str:
  """The checkout's root: `path` (--toolathlon_dir), else $TOOLATHLON_DIR.

  Raises:
    ToolathlonError: neither is given, or the folder lacks tasks/finalpool/ or configs/mcp_servers/ (FETCH_HINT).
  """
  root = path or os.environ.get(ENV_VAR, "")
  if not root:
    raise ToolathlonError(f"no Toolathlon checkout given: {FETCH_HINT}")
  root = os.path.abspath(os.path.expanduser(root))
  for sub in (TASKS_SUBDIR, SERVERS_SUBDIR):
    if not os.path.isdir(os.path.join(root, sub)):
      raise ToolathlonError(f"{root} is not a Toolathlon checkout (no {sub}/): {FETCH_HINT}")
  return root


def toolathlon_prefix() -> str:
  """Where setup.sh installs the benchmark's interpreter and servers: $PROGAGENT_TOOLATHLON_PREFIX, else
  <this venv>/toolathlon (inside the venv, so that every sandbox mounts it read-only)."""
  return os.path.abspath(os.environ.get(PREFIX_ENV) or os.path.join(sys.prefix, "toolathlon"))


def bench_python() -> str:
  """The benchmark's interpreter (<prefix>/eval/bin/python).

  Raises:
    ToolathlonError: not installed (setup.sh installs it).
  """
  py = os.path.join(toolathlon_prefix(), "eval", "bin", "python")
  if not os.path.exists(py):
    raise ToolathlonError(f"the interpreter for Toolathlon's scripts ({py}) is not installed: run setup.sh (it "
                          f"builds Python 3.13 and installs progagent/bench/requirements-toolathlon.txt there), or "
                          f"set ${PREFIX_ENV} to where it is")
  return py


def task_folder(root: str, name: str) -> str:
  """<root>/tasks/finalpool/<name>; ToolathlonError when it or its task_config.json is missing."""
  folder = os.path.join(root, TASKS_SUBDIR, name)
  if not os.path.isfile(os.path.join(folder, "task_config.json")):
    raise ToolathlonError(f"task {name!r}: {folder}/task_config.json does not exist (a partial checkout? the local "
                          f"tasks are {', '.join(LOCAL_TASKS)})")
  return folder


def _read_json(path: str) -> Any:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


# ------------------------------------------------------------------------------------------------ servers


def server_configs(root: str) -> dict[str, dict]:
  """{server name: its yaml} of configs/mcp_servers/*.yaml (a file's `name`, else its file name)."""
  out = {}
  for path in sorted(glob.glob(os.path.join(root, SERVERS_SUBDIR, "*.yaml"))):
    with open(path, encoding="utf-8") as f:
      doc = yaml.safe_load(f) or {}
    if isinstance(doc, dict):
      out[str(doc.get("name") or os.path.splitext(os.path.basename(path))[0])] = dict(doc, _file=path)
  return out


def _node_program(package: str, where: str) -> list[str]:
  folder = os.path.join(toolathlon_prefix(), "node", "node_modules", package)
  meta_path = os.path.join(folder, "package.json")
  if not os.path.isfile(meta_path):
    raise ToolathlonError(f"{where}: the npm package {package} is not installed in "
                          f"{os.path.join(toolathlon_prefix(), 'node')} (setup.sh installs the versions Toolathlon's "
                          "package-lock.json pins)")
  meta = _read_json(meta_path)
  bins = meta.get("bin")
  rel = bins if isinstance(bins, str) else (next(iter(bins.values())) if isinstance(bins, dict) and bins else None)
  if rel is None:
    raise ToolathlonError(f"{where}: {package} declares no program (package.json 'bin')")
  return ["node", os.path.realpath(os.path.join(folder, rel))]


def _python_program(program: str, where: str) -> str:
  package = PY_PROGRAMS.get(program)
  if package is None:
    raise ToolathlonError(f"{where}: the Python server program {program!r} is not one of the local servers this "
                          f"adapter installs ({sorted(PY_PROGRAMS)})")
  path = os.path.join(toolathlon_prefix(), "servers", package, "bin", program)
  if not os.path.exists(path):
    raise ToolathlonError(f"{where}: {path} is not installed (setup.sh installs {package} at Toolathlon's version)")
  return path


def _fill(value: Any, where: str) -> str:
  text = str(value).replace(WORKSPACE_VAR, mcp_servers.WORKSPACE_PLACEHOLDER)
  left = re.findall(r"\$\{[^}]*\}", text)
  if left:
    raise ToolathlonError(f"{where}: {left} is not a local setting (a token or a service address): the server is "
                          "not one of the local ones")
  return text


def server_command(root: str, name: str, configs: dict[str, dict] | None = None) -> str:
  """'NAME=COMMAND' (progagent.mcp_servers.parse_server) for Toolathlon's server `name` (module docstring).

  Raises:
    ToolathlonError: no yaml names the server, it is not a stdio server, its launcher is not npx / uvx / uv run,
      it needs a non-local setting, or its package is not installed.
  """
  configs = server_configs(root) if configs is None else configs
  doc = configs.get(name)
  if doc is None:
    raise ToolathlonError(f"server {name!r}: no file in {os.path.join(root, SERVERS_SUBDIR)} names it")
  where = f"server {name!r} ({doc['_file']})"
  params = doc.get("params") or {}
  if doc.get("type", "stdio") != "stdio" or "command" not in params:
    raise ToolathlonError(f"{where}: not a stdio server with a command")
  cmd, args = str(params["command"]), [_fill(a, where) for a in (params.get("args") or [])]
  if cmd == "npx":
    while args and args[0] in ("-y", "--yes"):
      args.pop(0)
    if not args:
      raise ToolathlonError(f"{where}: npx without a package")
    argv = _node_program(args[0], where) + args[1:]
  elif cmd == "uvx":
    if args[:1] == ["--from"] and len(args) >= 3:
      argv = [_python_program(args[2], where)] + args[3:]
    elif args:
      argv = [_python_program(args[0], where)] + args[1:]
    else:
      raise ToolathlonError(f"{where}: uvx without a program")
  elif cmd == "uv" and args[:1] == ["run"] and len(args) >= 2:
    argv = [_python_program(args[1], where)] + args[2:]
  else:
    raise ToolathlonError(f"{where}: the launcher {cmd!r} is not npx, uvx or `uv run`")
  env = [f"PATH={os.path.join(toolathlon_prefix(), 'eval', 'bin')}:{mcp_servers.SANDBOX_PATH}"]
  env += [f"{k}={_fill(v, where)}" for k, v in (params.get("env") or {}).items()]
  return f"{name}=" + shlex.join(["env"] + env + argv)


# ------------------------------------------------------------------------------------------------ state


def _launcher_argv(root: str, module: str, args: Sequence[str], writable: Sequence[str] = ()) -> list[str]:
  out = [bench_python(), LAUNCHER, "--checkout", root, "--module", module]
  for flag in writable:
    out += ["--writable-copy", flag.lstrip("-")]
  return out + ["--"] + list(args)


def run_sandboxed(argv: Sequence[str], workspace: str, *, ro_paths: Sequence[str], timeout_s: float,
                  sandbox: SandboxConfig = SandboxConfig()) -> tuple[int | None, str]:
  """Runs argv in a sandbox with the host folder `workspace` writable at /workspace (written back at the end)
  and `ro_paths` read-only at their own paths; returns (exit status or None when killed at timeout_s, output).

  Raises:
    common.sandbox.SandboxError: the sandbox could not be made.
  """
  log_path = sandbox_guard.owned_tempfile("tlpre", suffix=".log")
  keep = tuple(os.path.abspath(p) for p in ro_paths)
  sb = None
  code: int | None = None
  try:
    if sandbox.enabled:
      cfg = sandbox._replace(env=tuple(sandbox.env) + (("HOME", "/tmp"),))
      sb = Sandbox(cfg, workspace=workspace, binds=tuple((p, p, True) for p in keep if os.path.exists(p)))
      cmd = kernel_launch.strip_project_mounts(sb.command(list(argv)), keep=keep)
      env, cwd = {"PATH": mcp_servers.SANDBOX_PATH}, None
    else:
      cmd, env, cwd = list(argv), dict(os.environ), workspace
    with open(log_path, "wb") as logf:
      proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                              start_new_session=True, env=env, cwd=cwd)
    try:
      code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      if sb is not None:
        sb.kill()
      proc.kill()
      proc.wait(timeout=30)
  finally:
    if sb is not None:
      sb.close()
  with open(log_path, "rb") as f:
    out = f.read().decode("utf-8", "replace")
  os.unlink(log_path)
  return code, out


def generate_state(root: str, name: str, state_dir: str, *, launch_time: str,
                   sandbox: SandboxConfig = SandboxConfig()) -> str:
  """The task's initial workspace, staged as Toolathlon stages it (module docstring, "State"); returns the
  folder. Reused when <state_dir>/<name>/state.json exists.

  Raises:
    ToolathlonError: the preprocess script failed (its output in the message) or the task has no
      initial_workspace.
  """
  folder = task_folder(root, name)
  out = os.path.join(os.path.abspath(state_dir), name)
  ws, marker = os.path.join(out, "workspace"), os.path.join(out, "state.json")
  if os.path.isfile(marker) and os.path.isdir(ws):
    return ws
  init = os.path.join(folder, "initial_workspace")
  if not os.path.isdir(init):
    raise ToolathlonError(f"task {name!r}: {init} does not exist")
  shutil.rmtree(out, ignore_errors=True)
  os.makedirs(out)
  shutil.copytree(init, ws, symlinks=False)
  record: dict[str, Any] = {"task": name, "launch_time": launch_time, "checkout": root, "preprocess": None}
  pre = os.path.join(folder, "preprocess", "main.py")
  if os.path.isfile(pre):
    t0 = time.monotonic()
    argv = _launcher_argv(root, f"tasks.finalpool.{name}.preprocess.main",
                          ["--agent_workspace", mcp_servers.WORKSPACE_INSIDE if sandbox.enabled else ws,
                           "--launch_time", launch_time])
    code, output = run_sandboxed(argv, ws, ro_paths=(LAUNCHER, root), timeout_s=PREPROCESS_TIMEOUT_S,
                                 sandbox=sandbox)
    record["preprocess"] = {"exit_code": code, "seconds": round(time.monotonic() - t0, 2), "output": output[-4000:]}
    if code != 0:
      raise ToolathlonError(f"task {name!r}: its preprocess/main.py exited with {code}: {output[-2000:]}")
  needed = _read_json(os.path.join(folder, "task_config.json")).get("needed_mcp_servers") or []
  for server, sub in (("memory", "memory"), ("arxiv_local", "arxiv_local_storage"), ("xmind", "xmind"),
                      ("playwright", ".playwright_output")):
    if server in needed:
      os.makedirs(os.path.join(ws, sub), exist_ok=True)
  with open(marker, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
  return ws


# ------------------------------------------------------------------------------------------------ tasks


def instruction(root: str, name: str, *, workspace: str = mcp_servers.WORKSPACE_INSIDE, launch_time: str = "") -> str:
  """docs/task.md, then docs/agent_system_prompt.md with its placeholders filled (module docstring)."""
  folder = task_folder(root, name)
  with open(os.path.join(folder, "docs", "task.md"), encoding="utf-8") as f:
    text = f.read().strip()
  sp_path = os.path.join(folder, "docs", "agent_system_prompt.md")
  if os.path.isfile(sp_path):
    with open(sp_path, encoding="utf-8") as f:
      sp = f.read()
    for key, value in (("workspace_dir", workspace), ("workspace_dir_rela", "."), ("current_working_dir", workspace),
                       ("time", launch_time)):
      sp = sp.replace(f"!!<<<<||||{key}||||>>>>!!", value)
    text += "\n\n" + sp.replace(*CLAIM_DONE).strip()
  return text


def evaluator_command(root: str, name: str, *, launch_time: str) -> str | None:
  """The command progagent.evaluator.Evaluator runs for the task (module docstring); None without
  evaluation/main.py."""
  folder = task_folder(root, name)
  if not os.path.isfile(os.path.join(folder, "evaluation", "main.py")):
    return None
  args = ["--agent_workspace", mcp_servers.WORKSPACE_PLACEHOLDER]
  has_gt = os.path.isdir(os.path.join(folder, "groundtruth_workspace"))
  if has_gt:
    args += ["--groundtruth_workspace", "{groundtruth}"]
  args += ["--launch_time", launch_time]
  return shlex.join(_launcher_argv(root, f"tasks.finalpool.{name}.evaluation.main", args,
                                   writable=("--groundtruth_workspace",) if has_gt else ()))


def load_task(root: str, name: str, *, state_dir: str, launch_time: str | None = None,
              configs: dict[str, dict] | None = None, sandbox: SandboxConfig = SandboxConfig()) -> BenchTask:
  """One task as a BenchTask: its servers, and an McpTask with its instruction, generated state, ground truth and
  evaluator.

  Raises:
    ToolathlonError: see task_folder, server_command, generate_state, bench_python.
  """
  folder = task_folder(root, name)
  launch_time = launch_time or datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S %A")
  conf = _read_json(os.path.join(folder, "task_config.json"))
  configs = server_configs(root) if configs is None else configs
  servers = tuple(server_command(root, s, configs) for s in conf.get("needed_mcp_servers") or ())
  if not servers:
    raise ToolathlonError(f"task {name!r}: task_config.json names no needed_mcp_servers")
  ws = generate_state(root, name, state_dir, launch_time=launch_time, sandbox=sandbox)
  gt = os.path.join(folder, "groundtruth_workspace")
  task = McpTask(name, instruction(root, name, launch_time=launch_time), workspace=ws,
                 groundtruth=gt if os.path.isdir(gt) else None,
                 evaluator=evaluator_command(root, name, launch_time=launch_time))
  return BenchTask(SUITE, name, servers, task)


def add_args(p: argparse.ArgumentParser) -> None:
  g = p.add_argument_group("suite toolathlon_local (Toolathlon's ten local tasks)")
  g.add_argument("--toolathlon_dir", default=None, help=f"a Toolathlon checkout (default ${ENV_VAR})")
  g.add_argument("--toolathlon_tasks", default="", help="task names, comma-separated (default: the ten local ones)")


def load_suite(args: argparse.Namespace) -> list[BenchTask]:
  """The suite's tasks (`--toolathlon_dir`, `--toolathlon_tasks`), their state generated under
  <--workdir>/states/toolathlon.

  Raises:
    ToolathlonError: no checkout (FETCH_HINT), a task missing, a server not installed. SuiteError: a task that
      is not one of the ten local ones.
  """
  root = find_checkout(getattr(args, "toolathlon_dir", None))
  names = [n.strip() for n in str(getattr(args, "toolathlon_tasks", "") or "").split(",") if n.strip()] or list(LOCAL_TASKS)
  bad = [n for n in names if n not in LOCAL_TASKS]
  if bad:
    raise SuiteError(f"--toolathlon_tasks {bad}: the local tasks are {', '.join(LOCAL_TASKS)}")
  state_dir = os.path.join(str(getattr(args, "workdir", None) or "runs/bench"), "states", "toolathlon")
  configs = server_configs(root)
  return [load_task(root, n, state_dir=state_dir, configs=configs) for n in names]



# ------------------------------------------------------------------------------------------------ one task over MCP


def runtime_server_argv(rec: BenchTask, workspace: str, *, instruction_file: str,
                        verdict_file: str | None = None, direct_tools: bool = False) -> list[str]:
  """The arguments of `python -m progagent.mcp_runtime_server` serving one task over MCP stdio: its servers, the
  workspace, its own evaluator and ground truth, its instruction (written to `instruction_file`)."""
  with open(instruction_file, "w", encoding="utf-8") as f:
    f.write(rec.task.instruction)
  argv = ["--workspace", workspace, "--instruction-file", instruction_file]
  for s in rec.servers:
    argv += ["--mcp-server", s]
  if rec.task.evaluator:
    argv += ["--evaluator", rec.task.evaluator]
  if rec.task.groundtruth:
    argv += ["--groundtruth", rec.task.groundtruth]
  if verdict_file:
    argv += ["--verdict-file", verdict_file]
  return argv + (["--direct-tools"] if direct_tools else [])


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m progagent.bench.toolathlon {serve,command} TASK [--toolathlon_dir DIR] [--workdir DIR]
  [--workspace DIR] [--verdict-file PATH] [--direct-tools]`: serve one local task through ProgAgent's runtime over
  MCP stdio (progagent.mcp_runtime_server: the programmatic_tool_call tool over the task's sandboxed servers, the
  task's instruction as resource task://instruction and prompt `task`, its own evaluator's verdict in the verdict
  file when the episode ends), or print that command. The workspace (default <workdir>/episodes/<task>-<time>) is
  a fresh copy of the generated state and holds the episode's files afterwards. Exit status 2 on a bad task or
  checkout (the reason on stderr)."""
  p = argparse.ArgumentParser(prog="python -m progagent.bench.toolathlon", description=main.__doc__.split("\n")[0])
  p.add_argument("action", choices=("serve", "command"),
                 help="serve: run the runtime server on stdio; command: stage the workspace as serve would and "
                 "print the server's command line instead of running it")
  p.add_argument("task", help=f"one of {', '.join(LOCAL_TASKS)}")
  p.add_argument("--toolathlon_dir", default=None, help=f"a Toolathlon checkout (default ${ENV_VAR})")
  p.add_argument("--workdir", default="runs/bench",
                 help="generated task states (<workdir>/states/toolathlon) and the default workspace's parent")
  p.add_argument("--workspace", default=None,
                 help="the episode's folder, filled with a fresh copy of the task's state "
                 "(default <workdir>/episodes/<task>-<time>)")
  p.add_argument("--verdict-file", default=None,
                 help="where the task's evaluator's verdict is written when the episode ends "
                 "(default <workspace>.verdict.json)")
  p.add_argument("--direct-tools", action="store_true",
                 help="also list the servers' tools as direct MCP tools beside programmatic_tool_call")
  a = p.parse_args(argv)
  try:
    if a.task not in LOCAL_TASKS:
      raise SuiteError(f"{a.task!r} is not one of the local tasks ({', '.join(LOCAL_TASKS)})")
    root = find_checkout(a.toolathlon_dir)
    rec = load_task(root, a.task, state_dir=os.path.join(a.workdir, "states", "toolathlon"))
  except (ToolathlonError, SuiteError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  stamp = time.strftime("%Y%m%d-%H%M%S")
  ws = os.path.abspath(a.workspace or os.path.join(a.workdir, "episodes", f"{a.task}-{stamp}"))
  os.makedirs(ws, exist_ok=True)
  shutil.copytree(rec.task.workspace, ws, dirs_exist_ok=True)
  instruction_file = os.path.join(os.path.dirname(ws), f"{os.path.basename(ws)}.instruction.md")
  verdict = a.verdict_file or os.path.join(os.path.dirname(ws), f"{os.path.basename(ws)}.verdict.json")
  args = runtime_server_argv(rec, ws, instruction_file=instruction_file, verdict_file=verdict,
                             direct_tools=a.direct_tools)
  if a.action == "command":
    print(shlex.join([sys.executable, "-m", "progagent.mcp_runtime_server"] + args))
    return 0
  from progagent import mcp_runtime_server  # pylint: disable=g-import-not-at-top
  mcp_runtime_server.main(args)
  return 0


if __name__ == "__main__":
  sys.exit(main())
