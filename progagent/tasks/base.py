"""The task-synthesis framework: domains (a database, a workspace, tools) and tasks over them.

A *domain* owns the environment state s_E of ProgAgent (SPEC.md, ProgAgent): a SQLite database D (schema +
seeded generator), a workspace W of files, and single-purpose tools whose implementations are hidden Python
functions over D and W. A *task* adds an instruction, a binary verifier R in {0, 1}, a PTC oracle program and
a "plausible wrong" solution. The DTC oracle is derived from the PTC program (progagent/tasks/oracle.py).

SCALE: level k in {0, 1, 2, 3} (v0..v3) multiplies every scaled table's row count by 2**k; workspace files that
carry data grow too (4 * 2**k of them, next to 8 fixed documents: 12 / 16 / 24 / 40 files). Instruction, tools
and verifier never depend on the level: state size is the only thing that changes.
Source: ProgAgent (2026), "task synthesis with environment-state scaling" (SPEC.md, ProgAgent).

Determinism: the generator draws from random.Random(f"{domain}|{seed}|{level}") only (str seeds hash with
SHA-512 in CPython, so they are stable across processes and PYTHONHASHSEED).

Tool results are JSON values (dict, list, number, bool): never a bare string, so that a client can always
decode them unambiguously. A tool signals a failure the agent caused by raising `ToolError(message)`.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import itertools
import json
import math
import os
import pathlib
import random
import sqlite3
import stat
from typing import Any, Callable, Mapping, Sequence

from common import tool_wire

LEVELS = (0, 1, 2, 3)
FIXED_DOCS = 8          # documents every workspace holds at every level
DATA_FILES_PER_UNIT = 4  # data-carrying files per unit of scale (x 2**level)
TODAY = "2024-07-01"     # the fixed "today" of every instruction


ToolError = tool_wire.ToolError
"""A tool call failed because of its arguments or the state (status 'failed'; the agent sees the text).

The one tool-error class (common.tool_wire): raised here with the message alone, ToolError("no order with
id 7"); the same class is what programs catch when a tool call fails."""


def level_factor(level: int) -> int:
  """2**level for level in LEVELS; ValueError naming the valid levels otherwise."""
  if isinstance(level, bool) or level not in LEVELS:
    raise ValueError(f"scale level must be one of {LEVELS} (v0..v3), got {level!r}")
  return 2 ** level


def n_data_files(f: int) -> int:
  """Data-carrying workspace files at scale factor f = 2**level: 4 * f."""
  return DATA_FILES_PER_UNIT * f


# ------------------------------------------------------------------------------------------------ tools

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "array": list, "object": dict}


