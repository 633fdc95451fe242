"""A client of an OpenAI-compatible chat-completions endpoint with native function calling: the teacher policy.

Request: POST {base_url}/v1/chat/completions with {model, messages, tools, temperature, [top_p, max_tokens,
seed], [chat_template_kwargs: {enable_thinking}]} (a base_url that already ends in /v1 is not given a second
one). `tools` are OpenAI function tools (common.chat.tool_schemas of the harness mode's MCP tools). The
conversation is sent in OpenAI wire form: an assistant message carries `tool_calls` [{id, type: 'function',
function: {name, arguments: <JSON string>}}], each tool result is a {role: 'tool', tool_call_id, content}
message. Reasoning text is never sent back.

Qwen3 thinking: `enable_thinking` True/False is sent as chat_template_kwargs.enable_thinking (vLLM, SGLang);
None sends nothing (the server's default; use it for servers that reject unknown fields). CLI:
`python -m progagent.teacher --thinking on|off|server`.

Reply -> assistant message {'role': 'assistant', 'content', 'tool_calls': [{'id', 'type': 'function',
'function': {'name', 'arguments': dict}}], 'reasoning': str (only when there was some), 'error': str (only
for a reply that could not be read)}:
  - reasoning is message.reasoning_content (or .reasoning) when the server split it off (vLLM
    --reasoning-parser), plus the <think> block still in the content (common.tool_calls.split_reasoning: a
    '</think>' with no opening makes all before it reasoning). It is kept in the record and never read for
    actions: a program or call written while thinking never runs.
  - tool calls are message.tool_calls when the server parsed them (vLLM --enable-auto-tool-choice
    --tool-call-parser hermes/llama3_json); otherwise they are read from the content after the reasoning
    is removed (common.tool_calls.parse_response: Qwen's <tool_call>{...}</tool_call> blocks, Llama-3.1's
    <|python_tag|> or bare JSON), and their text is removed from the content. Text with a broken call (or
    a <think> never closed) gives `error`, the named 'tool call error: ...' observation the harness shows
    the agent as a user message, and no tool call; a native call whose arguments are not a JSON object
    keeps them as sent (the harness answers it with a named error in its tool message).
Retries (exponential backoff: backoff_s * 2**attempt, capped at max_backoff_s, or the server's Retry-After):
connection failures, timeouts, HTTP 408/409/425/429 and 5xx. Not retried (TeacherHTTPError at once): other
4xx, whose message carries the server's text. An answer that is not an OpenAI chat completion (not JSON, an
error object, no choices, no message) raises TeacherProtocolError naming what is missing and quoting the body.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from common import tool_calls as tool_calls_lib

RETRY_STATUS = frozenset({408, 409, 425, 429})
_EXCERPT = 300


class TeacherError(RuntimeError):
  """The endpoint could not be used (no answer after the retries, or a bad answer)."""


class TeacherHTTPError(TeacherError):
  """The endpoint answered with an HTTP error that is not worth retrying (or kept failing)."""

  def __init__(self, message: str, status: int, body: str = ""):
    super().__init__(message)
    self.status = status
    self.body = body


class TeacherProtocolError(TeacherError):
  """The endpoint answered, but not with an OpenAI chat completion."""


class Completion(NamedTuple):
  """One chat completion: the assistant message (module docstring), why it stopped, the server's token counts
  (-1 if absent)."""
  message: dict
  finish_reason: str | None
  prompt_tokens: int
  completion_tokens: int

  @property
  def text(self) -> str:
    """The reply's content with the reasoning removed."""
    return self.message["content"]


def endpoint_url(base_url: str) -> str:
  """{base_url}/v1/chat/completions; a base_url ending in /v1 gets no second /v1.

  Raises:
    ValueError: not an http(s) URL.
  """
  if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
    raise ValueError(f"base_url must be an http:// or https:// URL such as http://localhost:8000, got "
                     f"{base_url!r}")
  url = base_url.rstrip("/")
  if url.endswith("/chat/completions"):
    return url
  if not url.endswith("/v1"):
    url += "/v1"
  return url + "/chat/completions"


