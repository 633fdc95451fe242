"""LOCA-bench over a user-supplied checkout: task config entries as ProgAgent environments (issue 29, item 7).

  tasks = loca.suite(loca_dir=None, size="8k")           # the 75 entries of final_8k_set_config.json
  tasks = loca.suite(size="64k", task_types=["CanvasListTestS2LEnv"], seeds=[42])
  env = loca.make_env(tasks[:1])                          # an McpTaskEnv: its servers, its evaluator
  prog = ptc_env.ProgEnv(env, mode="ptc", close_env=True) # or 'dtc', 'hybrid'
  python -m progagent.bench.loca --loca_dir ~/LOCA-bench --size 8k --seeds 42 --check   # check(): a table

Source: Zeng et al. 2026, "LOCA-bench: Benchmarking Language Agents Under Controllable and Extreme Context
Growth", arXiv:2602.07962; code hkust-nlp/LOCA-bench@8cd474d (MIT), read in place from the user's checkout and
never copied into this project.

Checkout (find_checkout): `loca_dir`, else $LOCA_BENCH_DIR (CLI `--loca_dir`); it must hold
`task-configs/final_<size>_set_config.json`, `gem/envs/` and `mcp_convert/mcps/`. Absent: LocaCheckoutError,
naming what to fetch (`git clone https://github.com/hkust-nlp/LOCA-bench`) and where to point it.

Task sets (SIZES): 8k, 16k, 32k, 64k (the published setting), 96k, 128k, 256k: the environment description
lengths of `task-configs/final_<size>_set_config.json`, 75 entries {name, env_class, env_params, mcp_servers}
each, 5 seeds of 15 task types (TASK_TYPES at 8cd474d; the file's own list is what counts). An unknown size is
UnknownSizeError, a task type the file does not hold UnknownTaskTypeError, a seed no entry of the chosen types
has UnknownSeedError (all LocaError, a ValueError).

LOCA's code runs in its own interpreter (`python`, default $LOCA_PYTHON, else `.venv/loca/bin/python` that
setup.sh makes with `mcp` 1.x pinned: the mock servers use the SDK's low-level 1.x server API), through
progagent/bench/loca_runner.py, and always in the sandbox (common.sandbox: no network, uid 65534):
  * State: each entry's env class is constructed with task_dir=<state>/task (its reset() is the generator:
    agent workspace, local_db of the mock services, ground truth) in a sandbox whose workspace is the entry's
    state folder (`state_dir`, default $LOCA_STATE_DIR, else ~/.cache/progagent/loca;
    <state_dir>/<size>/<name>/state<i>/). Done once: `stamp.json` holds the entry, the instruction and the
    ERROR lines of the env's log; a folder whose stamp matches is reused. LOCA's envs catch a failed
    preprocessing, log it and return the instruction over an empty state; those ERROR lines make
    LocaStateError here (`allow_errors=True` keeps such a task).
  * Servers: the entry's `mcp_servers`, built as LOCA's gem/tools/mcp_server/config_loader.py builds them from
    config/<type>.yaml (loca_runner `servers`), each a progagent.mcp_servers server in its own sandbox:
    `{agent_workspace}` is the shared workspace, /workspace; `{task_workspace}` is TASK_INSIDE (/loca/task), a
    capped folder of the environment's (common.sandbox_fs) mounted read-write only into the servers whose
    command or variables name it (the mock services' `local_db`), restaged from the task's state at every
    reset, never seen by the programs' kernel or by servers that run commands (terminal). Commands: `python`
    and `uv ... run python SCRIPT` (the mock servers, claim_done) run SCRIPT with LOCA's interpreter (no `uv`
    resolving packages at run time); `uvx PACKAGE` and `direct` programs (cli-mcp-server, pdf-tools-mcp,
    excel-mcp-server) are the scripts of LOCA's interpreter's environment; `npx PACKAGE` the npm package
    installed in .venv/mcp-node (@modelcontextprotocol/server-filesystem, server-memory; setup.sh). The
    checkout is mounted read-only at its own path. DROPPED_SERVERS (`python_execute`: LOCA's unsandboxed
    `exec` of the model's code) are left out: programs run in ProgAgent's sandboxed kernel instead (PTC,
    Hybrid: `programmatic_tool_call`).
  * Reward: the entry's env class's own step() (what LOCA's claim_done triggers), run by loca_runner
    `evaluate` through progagent.evaluator.Evaluator after the episode, in a sandbox of its own, on a copy of
    the task folder with the episode's workspace as `agent_workspace` and the services' state as `local_db`;
    exit status 0 (reward 1.0) is a pass. A call of LOCA's `claim_done` tool ends the episode, as in LOCA.

Check (check(), `--check`; issue 29's done-when): per task, the state generated, every server's tools listed
inside its sandbox, the do-nothing episode failing (with the evaluator's own reason) and a ground-truth copy
passing: the generated ground truth put where the evaluator looks (GROUND_TRUTH_COPIES into the workspace,
GROUND_TRUTH_CALLS through the mock services' tools); 'n/a' with the reason for NO_FILE_GROUND_TRUTH.

Records: LocaTask has McpTask's fields (task_id, instruction, workspace, groundtruth, evaluator) plus where it
came from; make_env(tasks) builds a LocaTaskEnv (an McpTaskEnv) for tasks sharing one server set (a task type;
group_by_servers splits a suite so).

Known departures (kept visible in the check's notes): LOCA runs the terminal server with ALLOWED_DIR from
whichever of `agent_workspace` / `allowed_dir` comes last in terminal.yaml (CourseAssistantS2LEnv gets '.',
LOCA's working folder); here '.' is the server's working folder, /workspace. pdf-tools-mcp's default
`{workspace_path}/.pdf_tools_tempfiles` is passed unexpanded, as LOCA passes it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any, Iterable, NamedTuple, Sequence

from common import sandbox_fs
from common import sandbox_guard
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_launch
from progagent import evaluator
from progagent import mcp_servers
from progagent.mcp_task_env import McpTaskEnv

_log = logging.getLogger(__name__)

REPO = "hkust-nlp/LOCA-bench"
COMMIT = "8cd474d"
ENV_DIR = "LOCA_BENCH_DIR"
ENV_PYTHON = "LOCA_PYTHON"
ENV_STATE = "LOCA_STATE_DIR"
SIZES = ("8k", "16k", "32k", "64k", "96k", "128k", "256k")
DEFAULT_SIZE = "64k"
TASK_TYPES = (  # at 8cd474d, in the config files' order
    "CanvasArrangeExamS2LEnv", "CanvasListTestS2LEnv", "CourseAssistantS2LEnv", "ABTestingS2LEnv",
    "AcademicWarningS2LEnv", "ApplyPhDEmailS2LEnv", "MachineOperatingS2LEnv", "SetConfCrDdlS2LEnv",
    "ExcelMarketResearchS2LEnv", "FilterLowSellingProductsS2LEnv", "UpdateMaterialInventoryS2LEnv",
    "WoocommerceNewWelcomeS2LEnv", "WoocommerceStockAlertS2LEnv", "NhlB2bAnalysisS2LEnv",
    "PayableInvoiceCheckerS2LEnv")
DROPPED_SERVERS = ("python_execute",)
DONE_SERVERS = ("claim_done",)
TASK_INSIDE = "/loca/task"
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loca_runner.py")
_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_STAMP = "stamp.json"
_STAMP_VERSION = 1


class LocaError(ValueError):
  """Bad input to the LOCA-bench adapter; the message names the flag, variable or argument to fix."""


class LocaCheckoutError(LocaError):
  """No LOCA-bench checkout (or LOCA interpreter) where one was looked for; the message says what to fetch."""


class UnknownSizeError(LocaError):
  """A task-set size that is not one of SIZES."""


class UnknownTaskTypeError(LocaError):
  """A task type the chosen task set does not hold."""


class UnknownSeedError(LocaError):
  """A seed no entry of the chosen task types has."""


class LocaStateError(RuntimeError):
  """A task's state could not be generated (the generator failed or logged errors); names the task and log."""


