"""One place for tool results: decoding, tool errors, output truncation, and how a program run reads.

Everything the agent sees of a tool call or a program run is decided here, so that every path shows it
the same text: the sandboxed kernel (progagent.runtime, RL rollouts), the in-process runtime (audits,
oracle SFT data), the task oracles, the harnesses and the MCP runtime server.

This module imports only the standard library: progagent.runtime sends its source into the sandboxed
kernel (where the project's packages are not mounted), so the rules below run identically there and on
the host.

Result -> Python value (`decode_result`), after the error rule below has found no error:
  1. structuredContent, when present, as data: the dict the tool's outputSchema describes (a filesystem
     server's read_text_file gives {"content": "..."}), never re-parsed; a dict whose only key is "result"
     is unwrapped (the MCP SDKs wrap non-object outputs that way). Other single-key objects are kept whole,
     so that the value is the shape the model is shown: describe_tools writes a tool's outputSchema as
     `name(args) -> {content: string}` (describe_schema) in the program tool's description and in each
     `tools[...]` function's docstring;
  2. else the content (a server that returns text only): no item -> None; one text item -> decoded text;
     several items -> a list of them (text items decoded, other items such as images as their wire dicts);
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

Program runs (`run_program`, the rule both PTC runtimes apply):
  * the program is plain Python (no IPython magics), compiled as "<program N>" (N counts the
    runtime's programs from 1);
  * stdout and stderr go to one stream, in the order they are written; sys.stdout / sys.stderr are
    `OutStream`s with the Python API of the kernel's own (ipykernel) streams, and os.write to fd 1 / 2
    from the program's thread is captured in that same order; output written below Python (a
    subprocess, a C library, another thread's os.write) is captured by the kernel only;
  * a final expression statement's value is shown as repr(value) + newline unless it is None (the
    Python REPL's rule; no pretty-printing);
  * an exception (KeyboardInterrupt and SystemExit included) ends the program and is shown as
        Traceback (most recent call last):
          line 3: <source line>                (frames of this program)
          line 7 of program 2: <source line>   (a function defined by an earlier program)
        Name: message
    with no frame of the runtime or the tool proxy; the run's error is "Name: message";
  * a lone surrogate in the output or the error line (half of a UTF-16 pair, "\\ud800": not valid
    Unicode, so neither the kernel's messages nor a tokenizer take it) is written as its escape, six
    ASCII characters, and a note after the output counts them and names the first (`escape_surrogates`);
  * the output is cut to MAX_OUTPUT_CHARS characters (Python str: Unicode code points, so no
    character is split): the first and last halves are kept and a marker line in between says how
    many characters were cut (`OutputBuffer`, mode 'head' keeps the beginning instead).
`format_exec` is the observation text of a run.
Source: ProgAgent (2026), "Runtime" (SPEC.md, ProgAgent): native Python objects from tools, printed
output cut to 50,000 characters.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import io
import json
import os
import re
import sys
import threading
from typing import Any, Callable, Mapping, NamedTuple

MAX_OUTPUT_CHARS = 50_000
ERROR_OBJECT_KEYS = frozenset({"error", "message", "code", "details", "detail", "status", "type",
                               "exception", "traceback", "isError", "is_error", "ok", "success"})
_ERROR_TEXT_RE = re.compile(
    r"^\s*(?:error(?:\s+executing\s+tool\b[^\n:]*)?\s*:|error\s+executing\s+tool\b"
    r"|traceback \(most recent call last\):"
    r"|[A-Za-z_][\w.]*(?:Error|Exception)\s*:\s)",
    re.IGNORECASE)
_LITERAL_EVAL_MAX_CHARS = 1_000_000
PROGRAM_FILENAME = "<program {n}>"
_PROGRAM_FILE_RE = re.compile(r"^<program (\d+)>$")


class ToolError(Exception):
  """A tool call failed: raised by tool implementations (environment side) and in programs.

  str() is "tool 'NAME' failed: <message>" when the tool is known, else the message alone (what a
  tool implementation raises: `ToolError("no order with id 7")`).

  Attributes:
    message: the server's (or implementation's) message, unchanged.
    tool: name of the tool, or None.
    result: the MCP result in wire form (None when the call never reached the server).
  """

  def __init__(self, message: str, tool: str | None = None, result: dict | None = None):
    self.message = str(message)
    self.tool = tool
    self.result = result
    super().__init__(self.message if tool is None else f"tool {tool!r} failed: {self.message}")

  def __reduce__(self):
    return (type(self), (self.message, self.tool, self.result))


# --------------------------------------------------------------------------------------------
# Tool results


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


def text_result(text: str) -> dict:
  """A text observation (e.g. a DTC tool message) as a wire result with one text item."""
  return {"content": [{"type": "text", "text": text}]}


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


def decode_result(wire: Mapping, tool: str | None = None) -> Any:
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
    raise ToolError(msg, tool, dict(wire))
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


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _has_surrogate(value: Any) -> bool:
  stack = [value]
  while stack:
    v = stack.pop()
    if isinstance(v, str):
      if _SURROGATE_RE.search(v):
        return True
    elif isinstance(v, Mapping):
      stack.extend(v.keys())
      stack.extend(v.values())
    elif isinstance(v, (list, tuple)):
      stack.extend(v)
  return False


def invalid_text(value: Any, where: str = "arguments") -> str | None:
  """Where `value` holds text that is not valid Unicode, or None.

  JSON's escapes can write half of a surrogate pair ("\\ud800"), which json.loads turns into a lone
  surrogate: a Python str that no UTF-8 encoder accepts, so it cannot reach a tool (an MCP pipe, SQLite, a
  file). Callers answer it with an error observation instead of sending it on.

  Args:
    value: a JSON-like value (str, dict, list, tuple; other leaves are ignored), e.g. a call's arguments.
    where: its name in the message.
  Returns:
    None, or e.g. "arguments['code'] holds a lone surrogate '\\ud800' at character 9, which is not valid
    Unicode text: write the character itself, or a complete escape pair such as \\ud83d\\ude00".
  """
  if not _has_surrogate(value):  # the common case: one pass, no paths built
    return None
  stack = [(value, where)]
  while stack:
    v, path = stack.pop()
    if isinstance(v, str):
      m = _SURROGATE_RE.search(v)
      if m:
        return (f"{path} holds a lone surrogate {m.group()!r} at character {m.start()}, which is not valid "
                "Unicode text: write the character itself, or a complete escape pair such as \\ud83d\\ude00")
    elif isinstance(v, Mapping):
      for k, x in v.items():
        if isinstance(k, str) and _SURROGATE_RE.search(k):
          return invalid_text(k, f"a key of {path}")
        stack.append((x, f"{path}[{k!r}]"))
    elif isinstance(v, (list, tuple)):
      stack.extend((x, f"{path}[{i}]") for i, x in enumerate(v))
  return None


def escape_surrogates(text: str) -> tuple[str, int, str | None]:
  """(text with each lone surrogate written as its escape, how many, the first one's escape or None).

  "a\\ud800b" -> ("a\\\\ud800b", 1, "\\\\ud800"): the result is valid Unicode (it encodes to UTF-8), and the
  replaced character stays visible. Cost: one regular-expression search when there is none.
  """
  if text.isascii() or not _SURROGATE_RE.search(text):
    return text, 0, None
  out, n = _SURROGATE_RE.subn(lambda m: f"\\u{ord(m.group()):04x}", text)
  return out, n, f"\\u{ord(_SURROGATE_RE.search(text).group()):04x}"


def surrogates_note(n: int, first: str) -> str:
  """The line a program run's output ends with when `n` lone surrogates were escaped (run_program)."""
  return (f"\n[runtime] The output held {n} lone surrogate{'s' if n > 1 else ''} (half of a UTF-16 pair, not valid "
          f"Unicode text), shown as {'its' if n == 1 else 'their'} escape (the first: {first}).\n")


def call_text_problem(name: Any, arguments: Any) -> str | None:
  """invalid_text of a tool call: its name ("the tool name") and its arguments ("arguments"), or None."""
  return invalid_text(name, "the tool name") or invalid_text(arguments, "arguments")


def refused_text(problem: str) -> str:
  """The observation of a call refused for invalid text (call_text_problem), whatever runs the tools:
  "Error: the tool call was not run: <problem>."."""
  return f"Error: the tool call was not run: {problem}."


MAX_SCHEMA_CHARS = 400


def describe_schema(schema: Any, *, depth: int = 0) -> str:
  """A JSON Schema as a short type expression: 'string', 'list[number]', "'a'|'b'", '{name: string, n?: integer}'.

  Objects list their properties (optional ones marked '?'; nested objects to depth 3, deeper ones 'object');
  arrays their item type; enums their values; anyOf / oneOf alternatives joined by '|'; anything else 'any'.
  Used for tools' output schemas (outputSchema) in the descriptions a model reads (describe_tools); cut to
  MAX_SCHEMA_CHARS characters (a '...' marks the cut).
  """
  if not isinstance(schema, Mapping):
    return "any"
  if "enum" in schema and isinstance(schema["enum"], list):
    return "|".join(json.dumps(v) for v in schema["enum"][:8]) + ("|..." if len(schema["enum"]) > 8 else "")
  alts = schema.get("anyOf") or schema.get("oneOf")
  if isinstance(alts, list) and alts:
    return "|".join(describe_schema(a, depth=depth) for a in alts)
  ty = schema.get("type")
  if isinstance(ty, list):
    return "|".join(describe_schema(dict(schema, type=t), depth=depth) for t in ty)
  if ty == "array":
    return f"list[{describe_schema(schema.get('items'), depth=depth + 1)}]"
  if ty == "object" or (ty is None and isinstance(schema.get("properties"), Mapping)):
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props or depth >= 3:
      return "object"
    req = set(schema.get("required") or ())
    parts = [f"{k}{'' if k in req else '?'}: {describe_schema(v, depth=depth + 1)}" for k, v in props.items()]
    text = "{" + ", ".join(parts) + "}"
  else:
    text = ty if isinstance(ty, str) else "any"
  return text if len(text) <= MAX_SCHEMA_CHARS else text[:MAX_SCHEMA_CHARS - 3] + "..."


def describe_tools(tool_list: list[dict]) -> str:
  """One line per tool, `name(arg: type, opt?: type) -> output - description`, for prompts and reprs.

  `-> output` (describe_schema of the tool's outputSchema) appears only for a tool that declares one: what a
  program's call returns then (decode_result: the structured content, a dict of that shape).
  """
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
    out = t.get("outputSchema")
    ret = f" -> {describe_schema(out)}" if isinstance(out, Mapping) and out else ""
    lines.append(f"{t['name']}({', '.join(args)}){ret}" + (f" - {desc}" if desc else ""))
  return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Output truncation


class OutputBuffer:
  """Keeps at most `max_chars` characters of a stream: its head and its tail, counting the rest.

  What it keeps is valid Unicode: a lone surrogate written to it (a kernel's message can hold one as a JSON
  escape) is kept as its escape (escape_surrogates); run_program escapes a program's own output before,
  with a note.

  Args:
    max_chars: characters kept (int >= 0; ProgAgent: 50,000).
    mode: 'head_tail' (half each) or 'head'.
  Raises:
    ValueError: a bad mode or a negative max_chars.
  """

  def __init__(self, max_chars: int = MAX_OUTPUT_CHARS, mode: str = "head_tail"):
    if mode not in ("head_tail", "head"):
      raise ValueError(f"truncation={mode!r}; use 'head_tail' or 'head'")
    if max_chars < 0:
      raise ValueError(f"max_output_chars={max_chars} must be >= 0")
    self.max_chars = int(max_chars)
    self.head_cap = self.max_chars if mode == "head" else (self.max_chars + 1) // 2
    self.tail_cap = self.max_chars - self.head_cap
    self._head: list[str] = []
    self._head_len = 0
    self._tail: collections.deque[str] = collections.deque()
    self._tail_len = 0
    self.total = 0

  def write(self, s: str) -> int:
    if not s:
      return 0
    s = escape_surrogates(s)[0]
    n = len(s)
    self.total += n
    room = self.head_cap - self._head_len
    if room > 0:
      self._head.append(s[:room])
      self._head_len += min(room, len(s))
      s = s[room:]
    if not s or self.tail_cap == 0:
      return n
    if len(s) >= self.tail_cap:
      self._tail.clear()
      self._tail.append(s[-self.tail_cap:])
      self._tail_len = self.tail_cap
      return n
    self._tail.append(s)
    self._tail_len += len(s)
    while self._tail_len - len(self._tail[0]) >= self.tail_cap:
      self._tail_len -= len(self._tail.popleft())
    return n

  @property
  def cut(self) -> int:
    """Characters cut so far (0 when everything was kept)."""
    return max(0, self.total - self.max_chars)

  def getvalue(self) -> str:
    head = "".join(self._head)
    tail = "".join(self._tail)
    cut = self.cut
    if cut == 0:
      return head + tail
    tail = tail[len(tail) - self.tail_cap:] if self.tail_cap else ""
    marker = (f"\n[... {cut} characters cut: the output had {self.total}, at most "
              f"{self.max_chars} are kept ...]\n")
    return head + marker + tail


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS, mode: str = "head_tail") -> str:
  """`text` cut to `limit` characters by the OutputBuffer rule (code points; a marker names the cut)."""
  buf = OutputBuffer(limit, mode)
  buf.write(text)
  return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Program runs