def _excerpt(text: str, n: int = _EXCERPT) -> str:
  text = text.strip()
  return repr(text if len(text) <= n else text[:n] + f"... [{len(text) - n} more characters]")


# ------------------------------------------------------------------------------------------------ messages


def _without_call_text(content: str) -> str:
  """The content with the text of its tool calls removed (they are carried as tool_calls; a template renders
  them again): everything from the first <tool_call> or <|python_tag|>, else the first call's JSON object."""
  for tag in ("<tool_call>", "<|python_tag|>"):
    if tag in content:
      return content[:content.index(tag)].strip()
  span = tool_calls_lib.parse_tool_call(content).span
  return (content[:span[0]] + content[span[1]:]).strip() if span else content


def _native_calls(raw: Any, where: str) -> list[dict]:
  """message.tool_calls of a completion -> [{'id', 'name', 'arguments'}]; arguments that are not a JSON object
  stay the string the server sent (the harness answers that call with a named error)."""
  if not isinstance(raw, list):
    raise TeacherProtocolError(f"{where}: message.tool_calls is a {type(raw).__name__}, not a list")
  calls = []
  for i, tc in enumerate(raw):
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
      raise TeacherProtocolError(f"{where}: message.tool_calls[{i}] has no function.name: {_excerpt(str(tc))}")
    args = fn.get("arguments")
    if args is None or args == "":
      args = {}
    if isinstance(args, str):
      try:
        decoded = json.loads(args)
      except json.JSONDecodeError:
        decoded = None
      args = decoded if isinstance(decoded, dict) else args   # kept as sent: the harness names the problem
    calls.append({"id": tc.get("id"), "name": fn["name"], "arguments": args})
  return calls


def assistant_message(msg: Mapping[str, Any], where: str = "the endpoint") -> dict:
  """A completion's choices[0].message -> the harness's assistant message (module docstring).

  Raises:
    TeacherProtocolError: content or tool_calls of the wrong type.
  """
  content = msg.get("content")
  if content is None:
    content = ""
  if isinstance(content, list):   # content parts [{type: text, text}]
    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
  if not isinstance(content, str):
    raise TeacherProtocolError(f"{where}: choices[0].message.content is a {type(content).__name__}, not a string")
  parsed = tool_calls_lib.parse_response(content)   # the reasoning block is removed before calls are read
  content = parsed.content
  reasoning = "\n".join(r for r in (msg.get("reasoning_content") or msg.get("reasoning"), parsed.reasoning)
                        if isinstance(r, str) and r.strip())
  if msg.get("tool_calls"):
    calls, error = _native_calls(msg["tool_calls"], where), None
  else:
    calls, error = ([], parsed.error) if parsed.error else (parsed.tool_calls, None)   # one bad call: run none
    if calls:
      content = _without_call_text(content)
  out = {"role": "assistant", "content": content,
         "tool_calls": [{"id": c.get("id") or f"call_{i}", "type": "function",
                         "function": {"name": c["name"], "arguments": c["arguments"]}}
                        for i, c in enumerate(calls)]}
  if reasoning:
    out["reasoning"] = reasoning
  if error:
    out["error"] = error
  return out


def _arguments_json(args: Any) -> str:
  return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def wire_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
  """The harness's messages in OpenAI wire form: arguments as JSON strings, tool results with tool_call_id,
  no reasoning or error fields."""
  out = []
  for m in messages:
    w: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m["role"] == "assistant" and m.get("tool_calls"):
      w["tool_calls"] = [{"id": c.get("id") or f"call_{i}", "type": "function",
                          "function": {"name": c["function"]["name"],
                                       "arguments": _arguments_json(c["function"]["arguments"])}}
                         for i, c in enumerate(m["tool_calls"])]
    if m["role"] == "tool":
      w["tool_call_id"] = m.get("tool_call_id") or ""
      if m.get("name"):
        w["name"] = m["name"]
    out.append(w)
  return out


