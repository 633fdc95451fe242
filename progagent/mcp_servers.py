"""Any MCP server behind ProgAgent's runtime: stdio servers, each in its own sandbox, their tools in one list.

  specs = [parse_server("fs=npx -y @modelcontextprotocol/server-filesystem {workspace}"),
           parse_server("calc=python /srv/calc_server.py")]
  group = McpServerGroup(specs, workspace=folder_or_capped_dir)     # starts them (in parallel)
  group.tools()      # MCP tool entries, inputSchema and outputSchema kept; names namespaced on a clash
  group.call_tool("read_text_file", {"path": "/workspace/a.txt"})   # the server's result, wire form
  group.restart()    # a fresh process of each server (the next episode's state), same workspace
  group.close()

Used by `python -m progagent.mcp_runtime_server --mcp-server NAME=COMMAND ...` and by
progagent.mcp_task_env.McpTaskEnv (the trainer's PTC / DTC / Hybrid harnesses; config `env.mcp.servers`).
The group is a tool backend of progagent.tool_proxy (`tools()`, `call_tool()`), so programs call its tools as
tools["name"](...) through the kernel's tool socket; the servers run on the host side of that socket, each in
its own sandbox.

A server is `NAME=COMMAND` (parse_server):
  NAME     [A-Za-z][A-Za-z0-9_-]{0,31}, unique in the group: the namespace of its tools.
  COMMAND  split like a shell command (shlex; no shell runs it): the program and its arguments.

Resolution (resolve_command), on the host, before anything starts; every error names the flag or config key
the command came from (`flag`) and the server:
  * `{workspace}` in an argument becomes the workspace as servers and programs see it: WORKSPACE_INSIDE
    (/workspace) in the sandbox, the host folder without one (SandboxConfig(enabled=False), debugging only).
    An argument that is the host workspace folder itself, or a path beneath it, is translated the same way,
    so `fs=npx -y @modelcontextprotocol/server-filesystem /home/me/ws` with `--workspace /home/me/ws` serves
    /workspace: one workspace, one path, for the programs (progagent.runtime mounts it there), every server
    and the descriptions the model reads (progagent.mcp_runtime_server.tool_description).
  * `npx [-y|--yes|-q|--quiet] PACKAGE[@VERSION] ARGS...` runs the package's installed copy with node: the
    sandbox has no network, so npx could not fetch it. The package is looked up in node_prefixes():
    $PROGAGENT_NODE_PREFIX, <venv>/mcp-node (where setup.sh installs @modelcontextprotocol/server-filesystem),
    then npm's global folders (/usr/local, /usr); a VERSION given must be the installed one. Its `bin` entry
    (the one named after the package, or its only one) is the program.
  * `python` / `python3` is this interpreter (sys.executable: the project's environment, which has the `mcp`
    SDK); `node` is found on PATH.
  * Any other program is looked up on the sandbox's PATH (the bin folders of node_prefixes(), the venv's, then
    /usr/local/bin:/usr/bin:/bin), or taken as given when absolute.
  * Every argument (and the program) that is an absolute host path that exists, outside the folders every
    sandbox mounts (/usr, the Python environment) and outside the workspace, is mounted read-only at the same
    path: a server's script, a data folder. These and the workspace are the only folders a server is given;
    they must be readable by the sandbox user (uid 65534). Other arguments are passed as they are: a relative
    path is relative to the server's working folder, /workspace (give a script's absolute path).

Sandbox (common.sandbox, README "Security"): each server runs in its own bubblewrap sandbox with the cgroup
limits of the SandboxConfig, no network, as uid 65534, with the workspace at /workspace (read-write: the
capped folder of common.sandbox_fs, the same tmpfs the programs' kernel sees) and a /tmp of its own; HOME is
/tmp (so that servers' dotfiles do not land in the workspace); the project's packages are not mounted
(progagent.kernel_launch.strip_project_mounts, as for the kernel). Without a sandbox the commands run on
the host as they are (debugging only).

Tool names (`namespace`, config `env.mcp.namespace`): 'clash' (default) keeps each tool's own name unless two
servers offer the same name, in which case each of them is called `<server>__<tool>` (NAMESPACE_SEP; a valid
Python identifier and OpenAI function name); 'always' names every tool so. A name that still collides, or the
name `programmatic_tool_call`, is refused (McpServerError).

Results: each call's CallToolResult in MCP wire form, unchanged (structuredContent and isError kept; the
program's value follows common.tool_wire.decode_result). A server found dead before a call is started again
first (its in-memory state is lost; a warning is logged); a call in flight when it dies, or that it does not
answer within `call_timeout_s`, fails (EnvError naming the server and its stderr's end: a ToolError in the
program, a 'failed' step in McpTaskEnv) and the server is started again before the next call.

Reuse across episodes: a group is started once and its servers kept; `restart(names)` gives the named ones a
fresh process (state reset), the others keep theirs (config `env.mcp.reuse_servers` in McpTaskEnv: servers
whose whole state is the workspace, e.g. the filesystem server, can be reused; the workspace itself is restaged
at each reset, common.sandbox_fs.CappedDir.restage).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import shlex
import shutil
import sys
import time
from typing import NamedTuple, Sequence

from common import sandbox_fs
from common import sandbox_guard
from common import timeouts
from common import tool_wire
from common.mcp_process import EnvError, LoopThread, McpProcess
from common.sandbox import Sandbox, SandboxConfig
from progagent import kernel_launch

_log = logging.getLogger(__name__)

WORKSPACE_INSIDE = "/workspace"
WORKSPACE_PLACEHOLDER = "{workspace}"
NAMESPACE_SEP = "__"
NAMESPACES = ("clash", "always")
RESERVED_NAMES = ("programmatic_tool_call",)
SERVER_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_NPX_FLAGS = ("-y", "--yes", "-q", "--quiet")
# Folders every sandbox mounts read-only already (common.sandbox._SYSTEM_DIRS and the Python prefixes).
_SYSTEM_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt/java")
# Host folders an argument may not bring into a sandbox whole (the root would bring all of them), and pseudo file
# systems nothing of which may be mounted from an argument.
_NEVER_MOUNTED = ("/", "/etc", "/root", "/home", "/run", "/var", "/tmp", "/mnt", "/media", "/srv", "/opt", "/boot")
_PSEUDO_FS = ("/proc", "/sys", "/dev")


class McpServerError(ValueError):
  """A server command that cannot run (malformed, unknown program, not installed), or a server that did not
  start or listed clashing tools; the message names the flag or config key and the server."""


class McpServerSpec(NamedTuple):
  """One server of a group.

  Attributes:
    name: its namespace (SERVER_NAME_RE).
    argv: the command as written (before resolve_command).
    source: where it came from, for messages (e.g. "--mcp-server fs=npx ...", "config env.mcp.servers[0]").
    env: extra environment variables of this server only, as (name, value) pairs (API only; e.g. a mock
      service's data folder, progagent.bench.loca).
    binds: extra mounts of this server only, as (host folder or common.sandbox_fs.CappedDir, path inside,
      read_only) (API only: what the caller gives on purpose, e.g. a writable capped folder of service state
      that the programs' kernel does not see). Ignored without a sandbox.
  """
  name: str
  argv: tuple[str, ...]
  source: str = "--mcp-server"
  env: tuple[tuple[str, str], ...] = ()
  binds: tuple[tuple["str | sandbox_fs.CappedDir", str, bool], ...] = ()


def parse_server(text: str, *, flag: str = "--mcp-server") -> McpServerSpec:
  """'NAME=COMMAND' -> McpServerSpec (module docstring).

  Raises:
    McpServerError: no '=', a bad or empty name, an empty command, or quoting shlex cannot split; the message
      names `flag` and gives the expected form.
  """
  form = f"expected {flag} NAME=COMMAND, e.g. {flag} 'fs=npx -y @modelcontextprotocol/server-filesystem {{workspace}}'"
  if not isinstance(text, str) or "=" not in text:
    raise McpServerError(f"{flag} {text!r}: no '=' between the server's name and its command; {form}")
  name, command = text.split("=", 1)
  name = name.strip()
  if not SERVER_NAME_RE.match(name):
    raise McpServerError(f"{flag} {text!r}: the server name {name!r} must match {SERVER_NAME_RE.pattern} "
                         f"(a letter, then letters, digits, '_' or '-'); {form}")
  try:
    argv = tuple(shlex.split(command))
  except ValueError as e:
    raise McpServerError(f"{flag} {text!r}: the command cannot be split like a shell command ({e}); {form}") from None
  if not argv:
    raise McpServerError(f"{flag} {text!r}: the command is empty; {form}")
  return McpServerSpec(name, argv, f"{flag} {text}")


def parse_servers(texts: Sequence[str], *, flag: str = "--mcp-server") -> list[McpServerSpec]:
  """parse_server of each; McpServerError on a name given twice."""
  specs = [parse_server(t, flag=flag) for t in texts]
  seen: dict[str, str] = {}
  for s in specs:
    if s.name in seen:
      raise McpServerError(f"{flag}: the server name {s.name!r} is given twice ({seen[s.name]!r} and "
                           f"{s.source!r}); names must be unique")
    seen[s.name] = s.source
  return specs


def node_prefixes() -> list[str]:
  """Where `npx PACKAGE` commands find installed packages (`<prefix>/lib/node_modules/PACKAGE`), in order:
  $PROGAGENT_NODE_PREFIX, <venv>/mcp-node (setup.sh), /usr/local, /usr."""
  out = []
  env = os.environ.get("PROGAGENT_NODE_PREFIX")
  if env:
    out.append(os.path.abspath(env))
  out += [os.path.join(sys.prefix, "mcp-node"), "/usr/local", "/usr"]
  return out


def _sandbox_path() -> str:
  bins = [os.path.join(p, "bin") for p in node_prefixes()[:-2]] + [os.path.dirname(sys.executable)]
  return ":".join([b for b in bins if os.path.isdir(b)] + [SANDBOX_PATH])


def _npx_package(spec: McpServerSpec, argv: list[str]) -> list[str]:
  """`npx [flags] PACKAGE[@VERSION] ARGS` -> [node, <installed bin>, ARGS] (module docstring)."""
  rest = list(argv[1:])
  while rest and rest[0] in _NPX_FLAGS:
    rest.pop(0)
  if not rest or rest[0].startswith("-"):
    raise McpServerError(f"{spec.source!r}: after npx (and -y / --yes) the package name must follow; other npx "
                         "options are not supported (the sandbox runs the installed package with node)")
  pkg, args = rest[0], rest[1:]
  at = pkg.find("@", 1)
  name, version = (pkg, None) if at < 0 else (pkg[:at], pkg[at + 1:])
  for prefix in node_prefixes():
    folder = os.path.join(prefix, "lib", "node_modules", name)
    meta_path = os.path.join(folder, "package.json")
    if not os.path.isfile(meta_path):
      continue
    with open(meta_path) as f:
      meta = json.load(f)
    if version and version not in ("latest", meta.get("version")):
      raise McpServerError(f"{spec.source!r}: {name} {meta.get('version')} is installed in {prefix}, not "
                           f"{version}; install that version (npm install -g --prefix {prefix} {pkg}) or drop "
                           "the version")
    bins = meta.get("bin")
    if isinstance(bins, str):
      rel = bins
    elif isinstance(bins, dict) and bins:
      short = name.rsplit("/", 1)[-1]
      rel = bins.get(short) or (next(iter(bins.values())) if len(bins) == 1 else None)
      if rel is None:
        raise McpServerError(f"{spec.source!r}: {name} has several programs ({sorted(bins)}); run the one "
                             f"wanted as a command: {os.path.join(prefix, 'bin')}/<program> ...")
    else:
      raise McpServerError(f"{spec.source!r}: {name} (in {folder}) declares no program (package.json 'bin')")
    node = shutil.which("node")
    if node is None:
      raise McpServerError(f"{spec.source!r}: node is not installed (setup.sh installs it: apt-get install nodejs)")
    return [os.path.realpath(node), os.path.realpath(os.path.join(folder, rel))] + args
  venv_prefix = os.path.join(sys.prefix, "mcp-node")
  raise McpServerError(
      f"{spec.source!r}: the npm package {name} is not installed where the sandbox can run it (looked in "
      f"{', '.join(node_prefixes())}); the sandbox has no network, so npx cannot fetch it. Install it with "
      f"`npm install -g --prefix {venv_prefix} {pkg}` (setup.sh does so for "
      "@modelcontextprotocol/server-filesystem), or set PROGAGENT_NODE_PREFIX to the prefix holding it")


def _mounted_by_default(path: str) -> bool:
  real = os.path.realpath(path)
  prefixes = _SYSTEM_PREFIXES + (os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix))
  return any(real == p or real.startswith(p.rstrip("/") + "/") for p in prefixes)


def _beneath(path: str, folder: str) -> str | None:
  """The part of `path` below `folder` ('' for the folder itself), or None when it is not there."""
  p, f = os.path.normpath(path), os.path.normpath(folder)
  if p == f:
    return ""
  return p[len(f):] if p.startswith(f.rstrip("/") + "/") else None


def resolve_command(spec: McpServerSpec, *, workspace: str, sandboxed: bool = True,
                    what: str = "server") -> tuple[list[str], list[str]]:
  """The command to run for `spec` and the host paths to mount read-only (module docstring, "Resolution").

  Args:
    spec: the server (or evaluator) as written.
    workspace: the workspace's host folder.
    sandboxed: whether the command runs in the sandbox (else paths stay the host's).
    what: 'server' or 'evaluator', for messages.
  Returns:
    (argv, ro_paths): argv with placeholders and workspace paths translated and the program resolved;
    ro_paths the absolute host paths to mount at the same place (files and folders).
  Raises:
    McpServerError: the program is not found or the npx package is not installed (the message names the flag).
  """
  inside = WORKSPACE_INSIDE if sandboxed else os.path.abspath(workspace)
  ws = os.path.abspath(workspace)
  argv = list(spec.argv)
  prog = argv[0]
  if prog == "npx":
    argv = _npx_package(spec, argv)
  elif prog in ("python", "python3"):
    argv[0] = sys.executable
  elif "/" not in prog:
    found = shutil.which(prog, path=_sandbox_path())
    if found is None:
      raise McpServerError(f"{spec.source!r}: the {what}'s program {prog!r} is not on the sandbox's PATH "
                           f"({_sandbox_path()}); give its absolute path or install it")
    argv[0] = found
  elif not os.path.exists(prog):
    raise McpServerError(f"{spec.source!r}: the {what}'s program {prog!r} does not exist")
  else:
    argv[0] = os.path.abspath(prog)
  out, ro = [argv[0]], []
  if os.path.isabs(argv[0]) and not _mounted_by_default(argv[0]):
    ro.append(argv[0])
  first = 1
  if prog == "npx":  # the package's script: its whole node_modules folder (its dependencies) is mounted
    out.append(argv[1])
    if not _mounted_by_default(argv[1]):
      ro.append(_package_root(argv[1]))
    first = 2
  for a in argv[first:]:
    a = a.replace(WORKSPACE_PLACEHOLDER, inside)
    rel = _beneath(a, ws) if os.path.isabs(a) else None
    if rel is not None:
      a = inside + rel
    elif sandboxed and os.path.isabs(a) and os.path.exists(a) and not _mounted_by_default(a) \
        and _beneath(a, WORKSPACE_INSIDE) is None:
      real = os.path.realpath(a)
      if real in _NEVER_MOUNTED or any(_beneath(real, d) is not None for d in _PSEUDO_FS):
        raise McpServerError(f"{spec.source!r}: {a!r} would give the {what} {real}, a folder an argument may "
                             f"not bring into the sandbox ({', '.join(_NEVER_MOUNTED)} and anything under "
                             f"{', '.join(_PSEUDO_FS)}); give it a folder of its own")
      ro.append(os.path.abspath(a))
    out.append(a)
  return out, sorted(set(ro)) if sandboxed else []


def _package_root(script: str) -> str:
  """The node_modules folder that holds an installed package's script (mounted whole: its dependencies)."""
  parts = script.split(os.sep)
  if "node_modules" in parts:
    i = len(parts) - 1 - parts[::-1].index("node_modules")
    return os.sep.join(parts[:i + 1])
  return os.path.dirname(script)


class _Server:
  """One running server: its spec, resolved command, sandbox, process and stderr log."""

  def __init__(self, spec: McpServerSpec, argv: list[str], ro: list[str]):
    self.spec, self.argv, self.ro = spec, argv, ro
    self.sandbox: Sandbox | None = None
    self.proc: McpProcess | None = None
    self.log_path: str | None = None
    self.tools: list[dict] = []
    self.started_s = 0.0

  def stop(self) -> None:
    proc, self.proc = self.proc, None
    sb, self.sandbox = self.sandbox, None
    try:
      if proc is not None:
        proc.close(grace_s=1.0)
    finally:
      if sb is not None:
        sb.close()
      if self.log_path and os.path.exists(self.log_path):
        os.unlink(self.log_path)
      self.log_path = None


class McpServerGroup:
  """Several stdio MCP servers, each in its own sandbox, as one tool backend (module docstring).

  Args:
    specs: McpServerSpec of each server (parse_servers).
    workspace: the workspace: a host folder (the group mounts its own capped folder over it, written back at
      close, as progagent.runtime does) or a common.sandbox_fs.CappedDir the caller holds (shared with the
      programs' kernel: ProgramRuntime(..., workspace_cap=)); left open at close.
    sandbox: SandboxConfig of every server (limits, network off); enabled=False runs them on the host.
    namespace: 'clash' or 'always' (module docstring; config `env.mcp.namespace`).
    start_timeout_s: seconds each server has to answer the MCP handshake and list its tools, stretched on a
      loaded machine (common.timeouts.scaled).
    call_timeout_s: seconds one tool call may take (a server that does not answer is killed: 'timeout').
    background: start the servers on a thread and return at once; tools() and call_tool() wait for them
      (so that a kernel can start meanwhile: progagent.runtime reads tools() right before its prelude).
    start: False: start nothing yet; start() does (tools() and call_tool() wait for it): the runtime server
      makes the group (and hands it to the kernel) on one thread and starts it from another.
  Raises:
    McpServerError: a command cannot be resolved; with background=False also a server that did not start or
      clashing names (with background=True these are raised by tools() / call_tool()).
  """

  def __init__(self, specs: Sequence[McpServerSpec], *, workspace: "str | sandbox_fs.CappedDir",
               sandbox: SandboxConfig = SandboxConfig(), namespace: str = "clash", start_timeout_s: float = 60.0,
               call_timeout_s: float = 120.0, background: bool = False, start: bool = True):
    if namespace not in NAMESPACES:
      raise McpServerError(f"namespace={namespace!r} (config env.mcp.namespace) must be one of {NAMESPACES}")
    if not specs:
      raise McpServerError("no MCP server given (--mcp-server NAME=COMMAND, config env.mcp.servers)")
    self.config = sandbox
    self.namespace = namespace
    self.start_timeout_s = float(start_timeout_s)
    self.call_timeout_s = float(call_timeout_s)
    self.calls = 0
    self.errors = 0
    self.closed = False
    self._own_cap: sandbox_fs.CappedDir | None = None
    if isinstance(workspace, sandbox_fs.CappedDir):
      self.workspace_cap: sandbox_fs.CappedDir | None = workspace
      self.workspace_dir = workspace.path
    else:
      self.workspace_dir = os.path.abspath(workspace)
      self.workspace_cap = None
    self.workspace_inside = WORKSPACE_INSIDE if sandbox.enabled else self.workspace_dir
    self._servers = {s.name: _Server(s, *resolve_command(s, workspace=self.workspace_dir,
                                                          sandboxed=sandbox.enabled)) for s in specs}
    self._lt = LoopThread("mcp-servers")
    self._routes: dict[str, tuple[str, str]] = {}
    self._tools: list[dict] = []
    self._ready: concurrent.futures.Future = concurrent.futures.Future()
    self._starter: concurrent.futures.ThreadPoolExecutor | None = None
    self._started = False
    try:
      if sandbox.enabled and self.workspace_cap is None:
        self._own_cap = self.workspace_cap = sandbox_fs.CappedDir(
            self.workspace_dir, "ws", max_bytes=sandbox.workspace_max_bytes,
            max_files=sandbox.workspace_max_files, uid=sandbox.uid, gid=sandbox.gid, keep=True,
            limits=("SandboxConfig.workspace_max_bytes", "SandboxConfig.workspace_max_files"))
      if start:
        self.start(background=background)
    except BaseException:
      self.close()
      raise

  # --- start ---------------------------------------------------------------------------------

  def start(self, *, background: bool = False) -> None:
    """Starts every server, in parallel (once; see the class's `background` and `start`).

    Raises:
      RuntimeError: already started. McpServerError (background=False): a server did not start, or clashing names.
    """
    if self._started:
      raise RuntimeError("the MCP server group is already started")
    self._started = True
    if background:
      self._starter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mcp-servers-start")
      self._starter.submit(self._start_all).add_done_callback(self._settle)
    else:
      self._settle_now(self._start_all)
      self._ready.result()

  def _settle(self, fut: concurrent.futures.Future) -> None:
    e = fut.exception()
    if e is not None:
      self._ready.set_exception(e)
    else:
      self._ready.set_result(None)

  def _settle_now(self, fn) -> None:
    try:
      fn()
    except BaseException as e:
      self._ready.set_exception(e)
    else:
      self._ready.set_result(None)

  def _start_all(self) -> None:
    names = list(self._servers)
    with concurrent.futures.ThreadPoolExecutor(len(names), thread_name_prefix="mcp-server") as pool:
      futs = {n: pool.submit(self._start_one, self._servers[n]) for n in names}
    errors = [f.exception() for f in futs.values() if f.exception() is not None]
    if errors:
      raise errors[0]
    self._route()

  def _start_one(self, srv: _Server) -> None:
    """Starts one server (the process is spawned on the group's loop thread, which lives as long as the group:
    bubblewrap's --die-with-parent follows the thread that spawned it)."""
    if self.closed:
      raise McpServerError("the group is closed")
    t0 = time.monotonic()
    c = self.config
    srv.log_path = sandbox_guard.owned_tempfile("mcps", suffix=".log")
    if c.enabled:
      cfg = c._replace(env=tuple(c.env) + (("HOME", "/tmp"), ("PATH", _sandbox_path())) + tuple(srv.spec.env))
      extra = tuple(srv.spec.binds)
      srv.sandbox = Sandbox(cfg, workspace=self.workspace_cap,
                            binds=tuple((p, p, True) for p in srv.ro) + extra)
      keep = tuple(srv.ro) + tuple(b[0] for b in extra if isinstance(b[0], str))
      argv = kernel_launch.strip_project_mounts(srv.sandbox.command(srv.argv), keep=keep)
      env = {"PATH": SANDBOX_PATH}
      cwd = None
    else:
      argv = list(srv.argv)
      env = dict(os.environ, **dict(srv.spec.env))
      cwd = self.workspace_dir
    srv.proc = McpProcess(argv, loop=self._lt, env=env, cwd=cwd, stderr_path=srv.log_path)
    try:
      srv.proc.start(timeouts.scaled(self.start_timeout_s))
    except EnvError as e:
      detail = e.detail
      srv.stop()
      raise McpServerError(f"{srv.spec.source!r}: the MCP server {srv.spec.name!r} did not start (command "
                           f"{shlex.join(srv.argv)}): {detail}") from None
    srv.tools = [dict(t) for t in srv.proc.tools]
    srv.started_s = time.monotonic() - t0
    _log.info("MCP server %s started in %.2f s (%d tools)", srv.spec.name, srv.started_s, len(srv.tools))

  def _route(self) -> None:
    """Names every tool (namespace rule) and builds the routing table; McpServerError on a clash."""
    owners: dict[str, list[str]] = {}
    for name, srv in self._servers.items():
      for t in srv.tools:
        owners.setdefault(t["name"], []).append(name)
    routes: dict[str, tuple[str, str]] = {}
    tools = []
    for name, srv in self._servers.items():
      for t in srv.tools:
        own = t["name"]
        full = (f"{name}{NAMESPACE_SEP}{own}" if self.namespace == "always" or len(owners[own]) > 1 else own)
        if full in routes or full in RESERVED_NAMES:
          other = routes.get(full, ("the runtime",))[0]
          raise McpServerError(f"{srv.spec.source!r}: the tool name {full!r} of server {name!r} collides with "
                               f"{other!r}'s; use namespace='always' (config env.mcp.namespace) or rename a server")
        routes[full] = (name, own)
        entry = dict(t, name=full)
        entry.setdefault("inputSchema", {"type": "object"})
        tools.append(entry)
    self._routes, self._tools = routes, tools

  def wait_ready(self) -> None:
    """Waits for the servers to start; re-raises why they did not."""
    self._ready.result()

  @property
  def start_seconds(self) -> dict[str, float]:
    """{server: seconds its last start took (handshake and tools/list included)}."""
    return {n: s.started_s for n, s in self._servers.items()}

  # --- tool backend --------------------------------------------------------------------------

  def tools(self) -> list[dict]:
    """The MCP tool entries of every server, named by the namespace rule (waits for the start)."""
    self.wait_ready()
    return [dict(t) for t in self._tools]

  def route(self, name: str) -> tuple[str, str]:
    """(server, the server's own tool name) of a listed tool name; KeyError for an unknown one."""
    self.wait_ready()
    return self._routes[name]

  def call_tool(self, name: str, arguments: dict) -> dict:
    """One tools/call -> the server's CallToolResult in wire form (common.tool_wire.to_wire); a JSON-RPC error
    answer (the server lives on) -> an isError result with its message ("Error: ...").

    Raises:
      KeyError: an unknown tool (progagent.tool_proxy.ToolHandler refuses those before they get here).
      EnvError: the server crashed or did not answer within call_timeout_s (it is started again before the
        next call to it); ToolHandler answers the program with the error.
    """
    server, own = self.route(name)
    srv = self._servers[server]
    self.calls += 1
    if srv.proc is None or not srv.proc.alive:
      _log.warning("MCP server %s is not running; starting it again", server)
      srv.stop()
      self._start_one(srv)
    try:
      wire = tool_wire.to_wire(srv.proc.call(own, dict(arguments), timeout_s=self.call_timeout_s))
    except EnvError as e:
      self.errors += 1
      if e.reason == "protocol" and srv.proc is not None and srv.proc.alive:
        # a JSON-RPC error answer (the SDKs send one when a tool's handler raises): the tool failed, the server
        # lives on; answered as an error result carrying the server's message
        return {"content": [{"type": "text", "text": f"Error: {e.detail.removeprefix('MCPError: ')}"}],
                "isError": True}
      tail = _tail(srv.log_path)
      raise EnvError(e.reason, f"MCP server {server!r} ({e.detail}); it is started again for the next call"
                     + (f"; its stderr ends: {tail}" if tail else ""), exit_code=e.exit_code) from None
    if wire.get("isError") or tool_wire.error_message(wire) is not None:
      self.errors += 1
    return wire

  def counts(self) -> dict:
    """{'tool_calls', 'tool_errors'}: calls routed to a server since the last reset_counts(), and those whose
    result was an error (common.tool_wire.error_message) or that failed."""
    return {"tool_calls": self.calls, "tool_errors": self.errors}

  def reset_counts(self) -> None:
    self.calls = self.errors = 0

  # --- episodes ------------------------------------------------------------------------------

  def restart(self, names: Sequence[str] | None = None) -> None:
    """Gives the named servers (None: all) a fresh process, in parallel; the tool list must stay the same.

    Raises:
      KeyError: an unknown server name. McpServerError: a server did not start, or now lists other tools.
    """
    self.wait_ready()
    names = list(self._servers) if names is None else list(names)
    for n in names:
      if n not in self._servers:
        raise KeyError(f"no MCP server named {n!r}; the group has {sorted(self._servers)}")
    before = {n: [t["name"] for t in self._servers[n].tools] for n in names}
    for n in names:
      self._servers[n].stop()
    with concurrent.futures.ThreadPoolExecutor(max(1, len(names)), thread_name_prefix="mcp-server") as pool:
      futs = [pool.submit(self._start_one, self._servers[n]) for n in names]
    for f in futs:
      f.result()
    for n in names:
      if [t["name"] for t in self._servers[n].tools] != before[n]:
        raise McpServerError(f"{self._servers[n].spec.source!r}: the restarted server {n!r} lists other tools "
                             "than before; a group's tools must not change between episodes")

  def server_pids(self) -> dict[str, int | None]:
    """{server: host pid of its outermost process (bubblewrap, or the server without a sandbox)}."""
    return {n: (s.proc.pid if s.proc is not None else None) for n, s in self._servers.items()}

  def close(self) -> None:
    """Stops every server (its sandbox and processes) and, if the group mounted the workspace's capped folder
    itself, writes it back and unmounts it (common.sandbox_fs.CappedDir.close). Idempotent."""
    if self.closed:
      return
    self.closed = True
    if hasattr(self, "_ready") and not self._ready.done() and not self._started:
      self._ready.set_exception(McpServerError("the MCP server group was closed before it started"))
    try:
      if getattr(self, "_starter", None) is not None:
        self._starter.shutdown(wait=True)
      for srv in getattr(self, "_servers", {}).values():
        try:
          srv.stop()
        except Exception:  # best effort: the others still stop
          _log.exception("stopping MCP server %s failed", srv.spec.name)
    finally:
      if getattr(self, "_lt", None) is not None:
        self._lt.close()
      if self._own_cap is not None:
        self._own_cap.close()

  def __enter__(self) -> "McpServerGroup":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def result_text(wire: dict) -> str:
  """What a model is shown of a server's result when it calls the tool directly (DTC, Hybrid): its text
  content (text as text, as MCP hosts show it), the texts of several items joined by newlines; a result with
  structured content and no text shows that content as compact JSON instead. Items that are not text (images,
  resources) are named by their type and MIME type, not inlined."""
  parts = []
  for c in wire.get("content") or ():
    if isinstance(c, dict) and c.get("type") == "text":
      parts.append(str(c.get("text", "")))
    elif isinstance(c, dict):
      parts.append(f"[{c.get('type', 'item')} {c.get('mimeType', '')}]".replace(" ]", "]"))
  text = "\n".join(parts)
  structured = wire.get("structuredContent")
  if not text and structured is not None:
    text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
  return text


def _tail(path: str | None, n: int = 600) -> str:
  if not path or not os.path.exists(path):
    return ""
  with open(path, "rb") as f:
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - n))
    return " ".join(f.read().decode("utf-8", "replace").split())
