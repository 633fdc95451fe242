r"""Teacher trajectories: rollouts of any OpenAI-compatible chat endpoint under the three harnesses.

  python -m progagent.teacher --base-url http://localhost:8000 --model Qwen/Qwen3-32B --mode ptc --k 8 \
      --scale 0 --out runs/teacher/ptc_v0.jsonl [--tasks retail,hr/raise_top_rated] [--runtime kernel] \
      [--thinking off|on|server]

For every task (progagent.tasks) at the chosen scale, k episodes are run under the harness (DTC, PTC or
Hybrid: progagent.harness.run_episode over a progagent.ptc_env.ProgEnv) with the endpoint as the policy,
through native function calling (progagent.teacher_client: `tools=` in the request, tool calls read from
the reply's tool_calls, tool results sent back as role 'tool' messages with their tool_call_id; Qwen3
thinking switched by --thinking; reasoning never parsed as an action). Each episode is one JSON line of
`--out` (written as soon as it ends, so a stopped run resumes where it left off: episodes already in the file
are not asked for again):

  {"task_id", "scale", "mode", "sample", "seed", "model", "reward", "success",
   "messages": [OpenAI-format messages: system, user, assistant {content, tool_calls, [reasoning]},
                tool {tool_call_id, name, content}, ...],
   "tools": [the OpenAI function schemas offered],
   "stats": {turns, tool_calls, tool_errors, parse_errors, program_errors, errors, context_tokens,
             prompt_tokens, action_tokens, observation_tokens, end},
   "usage": {requests, prompt_tokens, completion_tokens}, "finish_reasons": [...], "wall_s"}

`reward` is the task's binary verifier R in {0, 1}; `stats` is the harness's accounting (tokens counted by
--tokenizer, default the harness's model-free regex count), `usage` what the server reported.
A summary (`--summary`, default <out>.summary.json) gives per task n, c (successes), pass@k for the requested
k values, the filter statistic, and the tasks the difficulty filter keeps (progagent.teacher_stats, which
documents the two filter statistics, --filter-stat). The CLI refuses a pass@k filter with fewer samples than
k and warns when the chosen statistic cannot fall inside the interval.

A request that still fails after the client's retries stops the collection (TeacherError); what was written
stays.

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
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from common import io
from progagent import harness
from progagent import ptc_env
from progagent import tasks as tasks_lib
from progagent import teacher_stats
from progagent.teacher_client import ChatClient, TeacherError

RUNTIMES = ("kernel", "inprocess")
THINKING = {"on": True, "off": False, "server": None}


# ------------------------------------------------------------------------------------------------ episodes


class _CountingPolicy:
  """Wraps a client for one episode, adding up the server's usage."""

  def __init__(self, client: ChatClient):
    self.client = client
    self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    self.finish_reasons: list[str | None] = []

  def __call__(self, messages, tools=()):
    c = self.client.complete(messages, tools)
    self.usage["requests"] += 1
    self.usage["prompt_tokens"] += max(0, c.prompt_tokens)
    self.usage["completion_tokens"] += max(0, c.completion_tokens)
    self.finish_reasons.append(c.finish_reason)
    return c.message


class _LockedEnv:
  """An environment whose steps run one at a time across threads (in-process programs swap the process's
  stdout); everything else is the wrapped environment's."""

  def __init__(self, env, lock: threading.Lock):
    self._env, self._lock = env, lock

  def step(self, call):
    with self._lock:
      return self._env.step(call)

  def __getattr__(self, name):
    return getattr(self._env, name)