@dataclasses.dataclass(frozen=True)
class ToolDef:
  """One single-purpose tool.

  Attributes:
    name: tool name (MCP).
    description: one or two sentences for the agent.
    params: parameter name -> JSON-schema property ({'type': ..., 'description': ...}).
    required: names of required parameters.
    fn: the hidden implementation, fn(ctx, **arguments) -> JSON value; raises ToolError.
  """
  name: str
  description: str
  params: Mapping[str, dict]
  required: tuple[str, ...]
  fn: Callable[..., Any]

  def mcp(self) -> dict:
    """MCP tools/list entry."""
    return {"name": self.name, "description": self.description,
            "inputSchema": {"type": "object", "properties": {k: dict(v) for k, v in self.params.items()},
                            "required": list(self.required)}}

  def check_arguments(self, arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with `arguments` for this tool's schema, or None."""
    unknown = sorted(set(arguments) - set(self.params))
    if unknown:
      return (f"unknown parameter(s) {unknown} for tool {self.name!r}; its parameters are "
              f"{sorted(self.params) or 'none'}")
    missing = [k for k in self.required if k not in arguments]
    if missing:
      return f"missing required parameter(s) {missing} for tool {self.name!r}"
    for k, v in arguments.items():
      t = self.params[k].get("type")
      py = _JSON_TYPES.get(t) if isinstance(t, str) else None
      if py is None or v is None and k not in self.required:
        continue
      if isinstance(v, bool) and t in ("integer", "number") or not isinstance(v, py):
        return f"parameter {k!r} of tool {self.name!r} must be of JSON type {t}, got {type(v).__name__}"
    return None


def tool(name: str, description: str, fn: Callable[..., Any], *, required: Sequence[str] = (),
         **params: dict) -> ToolDef:
  """Builds a ToolDef; `params` maps each parameter name to its JSON-schema property."""
  return ToolDef(name, description, dict(params), tuple(required), fn)


def p_str(description: str, enum: Sequence[str] | None = None) -> dict:
  d = {"type": "string", "description": description}
  if enum:
    d["enum"] = list(enum)
  return d


def p_int(description: str) -> dict:
  return {"type": "integer", "description": description}


def p_num(description: str) -> dict:
  return {"type": "number", "description": description}


# ------------------------------------------------------------------------------------------------ paging, filters

DEFAULT_LIMIT = 50   # rows a list tool returns when `limit` is omitted
MAX_LIMIT = 200      # the most rows one list call may return


def paging_params() -> dict:
  """The `limit` / `offset` parameters every list tool takes (JSON-schema properties)."""
  return {"limit": p_int(f"rows per page, 1..{MAX_LIMIT} (default {DEFAULT_LIMIT})"),
          "offset": p_int("rows to skip (default 0); pass the previous page's next_offset")}


def page(rows: Sequence[Any], limit: int | None = None, offset: int | None = None) -> dict:
  """One page of a list result: {'items': rows[offset:offset + limit], 'total', 'offset', 'next_offset'}.

  next_offset is None on the last page. Raises ToolError for limit outside 1..MAX_LIMIT or offset < 0."""
  limit = DEFAULT_LIMIT if limit is None else limit
  offset = 0 if offset is None else offset
  if not 1 <= limit <= MAX_LIMIT:
    raise ToolError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}; page with offset for more rows")
  if offset < 0:
    raise ToolError(f"offset must be >= 0, got {offset}")
  items = list(rows[offset:offset + limit])
  nxt = offset + limit if offset + limit < len(rows) else None
  return {"items": items, "total": len(rows), "offset": offset, "next_offset": nxt}


@dataclasses.dataclass(frozen=True)
class Filter:
  """One optional filter argument of a list tool: `where` is an SQL condition with one '?' (the argument).

  Example: Filter("min_total", "total >= ?", p_num("smallest order total")). `like=True` wraps the argument
  in '%...%' (substring match, case-insensitive for ASCII in SQLite)."""
  param: str
  where: str
  schema: dict
  like: bool = False


def list_tool(name: str, description: str, *, table: str, columns: str, filters: Sequence[Filter] = (),
              order_by: str = "id", required: Sequence[str] = ()) -> ToolDef:
  """A declarative paged list tool over one table (or an SQL join given as `table`).

  The tool takes the filters (all optional unless named in `required`) and limit/offset, and returns
  page(...) of `SELECT columns FROM table WHERE <given filters> ORDER BY order_by`. Its description gets
  the result shape appended, so that the agent knows to page.

  Args:
    name, description: the tool's name and what it lists.
    table: table name or join expression (trusted: written by the task library, never by the agent).
    columns: the SELECT list; the result rows' keys.
    filters: the optional filter arguments.
    order_by: the ORDER BY expression (results are deterministic).
    required: filters the caller must give.
  """
  by_param = {f.param: f for f in filters}

  def fn(ctx: "Ctx", limit: int | None = None, offset: int | None = None, **kw: Any) -> dict:
    conds, args = [], []
    for k, v in kw.items():
      if v is None:
        continue
      f = by_param[k]
      enum = f.schema.get("enum")
      if enum and v not in enum:
        raise ToolError(f"unknown {k} {v!r}; use one of {list(enum)}")
      conds.append(f.where)
      args.append(f"%{v}%" if f.like else v)
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    rows = ctx.q(f"SELECT {columns} FROM {table}{where} ORDER BY {order_by}", *args)
    return page(rows, limit, offset)

  desc = (f"{description} Returns {{items, total, offset, next_offset}} with at most `limit` items "
          f"(default {DEFAULT_LIMIT}); next_offset is null on the last page.")
  params = {f.param: f.schema for f in filters}
  params.update(paging_params())
  return ToolDef(name, desc, params, tuple(required), fn)


