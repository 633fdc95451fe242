"""The three ProgAgent harnesses over the same tasks: DTC, PTC and Hybrid; prompts, episodes, accounting.

Source: ProgAgent (2026), "Three harnesses over the same tasks" (SPEC.md, ProgAgent). Every harness speaks
OpenAI-format messages with native function calling (the contract of common.chat):
  [system: the mode's instructions (system_prompt), user: the task instruction,
   assistant: {content, tool_calls: [{id, type: 'function', function: {name, arguments: dict}}]},
   tool: {tool_call_id, name, content: the observation}, ...]
and the tools are OpenAI function schemas (common.chat.tool_schemas of ProgEnv.tools()):
  DTC     the task tools (incl. submit_answer); each call's raw result is the tool message;
  PTC     one tool, programmatic_tool_call(code: str): a Python program run in the episode's persistent
          interpreter, where tools["name"](**kwargs) calls a task tool and returns a Python object; only what
          the program prints (cut at 50,000 characters) is the tool message;
  Hybrid  both.
The environment is progagent.ptc_env.ProgEnv (a ToolEnv of the mode: a program is one step, run in-process or
in the sandboxed kernel). A policy maps (messages, tools) to an assistant message dict; the policy has already
separated reasoning (key 'reasoning', kept in the record, never executed) from the content and parsed its tool
calls (common.chat.ChatTemplate.parse for a local model, progagent.teacher_client for an endpoint). A reply it
could not read carries 'error' (a named message, common.tool_calls / common.chat): none of its calls runs, the
harness shows that error to the agent as a user message and the episode goes on. A single call that cannot
be run (no name, arguments that are not a JSON object) is answered by a named error in its tool message. A
reply with no tool call ends the episode ('no_action'). Several tool calls in one reply run in order, each
answered by its own tool message; the calls after the one that ends the episode do not run.

Episode accounting (EpisodeStats), per episode:
  context_tokens      tokens of the whole final context (tool schemas + system prompt + instruction + every
                      action and observation): the context length the policy needs at the last turn;
  prompt/action/observation_tokens   the same split by message kind (the tool schemas count as prompt);
  tool_calls, tool_errors            calls reaching the task environment and those that failed (status not
                                     'ok'), from the environment's own counter when it has one
                                     (episode_counts()), so calls made inside PTC programs count;
  parse_errors, program_errors       unreadable replies and calls the environment refused as malformed
                                     (status 'invalid'); programs that raised (status 'failed');
  turns                              assistant replies.
Token counting: `tokenizer` is any callable text -> int, or an object with `encode` (a Hugging Face
tokenizer; special tokens not added); the default `regex_token_count` counts words (\\w+) and single
punctuation marks: a documented, model-free proxy, not any model's tokenizer. A message counts as
message_text(message) (its content, then each tool call's name and argument values, strings raw, so a
program counts as its source text); the tool schemas as their JSON. No per-message template overhead is
added (argument message_overhead).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Mapping, Sequence

from common import chat
from common import tool_calls
from common import tool_wire
from progagent import ptc_env
from progagent.task_env import ProgTaskEnv
from progagent.tasks import oracle as oracle_lib

MODES = ("dtc", "ptc", "hybrid")

PROGRAM_TOOL = ptc_env.PROGRAM_TOOL   # PTC's one tool, programmatic_tool_call(code)
_TOKEN = re.compile(r"\w+|[^\w\s]")


# ------------------------------------------------------------------------------------------------ tokens


def regex_token_count(text: str) -> int:
  """Model-free token proxy: the number of \\w+ runs plus single non-space punctuation marks."""
  return len(_TOKEN.findall(text))


def make_token_counter(tokenizer: Any = None) -> Callable[[str], int]:
  """A text -> token count function: regex_token_count (None), a callable, or a HF tokenizer (`encode`).

  A HF tokenizer is given text that is valid Unicode: a lone surrogate (a policy's call can hold one,
  "\\ud800"; the environment refuses it) is counted as its escape, six characters.
  """
  if tokenizer is None:
    return regex_token_count
  if hasattr(tokenizer, "encode"):
    return lambda text: len(tokenizer.encode(_encodable(text), add_special_tokens=False))
  if callable(tokenizer):
    return tokenizer
  raise TypeError(f"tokenizer must be None, a callable text -> int, or have .encode; got {type(tokenizer).__name__}")


def _encodable(text: str) -> str:
  """`text` with each lone surrogate written as its escape (a Rust tokenizer raises TypeError on one)."""
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
  return text


# ------------------------------------------------------------------------------------------------ prompts


_INTRO = "You are an agent that solves a task by using tools over a database and a file workspace. "
_DTC = ("Call the tools through the function-calling interface; the raw result of each call is shown to you. "
        "When the task is complete, call submit_answer.")
_PROGRAM = ("In a program, tools[\"<tool>\"](**arguments) calls one of the tools listed in the description of "
            f"{PROGRAM_TOOL} and returns its result as a Python object (dict, list, number); a failed call raises "
            "ToolError with the tool's message. Loops, branches and try/except are allowed. Variables persist "
            "between your programs. Only what a program prints is shown to you (at most {limit} characters).")
_PTC = (f"Act by calling {PROGRAM_TOOL} with a Python program as its `code` argument. " + _PROGRAM +
        " Finish with tools[\"submit_answer\"](...) in a program.")
_HYBRID = ("Either call a tool directly through the function-calling interface (its raw result is shown to "
           f"you), or call {PROGRAM_TOOL} with a Python program as its `code` argument. " + _PROGRAM +
           " Finish by calling submit_answer, directly or in a program.")


_FINISH = {"dtc": " When the task is complete, call submit_answer.",
           "ptc": " Finish with tools[\"submit_answer\"](...) in a program.",
           "hybrid": " Finish by calling submit_answer, directly or in a program."}
_FINISH_BY_REPLY = " When the task is complete, reply without calling a tool."


def system_prompt(mode: str, *, max_output_chars: int = tool_wire.MAX_OUTPUT_CHARS, submit: bool = True) -> str:
  """The system prompt of a harness: how to act. The tools themselves reach the model as function schemas
  (the chat template renders them), PTC's task tools in the description of programmatic_tool_call.

  Args:
    mode: 'dtc', 'ptc' or 'hybrid'.
    max_output_chars: the printed-output cut the prompt announces (the runtime's, common.tool_wire).
    submit: the task ends with submit_answer (the task library); False: with a reply that calls no tool (tasks
      over external MCP servers, progagent.mcp_task_env, which have no submit_answer).
  Raises:
    ValueError: unknown mode.
  """
  _check_mode(mode)
  how = {"dtc": _DTC, "ptc": _PTC, "hybrid": _HYBRID}[mode]
  text = _INTRO + how.replace("{limit}", str(max_output_chars))
  return text if submit else text.replace(_FINISH[mode], _FINISH_BY_REPLY)


def _check_mode(mode: str) -> None:
  if mode not in MODES:
    raise ValueError(f"harness mode must be one of {MODES}, got {mode!r}")


# ------------------------------------------------------------------------------------------------ messages


def assistant_message(content: str = "", calls: Sequence[Mapping[str, Any]] = (), *, reasoning: str | None = None,
                      call_id_prefix: str = "call") -> dict:
  """An assistant message in the contract form: calls [{'name', 'arguments'}] become native tool calls
  [{'id': f'{call_id_prefix}_{i}', 'type': 'function', 'function': {'name', 'arguments'}}]."""
  msg = {"role": "assistant", "content": content,
         "tool_calls": [{"id": f"{call_id_prefix}_{i}", "type": "function",
                         "function": {"name": c["name"], "arguments": dict(c.get("arguments") or {})}}
                        for i, c in enumerate(calls)]}
  if reasoning:
    msg["reasoning"] = reasoning
  return msg


def _value_text(v: Any) -> str:
  return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def message_text(message: Mapping[str, Any]) -> str:
  """The text the token proxy counts for a message: its content, then per tool call its name and each
  argument's name and value (strings raw, other values as JSON). Reasoning is not counted (it is not carried
  into the next turn's context)."""
  parts = [message.get("content") or ""]
  for c in message.get("tool_calls") or ():
    fn = c.get("function") or {}
    args = fn.get("arguments")
    parts.append(str(fn.get("name", "")))
    if isinstance(args, Mapping):
      parts += [f"{k}: {_value_text(v)}" for k, v in args.items()]
    elif args is not None:
      parts.append(_value_text(args))
  return "\n".join(p for p in parts if p)


def mode_tools(mode: str, task_id: str) -> list[dict]:
  """The MCP tools a harness mode offers for `task_id` (ProgEnv.tools(); common.chat.tool_schemas makes them
  function schemas). Raises KeyError for an unknown task, ValueError for an unknown mode."""
  _check_mode(mode)
  task_env = ProgTaskEnv(task_id)
  try:
    return ptc_env.ProgEnv(task_env, mode=mode, runtime="inprocess").tools()
  finally:
    task_env.close()


def tools_text(schemas: Sequence[Mapping[str, Any]]) -> str:
  """The text the token proxy counts for the tool schemas: their JSON ('' for none)."""
  return json.dumps(list(schemas), ensure_ascii=False) if schemas else ""


# ------------------------------------------------------------------------------------------------ episodes


@dataclasses.dataclass
class EpisodeStats:
  """Per-episode accounting (see the module docstring)."""
  task_id: str
  mode: str
  reward: float = 0.0
  turns: int = 0
  tool_calls: int = 0
  tool_errors: int = 0
  parse_errors: int = 0
  program_errors: int = 0
  context_tokens: int = 0
  prompt_tokens: int = 0
  action_tokens: int = 0
  observation_tokens: int = 0
  end: str = ""     # 'done' (the environment ended it), 'no_action', 'max_turns'

  @property
  def errors(self) -> int:
    return self.tool_errors + self.parse_errors + self.program_errors


@dataclasses.dataclass
class Episode:
  """One episode: the OpenAI-format messages, the function schemas offered, the accounting."""
  messages: list[dict]
  stats: EpisodeStats
  tools: list[dict] = dataclasses.field(default_factory=list)


Policy = Callable[[list[dict], list[dict]], Mapping[str, Any]]


def _call_of(c: Any) -> tuple[dict | None, str | None]:
  """One native tool call -> ({'name', 'arguments'}, None) or (None, a named error for the agent).

  Arguments given as a JSON string (OpenAI wire form) are decoded.
  """
  fn = c.get("function") if isinstance(c, Mapping) else None
  name = fn.get("name") if isinstance(fn, Mapping) else None
  if not isinstance(name, str) or not name.strip():
    return None, tool_calls.call_error("a tool call of your reply has no function name")
  args = fn.get("arguments")
  if args is None or args == "":
    args = {}
  if isinstance(args, str):
    try:
      args = json.loads(args)
    except json.JSONDecodeError as e:
      return None, tool_calls.call_error(f"the arguments of your call to {name!r} are not valid JSON ({e.msg} "
                                         f"at char {e.pos})")
  if not isinstance(args, dict):
    return None, tool_calls.call_error(f"the arguments of your call to {name!r} must be a JSON object, got "
                                       f"{type(args).__name__}")
  return {"name": name.strip(), "arguments": args}, None


def _raw_function(c: Any) -> dict:
  """The 'function' of a tool call that cannot run, kept as the policy sent it (a dict, whatever it holds)."""
  fn = c.get("function") if isinstance(c, Mapping) else None
  return dict(fn) if isinstance(fn, Mapping) else {"name": "", "arguments": str(fn if fn is not None else c)}


def run_episode(env: Any, policy: Policy, *, mode: str, task_id: str | None = None, seed: int = 0,
                tokenizer: Any = None, max_turns: int = 50, message_overhead: int = 0,
                system: str | None = None) -> Episode:
  """Runs one episode of `policy` in `env` under a harness (see the module docstring).

  Args:
    env: a progagent.ptc_env.ProgEnv of `mode` (any ToolEnv whose tools() are the mode's tools; a program is
      a programmatic_tool_call step). Not closed here.
    policy: (messages, tools) -> assistant message {'content': str, 'tool_calls': [native calls],
      optional 'reasoning': str, optional 'error': str (a reply it could not read)}; messages are the
      conversation so far (OpenAI format), tools the OpenAI function schemas.
    mode: 'dtc', 'ptc' or 'hybrid'.
    task_id, seed: passed to env.reset.
    tokenizer: see make_token_counter.
    max_turns: replies before the episode is cut.
    message_overhead: tokens added per message (chat-template framing); 0 by default.
    system: the system message (None: system_prompt(mode)).
  Returns:
    Episode(messages, stats, tools); an assistant message keeps its reasoning under 'reasoning'; a tool
    message is {'role': 'tool', 'tool_call_id', 'name', 'content'}. stats.reward is env.verify() when the env
    has it, else the last info['reward'].
  Raises:
    ValueError: unknown mode. TypeError: the policy returned something that is not a message dict.
  """
  _check_mode(mode)
  count = make_token_counter(tokenizer)
  instruction = env.reset(task_id, seed) if task_id is not None else env.reset(seed=seed)
  schemas = chat.tool_schemas(env.tools())
  task = getattr(env, "task", None)
  stats = EpisodeStats(task_id=getattr(task, "task_id", task_id or "?"), mode=mode)
  messages: list[dict] = []

  def add(msg, kind):
    messages.append(msg)
    n = count(message_text(msg)) + message_overhead
    stats.context_tokens += n
    setattr(stats, kind, getattr(stats, kind) + n)

  if schemas:
    n = count(tools_text(schemas))
    stats.context_tokens += n
    stats.prompt_tokens += n
  add({"role": "system", "content": system_prompt(mode) if system is None else system}, "prompt_tokens")
  add({"role": "user", "content": instruction}, "prompt_tokens")
  counts = getattr(env, "episode_counts", None)
  last_info: dict = {}
  while not stats.end:
    if stats.turns >= max_turns:
      stats.end = "max_turns"
      break
    reply = policy(messages, schemas)
    if not isinstance(reply, Mapping):
      raise TypeError(f"a policy returns an assistant message dict, got {type(reply).__name__}")
    stats.turns += 1
    raw_calls = [] if reply.get("error") else list(reply.get("tool_calls") or ())   # unreadable: run none
    parsed = [_call_of(c) for c in raw_calls]
    msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or "", "tool_calls": [
        {"id": (c.get("id") if isinstance(c, Mapping) else None) or f"call_{stats.turns}_{i}", "type": "function",
         "function": ({"name": call["name"], "arguments": call["arguments"]} if call is not None
                      else _raw_function(c))}
        for i, (c, (call, _)) in enumerate(zip(raw_calls, parsed))]}
    if reply.get("reasoning"):
      msg["reasoning"] = reply["reasoning"]
    add(msg, "action_tokens")
    if not raw_calls:
      if reply.get("error"):   # a reply the policy could not read: named, and the episode goes on
        stats.parse_errors += 1
        add({"role": "user", "content": reply["error"]}, "observation_tokens")
        continue
      stats.end = "no_action"
      break
    for tc, (call, error) in zip(msg["tool_calls"], parsed):
      name = call["name"] if call is not None else str(tc["function"].get("name") or "")
      if call is None:
        stats.parse_errors += 1
        observation = error
      else:
        r = env.step(call)
        last_info = dict(r.info or {})
        observation = r.observation
        if name == PROGRAM_TOOL or mode == "ptc":   # never reaches the task environment's counter
          stats.program_errors += int(r.status == "failed")
          stats.parse_errors += int(r.status == "invalid")
        elif counts is None:
          stats.tool_calls += 1
          stats.tool_errors += int(r.status != "ok")
        if r.done:
          stats.end = "done"
      add({"role": "tool", "tool_call_id": tc["id"], "name": name, "content": observation}, "observation_tokens")
      if stats.end:
        break
  if counts is not None:
    c = counts()
    stats.tool_calls, stats.tool_errors = c["tool_calls"], c["tool_errors"]
  stats.reward = float(env.verify()) if hasattr(env, "verify") else float(last_info.get("reward", 0.0))
  return Episode(messages, stats, schemas)


