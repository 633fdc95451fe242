"""Direct tool calls (DTC): find the JSON tool call in a model's text, never crashing on bad text.

Rule (the first complete JSON object wins, trailing prose is ignored):
  1. Scan the text left to right for '{'. From each, find the extent of the object by matching braces
     outside JSON strings (escapes honoured), so that objects nested in a broken one are never taken
     for calls of their own.
  2. The first balanced region that decodes (json) to an object with a string "name" is the call;
     everything after it is ignored. "arguments" may be an object or a JSON string holding one;
     "parameters" is accepted as an alias. A missing "arguments" means {}.
  3. A balanced region that is valid JSON but not a call (no "name") is skipped; so is one that is
     not valid JSON (prose such as "{tool}"), remembering the first such problem.
  4. An unbalanced '{' (never closed) ends the scan.
  Outcome: kind 'call' (the call), 'error' (some '{' but no valid call: the first problem, as text an
  agent can act on) or 'none' (no '{' at all: plain prose, e.g. a final answer).
Code fences and <tool_call> tags need no special case: the object inside them is found the same way.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

CALL_FORMAT_HINT = ('Write one tool call as a JSON object: {"name": "<tool name>", "arguments": '
                    '{"<parameter>": <value>}}.')


class ParsedCall(NamedTuple):
  """Result of `parse_tool_call`.

  Attributes:
    kind: 'call' | 'error' | 'none'.
    call: {'name': str, 'arguments': dict} when kind == 'call', else None.
    error: what was wrong (kind 'error'), else None.
    span: (start, end) character span of the call's JSON in the text, or None.
  """
  kind: str
  call: dict | None
  error: str | None
  span: tuple[int, int] | None

  def error_observation(self) -> str:
    """The observation shown to the agent for kind 'error' (or 'none' where a call was required)."""
    if self.kind == "none":
      return f"Error: no tool call found in your reply. {CALL_FORMAT_HINT}"
    return f"Error: could not read a tool call: {self.error}. {CALL_FORMAT_HINT}"


def _balanced_end(text: str, start: int) -> int | None:
  """Index one past the '}' closing the '{' at `start`, or None if it is never closed."""
  depth = 0
  in_str = False
  esc = False
  for i in range(start, len(text)):
    ch = text[i]
    if in_str:
      if esc:
        esc = False
      elif ch == "\\":
        esc = True
      elif ch == '"':
        in_str = False
    elif ch == '"':
      in_str = True
    elif ch == "{":
      depth += 1
    elif ch == "}":
      depth -= 1
      if depth == 0:
        return i + 1
  return None


def _as_call(obj: Any) -> tuple[dict | None, str | None]:
  """(call, None) for a valid call object, (None, problem) otherwise."""
  if not isinstance(obj, dict):
    return None, "the JSON is not an object"
  if "name" not in obj:
    return None, "the JSON object has no \"name\""
  name = obj["name"]
  if not isinstance(name, str) or not name.strip():
    return None, f"\"name\" must be a non-empty string, got {json.dumps(name)[:60]}"
  args = obj.get("arguments", obj.get("parameters", {}))
  if args is None:
    args = {}
  if isinstance(args, str):
    try:
      args = json.loads(args) if args.strip() else {}
    except json.JSONDecodeError as e:
      return None, f"\"arguments\" is a string that is not valid JSON ({e.msg} at char {e.pos})"
  if not isinstance(args, dict):
    return None, f"\"arguments\" must be an object, got {type(args).__name__}"
  return {"name": name.strip(), "arguments": args}, None


def parse_tool_call(text: str) -> ParsedCall:
  """Extracts the first tool call from model text (see the module docstring for the rule).

  Args:
    text: the model's decoded response.
  Returns:
    ParsedCall; never raises on any str input.
  Raises:
    TypeError: text is not a str.
  """
  if not isinstance(text, str):
    raise TypeError(f"parse_tool_call takes the decoded text (str), got {type(text).__name__}")
  first_problem = None
  i = text.find("{")
  if i < 0:
    return ParsedCall("none", None, None, None)
  while i >= 0:
    end = _balanced_end(text, i)
    if end is None:
      first_problem = first_problem or f"the JSON object starting at char {i} is never closed"
      break
    chunk = text[i:end]
    try:
      obj = json.loads(chunk)
    except json.JSONDecodeError as e:
      first_problem = first_problem or f"invalid JSON at char {i + e.pos}: {e.msg}"
      i = text.find("{", i + 1)
      continue
    call, problem = _as_call(obj)
    if call is not None:
      return ParsedCall("call", call, None, (i, end))
    first_problem = first_problem or problem
    i = text.find("{", end)
  return ParsedCall("error", None, first_problem, None)