class ExecResult(NamedTuple):
  """What one program run returns (both PTC runtimes).

  Attributes:
    output: str, what the program printed (stdout and stderr in order, a final expression's repr,
      the traceback of the exception that ended it), cut by OutputBuffer, followed by the runtime's
      notices (timeout, restart; never cut); this is what enters the context.
    error: None, or "Name: message" of the exception that ended the program ("TimeoutError: ...",
      "KernelRestarted: ..." when the kernel had to be restarted).
    timed_out: bool, the program hit the per-execution time limit.
    restarted: bool, the kernel was restarted during this run; variables are lost.
    tool_calls: int, tool calls answered during this run.
    truncated_chars: int, characters cut from the output (0 when nothing was cut).
  """
  output: str
  error: str | None = None
  timed_out: bool = False
  restarted: bool = False
  tool_calls: int = 0
  truncated_chars: int = 0


def format_exec(result: Any) -> str:
  """The observation text of one program run: its output, then the error if the output lacks it.

  Rule: output + "\\nError:\\n" + error when the run failed and its output does not already contain
  the error line (e.g. it was cut away in 'head' mode); "(no output)" when there is nothing to show.
  """
  out = result.output or ""
  err = getattr(result, "error", None)
  if err and err not in out:
    return (out + ("\n" if out and not out.endswith("\n") else "") + f"Error:\n{err}").strip("\n")
  return out if out.strip() else "(no output)"