def all_items(tool_fn: Callable[..., dict], **kwargs: Any) -> list:
  """Every item of a paged list tool, for verifiers and generators in this library (not for agents)."""
  out, offset = [], 0
  while offset is not None:
    p = tool_fn(limit=MAX_LIMIT, offset=offset, **kwargs)
    out += p["items"]
    offset = p["next_offset"]
  return out


def flaky(tdef: ToolDef, *, fail_first: int = 1, message: str = "service temporarily unavailable (503); retry "
          "the same call") -> ToolDef:
  """The tool, failing transiently: the first `fail_first` calls with each distinct argument set raise
  ToolError(message) and later identical calls succeed. Deterministic per episode (the counter lives in the
  episode's Ctx), so the oracle passes by retrying and an agent that gives up on the first error fails."""
  def fn(ctx: "Ctx", **kw: Any) -> Any:
    key = (tdef.name, json_key(kw))
    n = ctx.calls.get(key, 0)
    ctx.calls[key] = n + 1
    if n < fail_first:
      raise ToolError(message)
    return tdef.fn(ctx, **kw)
  return dataclasses.replace(tdef, fn=fn, description=tdef.description + " May fail transiently; retry then.")


def json_key(kw: Mapping[str, Any]) -> str:
  """A canonical text key of an argument dict."""
  return json.dumps(kw, sort_keys=True, default=str)


# ------------------------------------------------------------------------------------------------ state


class Ctx:
  """The state of one episode handed to generators, tools and verifiers: the database and the workspace.

  Args:
    conn: an open sqlite3 connection (row_factory is set to sqlite3.Row here).
    workspace: the workspace directory (the only part of the state a sandboxed program may see).
  """

  def __init__(self, conn: sqlite3.Connection, workspace: pathlib.Path):
    self.conn = conn
    self.conn.row_factory = sqlite3.Row
    self.workspace = pathlib.Path(workspace)
    self.calls: dict[Any, int] = {}   # per-episode call counters (flaky tools)

  def q(self, sql: str, *args: Any) -> list[dict]:
    """Rows of a query as dicts."""
    return [dict(r) for r in self.conn.execute(sql, args)]

  def q1(self, sql: str, *args: Any) -> dict | None:
    r = self.conn.execute(sql, args).fetchone()
    return dict(r) if r is not None else None

  def scalar(self, sql: str, *args: Any) -> Any:
    r = self.conn.execute(sql, args).fetchone()
    return r[0] if r is not None else None

  def exec(self, sql: str, *args: Any) -> int:
    """Runs a write statement and commits; returns the affected row count."""
    n = self.conn.execute(sql, args).rowcount
    self.conn.commit()
    return n

  def path(self, rel: str) -> pathlib.Path:
    """The host path of an agent-given workspace path (for messages; never opened by name).

    Raises ToolError when the path leaves the workspace (lexically: '..' past the root)."""
    return self.workspace.joinpath(*_components(rel))

  # Every access below opens the workspace root once and walks the path's components from its
  # descriptor with O_NOFOLLOW (directories also O_DIRECTORY), so a program that swaps a component
  # for a symbolic link, at any moment, gets a ToolError and never a host file: no link is followed,
  # not even one that points back inside the workspace. Non-regular files (FIFOs, sockets) are
  # refused without blocking (O_NONBLOCK). Files and folders the tools create get the workspace
  # root's owner (the sandbox user, SandboxConfig.uid, once a sandbox has run in it), so programs
  # can edit them.

  def write(self, rel: str, text: str) -> None:
    """Creates or replaces a workspace file (parents made); ToolError as for write_file."""
    _write_beneath(self.workspace, rel, text)

  def read(self, rel: str) -> str | None:
    """A workspace file's text, or None when it is missing, not a regular file, or a link."""
    try:
      return _read_beneath(self.workspace, rel)
    except ToolError:
      return None

  def files(self, directory: str = "") -> list[str]:
    """Regular files under `directory` (relative paths, sorted; links not followed); [] if none."""
    try:
      return _list_beneath(self.workspace, directory)
    except ToolError:
      return []