class LocaTask(NamedTuple):
  """One task config entry with its generated state (McpTask's fields first).

  Attributes:
    task_id: 'loca/<size>/<name>/state<i>' (i: the entry's rank among its type's entries, as LOCA names them).
    instruction: the env's instruction (LOCA's user prompt).
    workspace: host folder of the generated agent workspace (copied into /workspace at reset).
    groundtruth: host folder of the generated ground truth (None when the generator wrote none).
    evaluator: None here (LocaTaskEnv sets the command, which names its own state folder).
    size, task_type, state_index, seed: where it came from.
    entry: the config entry as the file has it.
    task_dir: host folder of the whole generated state (<state>/task).
    servers: the entry's servers as loca_runner `servers` describes them (python_execute included).
    loca_dir: the checkout.
  """
  task_id: str
  instruction: str
  workspace: str | None
  groundtruth: str | None
  evaluator: str | None
  size: str
  task_type: str
  state_index: int
  seed: Any
  entry: dict
  task_dir: str
  servers: tuple
  loca_dir: str


def find_checkout(loca_dir: str | None = None) -> str:
  """The LOCA-bench checkout: `loca_dir`, else $LOCA_BENCH_DIR.

  Raises:
    LocaCheckoutError: neither is given, or the folder lacks task-configs/, gem/envs/ or mcp_convert/mcps/; the
      message names what to fetch and where to point --loca_dir / $LOCA_BENCH_DIR.
  """
  how = (f"fetch it with `git clone https://github.com/{REPO}` (tested at {COMMIT}) and pass --loca_dir DIR "
         f"(API: loca_dir=) or set ${ENV_DIR}")
  path = loca_dir or os.environ.get(ENV_DIR)
  if not path:
    raise LocaCheckoutError(f"no LOCA-bench checkout given: {how}")
  path = os.path.abspath(os.path.expanduser(path))
  missing = [p for p in ("task-configs", os.path.join("gem", "envs"), os.path.join("mcp_convert", "mcps"))
             if not os.path.isdir(os.path.join(path, p))]
  if missing:
    src = "--loca_dir" if loca_dir else f"${ENV_DIR}"
    raise LocaCheckoutError(f"{src}={path} is not a LOCA-bench checkout (no {', '.join(missing)}): {how}")
  return path


def find_python(python: str | None = None) -> str:
  """LOCA's interpreter: `python`, else $LOCA_PYTHON, else <project>/.venv/loca/bin/python (setup.sh).

  Raises:
    LocaCheckoutError: it does not exist (names setup.sh, which makes it).
  """
  path = python or os.environ.get(ENV_PYTHON) or os.path.join(_PROJECT, ".venv", "loca", "bin", "python")
  if not os.path.isfile(path):
    raise LocaCheckoutError(f"LOCA's interpreter {path} does not exist: run setup.sh (it makes .venv/loca with "
                            f"the pinned mcp 1.x that LOCA's mock servers need), or set ${ENV_PYTHON}")
  return os.path.abspath(path)


def config_path(loca_dir: str, size: str) -> str:
  """task-configs/final_<size>_set_config.json of the checkout.

  Raises:
    UnknownSizeError: `size` is not one of SIZES. LocaCheckoutError: the file is missing.
  """
  if size not in SIZES:
    raise UnknownSizeError(f"size {size!r} (--size; --loca_size in progagent.bench.evaluate) is not a LOCA-bench task set; the sets are {', '.join(SIZES)}")
  path = os.path.join(loca_dir, "task-configs", f"final_{size}_set_config.json")
  if not os.path.isfile(path):
    raise LocaCheckoutError(f"{path} is missing from the checkout: fetch a full checkout of {REPO}")
  return path


def entries(loca_dir: str, size: str) -> list[tuple[str, int, dict]]:
  """(name, state index, entry) of every entry of the size's task set, in file order."""
  with open(config_path(loca_dir, size), encoding="utf-8") as f:
    configs = json.load(f)["configurations"]
  out, rank = [], {}
  for c in configs:
    name = c.get("name") or c["env_class"].rsplit(".", 1)[-1]
    out.append((name, rank.setdefault(name, 0), c))
    rank[name] += 1
  return out