def run_teacher_episode(policy: harness.Policy, task_id: str, *, mode: str, scale: int = 0, seed: int = 0,
                        sample: int = 0, runtime: str = "kernel", max_turns: int = 30,
                        cache_dir: str | None = None, tokenizer: Any = None, model: str = "",
                        runtime_lock: threading.Lock | None = None) -> dict:
  """One episode of `policy` on a fresh instance of `task_id`; returns its JSONL record (module docstring).

  Raises:
    ValueError: unknown runtime or mode. TeacherError: the endpoint failed.
  """
  if runtime not in RUNTIMES:
    raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
  counting = policy if isinstance(policy, _CountingPolicy) else None
  env = ptc_env.ProgEnv(mode=mode, runtime=runtime, scale=scale, cache_dir=cache_dir)
  t0 = time.monotonic()
  try:
    stepped = _LockedEnv(env, runtime_lock) if (runtime == "inprocess" and runtime_lock is not None) else env
    ep = harness.run_episode(stepped, policy, mode=mode, task_id=task_id, seed=seed, tokenizer=tokenizer,
                             max_turns=max_turns)
  finally:
    env.close()
  stats = dataclasses.asdict(ep.stats)
  stats["errors"] = ep.stats.errors
  for k in ("task_id", "mode", "reward"):
    stats.pop(k)
  return {"task_id": task_id, "scale": scale, "mode": mode, "sample": sample, "seed": seed, "model": model,
          "reward": ep.stats.reward, "success": ep.stats.reward >= 1.0, "messages": ep.messages,
          "tools": ep.tools, "stats": stats, "usage": dict(counting.usage) if counting else None,
          "finish_reasons": list(counting.finish_reasons) if counting else None,
          "wall_s": round(time.monotonic() - t0, 3)}


def _key(rec: Mapping[str, Any]) -> tuple:
  return (rec["task_id"], int(rec["scale"]), rec["mode"], int(rec["sample"]))


def read_records(path: str) -> list[dict]:
  """The records of a teacher JSONL file ([] when it does not exist; a truncated last line, from a killed
  run, is skipped)."""
  return io.read_jsonl(path) if os.path.exists(path) else []


def collect(client: ChatClient | harness.Policy, task_ids: Sequence[str], *, mode: str, k: int,
            scale: int = 0, seed: int = 0, runtime: str = "kernel", max_turns: int = 30, concurrency: int = 4,
            out_path: str | None = None, cache_dir: str | None = None, tokenizer: Any = None,
            resume: bool = True, log: Callable[[str], None] | None = None) -> list[dict]:
  """k episodes of the teacher on every task; returns the records of all (task, sample) pairs, in order.

  Args:
    client: a ChatClient (usage is recorded) or any harness policy ((messages, tools) -> assistant message).
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
  harness.system_prompt(mode)   # validates mode
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
  p.add_argument("--thinking", default="off", choices=tuple(THINKING),
                 help="Qwen3 thinking: on / off (chat_template_kwargs.enable_thinking), or server: not sent")
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
  p.add_argument("--filter-stat", default="pass_at_k", choices=teacher_stats.FILTER_STATS)
  p.add_argument("--filter-k", type=int, default=8)
  p.add_argument("--filter-low", type=float, default=0.0)
  p.add_argument("--filter-high", type=float, default=0.8)
  p.add_argument("--quiet", action="store_true")
  return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
  """The CLI (see the module docstring); returns the exit status."""
  a = _parse_args(argv)
  log = None if a.quiet else functools.partial(print, flush=True)
  task_ids = tasks_lib.select_tasks(a.tasks)
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
                      max_tokens=a.max_tokens, enable_thinking=THINKING[a.thinking], timeout_s=a.timeout,
                      max_retries=a.retries, backoff_s=a.backoff)
  try:
    records = collect(client, task_ids, mode=a.mode, k=a.k, scale=a.scale, seed=a.seed, runtime=a.runtime,
                      max_turns=a.max_turns, concurrency=a.concurrency, out_path=a.out, tokenizer=tokenizer,
                      resume=not a.no_resume, log=log)
  except TeacherError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  ks = sorted({int(x) for x in a.pass_k.split(",")} if a.pass_k else {1, a.filter_k})
  ks = [k for k in ks if k <= a.k]
  summary = teacher_stats.summarize(records, ks=ks, filter_stat=a.filter_stat, filter_k=a.filter_k, low=a.filter_low,
                      high=a.filter_high)
  summary.update({"model": a.model, "mode": a.mode, "scale": a.scale, "k": a.k, "seed": a.seed,
                  "out": os.path.abspath(a.out)})
  path = a.summary or a.out + ".summary.json"
  with open(path, "w") as f:
    json.dump(summary, f, indent=1)
  if log:
    log(teacher_stats.format_summary(summary, ks))
    log(f"wrote {a.out} and {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
