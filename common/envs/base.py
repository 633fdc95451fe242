"""The environment interface every rollout talks to: `ToolEnv`, `StepResult`, the step statuses.

`ToolEnv` mirrors the MCP server surface (tools/list, tools/call) plus an episode reset, so that an
environment runs unchanged in the trainer's process or behind `common.env_server` in a sandboxed process
(`common.env_client`). Everything crossing the interface is plain data (str, dict, bool, int):
JSON-serialisable.

Statuses an environment reports (`StepResult.status`):
  'ok'          the call ran;
  'failed'      the call ran and failed (observation = the error text);
  'unavailable' a known tool that cannot answer now (e.g. a replay with no recording left);
  'invalid'     a malformed call or an unknown tool name (observation names the problem and the fix).
The rollout driver adds its own per-turn statuses on top ('parse_error', 'no_call', 'env_error',
'length_limit'; see common.trajectory.Turn).
"""
from __future__ import annotations

import abc
import re
from typing import Any, Mapping, NamedTuple

STATUSES = ("ok", "failed", "unavailable", "invalid")


class StepResult(NamedTuple):
  """What one tool call returns.

  Attributes:
    observation: text shown to the agent.
    status: one of STATUSES.
    done: True when the episode has reached its horizon (no further step is accepted).
    info: JSON-serialisable diagnostics for the trainer (never shown to the agent).
  """
  observation: str
  status: str
  done: bool
  info: dict[str, Any]


class ToolEnv(abc.ABC):
  """A tool-using episode environment, MCP-shaped.

  Protocol: tools() any time (an environment whose tools depend on the task lists the current episode's,
  possibly [] before the first reset; drivers list them after reset); reset(task_id, seed) starts an
  episode and returns the first observation;
  step(call) until StepResult.done; close() releases resources. Also a context manager.
  """

  @abc.abstractmethod
  def tools(self) -> list[dict[str, Any]]:
    """The tool list, MCP `tools/list` form: [{'name', 'description', 'inputSchema'}]."""

  @abc.abstractmethod
  def reset(self, task_id: str, seed: int) -> str:
    """Starts an episode of task `task_id`; returns the initial observation (the task's query)."""

  @abc.abstractmethod
  def step(self, call: Mapping[str, Any]) -> StepResult:
    """Executes one tool call {'name': str, 'arguments': dict}; a malformed call gives status 'invalid'."""

  def close(self) -> None:
    """Releases resources (none for in-process environments)."""

  def __enter__(self) -> "ToolEnv":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


# --- text-game environments: one tool, `action` {"action": <command>} ----------------------------------------


def action_tool(description: str) -> dict[str, Any]:
  """The MCP entry of a text game's one command tool, `action` {"action": str}."""
  return {"name": "action", "description": description,
          "inputSchema": {"type": "object", "properties": {"action": {"type": "string"}}, "required": ["action"]}}


def read_action(call: Any, *, example: str, tools_note: str = "the only tool is 'action' {\"action\": <command>}."
                ) -> tuple[str | None, str | None]:
  """(command, None) from an `action` tool call, or (None, the 'invalid' observation naming the problem).

  Args:
    call: {'name': str, 'arguments': dict}; anything else is a malformed call.
    example: a command of this game, quoted in the error that shows the right syntax.
    tools_note: what the error says the game's tools are.
  Returns:
    The command as given (not stripped), or None and the error text for a StepResult with status 'invalid'.
  """
  name = call.get("name") if isinstance(call, dict) else None
  args = (call.get("arguments") or {}) if isinstance(call, dict) else {}
  if name != "action":
    return None, f"Error: unknown tool {name!r}; {tools_note}"
  action = args.get("action") if isinstance(args, dict) else None
  if not isinstance(action, str) or not action.strip():
    return None, ("Error: 'action' needs a non-empty string argument 'action', e.g. "
                  f"{{\"name\": \"action\", \"arguments\": {{\"action\": \"{example}\"}}}}.")
  return action, None


def split_task_id(task_id: Any, *, env: str, form: str, number: str) -> tuple[str, int]:
  """'<name>/<int>' -> (name, int), e.g. 'coin/3' -> ('coin', 3).

  Args:
    env: the environment's name, for the message; form: e.g. "'coin/3' (<game>/<seed>)"; number: what the
      integer is called ('seed', 'variation').
  Raises:
    ValueError: no '/', or the part after the last '/' is not an integer.
  """
  if "/" not in str(task_id):
    raise ValueError(f"{env} task ids look like {form}, got {task_id!r}")
  name, n = str(task_id).rsplit("/", 1)
  try:
    return name, int(n)
  except ValueError:
    raise ValueError(f"{number} in {task_id!r} must be an integer") from None


# --- admissible-action templates (WebShop's search bar) ------------------------------------------------------

_TEMPLATE = re.compile(r"(\w+)\[<[^<>\[\]]*>\]")
_FILLED = re.compile(r"(\w+)\[(.*)\]", re.DOTALL)


def is_template(action: str) -> bool:
  """An admissible-action entry that stands for a family of actions: 'name[<placeholder>]', e.g. WebShop's
  'search[<your query>]' (any search)."""
  return _TEMPLATE.fullmatch(action) is not None


def admits(admissible, action: Any) -> bool:
  """`action` is admissible: it is in the list, or the list holds a template 'name[<...>]' and the action is
  'name[ARG]' with ARG not blank (common.windowed marks other actions invalid)."""
  if not isinstance(action, str):
    return False
  if action in admissible:
    return True
  m = _FILLED.fullmatch(action)
  if m is None or not m.group(2).strip():
    return False
  return any(is_template(a) and a.startswith(m.group(1) + "[") for a in admissible)


def fill_template(action: str, text: str) -> str:
  """A template entry with its placeholder replaced by `text` ('search[<your query>]', 'red shoes' ->
  'search[red shoes]'); any other action unchanged. What a scripted policy plays for a template (the random
  baseline searches the task's instruction)."""
  m = _TEMPLATE.fullmatch(action)
  return f"{m.group(1)}[{text}]" if m else action