def select(loca_dir: str, size: str, task_types: Sequence[str] | None = None,
           seeds: Sequence[Any] | None = None) -> list[tuple[str, int, dict]]:
  """The entries of `task_types` (None: all) with env_params.seed in `seeds` (None: all).

  Raises:
    UnknownSizeError, UnknownTaskTypeError (names the types the set holds), UnknownSeedError.
  """
  all_entries = entries(loca_dir, size)
  names = list(dict.fromkeys(n for n, _, _ in all_entries))
  if task_types:
    unknown = [t for t in task_types if t not in names]
    if unknown:
      raise UnknownTaskTypeError(f"task types {unknown} (--types; --loca_types in progagent.bench.evaluate) are not in the {size} set; it holds "
                                 f"{', '.join(names)}")
  chosen = [e for e in all_entries if not task_types or e[0] in task_types]
  if seeds is not None:
    want = {str(s) for s in seeds}
    have = {str(c.get("env_params", {}).get("seed")) for _, _, c in chosen}
    if not want <= have:
      raise UnknownSeedError(f"seeds {sorted(want - have)} (--seeds; --loca_seeds in progagent.bench.evaluate) are not in the {size} set's chosen entries; "
                             f"their seeds are {sorted(have)}")
    chosen = [e for e in chosen if str(e[2].get("env_params", {}).get("seed")) in want]
  return chosen


def _run_runner(python: str, args: list[str], *, loca_dir: str, sandbox: SandboxConfig,
                workspace: str | None = None, timeout_s: float = 900.0) -> tuple[int, dict, str]:
  """Runs loca_runner with LOCA's interpreter in a sandbox (workspace: a host folder, read-write, written back);
  returns (exit status, its last JSON line, its output's end)."""
  argv = [python, RUNNER] + args
  log_path = sandbox_guard.owned_tempfile("loca", suffix=".log")
  sb = None
  try:
    if sandbox.enabled:
      binds = [(p, p, True) for p in _python_mounts(python) + [loca_dir, RUNNER]]
      cfg = sandbox._replace(env=tuple(sandbox.env) + (("HOME", "/tmp"), ("LOCA_QUIET", "1")))
      sb = Sandbox(cfg, workspace=workspace, binds=binds)
      cmd = kernel_launch.strip_project_mounts(sb.command(argv), keep=tuple(b[0] for b in binds))
      env = {"PATH": mcp_servers.SANDBOX_PATH}
    else:
      cmd, env = argv, dict(os.environ, LOCA_QUIET="1")
    with open(log_path, "wb") as logf:
      proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    try:
      code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      if sb is not None:
        sb.kill()
      os.killpg(proc.pid, 9)
      proc.wait(timeout=30)
      code = None
    # the sandbox's log capper (a `head -c` beside it) may still be writing the last lines
    evaluator._wait_group(proc.pid, 5.0)  # pylint: disable=protected-access
  finally:
    if sb is not None:
      sb.close()
  with open(log_path, "rb") as f:
    text = f.read().decode("utf-8", "replace")
  os.unlink(log_path)
  result: dict = {}
  for line in reversed(text.splitlines()):
    if line.startswith("{"):
      try:
        result = json.loads(line)
        break
      except ValueError:
        continue
  return code, result, text[-4000:]


def _python_mounts(python: str) -> list[str]:
  """Host folders LOCA's interpreter needs in a sandbox, beyond what every sandbox mounts: its environment and
  the installation its `python` links to."""
  out = []
  for p in (os.path.dirname(os.path.dirname(python)), os.path.dirname(os.path.dirname(os.path.realpath(python)))):
    if not mcp_servers._mounted_by_default(p) and p not in out:
      out.append(p)
  return out


def _stamp_key(entry: dict) -> str:
  return hashlib.sha256(json.dumps([_STAMP_VERSION, entry], sort_keys=True).encode()).hexdigest()[:16]


def generate(loca_dir: str, name: str, index: int, entry: dict, *, size: str, state_dir: str, python: str,
             sandbox: SandboxConfig = SandboxConfig(), force: bool = False, timeout_s: float = 900.0) -> dict:
  """The entry's state in <state_dir>/<size>/<name>/state<index> (module docstring, "State"); returns its stamp
  ({key, entry, instruction, errors, seconds, servers}).

  Raises:
    LocaStateError: the generator exited non-zero or printed no instruction (names the task and its output).
  """
  folder = os.path.join(state_dir, size, name, f"state{index}")
  stamp_path = os.path.join(folder, _STAMP)
  key = _stamp_key(entry)
  if not force and os.path.isfile(stamp_path):
    with open(stamp_path, encoding="utf-8") as f:
      stamp = json.load(f)
    if stamp.get("key") == key and os.path.isdir(os.path.join(folder, "task")):
      return stamp
  if os.path.isdir(folder):
    shutil.rmtree(folder)
  os.makedirs(folder, mode=0o755)
  with open(os.path.join(folder, "entry.json"), "w", encoding="utf-8") as f:
    json.dump(entry, f)
  inside = mcp_servers.WORKSPACE_INSIDE if sandbox.enabled else folder
  code, srv, tail = _run_runner(python, ["servers", "--loca-dir", loca_dir, "--entry", f"{inside}/entry.json",
                                         "--task-workspace", TASK_INSIDE,
                                         "--agent-workspace", mcp_servers.WORKSPACE_INSIDE],
                                loca_dir=loca_dir, sandbox=sandbox, workspace=folder, timeout_s=120)
  if code != 0 or "servers" not in srv:
    raise LocaStateError(f"LOCA task {name} state{index} ({size}): its servers could not be read from "
                         f"gem/tools/mcp_server/config/: {tail[-2000:]}")
  t0 = time.monotonic()
  code, out, tail = _run_runner(python, ["generate", "--loca-dir", loca_dir, "--entry", f"{inside}/entry.json",
                                         "--task-dir", f"{inside}/task"],
                                loca_dir=loca_dir, sandbox=sandbox, workspace=folder, timeout_s=timeout_s)
  seconds = time.monotonic() - t0
  if code != 0 or "instruction" not in out:
    raise LocaStateError(f"LOCA task {name} state{index} ({size}): the generator failed (exit status {code}): "
                         f"{out.get('error', '')} {tail[-2000:]}")
  stamp = {"key": key, "entry": entry, "instruction": out["instruction"], "errors": out.get("errors", []),
           "seconds": round(seconds, 2), "servers": srv["servers"]}
  with open(stamp_path, "w", encoding="utf-8") as f:
    json.dump(stamp, f, indent=1)
  return stamp