MAX_READ_BYTES = 16 * 1024 ** 2  # read_file refuses larger files (a program can write up to the disk quota)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _components(rel: str) -> list[str]:
  """The path's components below the workspace root ('' and '.' dropped, '..' resolved lexically).

  Raises ToolError for a non-string, a NUL byte, or a path that leaves the workspace."""
  if not isinstance(rel, str):
    raise ToolError("path must be a string relative to the workspace, e.g. 'docs/README.md'")
  if "\0" in rel:
    raise ToolError(f"path {rel!r} contains a NUL character")
  out: list[str] = []
  for part in rel.split("/"):
    if part in ("", "."):
      continue
    if part == "..":
      if not out:
        raise ToolError(f"path {rel!r} is outside the workspace; use a path relative to the workspace root")
      out.pop()
    else:
      out.append(part)
  return out


def _link_error(rel: str, e: OSError) -> ToolError:
  if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
    return ToolError(f"path {rel!r} is or goes through a symbolic link (or a non-directory); the file tools "
                     "do not follow links")
  if e.errno == errno.ENOENT:
    return ToolError(f"no file {rel!r} in the workspace; use list_files to see the files")
  if e.errno == errno.EISDIR:
    return ToolError(f"{rel!r} is a directory")
  if e.errno == errno.EEXIST:
    return ToolError(f"{rel!r} exists")
  return ToolError(f"cannot open {rel!r}: {e.strerror}")


def _walk(root: pathlib.Path, parts: list[str], rel: str, *, create: bool = False) -> int:
  """A descriptor of the directory root/parts[0]/.../parts[-1], no link followed (caller closes).

  create: make missing directories (owned like the root)."""
  fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
  try:
    owner = os.fstat(fd)
    for part in parts:
      try:
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
      except FileNotFoundError:
        if not create:
          raise
        try:
          os.mkdir(part, 0o755, dir_fd=fd)
        except FileExistsError:
          pass
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        _give(nxt, owner)
      os.close(fd)
      fd = nxt
    return fd
  except OSError as e:
    os.close(fd)
    raise _link_error(rel, e) from None


def _give(fd: int, owner: os.stat_result) -> None:
  """Gives a file the workspace root's owner (when this process may and it differs)."""
  st = os.fstat(fd)
  if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid) and os.geteuid() == 0:
    os.fchown(fd, owner.st_uid, owner.st_gid)


def _open_file(root: pathlib.Path, rel: str, flags: int, *, create: bool = False) -> int:
  """A descriptor of the regular file at `rel` beneath root; ToolError otherwise (caller closes)."""
  parts = _components(rel)
  if not parts:
    raise ToolError(f"{rel!r} is the workspace directory, not a file")
  d = _walk(root, parts[:-1], rel, create=create)
  try:
    fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=d)
  except OSError as e:
    if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
      raise ToolError(f"{rel!r} is not a regular file") from None
    raise _link_error(rel, e) from None
  finally:
    os.close(d)
  st = os.fstat(fd)
  if not stat.S_ISREG(st.st_mode):
    os.close(fd)
    raise ToolError(f"{rel!r} is not a regular file" if not stat.S_ISDIR(st.st_mode) else f"{rel!r} is a directory")
  os.set_blocking(fd, True)
  return fd


def _read_beneath(root: pathlib.Path, rel: str) -> str:
  fd = _open_file(root, rel, os.O_RDONLY)
  with os.fdopen(fd, "rb") as f:
    data = f.read(MAX_READ_BYTES + 1)
  if len(data) > MAX_READ_BYTES:
    raise ToolError(f"{rel!r} is larger than {MAX_READ_BYTES} bytes (progagent.tasks.base.MAX_READ_BYTES); "
                    "read it from a program in pieces")
  return data.decode("utf-8", "replace")


def _write_beneath(root: pathlib.Path, rel: str, text: str) -> int:
  data = text.encode()
  try:  # a new file gets the workspace's owner; an existing one keeps its own
    fd, created = _open_file(root, rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, create=True), True
  except ToolError as e:
    if "exists" not in str(e):
      raise
    fd, created = _open_file(root, rel, os.O_WRONLY), False
  with os.fdopen(fd, "wb") as f:
    if created:
      rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
      try:
        _give(fd, os.fstat(rfd))
      finally:
        os.close(rfd)
    os.ftruncate(fd, 0)
    f.write(data)
  return len(data)


