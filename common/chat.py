"""Native chat formats: prompts from the tokenizer's own chat template, token-in/token-out follow-ups.

  chat = ChatTemplate(hf_tokenizer, enable_thinking=False)          # format 'auto' -> 'qwen' / 'llama3'
  ids = chat.prompt_ids([{'role': 'system', ...}, {'role': 'user', 'content': task}], tool_schemas(env.tools()))
  ids += response_ids                                                 # what the policy generated
  parsed = chat.parse(chat.decode(response_ids))                      # reasoning removed, calls read
  ids += chat.observation_ids([{'role': 'tool', 'name': 'f', 'content': out}], after=response_ids)

Formats ('auto' picks one from the template text; config key chat.format overrides):
  'qwen'     Qwen2.5 / Qwen3: calls as <tool_call>\\n{"name", "arguments"}\\n</tool_call> (several per reply),
             tool results in the template's tool role (<tool_response> blocks), end of turn <|im_end|>;
             Qwen3's thinking switch is `enable_thinking` (config key chat.enable_thinking), passed to the
             template; the <think> block is removed before a reply is read (common.tool_calls).
  'llama3'   Llama-3.1: a call is one JSON object {"name", "parameters"} (optionally after <|python_tag|>),
             tool results in the ipython role, end of turn <|eot_id|>.
  'fallback' tokenizers without a chat template (common.trajectory.ByteTokenizer, HF tokenizers whose
             chat_template is None): the hand-written ChatML text below, calls as bare JSON objects.

Token-in/token-out: earlier turns are never re-tokenised. The tokens after an assistant reply are a
render difference: the template renders [stub user, stub assistant, *new messages] with the generation
prompt, and the text after the stub assistant's end-of-turn token is the follow-up. This assumes that
what a template renders after an assistant turn depends only on the messages that follow it (true of
the Qwen2.5, Qwen3 and Llama-3.1 templates, whose re-render of earlier turns may differ, e.g. Qwen3
dropping old reasoning: exactly why the driver never re-renders). The end-of-turn token is special, so
tokenisation splits there; `ChatBoundaryError` is raised when the render does not split cleanly (the
end-of-turn text is not found after the stub, or tokenising the whole render differs from tokenising
its two parts).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from common import tool_calls as tc

FORMATS = ("auto",) + tc.FORMATS

# The hand-written fallback (ChatML text; the assistant turn is closed by the tokenizer's eos id).
FALLBACK_SYSTEM = ("You are an agent that solves the task by calling tools. Each reply contains exactly "
                   "one tool call as a JSON object {\"name\": <tool>, \"arguments\": {...}}.")
NATIVE_SYSTEM = "You are an agent that solves the task by calling the tools provided."
_STUB = "STUB_ASSISTANT_TURN_3f9c"   # marks the stub assistant message in a render difference


class ChatBoundaryError(ValueError):
  """The chat template's render of a follow-up does not extend the conversation at a token boundary."""


def tool_schemas(mcp_tools: Sequence[dict]) -> list[dict]:
  """MCP tools [{'name', 'description', 'inputSchema'}] -> OpenAI function tools (what templates take).

  Already-converted entries ({'type': 'function', ...}) pass through unchanged.
  """
  out = []
  for t in mcp_tools:
    if t.get("type") == "function" and "function" in t:
      out.append(dict(t))
      continue
    out.append({"type": "function", "function": {
        "name": t["name"], "description": t.get("description", ""),
        "parameters": t.get("inputSchema", t.get("parameters", {}))}})
  return out