# ------------------------------------------------------------------------------------------------ oracles


class OraclePolicy:
  """A policy replaying a task's oracle under a harness (no model): the context-cost experiment and audit.

  DTC: the DTC oracle (tasks.oracle.dtc_oracle), one native tool call per reply, reading each observation
  from the last (tool) message. PTC / Hybrid: the PTC oracle programs, one programmatic_tool_call per reply.
  After the oracle is exhausted it replies "Done." with no tool call. Call close() when the episode is over.
  """

  def __init__(self, task: Any, mode: str, tool_names: Sequence[str]):
    _check_mode(mode)
    self.mode = mode
    self._programs = list(task.ptc)
    self._gen = oracle_lib.dtc_oracle(task.ptc, tool_names) if mode == "dtc" else None
    self._started = False
    self._turn = 0

  def __call__(self, messages: list[dict], tools: Sequence[Mapping[str, Any]] = ()) -> dict:
    self._turn += 1
    prefix = f"oracle_{self._turn}"
    if self._gen is not None:
      try:
        call = self._gen.send(messages[-1]["content"]) if self._started else next(self._gen)
      except StopIteration:
        return assistant_message("Done.")
      self._started = True
      return assistant_message("", [call], call_id_prefix=prefix)
    if self._programs:
      return assistant_message("", [{"name": PROGRAM_TOOL, "arguments": {"code": self._programs.pop(0)}}],
                               call_id_prefix=prefix)
    return assistant_message("Done.")

  def close(self) -> None:
    if self._gen is not None:
      self._gen.close()


def run_oracle(env: Any, mode: str, *, seed: int = 0, runtime: str = "inprocess", tokenizer: Any = None,
               max_turns: int = 10_000) -> Episode:
  """The task's oracle episode under a harness, on the ProgTaskEnv `env` (reset by this call; left open).

  Its programs run in `runtime` ('inprocess' or 'kernel') through a progagent.ptc_env.ProgEnv over `env`.
  """
  policy = OraclePolicy(env.task, mode, [t["name"] for t in env.tools()])
  prog_env = ptc_env.ProgEnv(env, mode=mode, runtime=runtime)
  try:
    return run_episode(prog_env, policy, mode=mode, task_id=env.task.task_id, seed=seed, tokenizer=tokenizer,
                       max_turns=max_turns)
  finally:
    policy.close()
    prog_env.close()
