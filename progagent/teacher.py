r"""Teacher trajectories: rollouts of any OpenAI-compatible chat endpoint under the three harnesses.

  python -m progagent.teacher --base-url http://localhost:8000 --model Qwen/Qwen3-32B --mode ptc --k 8 \
      --scale 0 --out runs/teacher/ptc_v0.jsonl [--tasks retail,hr/raise_top_rated] [--runtime kernel]

For every task (progagent.tasks) at the chosen scale, k episodes are run under the harness (DTC, PTC or
Hybrid: progagent.harness.run_episode) with the endpoint as the policy. Each episode is one JSON line of
`--out` (written as soon as it ends, so a stopped run resumes where it left off: episodes already in the file
are not asked for again):

  {"task_id", "scale", "mode", "sample", "seed", "model", "reward", "success", "messages": [{role, content}],
   "stats": {turns, tool_calls, tool_errors, parse_errors, program_errors, errors, context_tokens,
             prompt_tokens, action_tokens, observation_tokens, end},
   "usage": {requests, prompt_tokens, completion_tokens}, "finish_reasons": [...], "wall_s"}

`reward` is the task's binary verifier R in {0, 1}; `stats` is the harness's accounting (tokens counted by
--tokenizer, default the harness's model-free regex count), `usage` what the server reported.
A summary (`--summary`, default <out>.summary.json) gives per task n, c (successes), pass@k for the requested
k values with the unbiased estimator (common.metrics.pass_at_k; Chen et al. 2021, arXiv:2107.03374, eq. 1),
the filter statistic, and the tasks the difficulty filter keeps.

Difficulty filter (ProgAgent 2026, "task synthesis"; SPEC.md, ProgAgent): keep tasks whose pass@8 of a strong
teacher under PTC lies in the open interval (0, 0.8). The source leaves the estimator's sample count open.
With n == k samples the unbiased pass@k is 1 as soon as one sample succeeds, so pass@8 from 8 samples is
0 or 1 and the interval keeps nothing. Two statistics are offered (--filter-stat):
  'pass_at_k'  the unbiased pass@filter_k from all n samples (the default, the literal reading); needs
               n > filter_k to be fractional: draw --k 16 or more;
  'mean'       the fraction of successes c / n (= the unbiased pass@1; the "average@n" reading).
The CLI warns when the chosen statistic cannot fall inside the interval.

Endpoint protocol: POST {base_url}/v1/chat/completions with {model, messages, temperature, [top_p,
max_tokens, seed]} (a base_url that already ends in /v1 is not given a second one); the reply text is
choices[0].message.content (null counts as an empty reply). Retried with exponential backoff
(backoff_s * 2**attempt, capped at max_backoff_s, or the server's Retry-After): connection failures,
timeouts, HTTP 408/409/425/429 and 5xx. Not retried (TeacherHTTPError at once): other 4xx, whose
message carries the server's text. An answer that is not an OpenAI chat completion (not JSON, an error
object, no choices, no message) raises TeacherProtocolError naming what is missing and quoting the body.
A request that still fails after the retries stops the collection (TeacherError); what was written stays.

Programs a teacher writes are untrusted: the CLI runs them in the sandboxed kernel (--runtime kernel, the
default, progagent.runtime); --runtime inprocess executes them in this process (tests, trusted endpoints;
programs then run one at a time, since in-process execution redirects the process's stdout).
All k samples of a task run on the same instance (environment seed --seed), so pass@k measures the teacher,
not the instance.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from common import metric_writer
from common import metrics as metrics_lib
from progagent import harness
from progagent import tasks as tasks_lib
from progagent.task_env import ProgTaskEnv

RETRY_STATUS = frozenset({408, 409, 425, 429})
FILTER_STATS = ("pass_at_k", "mean")
RUNTIMES = ("kernel", "inprocess")
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
  """One chat completion: the reply text, why it stopped, and the server's token counts (-1 if absent)."""
  text: str
  finish_reason: str | None
  prompt_tokens: int
  completion_tokens: int


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