# ------------------------------------------------------------------------------------------------ client


class ChatClient:
  """A client of an OpenAI-compatible chat-completions endpoint; callable as a harness policy.

  Args:
    base_url: the server, e.g. http://localhost:8000 (vLLM's `vllm serve`), or https://api.openai.com.
    model: the model name the server expects.
    api_key: sent as 'Authorization: Bearer <key>' (None: $OPENAI_API_KEY if set, else no header).
    temperature, top_p, max_tokens, seed: sampling fields of the request (None: not sent).
    enable_thinking: Qwen3 thinking on (True) or off (False) via chat_template_kwargs; None: not sent.
    timeout_s: seconds for one HTTP request (connect + answer).
    max_retries: retries after the first attempt (so 1 + max_retries attempts at most).
    backoff_s, max_backoff_s: wait backoff_s * 2**attempt before retry attempt+1, at most max_backoff_s;
      a Retry-After header (seconds) replaces it, capped the same way.
    extra_body: more request fields (merged last).
    sleep: the wait function (tests pass a fast one).
  Raises (from complete / __call__):
    TeacherHTTPError, TeacherProtocolError, TeacherError: see the module docstring.
  """

  def __init__(self, base_url: str, model: str, *, api_key: str | None = None, temperature: float | None = 1.0,
               top_p: float | None = None, max_tokens: int | None = None, seed: int | None = None,
               enable_thinking: bool | None = False, timeout_s: float = 300.0, max_retries: int = 4,
               backoff_s: float = 1.0, max_backoff_s: float = 60.0, extra_body: Mapping[str, Any] | None = None,
               sleep: Callable[[float], None] = time.sleep):
    if not model:
      raise ValueError("model must name the served model (what GET {base_url}/v1/models lists)")
    if max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
      raise ValueError(f"need max_retries >= 0, timeout_s > 0, backoff_s >= 0; got {max_retries}, "
                       f"{timeout_s}, {backoff_s}")
    self.url = endpoint_url(base_url)
    self.model = model
    self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    self.sampling = {k: v for k, v in (("temperature", temperature), ("top_p", top_p),
                                       ("max_tokens", max_tokens), ("seed", seed)) if v is not None}
    self.enable_thinking = enable_thinking
    self.timeout_s = float(timeout_s)
    self.max_retries = int(max_retries)
    self.backoff_s = float(backoff_s)
    self.max_backoff_s = float(max_backoff_s)
    self.extra_body = dict(extra_body or {})
    self.sleep = sleep

  def __call__(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict:
    return self.complete(messages, tools).message

  def request_body(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict:
    body: dict[str, Any] = {"model": self.model, "messages": wire_messages(messages)}
    if tools:
      body["tools"] = list(tools)
    body.update(self.sampling)
    if self.enable_thinking is not None:
      body["chat_template_kwargs"] = {"enable_thinking": bool(self.enable_thinking)}
    body.update(self.extra_body)
    return body

  def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Completion:
    """One chat completion, with retries (see the class docstring)."""
    data = json.dumps(self.request_body(messages, tools)).encode("utf-8")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if self.api_key:
      headers["Authorization"] = f"Bearer {self.api_key}"
    last = ""
    for attempt in range(self.max_retries + 1):
      wait = None
      try:
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
          status = resp.status
          ctype = resp.headers.get("Content-Type", "")
          body = resp.read().decode("utf-8", "replace")
        return self._parse(status, ctype, body)
      except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace") if e.fp is not None else ""
        if not (e.code in RETRY_STATUS or e.code >= 500):
          raise TeacherHTTPError(self._http_message(e.code, body), e.code, body) from None
        last = f"HTTP {e.code}: {_excerpt(body, 150)}"
        wait = _retry_after(e.headers.get("Retry-After") if e.headers else None)
        if attempt == self.max_retries:
          raise TeacherHTTPError(f"{self.url} kept failing: {1 + self.max_retries} attempts, the last "
                                 f"answered {last}", e.code, body) from None
      except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
        reason = getattr(e, "reason", e)
        last = f"{type(reason).__name__}: {reason}"
        if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
          last = f"no answer within timeout_s={self.timeout_s} s ({last})"
      if attempt < self.max_retries:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** attempt if wait is None else wait)
        self.sleep(delay)
    raise TeacherError(f"no answer from {self.url} after {1 + self.max_retries} attempts; last error: {last}. "
                       f"Is the server running and reachable (try curl {self.url.rsplit('/chat/completions', 1)[0]}/models)?")

  def _http_message(self, code: int, body: str) -> str:
    hint = {401: "check --api-key / $OPENAI_API_KEY", 403: "check --api-key / $OPENAI_API_KEY",
            404: f"check --base-url (the client posts to {self.url}) and --model",
            400: "the server refused the request; its message says which field (a server without "
                 "chat_template_kwargs support needs --thinking server)",
            422: "the server refused the request; its message says which field"}.get(code, "")
    detail = _server_error(body) or _excerpt(body)
    return f"{self.url} answered HTTP {code}: {detail}" + (f" ({hint})" if hint else "")

  def _parse(self, status: int, ctype: str, body: str) -> Completion:
    try:
      obj = json.loads(body)
    except json.JSONDecodeError:
      raise TeacherProtocolError(
          f"{self.url} answered HTTP {status} ({ctype or 'no content type'}) with a body that is not JSON: "
          f"{_excerpt(body)}; is it an OpenAI-compatible chat-completions server (e.g. `vllm serve`)?") from None
    if not isinstance(obj, dict):
      raise TeacherProtocolError(f"{self.url} answered JSON that is not an object: {_excerpt(body)}; an OpenAI "
                                 "chat completion is {\"choices\": [{\"message\": {...}}], ...}")
    if "error" in obj and "choices" not in obj:
      raise TeacherProtocolError(f"{self.url} answered an error object: {_server_error(body) or _excerpt(body)}")
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
      raise TeacherProtocolError(f"{self.url} answered JSON without a non-empty 'choices' list (keys: "
                                 f"{sorted(obj)[:10]}): not an OpenAI chat completion. Body: {_excerpt(body)}")
    first = choices[0]
    msg = first.get("message") if isinstance(first, dict) else None
    if not isinstance(msg, dict):
      hint = (" (it has 'text': a legacy /v1/completions answer; point --base-url at a chat server)"
              if isinstance(first, dict) and "text" in first else "")
      raise TeacherProtocolError(f"{self.url}: choices[0] has no 'message' object{hint}. Body: {_excerpt(body)}")
    try:
      message = assistant_message(msg, self.url)
    except TeacherProtocolError as e:
      raise TeacherProtocolError(f"{e}. Body: {_excerpt(body)}") from None
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    return Completion(message, first.get("finish_reason"), int(usage.get("prompt_tokens", -1) or -1),
                      int(usage.get("completion_tokens", -1) or -1))


def _retry_after(value: str | None) -> float | None:
  try:
    return max(0.0, float(value)) if value is not None else None
  except ValueError:
    return None


def _server_error(body: str) -> str | None:
  """The message of an OpenAI-style error body {'error': {'message': ...}} (or {'error': '...'})."""
  try:
    obj = json.loads(body)
  except json.JSONDecodeError:
    return None
  if isinstance(obj, dict):
    err = obj.get("error", obj.get("detail", obj.get("message")))
    if isinstance(err, dict):
      err = err.get("message", err)
    if err is not None:
      return _excerpt(str(err))
  return None
