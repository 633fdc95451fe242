"""Tool proxy of ProgAgent's programmatic tool calling: `tools["name"](**kwargs)` inside the kernel.

Two halves, joined by one Unix-domain socket that lives in the episode's private runtime directory:

  kernel side   `install(namespace, socket_path, tool_list)` puts `tools` (a read-only mapping of
                tool name -> callable) and `ToolError` into the program's namespace. A call sends
                one JSON line {"id", "name", "arguments"} and blocks until the host answers, then
                turns the answer into a native Python object, or raises `ToolError`.
  host side     `ToolServer(backend, socket_path)` accepts the kernel's connections on a thread,
                calls `backend.call_tool(name, arguments)` (one call at a time) and answers
                {"id", "result": <MCP CallToolResult in wire form>} or {"id", "error": str}.

This module imports only the standard library at the top: `progagent.runtime` ships its source into
the sandboxed kernel (the project's packages are not mounted there, see runtime.py), so the decoding
below runs identically in the kernel and in host-side tests.

Backends. Anything with `tools() -> list[dict]` (MCP tool entries {name, description, inputSchema})
and `call_tool(name, arguments) -> result`, where result is an MCP `CallToolResult` (SDK object), its
wire dict {"content", "structuredContent", "isError"}, or a `StepResult`-like object with
`.observation` and `.status`. `as_backend` also adapts a ToolEnv-shaped object (phgpo.env.ToolEnv,
common.env_client.EnvClient / EnvSlot: `tools()` and `step(call)`), and `McpBackend` any MCP server
driven by common.env_client.McpProcess. `FunctionBackend` serves a dict of Python functions (tests,
benchmarks, demos).

Result -> Python value (`decode_result`), after the error rule below has found no error:
  1. structuredContent, when present; a dict whose only key is "result" is unwrapped (the MCP SDKs
     wrap non-object outputs that way);
  2. else the content: no item -> None; one text item -> decoded text; several items -> a list of
     them (text items decoded, other items such as images as their wire dicts);
  3. a text is decoded as JSON; if that fails, with `ast.literal_eval` (servers that answer with
     Python reprs: single quotes, tuples, True/None); if that fails too, the raw string.

Error rule (`error_message`). A result is an error, raised as `ToolError` carrying the server's own
message, when
  (a) `isError` is true; the message is the text content, else the structured content's
      "error"/"message"/"exception" entry, else the structured content as JSON; or, with `isError`
      false or omitted,
  (b) the structured content, or a result consisting of one text item that parses as JSON, is an
      object with a truthy top-level "error" entry and no keys other than ERROR_OBJECT_KEYS
      ({"error": "no such table"}, {"error": {...}, "code": 404}); an ordinary record that merely
      has an "error" field among other fields is data, not an error; or
  (c) a result consisting of one text item whose text starts (after blank space) with "Error:" or
      "Error executing tool" (case-insensitive; the latter is the Python SDK's own wording), with
      "Traceback (most recent call last):", or with an exception-class prefix "SomethingError: " /
      "SomethingException: ".
  ProgAgent (2026) names servers that omit `isError` as a source of silent failures; (b) and (c)
  close that gap while keeping ordinary data (text that mentions an error later on) intact.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import socket
import threading
from typing import Any, Callable, Iterator, Mapping

ERROR_OBJECT_KEYS = frozenset({"error", "message", "code", "details", "detail", "status", "type",
                               "exception", "traceback", "isError", "is_error", "ok", "success"})
_ERROR_TEXT_RE = re.compile(
    r"^\s*(?:error(?:\s+executing\s+tool\b[^\n:]*)?\s*:|error\s+executing\s+tool\b"
    r"|traceback \(most recent call last\):"
    r"|[A-Za-z_][\w.]*(?:Error|Exception)\s*:\s)",
    re.IGNORECASE)
_LITERAL_EVAL_MAX_CHARS = 1_000_000
_PROXY_FILENAME = "<progagent.tool_proxy>"


class ToolError(Exception):
  """A tool call failed; str() is "tool 'NAME' failed: <the server's own message>".

  Attributes:
    tool: name of the tool.
    message: the server's message, unchanged.
    result: the MCP result in wire form (None when the call never reached the server).
  """

  def __init__(self, tool: str, message: str, result: dict | None = None):
    self.tool = tool
    self.message = message
    self.result = result
    super().__init__(f"tool {tool!r} failed: {message}")

  def __reduce__(self):
    return (type(self), (self.tool, self.message, self.result))


# --------------------------------------------------------------------------------------------
# Decoding (both sides)


def to_wire(result: Any) -> dict:
  """Any tool result -> MCP CallToolResult wire dict {"content", "structuredContent"?, "isError"?}.

  Accepts an SDK result object (pydantic, with `model_dump`), a wire dict, a StepResult-like object
  (`.observation`, `.status`: statuses "failed", "invalid", "unavailable", "error" set isError, any
  other leaves it omitted) or a plain string.

  Raises:
    TypeError: anything else, naming the accepted forms.
  """
  if isinstance(result, Mapping):
    if "content" not in result and "structuredContent" not in result:
      raise TypeError("a tool result dict must be an MCP CallToolResult in wire form with 'content' "
                      f"and/or 'structuredContent'; got keys {sorted(result)[:8]}")
    return dict(result)
  if hasattr(result, "model_dump"):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
  if hasattr(result, "observation") and hasattr(result, "status"):
    wire = {"content": [{"type": "text", "text": str(result.observation)}]}
    if str(result.status) in ("failed", "invalid", "unavailable", "error"):
      wire["isError"] = True
    return wire
  if isinstance(result, str):
    return {"content": [{"type": "text", "text": result}]}
  raise TypeError(f"cannot read a tool result of type {type(result).__name__}: return an MCP "
                  "CallToolResult, its wire dict, a StepResult or a str")


def _texts(wire: Mapping) -> list[str] | None:
  """The texts of the content items, or None when some item is not text."""
  out = []
  for c in wire.get("content") or ():
    if not isinstance(c, Mapping) or c.get("type") != "text":
      return None
    out.append(str(c.get("text", "")))
  return out


def _error_object_message(obj: Any) -> str | None:
  """Rule (b): the message of an error-shaped object, else None."""
  if not isinstance(obj, Mapping) or not obj.get("error"):
    return None
  if not set(obj).issubset(ERROR_OBJECT_KEYS):
    return None
  err = obj["error"]
  if isinstance(err, Mapping):
    msg = err.get("message") or err.get("detail") or json.dumps(err, default=str)
  elif err is True:
    msg = obj.get("message") or obj.get("detail") or obj.get("details") or json.dumps(obj, default=str)
  else:
    msg = str(err)
    extra = obj.get("message") or obj.get("detail")
    if extra and str(extra) not in msg:
      msg = f"{msg}: {extra}"
  return str(msg)


def error_message(wire: Mapping) -> str | None:
  """The server's error message when `wire` is an error result by the module's rule, else None."""
  texts = _texts(wire)
  structured = wire.get("structuredContent")
  if wire.get("isError"):
    joined = "\n".join(texts) if texts is not None else ""
    if joined.strip():
      return joined
    if isinstance(structured, Mapping):
      for k in ("error", "message", "exception"):
        if structured.get(k):
          v = structured[k]
          return v if isinstance(v, str) else json.dumps(v, default=str)
    if structured is not None:
      return json.dumps(structured, default=str)
    return "the tool reported an error without a message"
  msg = _error_object_message(structured)
  if msg is not None:
    return msg
  if texts is not None and len(texts) == 1 and structured is None:
    text = texts[0]
    stripped = text.lstrip()
    if stripped.startswith("{"):
      try:
        msg = _error_object_message(json.loads(stripped))
      except ValueError:
        msg = None
      if msg is not None:
        return msg
    if _ERROR_TEXT_RE.match(text):
      return text.strip()
  return None


def decode_text(text: str) -> Any:
  """JSON, else a Python literal (`ast.literal_eval`, texts up to 1e6 characters), else the string."""
  try:
    return json.loads(text)
  except ValueError:
    pass
  s = text.strip()
  if s and len(s) <= _LITERAL_EVAL_MAX_CHARS:
    try:
      return ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
      pass
  return text


def decode_result(wire: Mapping, tool: str = "?") -> Any:
  """One tool result (wire form) -> native Python value, or raises ToolError (module docstring).

  Args:
    wire: MCP CallToolResult in wire form (see `to_wire`).
    tool: the tool's name, for the error message.
  Returns:
    The decoded value.
  Raises:
    ToolError: the result is an error by the module's rule; carries the server's message.
  """
  msg = error_message(wire)
  if msg is not None:
    raise ToolError(tool, msg, dict(wire))
  structured = wire.get("structuredContent")
  if structured is not None:
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
      return structured["result"]
    return structured
  items = list(wire.get("content") or ())
  values = [decode_text(str(c.get("text", ""))) if isinstance(c, Mapping) and c.get("type") == "text"
            else c for c in items]
  if not values:
    return None
  return values[0] if len(values) == 1 else values


def describe_tools(tool_list: list[dict]) -> str:
  """One line per tool, `name(arg: type, opt?: type) - description`, for prompts and reprs."""
  lines = []
  for t in tool_list:
    schema = t.get("inputSchema") or {}
    props = schema.get("properties") or {}
    req = set(schema.get("required") or ())
    args = []
    for k, v in props.items():
      ty = v.get("type", "any") if isinstance(v, Mapping) else "any"
      args.append(f"{k}{'' if k in req else '?'}: {ty if isinstance(ty, str) else '|'.join(ty)}")
    desc = " ".join(str(t.get("description") or "").split())
    lines.append(f"{t['name']}({', '.join(args)})" + (f" - {desc}" if desc else ""))
  return "\n".join(lines)


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


class _Tool:
  """One tool as a callable: keyword arguments in, native Python value out."""

  def __init__(self, conn: _Connection, spec: dict):
    self._conn = conn
    self.name = spec["name"]
    self.spec = spec
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
      raise ToolError(self.name, str(msg["error"]))
    return decode_result(msg["result"], self.name)

  def __repr__(self) -> str:
    return f"<tool {self.__doc__}>"


class ToolProxy(Mapping):
  """`tools` inside a program: a read-only mapping name -> callable tool; also `tools.name(...)`."""

  def __init__(self, conn: _Connection, tool_list: list[dict]):
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


_STDIN_MESSAGE = ("{fn}() is not available: programs run without anyone to answer; put the value "
                  "in the program (or read it from a file or a tool) instead")


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
  if kernel is not None:
    def _no_input(prompt=""):
      __tracebackhide__ = True
      from IPython.core.error import StdinNotImplementedError
      raise StdinNotImplementedError(_STDIN_MESSAGE.format(fn="input"))

    def _no_getpass(prompt="", stream=None, **unused):
      __tracebackhide__ = True
      from IPython.core.error import StdinNotImplementedError
      raise StdinNotImplementedError(_STDIN_MESSAGE.format(fn="getpass"))

    kernel.raw_input = _no_input
    kernel.getpass = _no_getpass
  return proxy


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
  """Any MCP server driven by a started common.env_client.McpProcess.

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