def _list_beneath(root: pathlib.Path, directory: str) -> list[str]:
  parts = _components(directory)
  d = _walk(root, parts, directory)
  out = []
  try:
    for top, _, names, dfd in os.fwalk(".", dir_fd=d):  # fwalk opens each folder with O_NOFOLLOW
      for n in names:
        try:
          if stat.S_ISREG(os.stat(n, dir_fd=dfd, follow_symlinks=False).st_mode):
            out.append("/".join(parts + [p for p in os.path.normpath(os.path.join(top, n)).split("/")]))
        except OSError:
          continue
  finally:
    os.close(d)
  return sorted(out)


def _list_files(ctx: Ctx, directory: str = "") -> list[str]:
  try:
    return _list_beneath(ctx.workspace, directory or "")
  except ToolError as e:
    if "link" in str(e):
      raise
    raise ToolError(f"no directory {directory!r} in the workspace; list_files() with no argument lists "
                    "all") from None


def _read_file(ctx: Ctx, path: str) -> dict:
  return {"path": path, "content": _read_beneath(ctx.workspace, path)}


def _write_file(ctx: Ctx, path: str, content: str) -> dict:
  return {"path": path, "bytes": _write_beneath(ctx.workspace, path, content)}


LIST_FILES = tool("list_files", "List the workspace files (paths relative to the workspace root), optionally "
                  "only those under a directory.", _list_files,
                  directory=p_str("directory relative to the workspace root; omit for all files"))
READ_FILE = tool("read_file", "Read one workspace file; returns {path, content}.", _read_file,
                 required=("path",), path=p_str("file path relative to the workspace root"))
WRITE_FILE = tool("write_file", "Create or overwrite one workspace file with the given text; returns "
                  "{path, bytes}.", _write_file, required=("path", "content"),
                  path=p_str("file path relative to the workspace root"), content=p_str("the full file text"))
SUBMIT_ANSWER = ToolDef(
    "submit_answer", "Finish the task. Pass `answer` when the task asks for one (a number, a string or a list); "
    "omit it when the task only asks you to change the data. The episode ends with this call.",
    {"answer": {"description": "the requested answer (number, string or list); omit if none was asked for",
                "type": ["string", "number", "integer", "array", "null"]}},
    (), lambda ctx, answer=None: {"submitted": True})


# ------------------------------------------------------------------------------------------------ answers

ANSWER_KINDS = ("int", "number", "text", "set", "list")
TAGS = ("explore", "errors", "writeback", "paging")
HARD_TAGS = ("explore", "errors", "writeback")   # the three kinds of non-trivial task


def _norm_item(x: Any) -> Any:
  if isinstance(x, bool):
    return str(x).lower()
  if isinstance(x, (int, float)) and float(x).is_integer():
    return str(int(x))
  if isinstance(x, float):
    return f"{x:.2f}"
  return " ".join(str(x).split()).casefold()


def answer_matches(kind: str, answer: Any, expected: Any) -> bool:
  """Whether a submitted answer equals the expected one under the kind's rule.

  Rules: 'int' exact integer (a numeric string is accepted); 'number' |a - e| <= 0.01 (answers are asked
  rounded to 2 or 3 decimals; for 3-decimal answers the task compares itself); 'text' equal after
  whitespace collapsing and case folding; 'set' the same elements in any order (each normalised like
  'text', integers as their decimal string); 'list' the same in order.
  """
  if answer is None:
    return False
  try:
    if kind == "int":
      v = float(answer)
      return v.is_integer() and int(v) == int(expected)
    if kind == "number":
      return math.isfinite(float(answer)) and abs(float(answer) - float(expected)) <= 0.01 + 1e-9
  except (TypeError, ValueError):
    return False
  if kind == "text":
    return isinstance(answer, (str, int, float)) and _norm_item(answer) == _norm_item(expected)
  if kind in ("set", "list"):
    if not isinstance(answer, (list, tuple)):
      return False
    a = [_norm_item(x) for x in answer]
    e = [_norm_item(x) for x in expected]
    return sorted(a) == sorted(e) and len(set(a)) == len(a) if kind == "set" else a == e
  raise ValueError(f"unknown answer kind {kind!r}; expected one of {ANSWER_KINDS}")


