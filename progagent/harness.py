"""The three ProgAgent harnesses over the same tasks: DTC, PTC and Hybrid; prompts, parsing, accounting.

Source: ProgAgent (2026), "Three harnesses over the same tasks" (SPEC.md, ProgAgent).
  DTC     each action is one JSON tool call ({"name", "arguments"}, parsed by common.tool_calls); the raw
          tool result is appended to the context.
  PTC     each action is a Python program in a ```python block, run in a persistent interpreter where
          tools["name"](**kwargs) calls a tool and returns a Python object; only the program and what it
          prints (cut at 50,000 characters) enter the context.
  Hybrid  both are offered; a reply with a ```python block is a program, else a JSON tool call.

Action rule (parse_action): PTC takes the first ```python (or ```py) block; a block never closed is a
format error; no block is 'none' (the agent stopped acting). Hybrid: a python block wins over JSON (a
program may contain dict literals that look like calls). DTC: common.tool_calls.parse_tool_call.

Episode accounting (EpisodeStats), per episode:
  context_tokens      tokens of the whole final context (system prompt + instruction + every action and
                      observation): the context length the policy needs at the last turn;
  prompt/action/observation_tokens   the same split by message kind;
  tool_calls, tool_errors            calls reaching the environment and those that failed (status not
                                     'ok'), from the environment's own counter when it has one
                                     (ProgTaskEnv.episode_counts), so PTC calls made inside programs count;
  parse_errors, program_errors       unreadable actions; programs that raised.
Token counting: `tokenizer` is any callable text -> int, or an object with `encode` (a Hugging Face
tokenizer; special tokens not added); the default `regex_token_count` counts words (\\w+) and single
punctuation marks: a documented, model-free proxy, not any model's tokenizer. No per-message template
overhead is added (config: message_overhead).

Runtimes for PTC (anything with run(code) -> result having .output (str) and .error (str | None), and
close()): `InProcessRuntime` executes programs in this process with a `tools` dict of direct callables
(no sandbox, no timeout: for oracles, audits and tests); make_runtime('kernel', env) builds the sandboxed
IPython kernel of progagent.runtime instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import re
import traceback
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from common import tool_calls
from progagent.tasks import oracle as oracle_lib

MODES = ("dtc", "ptc", "hybrid")
MAX_OUTPUT_CHARS = 50_000
ToolError = oracle_lib.ToolError   # raised in programs by a failed call (the name progagent.runtime uses too)

_BLOCK = re.compile(r"```(?:python|py)[ \t]*\r?\n(.*?)```", re.S)
_OPEN = re.compile(r"```(?:python|py)[ \t]*\r?\n")
_TOKEN = re.compile(r"\w+|[^\w\s]")


# ------------------------------------------------------------------------------------------------ tokens


def regex_token_count(text: str) -> int:
  """Model-free token proxy: the number of \\w+ runs plus single non-space punctuation marks."""
  return len(_TOKEN.findall(text))


def make_token_counter(tokenizer: Any = None) -> Callable[[str], int]:
  """A text -> token count function: regex_token_count (None), a callable, or a HF tokenizer (`encode`)."""
  if tokenizer is None:
    return regex_token_count
  if hasattr(tokenizer, "encode"):
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
  if callable(tokenizer):
    return tokenizer
  raise TypeError(f"tokenizer must be None, a callable text -> int, or have .encode; got {type(tokenizer).__name__}")


# ------------------------------------------------------------------------------------------------ prompts


def _signature(tool: Mapping[str, Any]) -> str:
  schema = tool.get("inputSchema") or {}
  req = set(schema.get("required") or ())
  parts = []
  for name, prop in (schema.get("properties") or {}).items():
    t = prop.get("type", "any")
    t = "|".join(t) if isinstance(t, list) else t
    enum = f" one of {prop['enum']}" if prop.get("enum") else ""
    parts.append(f"{name}: {t}{enum}" + ("" if name in req else " (optional)"))
  return f"{tool['name']}({', '.join(parts)})"


def render_tools(tools: Sequence[Mapping[str, Any]]) -> str:
  """One line per tool: name(param: type, ...): description."""
  return "\n".join(f"- {_signature(t)}: {t.get('description', '')}" for t in tools)


_INTRO = ("You are an agent that solves a task by using tools over a database and a file workspace. "
          "The tools are:\n{tools}\n")
_DTC = ('Act with exactly one tool call per reply, written as a JSON object: {{"name": "<tool>", "arguments": '
        '{{...}}}}. The raw result of the call is shown to you. When the task is complete, call submit_answer.')
_PTC = ("Act by writing a Python program in a ```python code block. In the program, tools[\"<tool>\"](**arguments) "
        "calls a tool and returns its result as a Python object (dict, list, number); a failed call raises "
        "ToolError with the tool's message. Loops, branches and try/except are allowed. Variables persist "
        "between your programs. Only what your program prints is shown to you (at most {limit} characters). "
        "Finish with tools[\"submit_answer\"](...).")
_HYBRID = ("Each reply is either one tool call written as a JSON object {{\"name\": \"<tool>\", \"arguments\": "
           "{{...}}}} (its raw result is shown to you), or a Python program in a ```python code block. In a "
           "program, tools[\"<tool>\"](**arguments) calls a tool and returns its result as a Python object (dict, "
           "list, number); a failed call raises ToolError with the tool's message. Loops, branches and "
           "try/except are allowed. Variables persist between your programs. Only what a program prints is shown "
           "to you (at most {limit} characters). Finish by calling submit_answer.")


def system_prompt(mode: str, tools: Sequence[Mapping[str, Any]], *, max_output_chars: int = MAX_OUTPUT_CHARS) -> str:
  """The system prompt of a harness, listing the tools.

  Raises:
    ValueError: unknown mode.
  """
  _check_mode(mode)
  how = {"dtc": _DTC, "ptc": _PTC, "hybrid": _HYBRID}[mode].format(limit=max_output_chars)
  return _INTRO.format(tools=render_tools(tools)) + "\n" + how


# ------------------------------------------------------------------------------------------------ actions


class Action(NamedTuple):
  """A parsed reply: kind 'call' (call set), 'program' (code set), 'none' (no action) or 'error' (error set)."""
  kind: str
  call: dict | None = None
  code: str | None = None
  error: str | None = None


def _parse_program(text: str) -> Action | None:
  m = _BLOCK.search(text)
  if m is not None:
    code = m.group(1)
    return Action("program", code=code) if code.strip() else Action(
        "error", error="Error: the ```python block is empty; put the program inside it.")
  if _OPEN.search(text):
    return Action("error", error="Error: the ```python block is never closed; end the program with ```.")
  return None


def parse_action(mode: str, text: str) -> Action:
  """The action in a reply under a harness (see the module docstring for the rule); never raises on str."""
  _check_mode(mode)
  if not isinstance(text, str):
    raise TypeError(f"parse_action takes the reply text (str), got {type(text).__name__}")
  if mode in ("ptc", "hybrid"):
    prog = _parse_program(text)
    if prog is not None:
      return prog
    if mode == "ptc":
      return Action("none")
  parsed = tool_calls.parse_tool_call(text)
  if parsed.kind == "call":
    return Action("call", call=parsed.call)
  if parsed.kind == "none":
    return Action("none")
  return Action("error", error=parsed.error_observation())


def _check_mode(mode: str) -> None:
  if mode not in MODES:
    raise ValueError(f"harness mode must be one of {MODES}, got {mode!r}")


# ------------------------------------------------------------------------------------------------ runtimes


class ExecResult(NamedTuple):
  """What one program execution returns (the same fields as progagent.runtime's ExecResult)."""
  output: str
  error: str | None = None


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
  """Cuts text to `limit` characters (code points, never splitting one) plus a marker naming the cut."""
  if len(text) <= limit:
    return text
  return text[:limit] + f"\n[output truncated: {len(text) - limit} more characters were cut]"


class InProcessRuntime:
  """Runs PTC programs in this process, with `tools` calling `call_tool` directly.

  Persistent namespace across run() calls (variables survive between turns); stdout captured; output cut
  at max_output_chars; an exception becomes ExecResult.error (its traceback, program frames only). Not a
  sandbox and no timeout: use it for oracles, audits and tests only; progagent.runtime is the real one.

  Args:
    call_tool: (name, arguments) -> MCP tools/call result dict (ProgTaskEnv.call_tool).
    tool_names: the keys of the program's `tools` dict.
    max_output_chars: cut for printed output (ProgAgent: 50,000).
  """

  def __init__(self, call_tool: Callable[[str, dict], Mapping[str, Any]], tool_names: Sequence[str], *,
               max_output_chars: int = MAX_OUTPUT_CHARS):
    self.max_output_chars = max_output_chars

    def make(name):
      def call(**kwargs):
        return oracle_lib.mcp_to_native(call_tool(name, kwargs))
      call.__name__ = name
      return call

    self.namespace: dict[str, Any] = {"__name__": "__main__", "tools": {n: make(n) for n in tool_names},
                                      "ToolError": ToolError}

  def run(self, code: str) -> ExecResult:
    buf = io.StringIO()
    self.namespace["print"] = functools.partial(print, file=buf)
    error = None
    try:
      compiled = compile(code, "<program>", "exec")
      with contextlib.redirect_stdout(buf):
        exec(compiled, self.namespace)  # pylint: disable=exec-used
    except (Exception, SystemExit) as e:  # the agent's error, reported to it
      tb = traceback.extract_tb(e.__traceback__)
      src = code.splitlines()
      lines = [f"  line {f.lineno}: {src[f.lineno - 1].strip() if 0 < (f.lineno or 0) <= len(src) else ''}"
               for f in tb if f.filename == "<program>"]
      if isinstance(e, SyntaxError) and e.lineno:
        lines.append(f"  line {e.lineno}: {(e.text or '').strip()}")
      error = "\n".join(["Traceback (most recent call last):"] + lines + [f"{type(e).__name__}: {e}"])
    return ExecResult(truncate_output(buf.getvalue(), self.max_output_chars), error)

  def close(self) -> None:
    self.namespace.clear()


def make_runtime(kind: str, env: Any) -> Any:
  """A PTC runtime for the current episode of `env` (a ProgTaskEnv after reset()).

  kind 'inprocess': InProcessRuntime over env.call_tool. kind 'kernel': the sandboxed persistent IPython
  kernel of progagent.runtime (ProgramRuntime(env, workspace_dir=env.workspace_dir)): its tools are
  proxied to env.call_tool, and of the episode's state it sees the workspace only (as /workspace).
  Raises:
    ValueError: unknown kind. ImportError: the kernel runtime is not installed.
  """
  if kind not in ("inprocess", "kernel"):
    raise ValueError(f"runtime kind must be 'inprocess' or 'kernel', got {kind!r}")
  if kind == "inprocess":
    return InProcessRuntime(env.call_tool, [t["name"] for t in env.tools()])
  from progagent import runtime as runtime_lib  # the sandboxed kernel runtime (imported only when asked for)
  return runtime_lib.ProgramRuntime(env, workspace_dir=str(env.workspace_dir))


def format_exec(result: Any) -> str:
  """The observation of one program run: its printed output, then the error if it raised."""
  out = result.output or ""
  err = getattr(result, "error", None)
  if err and err not in out:   # progagent.runtime already prints the traceback into the output
    return (out + ("\n" if out and not out.endswith("\n") else "") + f"Error:\n{err}").strip("\n")
  return out if out.strip() else "(no output)"


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
  messages: list[dict]
  stats: EpisodeStats


def run_episode(env: Any, policy: Callable[[list[dict]], str], *, mode: str, task_id: str | None = None,
                seed: int = 0, runtime_factory: Callable[[Any], Any] | None = None, tokenizer: Any = None,
                max_turns: int = 50, message_overhead: int = 0) -> Episode:
  """Runs one episode of `policy` in `env` under a harness.

  Args:
    env: a ProgTaskEnv (or any ToolEnv; PTC needs call_tool and a runtime).
    policy: messages ([{'role', 'content'}]) -> the assistant's reply text.
    mode: 'dtc', 'ptc' or 'hybrid'.
    task_id, seed: passed to env.reset.
    runtime_factory: env -> PTC runtime, called after reset (default InProcessRuntime via make_runtime).
    tokenizer: see make_token_counter.
    max_turns: replies before the episode is cut.
    message_overhead: tokens added per message (chat-template framing); 0 by default.
  Returns:
    Episode(messages, stats); stats.reward is env.verify() when the env has it, else the last
    info['reward'].
  """
  _check_mode(mode)
  count = make_token_counter(tokenizer)
  instruction = env.reset(task_id, seed) if task_id is not None else env.reset(seed=seed)
  tools = env.tools()
  stats = EpisodeStats(task_id=getattr(getattr(env, "task", None), "task_id", task_id or "?"), mode=mode)
  messages: list[dict] = []

  def add(role, content, kind):
    messages.append({"role": role, "content": content})
    n = count(content) + message_overhead
    stats.context_tokens += n
    setattr(stats, kind, getattr(stats, kind) + n)

  add("system", system_prompt(mode, tools), "prompt_tokens")
  add("user", instruction, "prompt_tokens")
  runtime = None
  last_info: dict = {}
  counted = hasattr(env, "episode_counts")
  try:
    while True:
      if stats.turns >= max_turns:
        stats.end = "max_turns"
        break
      text = policy(messages)
      stats.turns += 1
      add("assistant", text, "action_tokens")
      act = parse_action(mode, text)
      if act.kind == "none":
        stats.end = "no_action"
        break
      if act.kind == "error":
        stats.parse_errors += 1
        add("user", act.error, "observation_tokens")
        continue
      if act.kind == "call":
        r = env.step(act.call)
        last_info = dict(r.info or {})
        if not counted:
          stats.tool_calls += 1
          stats.tool_errors += int(r.status != "ok")
        add("user", r.observation, "observation_tokens")
        if r.done:
          stats.end = "done"
          break
        continue
      if runtime is None:
        runtime = (runtime_factory or functools.partial(make_runtime, "inprocess"))(env)
      res = runtime.run(act.code)
      stats.program_errors += int(bool(res.error))
      add("user", format_exec(res), "observation_tokens")
      if getattr(env, "done", False):
        stats.end = "done"
        break
  finally:
    if runtime is not None:
      runtime.close()
  if counted:
    c = env.episode_counts()
    stats.tool_calls, stats.tool_errors = c["tool_calls"], c["tool_errors"]
  stats.reward = float(env.verify()) if hasattr(env, "verify") else float(last_info.get("reward", 0.0))
  return Episode(messages, stats)


# ------------------------------------------------------------------------------------------------ oracles


class OraclePolicy:
  """A policy replaying a task's oracle under a harness (no model): the context-cost experiment and audit.

  DTC: the DTC oracle (tasks.oracle.dtc_oracle), one JSON call per reply, reading each observation from
  the last message. PTC / Hybrid: the PTC oracle programs, one per reply, in ```python blocks. After the
  oracle is exhausted it replies "Done." (no action). Call close() when the episode is over.
  """

  def __init__(self, task: Any, mode: str, tool_names: Sequence[str]):
    _check_mode(mode)
    self.mode = mode
    self._programs = list(task.ptc)
    self._gen = oracle_lib.dtc_oracle(task.ptc, tool_names) if mode == "dtc" else None
    self._started = False

  def __call__(self, messages: list[dict]) -> str:
    if self._gen is not None:
      try:
        call = self._gen.send(messages[-1]["content"]) if self._started else next(self._gen)
      except StopIteration:
        return "Done."
      self._started = True
      return json.dumps(call)
    if self._programs:
      return f"```python\n{self._programs.pop(0)}```"
    return "Done."

  def close(self) -> None:
    if self._gen is not None:
      self._gen.close()


def run_oracle(env: Any, mode: str, *, seed: int = 0, runtime: str = "inprocess", tokenizer: Any = None,
               max_turns: int = 10_000) -> Episode:
  """The task's oracle episode under a harness, in a ProgTaskEnv (reset by this call)."""
  policy = OraclePolicy(env.task, mode, [t["name"] for t in env.tools()])
  try:
    return run_episode(env, policy, mode=mode, task_id=env.task.task_id, seed=seed,
                       runtime_factory=functools.partial(make_runtime, runtime), tokenizer=tokenizer,
                       max_turns=max_turns)
  finally:
    policy.close()