def suite(loca_dir: str | None = None, size: str = DEFAULT_SIZE, *, task_types: Sequence[str] | None = None,
          seeds: Sequence[Any] | None = None, state_dir: str | None = None, python: str | None = None,
          sandbox: SandboxConfig = SandboxConfig(), allow_errors: bool = False,
          force: bool = False) -> list[LocaTask]:
  """LOCA-bench's tasks of one task set, their state generated (module docstring).

  Args:
    loca_dir: the checkout (None: $LOCA_BENCH_DIR).
    size: one of SIZES.
    task_types: entry names to keep (None: all 15).
    seeds: env_params.seed values to keep (None: all five per type).
    state_dir: where states are generated and kept (None: $LOCA_STATE_DIR, else ~/.cache/progagent/loca).
    python: LOCA's interpreter (None: $LOCA_PYTHON, else .venv/loca/bin/python).
    sandbox: SandboxConfig of the generators.
    allow_errors: keep tasks whose generator logged ERROR lines (their stamp lists them).
    force: generate again even where a matching state exists.
  Returns:
    LocaTask records, in file order.
  Raises:
    LocaCheckoutError, UnknownSizeError, UnknownTaskTypeError, UnknownSeedError: bad input (each names the fix).
    LocaStateError: a generator failed, or logged errors (without allow_errors).
  """
  loca_dir = find_checkout(loca_dir)
  py = find_python(python)
  chosen = select(loca_dir, size, task_types, seeds)
  state_dir = os.path.abspath(os.path.expanduser(
      state_dir or os.environ.get(ENV_STATE) or os.path.join("~", ".cache", "progagent", "loca")))
  out = []
  for name, index, entry in chosen:
    stamp = generate(loca_dir, name, index, entry, size=size, state_dir=state_dir, python=py, sandbox=sandbox,
                     force=force)
    task_dir = os.path.join(state_dir, size, name, f"state{index}", "task")
    if stamp["errors"] and not allow_errors:
      raise LocaStateError(f"LOCA task {name} state{index} ({size}): the generator logged errors (LOCA's envs go "
                           f"on with an empty state): {' | '.join(stamp['errors'][:5])}; see "
                           f"{os.path.join(task_dir, 'logs', 'env.log')}")
    ws = os.path.join(task_dir, "agent_workspace")
    gt = os.path.join(task_dir, "groundtruth_workspace")
    out.append(LocaTask(f"loca/{size}/{name}/state{index}", stamp["instruction"],
                        ws if os.path.isdir(ws) else None, gt if os.path.isdir(gt) else None, None, size, name,
                        index, entry.get("env_params", {}).get("seed"), entry, task_dir,
                        tuple(stamp["servers"]), loca_dir))
  return out


def _servers_key(task: LocaTask) -> str:
  return json.dumps([s for s in task.servers if s["type"] not in DROPPED_SERVERS], sort_keys=True)


def group_by_servers(tasks: Iterable[LocaTask]) -> list[list[LocaTask]]:
  """Tasks split into groups that share one server set (what one LocaTaskEnv serves), in first-seen order."""
  groups: dict[str, list[LocaTask]] = {}
  for t in tasks:
    groups.setdefault(_servers_key(t), []).append(t)
  return list(groups.values())


def _names_task(server: dict) -> bool:
  texts = [server["command"]] + list(server["args"]) + list(server["env"].values())
  return any(TASK_INSIDE in str(t) for t in texts)


def server_spec(server: dict, *, loca_dir: str, python: str, state: "str | sandbox_fs.CappedDir | None",
                sandboxed: bool = True) -> mcp_servers.McpServerSpec:
  """One described LOCA server as a progagent.mcp_servers server (module docstring, "Servers").

  Raises:
    LocaCheckoutError: a `uvx` or `direct` program is not installed in LOCA's interpreter's environment.
  """
  command, args = server["command"], list(server["args"])
  bindir = os.path.dirname(python)
  if command in ("python", "python3"):
    argv = [python] + args
  elif command == "uv":  # SCRIPT ARGS (loca_runner), or config_loader's --directory ROOT run python SCRIPT ARGS
    if "run" in args and "python" in args[args.index("run"):]:
      args = args[args.index("python", args.index("run")) + 1:]
    argv = [python] + args
  elif command in ("uvx",) or "/" not in command and command not in ("npx", "node"):
    program = args.pop(0) if command == "uvx" else command
    path = os.path.join(bindir, program)
    if not os.path.isfile(path):
      raise LocaCheckoutError(f"LOCA server {server['name']!r} runs {program!r}, which is not installed in "
                              f"{os.path.dirname(bindir)} (setup.sh installs cli-mcp-server, pdf-tools-mcp and "
                              f"excel-mcp-server there)")
    argv = [path] + args
  elif command == "npx":
    argv = ["npx", "-y"] + args
  else:
    argv = [command] + args
  env = dict(server["env"], LOCA_QUIET="1")
  binds = [(p, p, True) for p in _python_mounts(python) + [loca_dir]]
  if state is not None and _names_task(server):
    if sandboxed:
      binds.append((state, TASK_INSIDE, False))
    else:  # debugging without a sandbox: the host folder stands for TASK_INSIDE
      host = state.path if isinstance(state, sandbox_fs.CappedDir) else state
      argv = [a.replace(TASK_INSIDE, host) for a in argv]
      env = {k: v.replace(TASK_INSIDE, host) for k, v in env.items()}
  return mcp_servers.McpServerSpec(server["name"], tuple(argv), f"LOCA server {server['name']} ({server['type']})",
                                   env=tuple(sorted(env.items())), binds=tuple(binds) if sandboxed else ())