# ------------------------------------------------------------------------------------------------ domains, tasks


@dataclasses.dataclass(frozen=True)
class Domain:
  """An environment: database schema and generator, workspace generator, tools.

  Attributes:
    name: short id ('retail').
    description: one line.
    schema: SQL DDL run on an empty database.
    generate: generate(ctx, rng, f) fills D and W at scale factor f = 2**level (f rows per base row).
    tools: the domain's tools (file tools included where the domain uses them); submit_answer is added by
      the environment.
  """
  name: str
  description: str
  schema: str
  generate: Callable[[Ctx, random.Random, int], None]
  tools: tuple[ToolDef, ...]


@dataclasses.dataclass(frozen=True)
class Task:
  """One task over a domain.

  Attributes:
    domain: the Domain.
    name: task name, unique within the domain; task_id is f'{domain.name}/{name}'.
    instruction: what the agent is told (never mentions the scale).
    ptc: the PTC oracle, one program per turn (variables persist between them). It must finish by calling
      tools['submit_answer'](...).
    expected: expected(ctx) -> JSON value computed from the *initial* state at reset (hidden).
    answer: the answer kind (ANSWER_KINDS) when the task asks for an answer, else None.
    check: check(ctx, expected, answer) -> bool on the *final* state; None means "the answer matches".
    wrong: a plausible wrong solution: a full PTC program, or (old, new) replaced once in the PTC oracle's
      last program. None: the oracle's answer perturbed (numbers + 1 / x 1.1, a set minus one element).
    tags: what makes the task more than one query (TAGS): 'explore' (a format or location the agent must
      discover), 'errors' (tools that fail transiently, return errors without an error flag, or return
      unstructured text), 'writeback' (several kinds of writes), 'paging' (results over several pages).
  """
  domain: Domain
  name: str
  instruction: str
  ptc: tuple[str, ...]
  expected: Callable[[Ctx], Any]
  answer: str | None = None
  check: Callable[[Ctx, Any, Any], bool] | None = None
  wrong: str | tuple[str, str] | None = None
  tags: tuple[str, ...] = ()

  def __post_init__(self):
    bad = sorted(set(self.tags) - set(TAGS))
    if bad:
      raise ValueError(f"task {self.task_id}: unknown tag(s) {bad}; tags are {TAGS}")
    if self.answer is None and self.check is None:
      raise ValueError(f"task {self.task_id}: a task without an answer kind needs a state check")
    if self.answer is not None and self.answer not in ANSWER_KINDS:
      raise ValueError(f"task {self.task_id}: answer kind {self.answer!r} not in {ANSWER_KINDS}")
    if isinstance(self.wrong, tuple) and self.wrong[0] not in self.ptc[-1]:
      raise ValueError(f"task {self.task_id}: wrong-solution pattern {self.wrong[0]!r} is not in the oracle")

  @property
  def task_id(self) -> str:
    return f"{self.domain.name}/{self.name}"

  @property
  def prompt(self) -> str:
    """The instruction plus how to finish (what reset() returns; identical at every level)."""
    how = ("Finish by calling submit_answer with the answer." if self.answer is not None else
           "When you are done, call submit_answer without an answer.")
    return f"{self.instruction} {how} Today is {TODAY}."

  def wrong_program(self) -> str | None:
    """The wrong solution as one program (the oracle's earlier programs are prepended), or None."""
    if self.wrong is None:
      return None
    if isinstance(self.wrong, str):
      return self.wrong
    old, new = self.wrong
    return "\n".join(self.ptc[:-1] + (self.ptc[-1].replace(old, new, 1),))

  def verify(self, ctx: Ctx, expected: Any, answer: Any) -> int:
    """R in {0, 1}: the answer (if the task asks for one) and the state check (if any) both hold."""
    if self.answer is not None and not answer_matches(self.answer, answer, expected if self.check is None
                                                      else expected["answer"]):
      return 0
    if self.check is not None and not self.check(ctx, expected, answer):
      return 0
    return 1


