"""Tool proxy of ProgAgent's programmatic tool calling: `tools["name"](**kwargs)` inside a program.

Two halves, joined by one Unix-domain socket that lives in the episode's private runtime directory:

  kernel side   `install(namespace, socket_path, tool_list)` puts `tools` (a read-only mapping of
                tool name -> callable) and `ToolError` into the program's namespace. A call sends
                one JSON line {"id", "name", "arguments"} and blocks until the host answers, then
                turns the answer into a native Python object, or raises `ToolError`
                (common.tool_wire.decode_result: the one decoding and error rule). `run_cell(code)`
                runs one program there by common.tool_wire.run_program.
  host side     `ToolServer(backend, socket_path)` accepts the kernel's connections on a thread and
                answers each request with `ToolHandler.handle`: {"id", "result": <MCP CallToolResult
                in wire form>} or {"id", "error": str}.

The in-process runtime (progagent.inprocess_runtime) uses the same `ToolProxy` over a
`DirectConnection` to the same `ToolHandler` (arguments and results pass through JSON as on the
socket), so a program sees the same values and the same errors in both runtimes.

This module imports only the standard library and common.tool_wire at the top: progagent.runtime
ships the source of both into the sandboxed kernel (the project's packages are not mounted there),
where tool_wire is the module `_progagent_tool_wire`.

Backends. Anything with `tools() -> list[dict]` (MCP tool entries {name, description, inputSchema})
and `call_tool(name, arguments) -> result`, where result is an MCP `CallToolResult` (SDK object), its
wire dict {"content", "structuredContent", "isError"}, or a `StepResult`-like object with
`.observation` and `.status`. `as_backend` also adapts a ToolEnv-shaped object
(common.envs.base.ToolEnv, common.env_client.EnvClient / EnvSlot: `tools()` and `step(call)`), and
`McpBackend` any MCP server driven by common.mcp_process.McpProcess. `FunctionBackend` serves a dict of
Python functions (tests, benchmarks, demos).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping

if "_progagent_tool_wire" in sys.modules:  # inside the sandboxed kernel (progagent.runtime's prelude)
  tool_wire = sys.modules["_progagent_tool_wire"]
else:
  from common import tool_wire

# Re-exported: the names programs, tests and benchmarks have used from this module.
ToolError = tool_wire.ToolError
to_wire = tool_wire.to_wire
decode_result = tool_wire.decode_result
decode_text = tool_wire.decode_text
error_message = tool_wire.error_message
describe_tools = tool_wire.describe_tools
ERROR_OBJECT_KEYS = tool_wire.ERROR_OBJECT_KEYS

PROXY_FILENAME = "<progagent.tool_proxy>"
WIRE_FILENAME = "<progagent.tool_wire>"
ERROR_MIME = "application/vnd.progagent.error+json"
# Kernel side: a program's output goes to the host in stream messages of at most this many characters, and its
# error line is cut to MAX_ERROR_CHARS, so that what a program prints stays far within the host's limit on one
# message (progagent.kernel_wire.MAX_MESSAGE_BYTES: 6 bytes a character at most once JSON-escaped).
STREAM_CHUNK_CHARS = 256 * 1024
MAX_ERROR_CHARS = 10_000


# --------------------------------------------------------------------------------------------
# Kernel side


class _Connection:
  """The kernel's connection to the host's ToolServer (reconnects after any interrupted call)."""

  def __init__(self, path: str):
    self.path = path
    self._sock: socket.socket | None = None
    self._file = None
    self._ids = itertools.count(1)
    self._lock = threading.Lock()
    self.calls = 0

  def _connect(self) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
      s.connect(self.path)
    except OSError as e:
      s.close()
      raise ConnectionError(f"the tool server at {self.path} is unreachable ({e}); the runtime "
                            "directory /tmp/.progagent must not be modified") from None
    self._sock, self._file = s, s.makefile("rb")

  def _drop(self) -> None:
    for x in (self._file, self._sock):
      try:
        if x is not None:
          x.close()
      except OSError:
        pass
    self._sock = self._file = None

  def request(self, name: str, arguments: dict) -> dict:
    __tracebackhide__ = True
    with self._lock:
      rid = next(self._ids)
      line = json.dumps({"id": rid, "name": name, "arguments": arguments}) + "\n"
      ok = False
      try:
        if self._sock is None:
          self._connect()
        self._sock.sendall(line.encode("utf-8"))
        reply = self._file.readline()
        if not reply:
          raise ConnectionError("the tool server closed the connection")
        msg = json.loads(reply)
        if msg.get("id") != rid:
          raise ConnectionError(f"tool server answered request {msg.get('id')} to request {rid}")
        ok = True
        self.calls += 1
        return msg
      finally:
        if not ok:  # interrupted mid-call: a late answer must not reach the next call
          self._drop()


class DirectConnection:
  """A connection without a socket: requests go to `handler` (a ToolHandler) in this process.

  Arguments and answers pass through JSON, as on the socket, so values are the same (tuples become
  lists, keys strings).
  """

  def __init__(self, handler: "ToolHandler"):
    self.handler = handler
    self._ids = itertools.count(1)
    self.calls = 0

  def request(self, name: str, arguments: dict) -> dict:
    rid = next(self._ids)
    req = json.loads(json.dumps({"id": rid, "name": name, "arguments": arguments}))
    msg = json.loads(json.dumps(self.handler.handle(req), default=str))
    self.calls += 1
    return msg


class _Tool:
  """One tool as a callable: keyword arguments in, native Python value out.

  Attributes (what a program can read): name; input_schema and output_schema, the tool's MCP inputSchema
  and outputSchema (None when it declares none; then results are decoded from text, tool_wire rule 2);
  __doc__, its line of describe_tools (`name(args) -> output - description`); spec, the whole MCP entry.
  """

  def __init__(self, conn: Any, spec: dict):
    self._conn = conn
    self.name = spec["name"]
    self.spec = spec
    self.input_schema = spec.get("inputSchema")
    self.output_schema = spec.get("outputSchema")
    self.__doc__ = describe_tools([spec])

  def __call__(self, *args, **kwargs) -> Any:
    __tracebackhide__ = True
    if args:
      if len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
        kwargs = dict(args[0])
      else:
        raise TypeError(f"tools[{self.name!r}] takes keyword arguments (or one dict of them), "
                        f"got {len(args)} positional: call it as tools[{self.name!r}](arg=value, ...)")
    try:
      json.dumps(kwargs)
    except (TypeError, ValueError) as e:
      raise TypeError(f"tools[{self.name!r}]: arguments must be JSON-serialisable ({e})") from None
    msg = self._conn.request(self.name, kwargs)
    if "error" in msg:
      raise ToolError(str(msg["error"]), self.name)
    return decode_result(msg["result"], self.name)

  def __repr__(self) -> str:
    return f"<tool {self.__doc__}>"


class ToolProxy(Mapping):
  """`tools` inside a program: a read-only mapping name -> callable tool; also `tools.name(...)`."""

  def __init__(self, conn: Any, tool_list: list[dict]):
    self._conn = conn
    self._tools = {t["name"]: _Tool(conn, t) for t in tool_list}

  def __getitem__(self, name: str) -> _Tool:
    try:
      return self._tools[name]
    except KeyError:
      raise KeyError(f"no tool named {name!r}; available: {sorted(self._tools)}") from None

  def __getattr__(self, name: str) -> _Tool:
    if name.startswith("_"):
      raise AttributeError(name)
    try:
      return self._tools[name]
    except KeyError:
      raise AttributeError(f"no tool named {name!r}; available: {sorted(self._tools)}") from None

  def __iter__(self) -> Iterator[str]:
    return iter(self._tools)

  def __len__(self) -> int:
    return len(self._tools)

  def __repr__(self) -> str:
    return "tools:\n" + describe_tools([t.spec for t in self._tools.values()])

  @property
  def calls(self) -> int:
    """Tool calls answered so far in this kernel."""
    return self._conn.calls


def install(namespace: dict, socket_path: str, tool_list: list[dict], kernel: Any = None) -> ToolProxy:
  """Kernel side: binds `tools` and `ToolError` in `namespace`; makes input()/getpass fail readably.

  Args:
    namespace: the program's global namespace (IPython's user_ns).
    socket_path: path of the host's ToolServer socket as seen inside the sandbox.
    tool_list: MCP tool entries {name, description, inputSchema}.
    kernel: the ipykernel Kernel (get_ipython().kernel), whose raw_input/getpass are replaced.
  Returns:
    The ToolProxy.
  """
  proxy = ToolProxy(_Connection(socket_path), tool_list)
  namespace["tools"] = proxy
  namespace["ToolError"] = ToolError
  _KERNEL_STATE.update(namespace=namespace, sources=[])
  if kernel is not None:
    kernel.raw_input = tool_wire.no_input
    kernel.getpass = tool_wire.no_getpass
    _chunk_streams(STREAM_CHUNK_CHARS)
  return proxy


_KERNEL_STATE: dict = {}


def _chunk_streams(limit: int) -> None:
  """Kernel side: ipykernel sends all the output buffered since its last flush as one stream message;
  this splits it into messages of at most `limit` characters (same order, same parent), each valid Unicode.

  Lone surrogates are written as their escapes (tool_wire.escape_surrogates): jupyter_client's packer cannot
  encode one, and the whole flush was lost (a tornado traceback on the kernel's stderr instead). A program's
  own prints are escaped before they get here, with a note (tool_wire.run_program); this catches the rest
  (its threads, sys.__stdout__)."""
  try:
    from ipykernel.iostream import OutStream
  except ImportError:  # not in an ipykernel kernel
    return
  if getattr(OutStream, "_progagent_chunked", False):
    return
  flush_buffers = OutStream._flush_buffers

  def _flush_buffers(self):
    for parent, data in flush_buffers(self):
      data = tool_wire.escape_surrogates(data)[0]
      for i in range(0, len(data), limit):
        yield parent, data[i:i + limit]

  OutStream._flush_buffers = _flush_buffers
  OutStream._progagent_chunked = True


def run_cell(code: str) -> None:
  """Kernel side: runs one program by tool_wire.run_program, writing to the kernel's stdout.

  The error line (or None; cut to MAX_ERROR_CHARS) is published as display data of type ERROR_MIME,
  {"error": ...}, after the output, which the host reads (progagent.runtime); nothing is displayed
  otherwise.
  """
  out = tool_wire.real_stdout()
  error = tool_wire.run_program(code, _KERNEL_STATE["namespace"], out.write, _KERNEL_STATE["sources"])
  out.flush()
  if error is not None:
    error = tool_wire.truncate_output(error, MAX_ERROR_CHARS)
  from IPython.display import publish_display_data
  publish_display_data({ERROR_MIME: {"error": error}})


# --------------------------------------------------------------------------------------------
# Host side


class FunctionBackend:
  """A tool backend made of Python functions (tests, benchmarks, demos).

  A function's return value becomes the result: a CallToolResult-shaped dict (has "content" or
  "structuredContent") is passed through unchanged, so tests can script any server behaviour; a str
  becomes one text item; any other value becomes one text item holding its JSON (plus
  structuredContent when it is a dict). An exception becomes isError with "Type: message".

  Args:
    functions: name -> callable taking keyword arguments.
    schemas: optional name -> inputSchema (default: any object).
    descriptions: optional name -> description (default: the function's docstring).
  """

  def __init__(self, functions: Mapping[str, Callable[..., Any]], *,
               schemas: Mapping[str, dict] | None = None,
               descriptions: Mapping[str, str] | None = None):
    self.functions = dict(functions)
    self._schemas = dict(schemas or {})
    self._descriptions = dict(descriptions or {})
    self.calls = 0

  def tools(self) -> list[dict]:
    return [{"name": n, "description": self._descriptions.get(n, (f.__doc__ or "").strip()),
             "inputSchema": self._schemas.get(n, {"type": "object"})}
            for n, f in self.functions.items()]

  def call_tool(self, name: str, arguments: dict) -> dict:
    self.calls += 1
    try:
      value = self.functions[name](**arguments)
    except Exception as e:  # the tool's failure is the result, as an MCP server reports it
      return {"content": [{"type": "text", "text": f"{type(e).__name__}: {e}"}], "isError": True}
    if isinstance(value, Mapping) and ("content" in value or "structuredContent" in value):
      return dict(value)
    if isinstance(value, str):
      return {"content": [{"type": "text", "text": value}]}
    text = json.dumps(value, default=str)
    wire: dict = {"content": [{"type": "text", "text": text}]}
    if isinstance(value, Mapping):
      wire["structuredContent"] = json.loads(text)
    return wire

  def close(self) -> None:
    pass


class ToolEnvBackend:
  """Adapts a ToolEnv-shaped object (`tools()`, `step({'name', 'arguments'})`) to `call_tool`."""

  def __init__(self, env: Any):
    self.env = env

  def tools(self) -> list[dict]:
    return list(self.env.tools())

  def call_tool(self, name: str, arguments: dict) -> dict:
    return to_wire(self.env.step({"name": name, "arguments": dict(arguments)}))

  def close(self) -> None:
    pass


class McpBackend:
  """Any MCP server driven by a started common.mcp_process.McpProcess.

  Args:
    process: the started McpProcess (its `tools` are listed at start).
    timeout_s: seconds allowed per call.
    exclude: tool names not offered to programs (default: common.env_server's control tools).
  """

  def __init__(self, process: Any, *, timeout_s: float | None = 60.0,
               exclude: tuple[str, ...] = ("env_reset", "env_step", "env_query", "env_close")):
    self.process = process
    self.timeout_s = timeout_s
    self.exclude = frozenset(exclude)

  def tools(self) -> list[dict]:
    return [dict(t) for t in self.process.tools if t["name"] not in self.exclude]

  def call_tool(self, name: str, arguments: dict) -> dict:
    return to_wire(self.process.call(name, dict(arguments), timeout_s=self.timeout_s))

  def close(self) -> None:
    pass


def as_backend(obj: Any) -> Any:
  """`obj` if it has `tools()` and `call_tool()`; a ToolEnvBackend if it has `tools()` and `step()`.

  Raises:
    TypeError: neither, naming what is needed.
  """
  if hasattr(obj, "tools") and hasattr(obj, "call_tool"):
    return obj
  if hasattr(obj, "tools") and hasattr(obj, "step"):
    return ToolEnvBackend(obj)
  raise TypeError(f"{type(obj).__name__} is not a tool backend: it needs tools() and either "
                  "call_tool(name, arguments) or step({'name', 'arguments'})")


class ToolHandler:
  """Answers tool requests from `backend`, one at a time (a lock), in the order they arrive.

  `calls` counts the answered ones. Names the backend does not list are refused without reaching it.
  A backend exception is answered as {"error": "Type: message"}, which the program raises as
  ToolError.
  """

  def __init__(self, backend: Any):
    self.backend = backend
    self.tool_list = [dict(t) for t in backend.tools()]
    self._names = {t["name"] for t in self.tool_list}
    self.calls = 0
    self._lock = threading.Lock()

  def handle(self, request: Mapping, *, check_json: bool = True) -> dict:
    """One request {"id", "name", "arguments"} -> answer {"id", "result"|"error"}.

    check_json: the result is encoded once (json.dumps) to check that it is JSON, and an error answered
      in its place if not; False where the caller encodes the answer itself (ToolServer: serialised once).
    """
    rid = request.get("id")
    name = request.get("name")
    args = request.get("arguments")
    if name not in self._names:
      return {"id": rid, "error": f"no tool named {name!r}; available: {sorted(self._names)}"}
    if not isinstance(args, Mapping):
      return {"id": rid, "error": f"arguments must be an object, got {type(args).__name__}"}
    problem = tool_wire.invalid_text(args)
    if problem is not None:  # no tool (an MCP pipe, SQLite, a file) could take it
      return {"id": rid, "error": f"the call was not run: {problem}"}
    with self._lock:
      try:
        wire = to_wire(self.backend.call_tool(name, dict(args)))
        if check_json:
          json.dumps(wire)
      except Exception as e:  # backend failure (crash, timeout): reported to the program
        return {"id": rid, "error": f"{type(e).__name__}: {e}"}
      finally:
        self.calls += 1
    return {"id": rid, "result": wire}


_REQUEST_ID_RE = re.compile(rb'\{"id": (\d{1,18}),')


def _discard_pending(conn: socket.socket, max_bytes: int = 4 << 20) -> None:
  """Reads and drops what the peer has already sent (at most max_bytes), without waiting."""
  conn.settimeout(0.0)
  try:
    while max_bytes > 0:
      chunk = conn.recv(1 << 16)
      if not chunk:
        return
      max_bytes -= len(chunk)
  except OSError:  # nothing more there (BlockingIOError), or the peer is gone
    return


class _Refused(Exception):
  """A request line the tool server will not read on; the message is the error line it answers."""


class ToolServer(ToolHandler):
  """Host side: serves `backend` to the kernel over a Unix-domain socket at `socket_path`.

  Bounded against a hostile program (README, "Security"): at most `max_connections` served at once
  (one host thread each; a connection past the cap gets one error line and is closed, and refusals
  are paced to 200 per second); a request line longer than `max_request_bytes` gets an error line
  naming the limit and its connection is closed (the line is never held whole); requests are paced
  to `max_rate` per second on average (token bucket of `max_rate` requests; a faster program waits).

  Memory (issue 27): at most MAX_LARGE_REQUESTS request lines longer than SMALL_REQUEST_BYTES are read
  at once (others wait for a slot, up to SEND_TIMEOUT_S); a request's JSON values and nesting are counted
  before it is parsed (common.json_limits; MAX_REQUEST_ITEMS, MAX_REQUEST_DEPTH: past them it is
  answered with an error naming the limit); one request at a time is parsed and answered; an answer
  longer than MAX_ANSWER_BYTES once encoded is replaced by an error; answers the program has not read are
  held by the host up to MAX_UNREAD_BYTES in all (past it a call of more than SMALL_ANSWER_BYTES of answer
  is answered with an error instead), and an answer still unread after SEND_TIMEOUT_S closes its
  connection. So an episode's tool socket holds at most MAX_LARGE_REQUESTS x max_request_bytes +
  max_connections x SMALL_REQUEST_BYTES of request lines, one parse, one answer being made and
  MAX_UNREAD_BYTES of unread answers (README, "Security").

  Args:
    backend: the tool backend (see `as_backend`).
    socket_path: where to listen (a folder the sandboxed program cannot modify).
    max_connections, max_request_bytes, max_rate: the limits above (class defaults).
  """

  MAX_CONNECTIONS = 8
  MAX_REQUEST_BYTES = 8 * 1024 ** 2
  MAX_REQUEST_ITEMS = 100_000
  MAX_REQUEST_DEPTH = 64
  MAX_RATE = 1000.0
  SMALL_REQUEST_BYTES = 64 * 1024
  MAX_LARGE_REQUESTS = 2
  MAX_ANSWER_BYTES = 32 * 1024 ** 2
  MAX_UNREAD_BYTES = 32 * 1024 ** 2
  SMALL_ANSWER_BYTES = 64 * 1024  # always sent: the program's own later calls go on past unread answers
  SEND_TIMEOUT_S = 30.0

  def __init__(self, backend: Any, socket_path: str, *, max_connections: int | None = None,
               max_request_bytes: int | None = None, max_rate: float | None = None):
    from common import json_limits  # host side only (this module's top imports run in the kernel too)
    super().__init__(backend)
    self._json = json_limits
    self.socket_path = socket_path
    self.max_connections = int(max_connections or self.MAX_CONNECTIONS)
    self.max_request_bytes = int(max_request_bytes or self.MAX_REQUEST_BYTES)
    self.max_rate = float(max_rate or self.MAX_RATE)
    self.request_limits = json_limits.Limits(self.max_request_bytes, max_items=self.MAX_REQUEST_ITEMS,
                                             max_depth=self.MAX_REQUEST_DEPTH)
    self.refused = 0
    self.unread_bytes = 0  # answer bytes being written to connections that have not taken them yet
    self._work_lock = threading.Lock()  # one request parsed and answered at a time
    self._large = threading.BoundedSemaphore(self.MAX_LARGE_REQUESTS)
    self._unread_lock = threading.Lock()
    self._closed = False
    self._conns: set[socket.socket] = set()
    self._conns_lock = threading.Lock()
    self._tokens = self.max_rate
    self._stamp = time.monotonic()
    self._rate_lock = threading.Lock()
    if os.path.lexists(socket_path):
      os.unlink(socket_path)
    self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self._listener.bind(socket_path)
    os.chmod(socket_path, 0o666)  # the sandbox user connects; the folder is read-only to it
    self._listener.listen(8)
    self._thread = threading.Thread(target=self._accept_loop, name="progagent-tools", daemon=True)
    self._thread.start()

  def _accept_loop(self) -> None:
    while not self._closed:
      try:
        conn, _ = self._listener.accept()
      except OSError:
        return
      with self._conns_lock:
        full = len(self._conns) >= self.max_connections
        if not full:
          self._conns.add(conn)
      if full:
        self.refused += 1
        try:
          conn.settimeout(0.1)
          conn.sendall((json.dumps({"id": None, "error": f"too many connections to the tool server "
                                    f"(at most {self.max_connections}, ToolServer.MAX_CONNECTIONS)"})
                        + "\n").encode())
        except OSError:
          pass
        conn.close()
        time.sleep(0.005)
        continue
      threading.Thread(target=self._serve, args=(conn,), name="progagent-tools-conn",
                       daemon=True).start()

  def _pace(self) -> None:
    with self._rate_lock:
      now = time.monotonic()
      self._tokens = min(self.max_rate, self._tokens + (now - self._stamp) * self.max_rate)
      self._stamp = now
      self._tokens -= 1.0
      wait = -self._tokens / self.max_rate if self._tokens < 0 else 0.0
    if wait > 0:
      time.sleep(wait)

  def _answer(self, request: list) -> dict:
    """[one request line] -> its answer; a line past the request limits (its JSON values or nesting,
    counted before parsing) is answered {"id": None, "error": "request too complex: ... (limit)"}, and
    one that is not a JSON object (bad JSON, bad UTF-8) {"id": None, "error": "malformed request (...)"}.
    The line is taken out of `request`, so that it is freed once parsed."""
    line = request.pop()
    try:
      req = self._json.loads(line, self.request_limits, what="the request", where="ToolServer.MAX_REQUEST_")
      if not isinstance(req, Mapping):
        raise ValueError("not an object")
    except self._json.LimitError as e:  # its id, as the kernel's proxy writes it first, so the call gets the error
      m = _REQUEST_ID_RE.match(line[:64])
      return {"id": int(m.group(1)) if m else None, "error": f"request too complex: {e}; it was not parsed"}
    except RecursionError:
      return {"id": None, "error": "malformed request (RecursionError: nested too deeply to decode)"}
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError included
      return {"id": None, "error": f"malformed request ({type(e).__name__}: {str(e)[:200]})"}
    del line
    return self.handle(req, check_json=False)  # _encode serialises it, once

  def _encode(self, out: dict) -> bytes:
    """The answer line, serialised once (`out` is let go before its text is encoded to bytes, so that
    the parsed request and the result are freed first); an error line in its place when it cannot be
    encoded (named as ToolHandler.handle names it), is longer than MAX_ANSWER_BYTES, or would take the
    unread answers past MAX_UNREAD_BYTES (then counted as unread)."""
    rid = out.get("id")
    try:
      text = json.dumps(out) + "\n"
    except (ValueError, TypeError, RecursionError) as e:  # a result that is not JSON; an "id" nested too deeply
      why = f"{type(e).__name__}: {str(e)[:200]}"
      del out
      try:
        return (json.dumps({"id": rid, "error": why}) + "\n").encode()
      except (ValueError, TypeError, RecursionError):
        return (json.dumps({"id": None, "error": f"unanswerable request: its answer could not be encoded "
                                                 f"({type(e).__name__})"}) + "\n").encode()
    del out
    data = text.encode("utf-8")
    del text
    n = len(data)
    why = None
    if n > self.MAX_ANSWER_BYTES:
      why = (f"the answer is {n} bytes, over the limit of {self.MAX_ANSWER_BYTES} "
             "(ToolServer.MAX_ANSWER_BYTES); ask for less at a time (a page, a part of the file)")
    with self._unread_lock:
      if why is None and n > self.SMALL_ANSWER_BYTES and self.unread_bytes + n > self.MAX_UNREAD_BYTES:
        why = (f"{self.unread_bytes} bytes of earlier answers are not yet read by the program, and this "
               f"one ({n} bytes) would take them past {self.MAX_UNREAD_BYTES} (ToolServer.MAX_UNREAD_BYTES); "
               "read the answers of earlier calls first")
      if why is not None:
        del data
        try:
          rid_text = json.dumps(rid)
        except (ValueError, TypeError, RecursionError):
          rid = None
        else:
          rid = rid if len(rid_text) <= 100 else None
        data = (json.dumps({"id": rid, "error": why}) + "\n").encode()
      self.unread_bytes += len(data)
    return data

  def _send(self, conn: socket.socket, data: bytes) -> None:
    """Writes one answer; an answer the program leaves unread for SEND_TIMEOUT_S closes the
    connection (socket.timeout, an OSError, ends _serve)."""
    try:
      conn.settimeout(self.SEND_TIMEOUT_S)
      conn.sendall(data)
      conn.settimeout(None)
    finally:
      with self._unread_lock:
        self.unread_bytes -= len(data)

  def _read_request(self, conn: socket.socket, held: list) -> tuple[bytearray | None, bool]:
    """(the next request line without its newline, whether it holds a large-request slot); (None, False)
    at the end of the connection. `held` = [bytes received past the last line].

    A line past SMALL_REQUEST_BYTES may only go on being read while it holds one of the
    MAX_LARGE_REQUESTS slots (waiting up to SEND_TIMEOUT_S for one), and must then arrive within
    SEND_TIMEOUT_S. Without a slot a connection reads at most SMALL_REQUEST_BYTES in all; with one, up to
    the end of its line and no further (MSG_PEEK finds it), so that nothing read past a large line waits
    for the next slot. So the partial lines of all connections hold at most MAX_LARGE_REQUESTS x
    max_request_bytes + max_connections x SMALL_REQUEST_BYTES.

    Raises:
      _Refused: the line is too long, no slot freed up in time, or the rest of a large line did not come.
    """
    buf, large, start = held[0], False, 0
    try:
      while True:
        i = buf.find(b"\n", start)
        if i >= 0:
          if i == len(buf) - 1:  # the usual case: the line is all there is (no copy)
            line, held[0] = buf, bytearray()
            del line[i:]
          else:
            line = buf[:i]
            del buf[:i + 1]
          if large:
            conn.settimeout(None)
          return line, large
        start = len(buf)
        if len(buf) > self.max_request_bytes:
          raise _Refused(f"request too large (over {self.max_request_bytes} bytes, "
                         "ToolServer.MAX_REQUEST_BYTES); connection closed")
        if not large and len(buf) >= self.SMALL_REQUEST_BYTES:
          if not self._large.acquire(timeout=self.SEND_TIMEOUT_S):
            raise _Refused(f"too many large requests at once (at most {self.MAX_LARGE_REQUESTS} of more than "
                           f"{self.SMALL_REQUEST_BYTES} bytes, ToolServer.MAX_LARGE_REQUESTS); connection closed")
          large = True
          conn.settimeout(self.SEND_TIMEOUT_S)
        try:
          if large:
            n = min(1 << 20, self.max_request_bytes + 1 - len(buf))
            peek = conn.recv(n, socket.MSG_PEEK)
            end = peek.find(b"\n")
            del peek
            chunk = conn.recv(n if end < 0 else end + 1)
          else:
            chunk = conn.recv(min(self.SMALL_REQUEST_BYTES, self.max_request_bytes + 1) - len(buf))
        except TimeoutError:
          raise _Refused(f"the rest of a request of more than {self.SMALL_REQUEST_BYTES} bytes did not come "
                         f"within {self.SEND_TIMEOUT_S:g} s (ToolServer.SEND_TIMEOUT_S); connection closed") from None
        if not chunk:
          if large:
            self._large.release()
          return None, False
        buf += chunk
        del chunk  # not held while waiting for a slot
    except BaseException:
      if large:
        self._large.release()
      raise

  def _serve(self, conn: socket.socket) -> None:
    held = [bytearray()]
    try:
      while not self._closed:
        try:
          line, large = self._read_request(conn, held)
        except _Refused as e:
          held[0] = bytearray()
          _discard_pending(conn)  # closing with unread data would reset the connection before the error is read
          conn.settimeout(1.0)
          conn.sendall((json.dumps({"id": None, "error": str(e)}) + "\n").encode("utf-8"))
          break
        if line is None:
          break
        try:
          self._pace()
          with self._work_lock:
            request = [line]
            del line
            data = self._encode(self._answer(request))  # neither the line nor the answer is kept here
        finally:
          if large:
            self._large.release()
        self._send(conn, data)
        del data
    except OSError:
      pass
    finally:
      with self._conns_lock:
        self._conns.discard(conn)
      try:
        conn.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
      try:
        conn.close()
      except OSError:
        pass

  def close(self) -> None:
    """Stops accepting, closes every connection, removes the socket file. Idempotent."""
    if self._closed:
      return
    self._closed = True
    try:
      self._listener.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass
    self._listener.close()
    with self._conns_lock:
      conns = list(self._conns)
    for c in conns:
      try:
        c.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
    self._thread.join(timeout=5)
    try:
      os.unlink(self.socket_path)
    except OSError:
      pass


def demo_backend(**unused) -> FunctionBackend:
  """A few small tools (echo, add, fail) for trying the runtime and its MCP server by hand."""

  def echo(**kwargs):
    """Returns its arguments."""
    return kwargs

  def add(a: float, b: float):
    """Returns a + b."""
    return a + b

  def fail(message: str = "boom"):
    """Always fails with `message`."""
    raise RuntimeError(message)

  num = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
         "required": ["a", "b"]}
  return FunctionBackend({"echo": echo, "add": add, "fail": fail},
                         schemas={"add": num, "fail": {"type": "object", "properties": {
                             "message": {"type": "string"}}}})