class ToolServer:
  """Host side: serves `backend` to the kernel over a Unix-domain socket at `socket_path`.

  Calls are executed one at a time (a lock), in the order they arrive; `calls` counts the answered
  ones. Names the backend does not list are refused without reaching it. A backend exception is
  answered as {"error": "Type: message"}, which the kernel raises as ToolError.
  """

  def __init__(self, backend: Any, socket_path: str):
    self.backend = backend
    self.tool_list = [dict(t) for t in backend.tools()]
    self._names = {t["name"] for t in self.tool_list}
    self.socket_path = socket_path
    self.calls = 0
    self._lock = threading.Lock()
    self._closed = False
    self._conns: set[socket.socket] = set()
    if os.path.exists(socket_path):
      os.unlink(socket_path)
    self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self._listener.bind(socket_path)
    self._listener.listen(8)
    self._thread = threading.Thread(target=self._accept_loop, name="progagent-tools", daemon=True)
    self._thread.start()

  def _accept_loop(self) -> None:
    while not self._closed:
      try:
        conn, _ = self._listener.accept()
      except OSError:
        return
      self._conns.add(conn)
      threading.Thread(target=self._serve, args=(conn,), name="progagent-tools-conn",
                       daemon=True).start()

  def handle(self, request: Mapping) -> dict:
    """One request {"id", "name", "arguments"} -> answer {"id", "result"|"error"}."""
    rid = request.get("id")
    name = request.get("name")
    args = request.get("arguments")
    if name not in self._names:
      return {"id": rid, "error": f"no tool named {name!r}; available: {sorted(self._names)}"}
    if not isinstance(args, Mapping):
      return {"id": rid, "error": f"arguments must be an object, got {type(args).__name__}"}
    with self._lock:
      try:
        wire = to_wire(self.backend.call_tool(name, dict(args)))
        json.dumps(wire)
      except Exception as e:  # backend failure (crash, timeout): reported to the program
        return {"id": rid, "error": f"{type(e).__name__}: {e}"}
      finally:
        self.calls += 1
    return {"id": rid, "result": wire}

  def _serve(self, conn: socket.socket) -> None:
    f = conn.makefile("rb")
    try:
      for line in f:
        try:
          req = json.loads(line)
          if not isinstance(req, Mapping):
            raise ValueError("not an object")
        except ValueError as e:
          out = {"id": None, "error": f"malformed request ({e})"}
        else:
          out = self.handle(req)
        conn.sendall((json.dumps(out, default=str) + "\n").encode("utf-8"))
    except OSError:
      pass
    finally:
      self._conns.discard(conn)
      try:
        f.close()
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
    for c in list(self._conns):
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