def _staged_entries(servers: Sequence[dict]) -> list[str]:
  """Top folders of the task folder that the servers name under TASK_INSIDE (e.g. local_db, memory_data)."""
  out = []
  for s in servers:
    for t in [s["command"]] + list(s["args"]) + list(s["env"].values()):
      t = str(t)
      i = t.find(TASK_INSIDE + "/")
      if i >= 0:
        top = t[i + len(TASK_INSIDE) + 1:].split("/", 1)[0]
        if top and top not in out:
          out.append(top)
  return out


class LocaTaskEnv(McpTaskEnv):
  """LOCA tasks that share one server set, as an McpTaskEnv (module docstring).

  Args:
    tasks: LocaTask records (suite()); all must have the same servers (group_by_servers).
    python: LOCA's interpreter (None: find_python()).
    sandbox: SandboxConfig of the servers, the evaluator and the workspace's and state's budgets.
    reuse_servers: servers kept across episodes (default: filesystem, whose whole state is the workspace).
    max_steps, evaluator_timeout_s, start_timeout_s, call_timeout_s, namespace: as McpTaskEnv's.
  Raises:
    LocaError: no task, or tasks with different server sets.
    progagent.mcp_servers.McpServerError: a server that does not start.
  """

  def __init__(self, tasks: Sequence[LocaTask], *, python: str | None = None,
               sandbox: SandboxConfig = SandboxConfig(), reuse_servers: Sequence[str] | None = None,
               max_steps: int = 200, evaluator_timeout_s: float = 600.0, start_timeout_s: float = 120.0,
               call_timeout_s: float = 120.0, namespace: str = "clash"):
    tasks = list(tasks)
    if not tasks:
      raise LocaError("LocaTaskEnv needs at least one task (loca.suite())")
    if len({_servers_key(t) for t in tasks}) > 1:
      raise LocaError("LocaTaskEnv's tasks must share one server set; split them with loca.group_by_servers()")
    self.python = find_python(python)
    servers = [s for s in tasks[0].servers if s["type"] not in DROPPED_SERVERS]
    self.loca_servers = servers
    self.done_servers = tuple(s["name"] for s in servers if s["type"] in DONE_SERVERS)
    self._staged = _staged_entries(servers)
    self._loca_tasks = {t.task_id: t for t in tasks}
    self._state_dir = sandbox_guard.owned_tempdir("lst")
    self._state: sandbox_fs.CappedDir | None = None
    self._staged_task: str | None = None
    try:
      if sandbox.enabled:
        self._state = sandbox_fs.CappedDir(
            self._state_dir, "lst", max_bytes=sandbox.workspace_max_bytes, max_files=sandbox.workspace_max_files,
            uid=sandbox.uid, gid=sandbox.gid, mode=0o755,
            limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
      self._stage_state(tasks[0])
      self._servers_on = tasks[0].task_id  # the state the servers start on
      loca_dir = tasks[0].loca_dir
      specs = [server_spec(s, loca_dir=loca_dir, python=self.python, state=self._state or self._state_dir,
                           sandboxed=sandbox.enabled) for s in servers]
      mcp_tasks = [t._replace(evaluator=self._evaluator_command(t, loca_dir)) for t in tasks]
      names = {s["name"] for s in servers}
      reuse = ("filesystem",) if reuse_servers is None else tuple(reuse_servers)
      super().__init__(specs, mcp_tasks, reuse_servers=tuple(r for r in reuse if r in names), namespace=namespace,
                       sandbox=sandbox, max_steps=max_steps, evaluator_timeout_s=evaluator_timeout_s,
                       start_timeout_s=start_timeout_s, call_timeout_s=call_timeout_s)
      for ev in self._evaluators.values():
        ev.ro_paths = tuple(_python_mounts(self.python))
    except BaseException:
      self._close_state()
      raise

  def _evaluator_command(self, task: LocaTask, loca_dir: str) -> str:
    state = self._state_dir
    argv = [self.python, RUNNER, "evaluate", "--loca-dir", loca_dir,
            "--entry", os.path.join(os.path.dirname(task.task_dir), "entry.json"),
            "--assemble", task.task_dir, "--workspace", "{workspace}",
            "--state", state] + [a for e in self._staged for a in ("--staged", e)]
    return shlex.join(argv)

  def _stage_state(self, task: LocaTask) -> None:
    """The task's state folders (those the servers name under TASK_INSIDE) copied into the state folder."""
    src = sandbox_guard.owned_tempdir("lsrc")
    try:
      for name in self._staged:
        p = os.path.join(task.task_dir, name)
        if os.path.isdir(p):
          shutil.copytree(p, os.path.join(src, name), symlinks=True)
        else:
          os.makedirs(os.path.join(src, name))
      if self._state is not None:
        self._state.restage(src)
      else:
        for n in os.listdir(self._state_dir):
          shutil.rmtree(os.path.join(self._state_dir, n))
        shutil.copytree(src, self._state_dir, symlinks=True, dirs_exist_ok=True)
    finally:
      shutil.rmtree(src, ignore_errors=True)
    self._staged_task = task.task_id

  def reset(self, task_id: str | None = None, seed: int = 0) -> str:
    """McpTaskEnv.reset, with the task's service state restaged first (and every server but the reused ones
    started afresh on it)."""
    tid = task_id if task_id is not None else (self._task.task_id if self._task is not None else None)
    tid = str(tid).split("@v")[0] if tid is not None else None
    if tid in self._loca_tasks:
      self._stage_state(self._loca_tasks[tid])
      if self.episodes == 0 and self._restart and tid != self._servers_on:
        self._group.restart(self._restart)  # (after the first episode, McpTaskEnv.reset restarts them)
      self._servers_on = tid
    return super().reset(task_id, seed)

  def call_tool(self, name: str, arguments: dict) -> dict:
    """McpTaskEnv.call_tool; a call of LOCA's claim_done tool ends the episode (as LOCA's claim_done does)."""
    wire = super().call_tool(name, arguments)
    if self.done_servers and self._group.route(name)[0] in self.done_servers:
      self._done = True
    return wire

  def _fingerprint(self, limit: int = 50_000) -> tuple:
    """The workspace's fingerprint (McpTaskEnv's) and the services' state's: a verdict is reused only while
    neither changed (the mock services' tools change only the latter)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(self._state_dir):
      for n in sorted(dirnames) + sorted(filenames):
        try:
          st = os.lstat(os.path.join(dirpath, n))
        except OSError:
          continue
        out.append((os.path.relpath(os.path.join(dirpath, n), self._state_dir), st.st_size, st.st_mtime_ns))
        if len(out) >= limit:
          break
    return super()._fingerprint(limit), tuple(out)

  def _close_state(self) -> None:
    try:
      if self._state is not None:
        self._state.close(copy_back=False)
        self._state = None
    finally:
      shutil.rmtree(self._state_dir, ignore_errors=True)

  def close(self) -> None:
    try:
      super().close()
    finally:
      self._close_state()


def make_env(tasks: Sequence[LocaTask], **kwargs) -> LocaTaskEnv:
  """A LocaTaskEnv over `tasks` (one server set; kwargs as LocaTaskEnv's)."""
  return LocaTaskEnv(tasks, **kwargs)


def add_args(p: argparse.ArgumentParser) -> None:
  """The suite's flags, for an evaluation command over several suites (load_suite reads them)."""
  g = p.add_argument_group("suite loca (LOCA-bench)")
  g.add_argument("--loca_dir", default=None, help=f"a LOCA-bench checkout (default ${ENV_DIR})")
  g.add_argument("--loca_size", default=DEFAULT_SIZE, help=f"task set: {', '.join(SIZES)} (default {DEFAULT_SIZE})")
  g.add_argument("--loca_types", default="", help="task types, comma-separated (default: all 15)")
  g.add_argument("--loca_seeds", default="", help="env_params.seed values, comma-separated (default: all)")
  g.add_argument("--loca_state_dir", default=None, help="where states are kept (default <--workdir>/states/loca, "
                 f"else ${ENV_STATE}, else ~/.cache/progagent/loca)")


def load_suite(args: argparse.Namespace) -> list[LocaTask]:
  """suite() with add_args' flags; each record's environment is make_env([record]) (LOCA's servers need the
  task's service state mounted, which 'NAME=COMMAND' strings cannot say).

  Raises:
    as suite().
  """
  split = lambda v: [x.strip() for x in str(v or "").split(",") if x.strip()] or None
  state_dir = getattr(args, "loca_state_dir", None)
  if state_dir is None and getattr(args, "workdir", None):
    state_dir = os.path.join(str(args.workdir), "states", "loca")
  return suite(getattr(args, "loca_dir", None), getattr(args, "loca_size", DEFAULT_SIZE),
               task_types=split(getattr(args, "loca_types", "")), seeds=split(getattr(args, "loca_seeds", "")),
               state_dir=state_dir)


# --- the adapter's check: state, tools in the sandbox, do-nothing fails, a ground-truth copy passes ---------------

# Ground-truth copies (the check's, not the benchmark's): what a correct episode leaves, made from the generated
# ground truth. GROUND_TRUTH_COPIES: for each task type, the ground-truth files the evaluator wants in the agent
# workspace, as (ground-truth file, workspace file); a '.xlsx' target of a '.csv' source is that table written as
# a workbook (pandas, in LOCA's interpreter). GROUND_TRUTH_CALLS: for the task types whose evaluator also (or only)
# reads the mock services' state, a function (ground-truth folder, call) that puts the ground truth there through
# the services' own tools, call(tool, arguments) -> result text (the episode's step()). The other task types
# (NO_FILE_GROUND_TRUTH) check service state that the ground-truth folder does not describe (emails with their
# wording and attachments, shop and calendar entries, sheet cells) or ship no ground-truth folder.
def _csv_rows(path: str) -> list[dict]:
  import csv  # pylint: disable=import-outside-toplevel
  with open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def _machine_operating(gt: str, call) -> None:
  call("storage_create_bucket", {"bucket_name": "iot_anomaly_reports"})
  call("storage_upload_file", {"bucket_name": "iot_anomaly_reports", "source_file_path": "/workspace/anomaly_report.csv",
                               "destination_blob_name": "anomaly_report.csv"})


def _academic_warning(gt: str, call) -> None:
  for r in _csv_rows(os.path.join(gt, "expected_alerts.csv")):
    if float(r["drop_ratio"]) > 0.45:   # evaluation/main.py: CRITICAL logs for drops over 45 %
      call("logging_write_log", {"log_name": "exam_log", "severity": "CRITICAL",
                                 "message": f"{r['student_id']} {r['name']}: score dropped {float(r['drop_ratio']):.0%}"})


def _ab_testing(gt: str, call) -> None:
  overall = [r for r in _csv_rows(os.path.join(gt, "expected_ratio.csv")) if r["scenario"].startswith("overall")][0]
  a, b = (float(overall[k].rstrip("%")) for k in ("A_conversion %", "B_conversion %"))
  if b > a:   # evaluation/main.py validate_task_completion: B wins -> the promo bucket, no log entry
    call("storage_create_bucket", {"bucket_name": "promo-assets-for-b"})
  else:
    call("logging_write_log", {"log_name": "abtesting_logging", "severity": "INFO", "message": json.dumps(
        {"status": "AB_Test_Concluded", "winner": "A", "action": "No_Change"})})


def _nhl_b2b_analysis(gt: str, call) -> None:
  import csv  # pylint: disable=import-outside-toplevel
  with open(os.path.join(gt, "standard_answer.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  sheet_id = json.loads(call("create_spreadsheet", {"title": "nhl_b2b_analysis"}))["spreadsheetId"]
  last = chr(ord("A") + len(rows[0]) - 1)
  call("update_cells", {"spreadsheet_id": sheet_id, "sheet": "Sheet1", "range": f"A1:{last}{len(rows)}",
                        "data": rows})


def _update_material_inventory(gt: str, call) -> None:
  with open(os.path.join(gt, "config.json"), encoding="utf-8") as f:
    config = json.load(f)
  with open(os.path.join(gt, "expected_results.json"), encoding="utf-8") as f:
    final = json.load(f)["expected_final_inventories"]
  sheet = config.get("inventory_sheet_name", "Material_Inventory")
  data = json.loads(call("get_sheet_data", {"spreadsheet_id": config["spreadsheet_id"], "sheet": sheet}))
  for i, row in enumerate(data["valueRanges"][0]["values"]):
    if i and row and row[0] in final["google_sheets_material_inventory"]:
      call("update_cells", {"spreadsheet_id": config["spreadsheet_id"], "sheet": sheet, "range": f"C{i + 1}",
                            "data": [[final["google_sheets_material_inventory"][row[0]]]]})
  for sku, stock in final["woocommerce_inventory"].items():
    product = json.loads(call("woo_products_list", {"sku": sku}))[0]
    call("woo_products_update", {"productId": product["id"], "productData": {"stock_quantity": stock}})


def _set_conf_cr_ddl(gt: str, call) -> None:
  import datetime  # pylint: disable=import-outside-toplevel
  with open(os.path.join(gt, "conference_metadata.json"), encoding="utf-8") as f:
    targets = json.load(f)["target_info"]["conferences"]
  for t in targets:   # evaluation/main.py: an event named with the conference and 'camera ready', 3 h before
    start = datetime.datetime.fromisoformat(t["deadline"]) - datetime.timedelta(hours=3)
    call("create_event", {"summary": f"{t['conference']} camera ready deadline ({t['track']})",
                          "start": {"dateTime": start.isoformat()},
                          "end": {"dateTime": (start + datetime.timedelta(hours=1)).isoformat()}})


GROUND_TRUTH_COPIES = {
    "CanvasListTestS2LEnv": (("quiz_info.csv", "quiz_info.csv"), ("assignment_info.csv", "assignment_info.csv")),
    "CanvasArrangeExamS2LEnv": (("exam_schedule.xlsx", "exam_schedule.xlsx"),),
    "ExcelMarketResearchS2LEnv": (("Market_Data_gt.csv", "growth_rate.xlsx"),),
    "MachineOperatingS2LEnv": (("anomaly_report.csv", "anomaly_report.csv"),),
    "AcademicWarningS2LEnv": (("expected_alerts.csv", "bad_student.csv"),),
    "ABTestingS2LEnv": (("expected_ratio.csv", "record.csv"),),
    "NhlB2bAnalysisS2LEnv": (("standard_answer.csv", "nhl_b2b_analysis.csv"),),
    "UpdateMaterialInventoryS2LEnv": (),
    "SetConfCrDdlS2LEnv": (),
}
GROUND_TRUTH_CALLS = {
    "MachineOperatingS2LEnv": _machine_operating,
    "AcademicWarningS2LEnv": _academic_warning,
    "ABTestingS2LEnv": _ab_testing,
    "NhlB2bAnalysisS2LEnv": _nhl_b2b_analysis,
    "UpdateMaterialInventoryS2LEnv": _update_material_inventory,
    "SetConfCrDdlS2LEnv": _set_conf_cr_ddl,
}
NO_FILE_GROUND_TRUTH = {
    "CourseAssistantS2LEnv": "reminder emails; the generator writes no ground-truth folder",
    "WoocommerceNewWelcomeS2LEnv": "google_cloud customer rows and welcome emails; no ground-truth folder",
    "WoocommerceStockAlertS2LEnv": "a google sheet's rows and alert emails; no ground-truth folder",
    "FilterLowSellingProductsS2LEnv": "woocommerce products and subscriber emails; the ground-truth folder holds "
                                      "only the generator's parameters",
    "ApplyPhDEmailS2LEnv": "an email whose ZIP is laid out as the replying professor asks; the ground-truth folder "
                           "holds the application's source files, not that email",
    "PayableInvoiceCheckerS2LEnv": "snowflake invoice and payment rows, a column comment and emails to purchasers "
                                   "(from invoice.jsonl; not written by this check)",
}


def copy_ground_truth(env: LocaTaskEnv, task: LocaTask) -> list[str]:
  """Puts the task's ground truth where its evaluator looks (after reset): GROUND_TRUTH_COPIES into the workspace,
  then GROUND_TRUTH_CALLS through the services' tools. Returns what it did ('file NAME', 'call TOOL').

  Raises:
    LocaError: the task type has no such ground truth, a ground-truth file is missing, or a tool call failed.
  """
  pairs = GROUND_TRUTH_COPIES.get(task.task_type)
  if pairs is None or task.groundtruth is None:
    raise LocaError(f"{task.task_type} has no ground truth a copy can satisfy: "
                    f"{NO_FILE_GROUND_TRUTH.get(task.task_type, 'unknown task type')}")
  done = []
  for src_name, dst_name in pairs:
    src = os.path.join(task.groundtruth, src_name)
    dst = os.path.join(env.workspace_dir, dst_name)
    if not os.path.isfile(src):
      raise LocaError(f"{task.task_id}: the ground-truth file {src} is missing")
    if src_name.endswith(".csv") and dst_name.endswith(".xlsx"):
      code = ("import sys, pandas; pandas.read_csv(sys.argv[1]).to_excel(sys.argv[2], index=False)")
      subprocess.run([env.python, "-c", code, src, dst], check=True, capture_output=True, timeout=120)
    else:
      shutil.copyfile(src, dst)
    os.chmod(dst, 0o666)
    done.append(f"file {dst_name}")

  def call(name: str, arguments: dict) -> str:
    res = env.step({"name": name, "arguments": arguments})
    if res.status != "ok":
      raise LocaError(f"{task.task_id}: the ground truth's call {name}({arguments}) failed: {res.observation[:300]}")
    done.append(f"call {name}")
    return res.observation

  if task.task_type in GROUND_TRUTH_CALLS:
    GROUND_TRUTH_CALLS[task.task_type](task.groundtruth, call)
  return done


def check(tasks: Sequence[LocaTask], *, python: str | None = None, sandbox: SandboxConfig = SandboxConfig(),
          log=print) -> list[dict]:
  """The done-when check of issue 29 on each task: its state generated (suite() did), every server listed its
  tools inside its sandbox, the do-nothing episode fails, a ground-truth copy passes (GROUND_TRUTH_COPIES and GROUND_TRUTH_CALLS;
  'n/a' elsewhere). Returns one row per task: {task_id, task_type, seed, generate_s, errors, servers
  {name: tools}, start_s, nothing, groundtruth, ok, note}."""
  rows = []
  for group in group_by_servers(tasks):
    for task in group:
      stamp_path = os.path.join(os.path.dirname(task.task_dir), _STAMP)
      with open(stamp_path, encoding="utf-8") as f:
        stamp = json.load(f)
      row = {"task_id": task.task_id, "task_type": task.task_type, "seed": task.seed,
             "generate_s": stamp.get("seconds"), "errors": len(stamp.get("errors", [])), "servers": {},
             "start_s": None, "nothing": None, "nothing_why": "", "groundtruth": None, "note": ""}
      t0 = time.monotonic()
      env = None
      try:
        env = LocaTaskEnv([task], python=python, sandbox=sandbox)
        row["start_s"] = round(time.monotonic() - t0, 1)
        counts = {s["name"]: 0 for s in env.loca_servers}
        for t in env.tools():
          counts[env.group.route(t["name"])[0]] += 1
        row["servers"] = counts
        env.reset(task.task_id)
        row["nothing"] = "fails" if env.verify() == 0 else "PASSES"
        row["nothing_why"] = verdict_reason(env.last_verdict)
        if task.task_type in GROUND_TRUTH_COPIES:
          env.reset(task.task_id)
          how = copy_ground_truth(env, task)
          passed = env.verify() == 1
          row["groundtruth_how"] = ", ".join(sorted(set(how)))
          row["groundtruth"] = "passes" if passed else "FAILS"
          row["note"] = ("ground truth: " + row["groundtruth_how"] if passed
                         else verdict_reason(env.last_verdict))
        else:
          row["groundtruth"] = "n/a"
          row["note"] = "evaluator checks " + NO_FILE_GROUND_TRUTH.get(task.task_type, "?")
      except Exception as e:  # noqa: BLE001 - one task's failure is a row of the table
        row["note"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
      finally:
        if env is not None:
          env.close()
      row["ok"] = (row["errors"] == 0 and bool(row["servers"]) and all(row["servers"].values())
                   and row["nothing"] == "fails" and row["groundtruth"] in ("passes", "n/a"))
      rows.append(row)
      log(f"{task.task_id}: {'ok' if row['ok'] else 'NOT OK'} {row}")
  return rows


def verdict_reason(verdict: dict | None) -> str:
  """The evaluator's own reason in a verdict (loca_runner's last JSON line: info.error, or the error that stopped
  it), on one line, at most 160 characters."""
  text = str((verdict or {}).get("output", "")) or str((verdict or {}).get("error", ""))
  for line in reversed(text.splitlines()):
    if line.startswith("{"):
      try:
        out = json.loads(line)
      except ValueError:
        continue
      why = out.get("error") or (out.get("info") or {}).get("error") or (out.get("info") or {}).get("evaluation")
      return " ".join(str(why).split())[:160]
  return " ".join(text.split())[-160:]


def format_table(rows: Sequence[dict]) -> str:
  """The check's rows as a Markdown table."""
  out = ["| task type | seed | state (s) | servers: tools listed in the sandbox | start (s) | do-nothing (why) | "
         "ground-truth copy | ok | note |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    servers = ", ".join(f"{k} {v}" for k, v in r["servers"].items()) or "-"
    state = f"{r['generate_s']}" + (f" ({r['errors']} errors)" if r["errors"] else "")
    out.append(f"| {r['task_type']} | {r['seed']} | {state} | {servers} | {r['start_s']} | {r['nothing']} "
               f"({r.get('nothing_why', '')}) | "
               f"{r['groundtruth']} | {'yes' if r['ok'] else 'NO'} | {r['note']} |")
  passed = sum(r["ok"] for r in rows)
  out.append(f"\n{passed} of {len(rows)} tasks ok")
  return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m progagent.bench.loca`: generate a task set's states; with --check, print the check's table."""
  p = argparse.ArgumentParser(prog="python -m progagent.bench.loca", description=__doc__.split("\n\n")[0])
  p.add_argument("--loca_dir", default=None, help=f"the LOCA-bench checkout (default ${ENV_DIR})")
  p.add_argument("--size", default=DEFAULT_SIZE, help=f"task set: {', '.join(SIZES)} (default {DEFAULT_SIZE})")
  p.add_argument("--types", default="", help="comma-separated task types (default: all)")
  p.add_argument("--seeds", default="", help="comma-separated env_params.seed values (default: all)")
  p.add_argument("--state_dir", default=None, help=f"where states are kept (default ${ENV_STATE}, else "
                 "~/.cache/progagent/loca)")
  p.add_argument("--python", default=None, help=f"LOCA's interpreter (default ${ENV_PYTHON}, else .venv/loca)")
  p.add_argument("--allow_errors", action="store_true", help="keep tasks whose generator logged errors")
  p.add_argument("--force", action="store_true", help="generate again")
  p.add_argument("--check", action="store_true", help="run the check and print its table")
  p.add_argument("--json", default=None, help="write the check's rows to this file")
  a = p.parse_args(argv)
  logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
  try:
    tasks = suite(a.loca_dir, a.size, task_types=[t for t in a.types.split(",") if t] or None,
                  seeds=[s for s in a.seeds.split(",") if s] or None, state_dir=a.state_dir, python=a.python,
                  allow_errors=a.allow_errors or a.check, force=a.force)
  except LocaError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if not a.check:
    for t in tasks:
      print(f"{t.task_id}\tseed {t.seed}\t{t.task_dir}")
    return 0
  rows = check(tasks, python=a.python, log=lambda s: print(s, file=sys.stderr, flush=True))
  print(format_table(rows))
  if a.json:
    with open(a.json, "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)
  return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