def assistant_message(parsed: tc.ParsedResponse, *, keep_reasoning: bool = False) -> dict:
  """The OpenAI-format assistant message of a parsed reply (reasoning kept as reasoning_content if asked)."""
  m: dict[str, Any] = {"role": "assistant", "content": parsed.content if parsed.prose is None else parsed.prose}
  if parsed.tool_calls:
    m["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                       for c in parsed.tool_calls]
  if keep_reasoning and parsed.reasoning:
    m["reasoning_content"] = parsed.reasoning
  return m


def _calls_of(m: dict) -> list[dict]:
  return [c.get("function", c) for c in (m.get("tool_calls") or [])]


def _source(tokenizer) -> str | None:
  t = getattr(tokenizer, "chat_template", None)
  if isinstance(t, dict):
    t = t.get("tool_use") or t.get("default") or next(iter(t.values()), None)
  return t if isinstance(t, str) and t.strip() else None


def detect_format(tokenizer) -> str:
  """'qwen' | 'llama3' | 'fallback' from the tokenizer's chat template text.

  Raises:
    ValueError: the template is neither ChatML-like nor Llama-3-like (set chat.format).
  """
  src = _source(tokenizer) if hasattr(tokenizer, "apply_chat_template") else None
  if src is None:
    return "fallback"
  if "<tool_call>" in src or "<|im_start|>" in src:
    return "qwen"
  if "<|start_header_id|>" in src or "<|python_tag|>" in src:
    return "llama3"
  raise ValueError("cannot tell the tool-call format of this chat template (neither ChatML/Qwen nor "
                   "Llama-3); set chat.format to 'qwen', 'llama3' or 'fallback'")


def _call_text(call: dict, fmt: str) -> str:
  """One tool call written the way `fmt` reads it (common.tool_calls.CALL_SYNTAX)."""
  args = call.get("arguments") or {}
  if isinstance(args, str):
    try:
      args = json.loads(args)
    except ValueError:
      pass
  if fmt == "llama3":
    return json.dumps({"name": call["name"], "parameters": args}, ensure_ascii=False)
  return "<tool_call>\n" + json.dumps({"name": call["name"], "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def _inline_tool_turns(msgs: list[dict], fmt: str) -> list[dict]:
  """Messages for a chat template that knows no tools (e.g. SmolLM2's plain ChatML), which would drop an
  assistant's `tool_calls` and print a 'tool' role it has no convention for: each call is appended to the
  assistant's text in the format's own syntax (what the model is asked to write, and what parse reads back), and
  results become what Qwen2.5's template renders: one user message of <tool_response> blocks per run of tool
  messages ('qwen'), or the 'ipython' role ('llama3')."""
  out: list[dict] = []
  for m in msgs:
    if m["role"] == "assistant" and m.get("tool_calls"):
      calls = "\n".join(_call_text(c["function"], fmt) for c in m["tool_calls"])
      m = {k: v for k, v in m.items() if k != "tool_calls"}
      m["content"] = (m["content"] + "\n" if m["content"] else "") + calls
    elif m["role"] == "tool":
      if fmt == "llama3":
        m = {"role": "ipython", "content": m["content"]}
      else:
        block = "<tool_response>\n" + m["content"] + "\n</tool_response>"
        if out and out[-1].get("_tool_results"):
          out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + block}
          continue
        m = {"role": "user", "content": block, "_tool_results": True}
    out.append(m)
  return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]


class ChatTemplate:
  """A tokenizer's chat format for multi-turn tool use (see the module docstring).

  Args:
    tokenizer: a Hugging Face tokenizer (or common.trajectory.HFTokenizer around one), or any
      common.trajectory.Tokenizer with `eos_id` (ByteTokenizer): the fallback format.
    enable_thinking: Qwen3's thinking switch, passed to the template (config chat.enable_thinking).
    format: 'auto' | 'qwen' | 'llama3' | 'fallback' (config chat.format); 'fallback' forces the
      hand-written format even where the tokenizer has a template.
  Attributes:
    format: the resolved format; end_id: the end-of-turn token id; stop_ids: ids that end a reply
      (end_id, eos, <|eom_id|>); native: True when the tokenizer's template renders.
  Raises:
    ValueError: unknown format, or no end-of-turn token can be found.
  """

  def __init__(self, tokenizer, *, enable_thinking: bool = False,
               format: str = "auto"):  # pylint: disable=redefined-builtin
    if format not in FORMATS:
      raise ValueError(f"chat.format must be one of {FORMATS}, got {format!r}")
    raw = getattr(tokenizer, "tok", tokenizer)
    self.hf = raw if hasattr(raw, "convert_tokens_to_ids") else None
    self.tokenizer = raw if self.hf is not None else tokenizer
    self.enable_thinking = bool(enable_thinking)
    self.format = detect_format(raw) if format == "auto" else format
    self.native = self.format != "fallback" and self.hf is not None and _source(self.hf) is not None
    if self.format != "fallback" and not self.native:
      raise ValueError(f"chat.format {self.format!r} needs a tokenizer with a chat template; use 'fallback'")
    self.template_has_tools = self.native and "tools" in _source(self.hf)
    eos = self.hf.eos_token_id if self.hf is not None else getattr(tokenizer, "eos_id", None)
    want = {"qwen": "<|im_end|>", "llama3": "<|eot_id|>", "fallback": "<|im_end|>"}[self.format]
    end = self._special_id(want)
    if end is None and eos is None:
      raise ValueError("the tokenizer has no end-of-turn token (no eos); cannot close assistant turns")
    self.end_id = int(end if end is not None else eos)
    self.end_text = self.hf.convert_ids_to_tokens(self.end_id) if self.hf is not None else None
    stops = {self.end_id} | ({int(eos)} if eos is not None else set())
    eom = self._special_id("<|eom_id|>")
    self.stop_ids = frozenset(stops | ({eom} if eom is not None else set()))

  def _special_id(self, token: str) -> int | None:
    if self.hf is None:
      return None
    i = self.hf.convert_tokens_to_ids(token)
    if i is None or i == self.hf.unk_token_id or self.hf.convert_ids_to_tokens(i) != token:
      return None
    return int(i)

  # --- text <-> ids --------------------------------------------------------------------------

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, no BOS/EOS added (special-token text such as <|im_end|> maps to its id)."""
    if self.hf is not None:
      return list(self.hf.encode(text, add_special_tokens=False))
    return list(self.tokenizer.encode(text))

  def decode(self, ids: Sequence[int]) -> str:
    """A reply's text: stop ids removed, other special tokens (<|python_tag|>, <think>) kept."""
    ids = [int(i) for i in ids if int(i) not in self.stop_ids]
    if self.hf is not None:
      return self.hf.decode(ids, skip_special_tokens=False)
    return self.tokenizer.decode(ids)

  def parse(self, text: str) -> tc.ParsedResponse:
    """common.tool_calls.parse_response in this template's format (reasoning removed first)."""
    return tc.parse_response(text, format=self.format)

  @property
  def default_system(self) -> str:
    """The system prompt used when a caller gives none (fallback: the call format is spelled out)."""
    return FALLBACK_SYSTEM if self.format == "fallback" else NATIVE_SYSTEM

  # --- rendering -----------------------------------------------------------------------------

  def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None, *,
             add_generation_prompt: bool) -> str:
    """The template's text for `messages` (native formats only). tools: MCP or OpenAI tool dicts."""
    msgs = [self._clean(m) for m in messages]
    if not self.template_has_tools:   # calls and results as text the plain template keeps (_inline_tool_turns)
      msgs = _inline_tool_turns(msgs, self.format)
    tools = tool_schemas(tools) if tools else None
    if tools and not self.template_has_tools:   # a template that ignores tools: list them in the system text
      note = "# Tools\n" + "\n".join(json.dumps(t["function"]) for t in tools) + (
          f"\n\nCall a tool by writing {tc.CALL_SYNTAX[self.format]}")
      if msgs and msgs[0]["role"] == "system":
        msgs[0] = {**msgs[0], "content": msgs[0]["content"] + "\n\n" + note}
      else:
        msgs.insert(0, {"role": "system", "content": note})
      tools = None
    return self.hf.apply_chat_template(msgs, tools=tools, add_generation_prompt=add_generation_prompt,
                                       tokenize=False, enable_thinking=self.enable_thinking)

  @staticmethod
  def _clean(m: dict) -> dict:
    out = dict(m)
    out["content"] = "" if out.get("content") is None else str(out["content"])
    if out.get("tool_calls"):
      out["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments") or {}}}
                           for c in _calls_of(out)]
    return out

  def prompt_ids(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
    """The whole conversation (system, tools, user, ...) plus the opening of the next assistant turn."""
    if not self.native:
      return self._fb_encode(self._fb_conversation(messages, tools) + ["<|im_start|>assistant\n"])
    return self.encode(self.render(messages, tools, add_generation_prompt=True))

  def follow_up_ids(self, messages: Sequence[dict], *, after: Sequence[int]) -> list[int]:
    """Tokens appended after an assistant reply `after`: end_id if `after` lacks it, the messages as
    the template renders them after an assistant turn, and the next assistant opening.

    Raises:
      ChatBoundaryError: the template's render does not split at the end of the assistant turn.
    """
    head = [] if (after and int(after[-1]) == self.end_id) else [self.end_id]
    msgs = [self._clean(m) for m in messages]
    if not self.native:
      return head + self._fb_encode(["\n"] + self._fb_conversation(msgs, None, system=False)
                                    + ["<|im_start|>assistant\n"])
    stub = {"role": "assistant", "content": _STUB}
    tools = [m for m in msgs if m["role"] == "tool"]
    if tools:   # one call in the stub (Llama-3.1 templates take one per message)
      stub["tool_calls"] = [{"type": "function", "function": {"name": _STUB, "arguments": {}}}]
    text = self.render([{"role": "user", "content": "-"}, stub] + msgs, add_generation_prompt=True)
    i = text.find(_STUB)
    j = text.find(self.end_text, i) if i >= 0 else -1
    if j < 0:
      raise ChatBoundaryError(f"the chat template did not close the assistant turn with {self.end_text!r}")
    cut = j + len(self.end_text)
    delta = self.encode(text[cut:])
    if self.encode(text) != self.encode(text[:cut]) + delta:
      raise ChatBoundaryError(f"tokenising the render across the end of the assistant turn ({self.end_text!r}) "
                              "differs from tokenising its two parts; the follow-up would re-tokenise history")
    return head + delta

  def observation_ids(self, tool_messages: Sequence[dict | str], *, after: Sequence[int]) -> list[int]:
    """`follow_up_ids` for tool results (dicts {'role': 'tool', 'name', 'content'} or plain strings)."""
    msgs = [m if isinstance(m, dict) else {"role": "tool", "content": str(m)} for m in tool_messages]
    return self.follow_up_ids(msgs, after=after)

  def user_ids(self, text: str, *, after: Sequence[int]) -> list[int]:
    """`follow_up_ids` for one user-role message (e.g. a tool-call error note)."""
    return self.follow_up_ids([{"role": "user", "content": text}], after=after)

  def assistant_ids(self, message: dict) -> list[int]:
    """An assistant message (content, tool_calls) as the model emits it after the generation prompt,
    ending with end_id (SFT targets). With thinking off, reasoning (<think> or reasoning_content) is dropped.

    Raises:
      ChatBoundaryError: the template's assistant render does not extend its generation prompt.
    """
    m = self._clean(message)
    if not self.enable_thinking or not self.native:
      if "<think>" in m["content"] or "</think>" in m["content"]:
        m["content"] = tc.split_reasoning(m["content"])[0]
      m.pop("reasoning_content", None)
    if not self.native:
      return self._fb_encode([self._fb_assistant_text(m)]) + [self.end_id]
    user = {"role": "user", "content": "-"}
    p = self.render([user], add_generation_prompt=True)
    b = self.render([user, m], add_generation_prompt=False)
    j = b.rfind(self.end_text)
    if not b.startswith(p) or j < len(p):
      raise ChatBoundaryError("the chat template's assistant message does not extend its generation prompt "
                              "(e.g. reasoning with thinking off); cannot form the reply tokens")
    return self.encode(b[len(p):j]) + [self.end_id]

  def encode_conversation(self, messages: Sequence[dict], tools: Sequence[dict] | None = None
                          ) -> list[tuple[list[int], list[int]]]:
    """[(prompt_ids, response_ids)] per assistant message: the token layout a rollout would have had
    (prompt of turn 0 = prompt_ids of what precedes it; then follow_up_ids of what each reply got).
    Messages after the last assistant one are dropped."""
    first = next((k for k, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
      return []
    out, prompt, k = [], self.prompt_ids(messages[:first], tools), first
    while k < len(messages):
      resp = self.assistant_ids(messages[k])
      out.append((prompt, resp))
      nxt = next((q for q in range(k + 1, len(messages)) if messages[q]["role"] == "assistant"), None)
      if nxt is None:
        break
      prompt = self.follow_up_ids(messages[k + 1:nxt], after=resp)
      k = nxt
    return out

  # --- the hand-written fallback -----------------------------------------------------------------

  def _fb_encode(self, parts: Sequence[str | int]) -> list[int]:
    out: list[int] = []
    for p in parts:
      out.extend([p] if isinstance(p, int) else self.encode(p))
    return out

  def _fb_assistant_text(self, m: dict) -> str:
    calls = [json.dumps({"name": c["name"], "arguments": c.get("arguments") or {}}) for c in _calls_of(m)]
    return "\n".join(([m["content"]] if m.get("content") else []) + calls)

  def _fb_conversation(self, messages: Sequence[dict], tools, *, system: bool = True) -> list[str | int]:
    """ChatML parts (str text, int end_id after assistant turns), without the generation prompt."""
    msgs = [self._clean(m) for m in messages]
    parts: list[str | int] = []
    if system:
      sys_text = self.default_system
      if msgs and msgs[0]["role"] == "system":
        sys_text, msgs = msgs[0]["content"], msgs[1:]
      lines = "\n".join(json.dumps({"name": t["function"]["name"], "description": t["function"].get("description", ""),
                                    "parameters": t["function"].get("parameters", {})})
                        for t in tool_schemas(tools or []))
      parts.append(f"<|im_start|>system\n{sys_text}\n\n# Tools\n{lines}<|im_end|>\n")
    k = 0
    while k < len(msgs):
      m = msgs[k]
      if m["role"] == "assistant":
        parts += [f"<|im_start|>assistant\n{self._fb_assistant_text(m)}", self.end_id, "\n"]
      elif m["role"] == "tool":
        run = []
        while k < len(msgs) and msgs[k]["role"] == "tool":
          run.append(f"<tool_response>\n{msgs[k]['content']}\n</tool_response>")
          k += 1
        parts.append("<|im_start|>user\n" + "\n".join(run) + "<|im_end|>\n")
        continue
      else:
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
      k += 1
    return parts
