"""A local OpenAI-compatible chat endpoint over a checkpoint: the endpoint path of the evaluation command without
an inference server.

  python -m progagent.bench.serve --checkpoint gguf:smollm2 --port 8000 [--host 127.0.0.1] [--max_new_tokens 512]
  python -m progagent.bench.evaluate --policy endpoint:http://127.0.0.1:8000 --model smollm2 ...

POST /v1/chat/completions with {model, messages, tools, temperature, max_tokens} in OpenAI's wire form (tool-call
arguments as JSON strings, tool results with tool_call_id) answers {id, object: 'chat.completion', model,
choices: [{index: 0, message: {role: 'assistant', content, tool_calls: [{id, type: 'function', function: {name,
arguments: JSON string}}]}, finish_reason: 'tool_calls' | 'stop' | 'length'}], usage: {prompt_tokens,
completion_tokens}}; GET /v1/models lists the one model. The reply is progagent.bench.policies.ModelPolicy's
(the checkpoint's chat template renders the messages and tools, common.lm.sampler.LMSampler samples, the template's
parser reads the calls; a prompt longer than --max_context_tokens gets an empty reply, finish_reason 'length').
Requests are served one at a time. `temperature` in a request is not applied (the server's --temperature is;
0 = greedy). A body that is not such JSON answers 400 with {error: {message}}.

Not a production server: no batching, no streaming, no authentication; it listens on 127.0.0.1 by default.
"""

from __future__ import annotations

import argparse
import http.server
import json
import sys
import threading
import time
import uuid
from typing import Any, Sequence

from progagent.bench import policies


def harness_messages(wire: Sequence[dict]) -> list[dict]:
  """OpenAI wire messages -> the harness's form (arguments decoded to dicts).

  Raises:
    ValueError: a message that is not an object with a role, or arguments that are not a JSON object.
  """
  out = []
  for m in wire:
    if not isinstance(m, dict) or "role" not in m:
      raise ValueError(f"a message must be an object with a 'role', got {str(m)[:200]}")
    m = dict(m)
    if isinstance(m.get("content"), list):
      m["content"] = "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))
    calls = []
    for c in m.get("tool_calls") or ():
      fn = dict(c.get("function") or {})
      args = fn.get("arguments")
      if isinstance(args, str):
        args = json.loads(args or "{}")
      if not isinstance(args, dict):
        raise ValueError(f"tool call arguments must be a JSON object, got {str(args)[:200]}")
      calls.append({"id": c.get("id"), "type": "function", "function": {"name": fn.get("name", ""), "arguments": args}})
    if calls:
      m["tool_calls"] = calls
    out.append(m)
  return out


class Endpoint:
  """The model behind the server: one reply per request (module docstring)."""

  def __init__(self, model: policies.ModelPolicy, name: str):
    self.model, self.name = model, name
    self.lock = threading.Lock()

  def complete(self, body: dict) -> dict:
    """A chat.completion object for a request body (module docstring).

    Raises:
      ValueError: no messages, or malformed ones.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
      raise ValueError("'messages' must be a non-empty list")
    msgs = harness_messages(messages)
    tools = body.get("tools") or []
    with self.lock:
      before, over = self.model.generated_tokens, self.model.overflow
      episode = self.model.for_episode(None, "", "")
      try:
        reply = episode(msgs, tools)
      finally:
        episode.close()
      completion = self.model.generated_tokens - before
      prompt = len(self.model.chat.prompt_ids(msgs, tools))
      overflow = self.model.overflow > over
    calls = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
              "function": {"name": c["function"]["name"],
                           "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
             for c in reply.get("tool_calls") or ()]
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
    if calls:
      message["tool_calls"] = calls
    finish = "length" if overflow else ("tool_calls" if calls else "stop")
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.name, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def make_server(endpoint: Endpoint, host: str = "127.0.0.1", port: int = 8000) -> http.server.ThreadingHTTPServer:
  """An HTTP server answering /v1/chat/completions and /v1/models with `endpoint` (call serve_forever)."""

  class Handler(http.server.BaseHTTPRequestHandler):

    def log_message(self, *args):  # quiet
      pass

    def _send(self, status: int, obj: dict) -> None:
      data = json.dumps(obj, ensure_ascii=False).encode()
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def do_GET(self):  # pylint: disable=invalid-name
      if self.path.rstrip("/") in ("/v1/models", "/models"):
        self._send(200, {"object": "list", "data": [{"id": endpoint.name, "object": "model"}]})
      else:
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):  # pylint: disable=invalid-name
      if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
        self._send(404, {"error": {"message": f"no route {self.path}"}})
        return
      try:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not isinstance(body, dict):
          raise ValueError("the body must be a JSON object")
        self._send(200, endpoint.complete(body))
      except (ValueError, json.JSONDecodeError) as e:
        self._send(400, {"error": {"message": str(e)}})

  return http.server.ThreadingHTTPServer((host, port), Handler)


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m progagent.bench.serve", description=__doc__.split("\n\n")[0])
  p.add_argument("--checkpoint", required=True, help="a HF folder, gguf:smollm2, tiny:qwen2 (common.lm.stages)")
  p.add_argument("--name", default=None, help="the model's name in answers (default: the checkpoint)")
  p.add_argument("--host", default="127.0.0.1")
  p.add_argument("--port", type=int, default=8000)
  p.add_argument("--max_new_tokens", type=int, default=512)
  p.add_argument("--max_context_tokens", type=int, default=8192)
  p.add_argument("--temperature", type=float, default=0.0)
  a = p.parse_args(argv)
  model = policies.ModelPolicy(a.checkpoint, max_new_tokens=a.max_new_tokens, max_context_tokens=a.max_context_tokens,
                               temperature=a.temperature)
  server = make_server(Endpoint(model, a.name or a.checkpoint), a.host, a.port)
  print(f"serving {a.checkpoint} at http://{a.host}:{server.server_address[1]}/v1/chat/completions", flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    server.server_close()
  return 0


if __name__ == "__main__":
  sys.exit(main())