def perturb(kind: str, answer: Any) -> Any:
  """A plausible wrong answer of the same kind (used when a task gives no wrong program)."""
  if kind == "int":
    return int(float(answer)) + 1
  if kind == "number":
    return round(float(answer) * 1.1 + 1.0, 2)
  if kind in ("set", "list"):
    a = list(answer)
    return a[:-1] if a else ["none"]
  return str(answer) + " (unverified)"


# ------------------------------------------------------------------------------------------------ generators

FIRST = ("Ada Alan Alma Amir Anna Aris Ava Ben Bruno Carla Chen Clara Dara Dev Diego Elena Emil Eva Farah Felix "
         "Gia Hana Hugo Ines Ivan Jae Jana Joel Kai Kira Lars Lea Leo Lina Luca Maya Mei Milo Nadia Noah Nora "
         "Olga Omar Otto Pia Priya Quinn Rafa Rosa Sami Sara Sven Tara Theo Uma Vera Wen Yara Yusuf Zoe").split()
LAST = ("Abbott Alvarez Baker Banerjee Berg Brandt Castro Chowdhury Costa Dalton Diaz Dubois Eriksen Fischer "
        "Fontaine Garcia Haddad Hansen Ibarra Ito Jensen Kaur Keller Kowalski Larsen Lopez Marsh Meyer Moreau "
        "Nakamura Novak Okafor Olsen Park Patel Quist Rossi Ruiz Sato Schmidt Silva Sousa Tanaka Torres Ueda "
        "Varga Vogel Wagner Walsh Weber Xu Yamada Young Zhang Ziegler").split()
CITIES = ("Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Krakow", "Dublin")
WORDS = ("quarterly review process update customer policy system record report schedule budget account "
         "team project meeting note summary item request status change data backlog migration vendor "
         "contract invoice audit feedback training release plan risk issue metric target milestone").split()


def unique_names(rng: random.Random, k: int, *, exclude: Sequence[str] = ()) -> list[str]:
  """k distinct 'First Last' names (a middle initial is added once the 3,600 pairs run out)."""
  pairs = [f"{a} {b}" for a, b in itertools.product(FIRST, LAST) if f"{a} {b}" not in set(exclude)]
  rng.shuffle(pairs)
  out = pairs[:k]
  i = 0
  while len(out) < k:
    a, b = pairs[i % len(pairs)].split()
    out.append(f"{a} {chr(65 + (i // len(pairs)) % 26)}. {b}")
    i += 1
  return out


def email_of(name: str, i: int, domain: str = "example.org") -> str:
  parts = name.lower().replace(".", "").split()
  return f"{parts[0][0]}.{parts[-1]}{i}@{domain}"


def rand_date(rng: random.Random, start: str = "2024-01-01", end: str = "2024-06-30") -> str:
  """A uniform date in [start, end], ISO format."""
  a = datetime.date.fromisoformat(start)
  b = datetime.date.fromisoformat(end)
  return (a + datetime.timedelta(days=rng.randint(0, (b - a).days))).isoformat()


def sentence(rng: random.Random, n: int = 12) -> str:
  w = [rng.choice(WORDS) for _ in range(n)]
  return " ".join(w).capitalize() + "."


def write_docs(ctx: Ctx, rng: random.Random, domain: str, topics: Sequence[str]) -> None:
  """The FIXED_DOCS background documents of a workspace (README + policies/notes), ~1-2 KB each."""
  names = ["README.md"] + [f"docs/{t}.md" for t in topics]
  names += [f"docs/notes_{i}.md" for i in range(FIXED_DOCS - len(names))]
  for nm in names[:FIXED_DOCS]:
    title = nm.rsplit("/", 1)[-1].removesuffix(".md").replace("_", " ")
    body = "\n\n".join(" ".join(sentence(rng) for _ in range(4)) for _ in range(rng.randint(3, 6)))
    ctx.write(nm, f"# {domain}: {title}\n\n{body}\n")


def insert_rows(ctx: Ctx, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
  """Bulk insert of dict rows (all with the same keys)."""
  if not rows:
    return
  cols = list(rows[0])
  ctx.conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                       [tuple(r[c] for c in cols) for r in rows])