class ChatClient:
  """A client of an OpenAI-compatible chat-completions endpoint; callable as a harness policy.

  Args:
    base_url: the server, e.g. http://localhost:8000 (vLLM's `vllm serve`), or https://api.openai.com.
    model: the model name the server expects.
    api_key: sent as 'Authorization: Bearer <key>' (None: $OPENAI_API_KEY if set, else no header).
    temperature, top_p, max_tokens, seed: sampling fields of the request (None: not sent).
    timeout_s: seconds for one HTTP request (connect + answer).
    max_retries: retries after the first attempt (so 1 + max_retries attempts at most).
    backoff_s, max_backoff_s: wait backoff_s * 2**attempt before retry attempt+1, at most max_backoff_s;
      a Retry-After header (seconds) replaces it, capped the same way.
    extra_body: more request fields (e.g. {'chat_template_kwargs': {'enable_thinking': False}}).
    sleep: the wait function (tests pass a fast one).
  Raises (from complete / __call__):
    TeacherHTTPError, TeacherProtocolError, TeacherError: see the module docstring.
  """

  def __init__(self, base_url: str, model: str, *, api_key: str | None = None, temperature: float | None = 1.0,
               top_p: float | None = None, max_tokens: int | None = None, seed: int | None = None,
               timeout_s: float = 300.0, max_retries: int = 4, backoff_s: float = 1.0,
               max_backoff_s: float = 60.0, extra_body: Mapping[str, Any] | None = None,
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
    self.timeout_s = float(timeout_s)
    self.max_retries = int(max_retries)
    self.backoff_s = float(backoff_s)
    self.max_backoff_s = float(max_backoff_s)
    self.extra_body = dict(extra_body or {})
    self.sleep = sleep

  def __call__(self, messages: Sequence[Mapping[str, str]]) -> str:
    return self.complete(messages).text

  def request_body(self, messages: Sequence[Mapping[str, str]]) -> dict:
    return {"model": self.model, "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            **self.sampling, **self.extra_body}

  def complete(self, messages: Sequence[Mapping[str, str]]) -> Completion:
    """One chat completion, with retries (see the class docstring)."""
    data = json.dumps(self.request_body(messages)).encode("utf-8")
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
                       "Is the server running and reachable (try curl {base_url}/v1/models)?")

  def _http_message(self, code: int, body: str) -> str:
    hint = {401: "check --api-key / $OPENAI_API_KEY", 403: "check --api-key / $OPENAI_API_KEY",
            404: "check --base-url (the client posts to {base_url}/v1/chat/completions) and --model",
            400: "the server refused the request; its message says which field",
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
    content = msg.get("content")
    if content is None:
      content = ""
    if not isinstance(content, str):
      if isinstance(content, list):   # content parts [{type: text, text}]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
      else:
        raise TeacherProtocolError(f"{self.url}: choices[0].message.content is a {type(content).__name__}, "
                                   f"not a string. Body: {_excerpt(body)}")
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    return Completion(content, first.get("finish_reason"), int(usage.get("prompt_tokens", -1) or -1),
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


# ------------------------------------------------------------------------------------------------ episodes


class _CountingPolicy:
  """Wraps a client for one episode, adding up the server's usage."""

  def __init__(self, client: ChatClient):
    self.client = client
    self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    self.finish_reasons: list[str | None] = []

  def __call__(self, messages):
    c = self.client.complete(messages)
    self.usage["requests"] += 1
    self.usage["prompt_tokens"] += max(0, c.prompt_tokens)
    self.usage["completion_tokens"] += max(0, c.completion_tokens)
    self.finish_reasons.append(c.finish_reason)
    return c.text


class _LockedRuntime:
  """Runs one program at a time across threads (in-process execution swaps the process's stdout)."""

  def __init__(self, runtime, lock: threading.Lock):
    self.runtime, self.lock = runtime, lock

  def run(self, code):
    with self.lock:
      return self.runtime.run(code)

  def close(self):
    self.runtime.close()


def run_teacher_episode(policy: Callable[[list[dict]], str], task_id: str, *, mode: str, scale: int = 0,
                        seed: int = 0, sample: int = 0, runtime: str = "kernel", max_turns: int = 30,
                        cache_dir: str | None = None, tokenizer: Any = None, model: str = "",
                        runtime_lock: threading.Lock | None = None) -> dict:
  """One episode of `policy` on a fresh instance of `task_id`; returns its JSONL record (module docstring)."""
  if runtime not in RUNTIMES:
    raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
  counting = policy if isinstance(policy, _CountingPolicy) else None
  env = ProgTaskEnv(task_id, scale, cache_dir=cache_dir)
  lock = runtime_lock

  def factory(e):
    rt = harness.make_runtime(runtime, e)
    return _LockedRuntime(rt, lock) if (runtime == "inprocess" and lock is not None) else rt

  t0 = time.monotonic()
  try:
    ep = harness.run_episode(env, policy, mode=mode, task_id=task_id, seed=seed, runtime_factory=factory,
                             tokenizer=tokenizer, max_turns=max_turns)
  finally:
    env.close()
  stats = dataclasses.asdict(ep.stats)
  stats["errors"] = ep.stats.errors
  for k in ("task_id", "mode", "reward"):
    stats.pop(k)
  return {"task_id": task_id, "scale": scale, "mode": mode, "sample": sample, "seed": seed, "model": model,
          "reward": ep.stats.reward, "success": ep.stats.reward >= 1.0, "messages": ep.messages,
          "stats": stats, "usage": dict(counting.usage) if counting else None,
          "finish_reasons": list(counting.finish_reasons) if counting else None,
          "wall_s": round(time.monotonic() - t0, 3)}


def _key(rec: Mapping[str, Any]) -> tuple:
  return (rec["task_id"], int(rec["scale"]), rec["mode"], int(rec["sample"]))


def read_records(path: str) -> list[dict]:
  """The records of a teacher JSONL file ([] when it does not exist; a truncated last line, from a killed
  run, is skipped)."""
  return metric_writer.read_jsonl(path) if os.path.exists(path) else []


def collect(client: ChatClient | Callable[[list[dict]], str], task_ids: Sequence[str], *, mode: str, k: int,
            scale: int = 0, seed: int = 0, runtime: str = "kernel", max_turns: int = 30, concurrency: int = 4,
            out_path: str | None = None, cache_dir: str | None = None, tokenizer: Any = None,
            resume: bool = True, log: Callable[[str], None] | None = None) -> list[dict]:
  """k episodes of the teacher on every task; returns the records of all (task, sample) pairs, in order.

  Args:
    client: a ChatClient (usage is recorded) or any messages -> text callable.
    task_ids: task ids ('domain/name').
    mode: harness 'dtc', 'ptc' or 'hybrid'.
    k: episodes per task.
    scale: level 0..3 (v0..v3).
    seed: environment seed of every episode (the same instance for all k samples).
    runtime: 'kernel' (sandboxed; default) or 'inprocess' (see the module docstring).
    max_turns: replies per episode before it is cut.
    concurrency: episodes in flight at once (threads).
    out_path: JSONL file the records are appended to (created with its folder); None = not written.
    cache_dir: generated-state cache shared by the episodes (None: a temporary one, removed at the end).
    tokenizer: token counter for the accounting (progagent.harness.make_token_counter).
    resume: records already in out_path are kept and not collected again.
    log: progress lines (None: silent).
  Raises:
    TeacherError (and subclasses): the endpoint failed; records written before stay in out_path.
    KeyError: unknown task id. ValueError: bad mode, k, concurrency or runtime.
  """
  harness.system_prompt(mode, [])   # validates mode
  if isinstance(k, bool) or not isinstance(k, int) or k < 1:
    raise ValueError(f"k (samples per task) must be an int >= 1, got {k!r}")
  if concurrency < 1:
    raise ValueError(f"concurrency must be >= 1, got {concurrency}")
  for t in task_ids:
    tasks_lib.get_task(t)
  model = getattr(client, "model", "")
  done: dict[tuple, dict] = {}
  if out_path and resume:
    for rec in read_records(out_path):
      if rec.get("mode") == mode and int(rec.get("scale", -1)) == scale and rec.get("task_id") in task_ids:
        done[_key(rec)] = rec
  todo = [(t, s) for t in task_ids for s in range(k) if (t, scale, mode, s) not in done]
  if log:
    log(f"teacher: {len(task_ids)} tasks x {k} samples, {mode} at v{scale}: {len(todo)} to collect, "
        f"{len(task_ids) * k - len(todo)} already in {out_path}")
  own_cache = cache_dir is None
  cache = tempfile.mkdtemp(prefix="teacher-states-") if own_cache else cache_dir
  write_lock, runtime_lock = threading.Lock(), threading.Lock()
  out_file = None
  if out_path:
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    out_file = open(out_path, "a")

  def one(task_id, sample):
    policy = _CountingPolicy(client) if isinstance(client, ChatClient) else client
    rec = run_teacher_episode(policy, task_id, mode=mode, scale=scale, seed=seed, sample=sample,
                              runtime=runtime, max_turns=max_turns, cache_dir=cache, tokenizer=tokenizer,
                              model=model, runtime_lock=runtime_lock)
    with write_lock:
      done[_key(rec)] = rec
      if out_file is not None:
        out_file.write(json.dumps(rec, ensure_ascii=False) + "\n")
        out_file.flush()
      if log:
        log(f"  {task_id} #{sample}: R={rec['reward']:.0f} turns={rec['stats']['turns']} "
            f"calls={rec['stats']['tool_calls']} errors={rec['stats']['errors']} ({len(done)}/{len(task_ids) * k})")
    return rec

  try:
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="teacher") as pool:
      futs = [pool.submit(one, t, s) for t, s in todo]
      try:
        for f in concurrent.futures.as_completed(futs):
          f.result()
      except BaseException:
        for f in futs:
          f.cancel()
        raise
  finally:
    if out_file is not None:
      out_file.close()
    if own_cache:
      shutil.rmtree(cache, ignore_errors=True)
  return [done[(t, scale, mode, s)] for t in task_ids for s in range(k)]


# ------------------------------------------------------------------------------------------------ pass@k, filter


def pass_at_k_table(records: Iterable[Mapping[str, Any]], ks: Sequence[int] = (1, 8)) -> dict[str, dict]:
  """Per task: {'n', 'c', 'success_rate', 'pass@<k>' for each k <= n} from the records' successes.

  A success is reward >= 1 (the verifier is binary). pass@k = 1 - C(n-c, k)/C(n, k) (unbiased;
  common.metrics.pass_at_k); k values above a task's n are left out for that task.
  """
  counts: dict[str, list[int]] = {}
  for r in records:
    n_c = counts.setdefault(r["task_id"], [0, 0])
    n_c[0] += 1
    n_c[1] += int(float(r["reward"]) >= 1.0)
  out = {}
  for tid, (n, c) in counts.items():
    row: dict[str, Any] = {"n": n, "c": c, "success_rate": c / n}
    for k in ks:
      if k <= n:
        row[f"pass@{k}"] = float(metrics_lib.pass_at_k(n, c, k))
    out[tid] = row
  return out


def filter_statistic(n: int, c: int, *, stat: str = "pass_at_k", k: int = 8) -> float:
  """The difficulty filter's statistic of a task with c successes in n samples (see the module docstring).

  Raises:
    ValueError: unknown stat, or 'pass_at_k' with n < k.
  """
  if stat == "pass_at_k":
    if n < k:
      raise ValueError(f"the filter's pass@{k} needs at least {k} samples per task, a task has {n}; "
                       f"collect with --k {max(k, 16)} or lower --filter-k")
    return float(metrics_lib.pass_at_k(n, c, k))
  if stat == "mean":
    return c / n
  raise ValueError(f"filter statistic must be one of {FILTER_STATS}, got {stat!r}")


def difficulty_filter(table: Mapping[str, Mapping[str, Any]], *, stat: str = "pass_at_k", k: int = 8,
                      low: float = 0.0, high: float = 0.8) -> dict[str, float]:
  """Tasks to keep: {task_id: statistic} for those whose statistic lies in the open interval (low, high).

  Source: ProgAgent (2026): keep tasks whose pass@8 (strong teacher, PTC) lies in (0, 0.8).
  """
  kept = {}
  for tid, row in table.items():
    s = filter_statistic(int(row["n"]), int(row["c"]), stat=stat, k=k)
    if low < s < high:
      kept[tid] = s
  return kept


def summarize(records: Sequence[Mapping[str, Any]], *, ks: Sequence[int] = (1, 8), filter_stat: str = "pass_at_k",
              filter_k: int = 8, low: float = 0.0, high: float = 0.8) -> dict:
  """{'tasks': per-task table (+ 'filter_stat'), 'kept': [task ids], 'totals': means over episodes}."""
  table = pass_at_k_table(records, ks)
  for tid, row in table.items():
    row["filter_stat"] = filter_statistic(row["n"], row["c"], stat=filter_stat, k=filter_k)
  kept = difficulty_filter(table, stat=filter_stat, k=filter_k, low=low, high=high)
  fields = ("turns", "tool_calls", "tool_errors", "parse_errors", "program_errors", "errors", "context_tokens",
            "observation_tokens", "action_tokens")
  totals: dict[str, Any] = {"episodes": len(records), "tasks": len(table),
                            "success_rate": float(np.mean([float(r["reward"]) >= 1.0 for r in records]))
                            if records else 0.0}
  for f in fields:
    vals = [r["stats"][f] for r in records if f in r.get("stats", {})]
    totals[f"mean_{f}"] = float(np.mean(vals)) if vals else 0.0
  for f in ("prompt_tokens", "completion_tokens", "requests"):
    vals = [r["usage"][f] for r in records if r.get("usage")]
    totals[f"usage_{f}"] = int(sum(vals))
  for k in ks:
    vals = [row[f"pass@{k}"] for row in table.values() if f"pass@{k}" in row]
    if vals:
      totals[f"mean_pass@{k}"] = float(np.mean(vals))
  return {"tasks": table, "kept": sorted(kept), "totals": totals,
          "filter": {"stat": filter_stat, "k": filter_k, "low": low, "high": high}}


def format_summary(summary: Mapping[str, Any], ks: Sequence[int]) -> str:
  cols = [f"pass@{k}" for k in ks]
  lines = [f"{'task':40s} {'n':>3s} {'c':>3s} " + " ".join(f"{c:>8s}" for c in cols) + f" {'filter':>8s} kept"]
  kept = set(summary["kept"])
  for tid, row in summary["tasks"].items():
    vals = " ".join(f"{row[c]:8.3f}" if c in row else f"{'-':>8s}" for c in cols)
    lines.append(f"{tid:40s} {row['n']:3d} {row['c']:3d} {vals} {row['filter_stat']:8.3f} "
                 f"{'yes' if tid in kept else 'no'}")
  t = summary["totals"]
  lines.append(f"kept {len(kept)}/{t['tasks']} tasks; episodes {t['episodes']}, success rate "
               f"{t['success_rate']:.3f}, mean tool calls {t['mean_tool_calls']:.2f}, mean errors "
               f"{t['mean_errors']:.2f}, mean context tokens {t['mean_context_tokens']:.0f}")
  return "\n".join(lines)


def select_tasks(spec: str) -> list[str]:
  """Comma list of task ids or domain names ('retail,hr/raise_top_rated'); '' = every task."""
  if not spec:
    return tasks_lib.task_ids()
  out: list[str] = []
  for part in (p.strip() for p in spec.split(",")):
    if not part:
      continue
    ids = tasks_lib.task_ids(part) if part in tasks_lib.DOMAINS else [tasks_lib.get_task(part).task_id]
    out += [t for t in ids if t not in out]
  return out


# ------------------------------------------------------------------------------------------------ CLI


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m progagent.teacher", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--base-url", required=True, help="OpenAI-compatible server, e.g. http://localhost:8000")
  p.add_argument("--model", required=True, help="served model name")
  p.add_argument("--api-key", default=None, help="bearer token (default $OPENAI_API_KEY)")
  p.add_argument("--mode", default="ptc", choices=harness.MODES)
  p.add_argument("--k", type=int, default=8, help="episodes per task")
  p.add_argument("--scale", type=int, default=0, choices=(0, 1, 2, 3), help="state scale level v0..v3")
  p.add_argument("--tasks", default="", help="comma list of task ids or domains (default: all tasks)")
  p.add_argument("--seed", type=int, default=0, help="environment seed (the instance)")
  p.add_argument("--out", required=True, help="JSONL file of episodes (appended; resumes)")
  p.add_argument("--summary", default=None, help="summary JSON (default <out>.summary.json)")
  p.add_argument("--no-resume", action="store_true", help="collect again even what --out holds")
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--top-p", type=float, default=None)
  p.add_argument("--max-tokens", type=int, default=None, help="per reply")
  p.add_argument("--max-turns", type=int, default=30)
  p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
  p.add_argument("--retries", type=int, default=4)
  p.add_argument("--backoff", type=float, default=1.0, help="first retry wait in seconds (doubles)")
  p.add_argument("--concurrency", type=int, default=8)
  p.add_argument("--runtime", default="kernel", choices=RUNTIMES,
                 help="kernel: sandboxed IPython kernel (default); inprocess: trusted endpoints only")
  p.add_argument("--tokenizer", default=None, help="local HF tokenizer dir for token counts (default: regex)")
  p.add_argument("--pass-k", default=None, help="comma list of k for pass@k (default 1,<filter-k>)")
  p.add_argument("--filter-stat", default="pass_at_k", choices=FILTER_STATS)
  p.add_argument("--filter-k", type=int, default=8)
  p.add_argument("--filter-low", type=float, default=0.0)
  p.add_argument("--filter-high", type=float, default=0.8)
  p.add_argument("--quiet", action="store_true")
  return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
  """The CLI (see the module docstring); returns the exit status."""
  a = _parse_args(argv)
  log = None if a.quiet else functools.partial(print, flush=True)
  task_ids = select_tasks(a.tasks)
  tokenizer = None
  if a.tokenizer:
    import transformers  # pylint: disable=g-import-not-at-top
    tokenizer = transformers.AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
  if a.filter_stat == "pass_at_k" and a.k < a.filter_k:
    print(f"error: the filter's pass@{a.filter_k} needs at least {a.filter_k} samples per task; use --k "
          f"{2 * a.filter_k}, a smaller --filter-k, or --filter-stat mean", file=sys.stderr)
    return 2
  if a.filter_stat == "pass_at_k" and a.k == a.filter_k and log:
    log(f"warning: pass@{a.filter_k} from {a.k} samples is 0 or 1 (1 as soon as one sample succeeds), so the "
        f"filter interval ({a.filter_low}, {a.filter_high}) keeps no task; use --k {2 * a.filter_k} or "
        "--filter-stat mean")
  client = ChatClient(a.base_url, a.model, api_key=a.api_key, temperature=a.temperature, top_p=a.top_p,
                      max_tokens=a.max_tokens, timeout_s=a.timeout, max_retries=a.retries, backoff_s=a.backoff)
  try:
    records = collect(client, task_ids, mode=a.mode, k=a.k, scale=a.scale, seed=a.seed, runtime=a.runtime,
                      max_turns=a.max_turns, concurrency=a.concurrency, out_path=a.out, tokenizer=tokenizer,
                      resume=not a.no_resume, log=log)
  except TeacherError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  ks = sorted({int(x) for x in a.pass_k.split(",")} if a.pass_k else {1, a.filter_k})
  ks = [k for k in ks if k <= a.k]
  summary = summarize(records, ks=ks, filter_stat=a.filter_stat, filter_k=a.filter_k, low=a.filter_low,
                      high=a.filter_high)
  summary.update({"model": a.model, "mode": a.mode, "scale": a.scale, "k": a.k, "seed": a.seed,
                  "out": os.path.abspath(a.out)})
  path = a.summary or a.out + ".summary.json"
  with open(path, "w") as f:
    json.dump(summary, f, indent=1)
  if log:
    log(format_summary(summary, ks))
    log(f"wrote {a.out} and {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