def error_line(exc: BaseException) -> str:
  """ "Name: message" of an exception ("Name" alone when the message is empty)."""
  name = type(exc).__name__
  msg = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
  return f"{name}: {msg}" if msg else name


def format_traceback(exc: BaseException, sources: list[str]) -> str:
  """The traceback text of the module docstring: program frames only, then error_line(exc).

  Args:
    exc: the exception that ended program number len(sources).
    sources: the runtime's programs so far, program n at sources[n - 1].
  """
  current = len(sources)
  lines = ["Traceback (most recent call last):"]

  def frame(filename: str, lineno: int | None) -> None:
    m = _PROGRAM_FILE_RE.match(filename or "")
    if m is None or not lineno:
      return
    n = int(m.group(1))
    src = sources[n - 1].splitlines() if 0 < n <= len(sources) else []
    text = src[lineno - 1].strip() if 0 < lineno <= len(src) else ""
    where = f"line {lineno}" if n == current else f"line {lineno} of program {n}"
    lines.append(f"  {where}: {text}")

  tb = exc.__traceback__
  while tb is not None:
    frame(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    tb = tb.tb_next
  if isinstance(exc, SyntaxError):
    frame(exc.filename or "", exc.lineno)
  lines.append(error_line(exc))
  return "\n".join(lines) + "\n"


class StdinNotImplementedError(RuntimeError):
  """input() or getpass() in a program: nobody is there to answer (the name IPython uses)."""


_STDIN_MESSAGE = ("{fn}() is not available: programs run without anyone to answer; put the value "
                  "in the program (or read it from a file or a tool) instead")


def no_input(prompt: str = "") -> str:
  """input() of a program: raises StdinNotImplementedError at once."""
  raise StdinNotImplementedError(_STDIN_MESSAGE.format(fn="input"))


def no_getpass(prompt: str = "", stream: Any = None, **unused) -> str:
  """getpass() of a program: raises StdinNotImplementedError at once."""
  raise StdinNotImplementedError(_STDIN_MESSAGE.format(fn="getpass"))


class OutStream(io.TextIOBase):
  """A program's sys.stdout / sys.stderr while run_program runs it, in both PTC runtimes.

  Its Python API is that of ipykernel.iostream.OutStream (the kernel's own streams), so a program sees
  the same object in the in-process runtime as in the kernel: a TextIOBase with name 'stdout' /
  'stderr', encoding 'UTF-8', isatty() False, writable() True, no `.buffer` (AttributeError
  "'OutStream' object has no attribute 'buffer'"), write() of a non-str raises TypeError
  "write() argument must be str, not <class '...'>". fileno() is 1 / 2: writes to those descriptors
  from the program's thread by os.write are captured in order (see `_routed_os_write`). ipykernel's
  zmq internals (session, pub_thread, parent_header, ...) are not mirrored.
  """

  encoding = "UTF-8"

  def __init__(self, name: str, write: Callable[[str], Any]):
    super().__init__()
    self.name = name
    self._write = write

  def __repr__(self) -> str:
    return f"<OutStream {self.name}>"

  def write(self, string: str) -> int:
    if not isinstance(string, str):
      raise TypeError(f"write() argument must be str, not {type(string)}")
    if self.closed:
      raise ValueError("I/O operation on closed file")
    self._write(string)
    return len(string)

  def writelines(self, sequence) -> None:
    for string in sequence:
      self.write(string)

  def writable(self) -> bool:
    return True

  def isatty(self) -> bool:
    return False

  def fileno(self) -> int:
    return 1 if self.name == "stdout" else 2


class _Router:
  """sys.stdout / sys.stderr stand-in: in a thread running a program it is that program's OutStream
  (every attribute read or set, write() and fileno() included, so a program cannot change the stream
  other threads and later programs use); elsewhere the stream it replaced (attributes set outside a
  program, e.g. IPython's per-cell write tee, are the router's own)."""

  _local = threading.local()

  def __init__(self, through: Any, name: str):
    object.__setattr__(self, "_router_through", through)
    object.__setattr__(self, "_router_name", name)

  def _router_current(self) -> Any:
    streams = getattr(_Router._local, "streams", None)
    return self._router_through if streams is None else streams[self._router_name]

  def write(self, s: str) -> int:
    return self._router_current().write(s)

  def writelines(self, lines) -> None:
    self._router_current().writelines(lines)

  def flush(self) -> None:
    self._router_current().flush()

  def __repr__(self) -> str:
    return repr(self._router_current())

  def __getattr__(self, name: str) -> Any:
    return getattr(self._router_current(), name)

  def __setattr__(self, name: str, value: Any) -> None:  # outside programs: on the router (IPython's tee)
    if getattr(_Router._local, "streams", None) is None:
      object.__setattr__(self, name, value)
    else:
      setattr(self._router_current(), name, value)

  def __delattr__(self, name: str) -> None:
    if getattr(_Router._local, "streams", None) is None:
      object.__delattr__(self, name)
    else:
      delattr(self._router_current(), name)


_REAL_OS_WRITE = os.write


def _routed_os_write(fd, data, /):
  """os.write while run_program is installed: in a thread running a program, fd 1 and 2 go to the
  program's output (bytes decoded as UTF-8, undecodable ones replaced, as ipykernel's fd watcher does);
  every other call is the real os.write (the process's real fd 1 is never redirected)."""
  streams = getattr(_Router._local, "streams", None)
  if streams is None or isinstance(fd, bool) or fd not in (1, 2) or streams["pid"] != os.getpid():
    return _REAL_OS_WRITE(fd, data)
  try:
    raw = bytes(memoryview(data))
  except TypeError:
    raise TypeError(f"a bytes-like object is required, not '{type(data).__name__}'") from None
  streams["stdout" if fd == 1 else "stderr"].write(raw.decode("utf-8", errors="replace"))
  return len(raw)


@contextlib.contextmanager
def _streams_to(write: Callable[[str], Any]):
  """Routes this thread's sys.stdout, sys.stderr and os.write(1 / 2) to `write` (other threads
  unaffected)."""
  for name in ("stdout", "stderr"):
    cur = getattr(sys, name)
    if not isinstance(cur, _Router):
      setattr(sys, name, _Router(cur, name))
  if os.write is not _routed_os_write:
    os.write = _routed_os_write
  prev = getattr(_Router._local, "streams", None)
  _Router._local.streams = {"stdout": OutStream("stdout", write), "stderr": OutStream("stderr", write),
                            "pid": os.getpid()}  # a forked child's os.write(1) is its own (real) one
  try:
    yield
  finally:
    _Router._local.streams = prev


def real_stdout() -> Any:
  """sys.stdout without this module's router (the kernel's own output stream)."""
  out = sys.stdout
  return out._router_through if isinstance(out, _Router) else out


def run_program(code: str, namespace: dict, write: Callable[[str], Any], sources: list[str]) -> str | None:
  """Runs one program by the module's rule; returns None, or error_line of what ended it.

  Args:
    code: Python source.
    namespace: the persistent global namespace of the runtime's programs.
    write: receives the program's output (stdout, stderr, final value, traceback) in order.
    sources: the runtime's earlier programs; `code` is appended (it becomes program len(sources)).
  Returns:
    None when the program finished, else "Name: message" (the traceback was written). Output and error
    line are valid Unicode: lone surrogates escaped, with a note after the output (escape_surrogates).
  """
  sources.append(code)
  filename = PROGRAM_FILENAME.format(n=len(sources))
  escaped = [0, None]  # lone surrogates escaped so far, the first one's escape

  def valid_write(s: str) -> Any:
    s, n, first = escape_surrogates(s)
    if n:
      escaped[0] += n
      escaped[1] = escaped[1] or first
    return write(s)

  error = None
  with _streams_to(valid_write):
    try:
      tree = ast.parse(code, filename)
      last = None
      if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
      exec(compile(tree, filename, "exec", dont_inherit=True), namespace)  # pylint: disable=exec-used
      if last is not None:
        value = eval(compile(last, filename, "eval", dont_inherit=True), namespace)  # pylint: disable=eval-used
        if value is not None:
          valid_write(repr(value) + "\n")
    except BaseException as e:  # the program's error (KeyboardInterrupt: a timeout), shown to the agent
      valid_write(format_traceback(e, sources))
      error = escape_surrogates(error_line(e))[0]
  if escaped[0]:
    write(surrogates_note(*escaped))
  return error
