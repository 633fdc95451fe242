"""Tests of progagent.teacher against a local OpenAI-compatible chat server started by the test.

The server (http.server on 127.0.0.1, port chosen by the OS, in a thread) answers chat completions from the
task's oracle for some tasks and wrongly for others, so pass@k and the difficulty filter have exact values.
"""

import contextlib
import http.server
import io
import json
import math
import os
import shutil
import tempfile
import threading

from absl.testing import absltest
from absl.testing import parameterized
import psutil

import procs
from progagent import teacher
from progagent import teacher_client
from progagent import teacher_stats
from progagent import tasks as tasks_lib
from progagent.tasks import base
from progagent.tasks import oracle as oracle_lib

GOOD = "retail/pending_over_500"      # always answered by the oracle
BAD = "library/morland_copies"        # always answered wrongly
MIXED = "inventory/electrical_value"  # the first `mixed_good` conversations by the oracle, the rest wrongly

_SERVER_THREAD = "teacher-test-server"


def _comb(n, k):
  return math.comb(n, k) if 0 <= k <= n else 0


def _unbiased(n, c, k):
  return 1.0 - _comb(n - c, k) / _comb(n, k)


def _wire_call(name, args, call_id):
  return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _first_code(messages):
  """The code of the first program call among the (wire) assistant messages, or ''."""
  for m in messages:
    for c in m.get("tool_calls") or ():
      try:
        args = json.loads(c["function"]["arguments"])
      except json.JSONDecodeError:
        continue
      if isinstance(args, dict) and "code" in args:
        return args["code"]
  return ""


_TEMPTATION = ("tools[\"submit_answer\"](answer=-1)\n")


class Brain:
  """Decides each reply (an OpenAI assistant message) from the conversation (stateless per request except a
  per-task counter).

  PTC / Hybrid, good conversation: turn 1 a look-around program, turn 2 the oracle program (2 turns), each a
  native programmatic_tool_call. DTC, good: the DTC oracle replayed over the tool messages in the history (one
  native call per turn). Bad: submit_answer(-1) at once (R = 0 for every task used here).
  The first program of a conversation carries a marker comment naming its verdict, so later turns know it.
  think: every reply opens with a <think> block holding a wrong program (```python and <tool_call> forms)
    that must never run. text_calls: the calls are written in the content as Qwen's <tool_call>{json}</tool_call>
    text (a server without a tool-call parser) instead of message.tool_calls.
  """

  def __init__(self, mode, mixed_good=0, think=False, text_calls=False):
    self.mode = mode
    self.mixed_good = mixed_good
    self.think = think
    self.text_calls = text_calls
    self.lock = threading.Lock()
    self.first_turns = {}
    self.requests = 0
    self.bodies = []
    self.by_prompt = {t.prompt: t for t in tasks_lib.TASKS.values()}

  def _good(self, task, assistant):
    if assistant:
      return "verdict: bad" not in _first_code(assistant)
    with self.lock:
      n = self.first_turns.get(task.task_id, 0)
      self.first_turns[task.task_id] = n + 1
    if task.task_id == GOOD:
      return True
    if task.task_id == MIXED:
      return n < self.mixed_good
    return False

  def _message(self, text, name=None, args=None, turn=0):
    if self.think:
      bad = json.dumps({"name": "programmatic_tool_call", "arguments": {"code": _TEMPTATION}})
      text = (f"<think>A shortcut would be\n```python\n{_TEMPTATION}```\nor <tool_call>{bad}</tool_call>; no, "
              f"look first.</think>\n{text}")
    msg = {"role": "assistant", "content": text}
    if name is not None:
      if self.text_calls:
        msg["content"] += f"\n<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"
      else:
        msg["tool_calls"] = [_wire_call(name, args, f"srv_{turn}")]
    return msg

  def reply(self, messages):
    task = self.by_prompt[messages[1]["content"]]
    assistant = [m for m in messages if m["role"] == "assistant"]
    turn = len(assistant)
    good = self._good(task, assistant)
    if self.mode == "dtc":
      if not good:
        return self._message("", "submit_answer", {"answer": -1}, turn)
      names = [t.name for t in task.domain.tools] + [base.SUBMIT_ANSWER.name]
      gen = oracle_lib.dtc_oracle(task.ptc, names)
      try:
        call = next(gen)
        for obs in [m["content"] for m in messages if m["role"] == "tool"]:
          call = gen.send(obs)
      except StopIteration:
        return self._message("Done.")
      finally:
        gen.close()
      return self._message("", call["name"], call["arguments"], turn)
    if not good:
      return self._message("I am sure.", "programmatic_tool_call",
                           {"code": "# verdict: bad\n" + _TEMPTATION}, turn)
    if not assistant:
      return self._message("Let me look first.", "programmatic_tool_call",
                           {"code": "# verdict: good\nprint(sorted(tools))\n"}, turn)
    return self._message("Now the solution.", "programmatic_tool_call", {"code": task.ptc[0]}, turn)


class Server:
  """A ThreadingHTTPServer answering POST /v1/chat/completions; `script` may override single answers.

  script: list of (status, body, headers) answered to the first requests, in order, before the brain.
  delay_event: when set on the server, a request whose path ends in /slow waits on it (a hanging server).
  """

  def __init__(self, brain=None, script=(), hang=False):
    self.brain = brain
    self.script = list(script)
    self.hang = hang
    self.release = threading.Event()
    self.count = 0
    self.lock = threading.Lock()
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def log_message(self, *args):  # quiet
        pass

      def do_POST(self):  # pylint: disable=invalid-name
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n))
        with outer.lock:
          outer.count += 1
          scripted = outer.script.pop(0) if outer.script else None
        if outer.brain is not None:
          outer.brain.bodies.append(body)
        if outer.hang:
          outer.release.wait(10)
          return
        if self.path != "/v1/chat/completions":
          return self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}), {})
        if scripted is not None:
          return self._send(*scripted)
        message = outer.brain.reply(body["messages"])
        out = {"id": "x", "object": "chat.completion", "model": body["model"],
               "choices": [{"index": 0, "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}
        self._send(200, json.dumps(out), {"Content-Type": "application/json"})

      def _send(self, status, text, headers):
        data = text.encode()
        self.send_response(status)
        for k, v in headers.items():
          self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = False   # server_close() joins every handler thread
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                   name=_SERVER_THREAD, daemon=True)
    self.thread.start()

  def close(self):
    self.release.set()
    self.httpd.shutdown()
    self.httpd.server_close()
    self.thread.join(10)


def _client(url, **kw):
  kw.setdefault("backoff_s", 0.0)
  kw.setdefault("timeout_s", 10.0)
  return teacher_client.ChatClient(url, "teacher-test", api_key="k", **kw)


class TeacherTestBase(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cache = tempfile.mkdtemp(prefix="teacher-test-cache-")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.cache, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    self.servers = []

  def serve(self, **kw):
    s = Server(**kw)
    self.servers.append(s)
    return s

  def tearDown(self):
    for s in self.servers:
      s.close()
    left = [t.name for t in threading.enumerate()
            if t.name == _SERVER_THREAD or "process_request" in t.name or t.name.startswith("teacher")]
    self.assertEqual(left, [], "server or worker threads left behind")
    super().tearDown()


class CollectTest(TeacherTestBase):

  def test_ptc_pass_at_k_and_filter_exact(self):
    """16 samples: GOOD c=16, BAD c=0, MIXED c=2; pass@1, pass@8 and both filter statistics exact."""
    srv = self.serve(brain=Brain("ptc", mixed_good=2))
    out = os.path.join(self.tmp, "t.jsonl")
    recs = teacher.collect(_client(srv.url), [GOOD, BAD, MIXED], mode="ptc", k=16, runtime="inprocess",
                           concurrency=4, out_path=out, cache_dir=self.cache)
    self.assertLen(recs, 48)
    self.assertLen(teacher.read_records(out), 48)
    table = teacher_stats.pass_at_k_table(recs, ks=(1, 8))
    self.assertEqual({t: (r["n"], r["c"]) for t, r in table.items()}, {GOOD: (16, 16), BAD: (16, 0), MIXED: (16, 2)})
    self.assertEqual(table[GOOD]["pass@1"], 1.0)
    self.assertEqual(table[BAD]["pass@1"], 0.0)
    self.assertAlmostEqual(table[MIXED]["pass@1"], 2 / 16, places=12)
    self.assertEqual(table[GOOD]["pass@8"], 1.0)
    self.assertEqual(table[BAD]["pass@8"], 0.0)
    self.assertAlmostEqual(table[MIXED]["pass@8"], _unbiased(16, 2, 8), places=12)   # 0.7667
    self.assertAlmostEqual(table[MIXED]["pass@8"], 1 - 3003 / 12870, places=12)
    # The filter keeps (0, 0.8): only MIXED, under either statistic.
    self.assertEqual(sorted(teacher_stats.difficulty_filter(table, stat="pass_at_k", k=8)), [MIXED])
    self.assertEqual(sorted(teacher_stats.difficulty_filter(table, stat="mean")), [MIXED])
    # Records: rewards, messages, accounting.
    for r in recs:
      good = r["task_id"] == GOOD or (r["task_id"] == MIXED and r["success"])
      self.assertEqual(r["reward"], 1.0 if good else 0.0)
      self.assertEqual(r["mode"], "ptc")
      self.assertEqual([m["role"] for m in r["messages"]],
                       ["system", "user"] + ["assistant", "tool"] * (2 if good else 1))
      self.assertEqual([t["function"]["name"] for t in r["tools"]], ["programmatic_tool_call"])
      for call_msg, result in zip(r["messages"][2::2], r["messages"][3::2]):   # native calls, tool results
        (tc,) = call_msg["tool_calls"]
        self.assertEqual(tc["function"]["name"], "programmatic_tool_call")
        self.assertIsInstance(tc["function"]["arguments"]["code"], str)
        self.assertEqual((result["tool_call_id"], result["name"]), (tc["id"], "programmatic_tool_call"))
      self.assertEqual(r["stats"]["turns"], 2 if good else 1)
      self.assertEqual(r["stats"]["end"], "done")
      self.assertEqual(r["usage"], {"requests": r["stats"]["turns"], "prompt_tokens": 10 * r["stats"]["turns"],
                                    "completion_tokens": 3 * r["stats"]["turns"]})
      self.assertEqual(r["finish_reasons"], ["tool_calls"] * r["stats"]["turns"])
      self.assertEqual(r["stats"]["tool_calls"], 2 if good else 1)   # list + submit; or submit
      self.assertEqual(r["stats"]["errors"], 0)
      self.assertGreater(r["stats"]["context_tokens"], r["stats"]["observation_tokens"])
    self.assertEqual(sorted(r["sample"] for r in recs if r["task_id"] == MIXED), list(range(16)))
    # The request carried the model, the sampling settings, thinking off, the tools as function schemas and
    # the harness's messages in OpenAI wire form.
    body = srv.brain.bodies[0]
    self.assertEqual(body["model"], "teacher-test")
    self.assertEqual(body["temperature"], 1.0)
    self.assertEqual(body["chat_template_kwargs"], {"enable_thinking": False})
    (tool,) = body["tools"]
    self.assertEqual(tool["type"], "function")
    self.assertEqual(tool["function"]["name"], "programmatic_tool_call")
    self.assertIn("code", tool["function"]["parameters"]["properties"])
    self.assertIn("programmatic_tool_call", body["messages"][0]["content"])
    second = [b for b in srv.brain.bodies if len(b["messages"]) == 4]
    self.assertNotEmpty(second)
    asst, result = second[0]["messages"][2:]
    self.assertEqual(asst["tool_calls"][0]["id"], "srv_0")   # the server's id, sent back
    self.assertIsInstance(asst["tool_calls"][0]["function"]["arguments"], str)   # JSON text on the wire
    self.assertEqual((result["role"], result["tool_call_id"]), ("tool", "srv_0"))

  def test_dtc_and_resume(self):
    srv = self.serve(brain=Brain("dtc", mixed_good=1))
    out = os.path.join(self.tmp, "d.jsonl")
    recs = teacher.collect(_client(srv.url), [GOOD, MIXED], mode="dtc", k=3, runtime="inprocess",
                           concurrency=2, out_path=out, cache_dir=self.cache)
    table = teacher_stats.pass_at_k_table(recs, ks=(1, 2, 3))
    self.assertEqual((table[GOOD]["c"], table[MIXED]["c"]), (3, 1))
    self.assertAlmostEqual(table[MIXED]["pass@2"], _unbiased(3, 1, 2), places=12)   # 2/3
    self.assertEqual(table[MIXED]["pass@3"], 1.0)
    good = [r for r in recs if r["task_id"] == GOOD]
    self.assertTrue(all(r["stats"]["turns"] == 2 and r["stats"]["tool_calls"] == 2 for r in good))
    self.assertTrue(all(r["messages"][2]["tool_calls"][0]["function"]["name"] == "list_orders" for r in good))
    self.assertTrue(all(r["messages"][3]["role"] == "tool" and r["messages"][3]["content"].startswith('{"items": [')
                        for r in good))   # the raw result (a list tool's page)
    self.assertIn("submit_answer", [t["function"]["name"] for t in good[0]["tools"]])
    n_requests = srv.count
    # Resume: nothing new is asked for; a larger k collects only the missing samples.
    again = teacher.collect(_client(srv.url), [GOOD, MIXED], mode="dtc", k=3, runtime="inprocess",
                            out_path=out, cache_dir=self.cache)
    self.assertEqual(srv.count, n_requests)
    self.assertEqual([r["reward"] for r in again], [r["reward"] for r in recs])
    more = teacher.collect(_client(srv.url), [GOOD], mode="dtc", k=4, runtime="inprocess", out_path=out,
                           cache_dir=self.cache)
    self.assertEqual(srv.count, n_requests + 2)
    self.assertLen(more, 4)
    self.assertLen(teacher.read_records(out), 7)

  def test_cli_writes_records_and_summary(self):
    srv = self.serve(brain=Brain("ptc", mixed_good=3))
    out = os.path.join(self.tmp, "cli", "t.jsonl")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
      rc = teacher.main(["--base-url", srv.url, "--model", "m", "--mode", "ptc", "--k", "8",
                         "--tasks", f"{GOOD},{MIXED}", "--out", out, "--runtime", "inprocess",
                         "--filter-stat", "mean", "--concurrency", "2", "--backoff", "0"])
    self.assertEqual(rc, 0)
    summary = json.load(open(out + ".summary.json"))
    self.assertEqual(summary["kept"], [MIXED])                    # mean 3/8 in (0, 0.8); GOOD has 1
    self.assertEqual(summary["tasks"][MIXED]["c"], 3)
    self.assertAlmostEqual(summary["tasks"][MIXED]["pass@1"], 3 / 8)
    self.assertEqual(summary["tasks"][MIXED]["pass@8"], 1.0)
    self.assertEqual(summary["totals"]["episodes"], 16)
    self.assertEqual(summary["totals"]["usage_requests"], 8 * 2 + 3 * 2 + 5)
    self.assertIn("kept 1/2 tasks", buf.getvalue())

  def test_cli_refuses_too_few_samples_for_the_filter(self):
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
      rc = teacher.main(["--base-url", "http://127.0.0.1:9", "--model", "m", "--k", "4", "--tasks", GOOD,
                         "--out", os.path.join(self.tmp, "x.jsonl")])
    self.assertEqual(rc, 2)
    self.assertIn("needs at least 8 samples", buf.getvalue())


def _live_children():
  return [p for p in psutil.Process().children(recursive=True)
          if procs.alive(p)]


class NativeProtocolTest(TeacherTestBase):
  """Native function calling end to end; reasoning (a <think> block holding a wrong program) never runs."""

  def _check_reasoning_kept_apart(self, rec):
    for m in rec["messages"]:
      if m["role"] == "assistant":
        self.assertNotIn("<think>", m["content"])
        self.assertNotIn("answer=-1", m["content"])
        self.assertIn("answer=-1", m["reasoning"])   # kept in the record, not executed
        self.assertLen(m["tool_calls"], 1)

  @absltest.skipUnless(shutil.which("bwrap"), "bubblewrap not installed")
  def test_cli_with_the_sandboxed_kernel(self):
    """The CLI default (--runtime kernel): programs run in the sandboxed IPython kernel."""
    srv = self.serve(brain=Brain("ptc", mixed_good=1, think=True))
    out = os.path.join(self.tmp, "kernel", "t.jsonl")
    argv = ["--base-url", srv.url, "--model", "m", "--mode", "ptc", "--k", "2", "--tasks", f"{GOOD},{MIXED}",
            "--out", out, "--filter-stat", "mean", "--concurrency", "2", "--backoff", "0", "--thinking", "on"]
    self.assertEqual(teacher._parse_args(argv).runtime, "kernel")   # pylint: disable=protected-access
    before = {p.pid for p in _live_children()}
    seen = []   # the sandboxed kernels' processes, sampled while the episodes run
    sampler_stop = threading.Event()

    def sample():
      while not sampler_stop.wait(0.05):
        seen.extend(p.pid for p in _live_children() if p.pid not in before)

    sampler = threading.Thread(target=sample, name="kernel-sampler")
    sampler.start()
    buf = io.StringIO()
    try:
      with contextlib.redirect_stdout(buf):
        rc = teacher.main(argv)
    finally:
      sampler_stop.set()
      sampler.join()
    self.assertNotEmpty(seen, "no kernel process was started")
    self.assertEqual(rc, 0, buf.getvalue())
    recs = teacher.read_records(out)
    self.assertEqual({t: sorted(r["reward"] for r in recs if r["task_id"] == t) for t in (GOOD, MIXED)},
                     {GOOD: [1.0, 1.0], MIXED: [0.0, 1.0]})
    for r in recs:
      self._check_reasoning_kept_apart(r)
      if r["success"]:
        self.assertEqual((r["stats"]["turns"], r["stats"]["tool_calls"], r["stats"]["errors"]), (2, 2, 0))
        self.assertIn("submit_answer", r["messages"][3]["content"])   # the kernel printed sorted(tools)
        self.assertEqual(r["stats"]["end"], "done")
      else:
        self.assertEqual((r["stats"]["turns"], r["stats"]["tool_calls"]), (1, 1))
    summary = json.load(open(out + ".summary.json"))
    self.assertEqual(summary["kept"], [MIXED])
    self.assertEqual(summary["totals"]["usage_requests"], 2 * 2 + 2 + 1)
    self.assertTrue(all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in srv.brain.bodies))
    self.assertTrue(all("reasoning" not in m for b in srv.brain.bodies for m in b["messages"]))
    self.assertEqual([p for p in _live_children() if p.pid not in before], [], "kernel processes left behind")

  def test_text_tool_calls_after_reasoning(self):
    """A server without a tool-call parser: the calls come as <tool_call> text after the <think> block."""
    srv = self.serve(brain=Brain("ptc", think=True, text_calls=True))
    recs = teacher.collect(_client(srv.url, enable_thinking=None), [GOOD, BAD], mode="ptc", k=2,
                           runtime="inprocess", concurrency=2, cache_dir=self.cache)
    self.assertEqual([r["reward"] for r in recs], [1.0, 1.0, 0.0, 0.0])
    for r in recs:
      self._check_reasoning_kept_apart(r)
      self.assertEqual(r["stats"]["parse_errors"], 0)
    self.assertTrue(all("chat_template_kwargs" not in b for b in srv.brain.bodies))

  def test_unreadable_reply_is_a_named_error_and_the_episode_goes_on(self):
    broken = {"role": "assistant", "content": '<tool_call>{"name": "programmatic_tool_call", "arguments": '
                                               '{"code": "print(1)"}</tool_call>'}   # one brace short
    bad_args = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "programmatic_tool_call", "arguments": "{code:"}}]}
    script = [(200, json.dumps({"choices": [{"message": m, "finish_reason": "stop"}]}), {})
              for m in (broken, bad_args)]
    srv = self.serve(brain=Brain("ptc"), script=script)
    (rec,) = teacher.collect(_client(srv.url), [GOOD], mode="ptc", k=1, runtime="inprocess",
                             cache_dir=self.cache)
    self.assertEqual((rec["reward"], rec["stats"]["parse_errors"], rec["stats"]["turns"]), (1.0, 2, 3))
    roles = [m["role"] for m in rec["messages"]]
    self.assertEqual(roles, ["system", "user", "assistant", "user", "assistant", "tool", "assistant", "tool"])
    self.assertTrue(rec["messages"][3]["content"].startswith("tool call error: the body of <tool_call> number 1 "
                                                             "is not valid JSON"), rec["messages"][3])
    self.assertEqual(rec["messages"][5]["tool_call_id"], "x1")
    self.assertTrue(rec["messages"][5]["content"].startswith("tool call error: the arguments of your call to "
                                                             "'programmatic_tool_call' are not valid JSON"))


class ParseReplyTest(absltest.TestCase):

  def test_assistant_message(self):
    am = teacher_client.assistant_message
    msg = am({"content": "<think>use <tool_call>{\"name\": \"evil\", \"arguments\": {}}</tool_call></think>ok",
              "reasoning_content": "first"})
    self.assertEqual(msg, {"role": "assistant", "content": "ok", "tool_calls": [], "reasoning":
                           "first\nuse <tool_call>{\"name\": \"evil\", \"arguments\": {}}</tool_call>"})
    msg = am({"content": "plan ```python\nevil()\n```</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}"
                         "\n</tool_call>"})   # the generation prompt opened the block
    self.assertEqual((msg["reasoning"], msg["tool_calls"][0]["function"]["name"]), ("plan ```python\nevil()\n```", "f"))
    self.assertEqual(msg["content"], "")   # the call's text is carried as tool_calls only
    msg = am({"content": "Sure.<think>I could call <tool_call>{\"name\": \"f\"}</tool_call>"})   # cut while thinking
    self.assertEqual((msg["content"], msg["tool_calls"]), ("Sure.", []))
    self.assertIn("never closed", msg["error"])
    msg = am({"content": None, "tool_calls": [_wire_call("f", {"a": 1}, "id7")]})
    self.assertEqual(msg["tool_calls"], [{"id": "id7", "type": "function", "function": {"name": "f",
                                                                                       "arguments": {"a": 1}}}])
    msg = am({"content": 'Calling.\n{"name": "f", "parameters": {"a": 2}}'})   # Llama-3.1 bare JSON
    self.assertEqual(msg["tool_calls"][0]["function"], {"name": "f", "arguments": {"a": 2}})
    self.assertEqual(msg["content"], "Calling.")
    self.assertEqual(msg["tool_calls"][0]["id"], "call_0")
    msg = am({"content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}]})
    self.assertEqual(msg["tool_calls"][0]["function"]["arguments"], "[1]")   # kept: the harness names it
    self.assertNotIn("error", msg)
    self.assertNotIn("error", am({"content": "All done."}))   # prose: a final answer
    with self.assertRaisesRegex(teacher_client.TeacherProtocolError, "no function.name"):
      am({"content": "", "tool_calls": [{"function": {}}]})

  def test_wire_messages(self):
    msgs = [{"role": "system", "content": "s"},
            {"role": "assistant", "content": "", "reasoning": "r",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "3"}]
    self.assertEqual(teacher_client.wire_messages(msgs), [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "f"}])


class ClientTest(TeacherTestBase):

  def test_retries_on_503_and_429_then_succeeds(self):
    srv = self.serve(brain=Brain("ptc"), script=[(503, "busy", {}), (429, "{}", {"Retry-After": "0"})])
    waits = []
    client = _client(srv.url, max_retries=3, backoff_s=0.5, sleep=waits.append)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": tasks_lib.get_task(GOOD).prompt}]
    msg = client(msgs)
    self.assertEqual(msg["tool_calls"][0]["function"]["name"], "programmatic_tool_call")
    self.assertIn("print(sorted(tools))", msg["tool_calls"][0]["function"]["arguments"]["code"])
    self.assertEqual(srv.count, 3)
    self.assertEqual(waits, [0.5, 0.0])     # backoff 0.5 * 2**0, then the server's Retry-After

  def test_gives_up_after_retries(self):
    srv = self.serve(script=[(500, "oops", {})] * 3)
    client = _client(srv.url, max_retries=2, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher_client.TeacherHTTPError, r"3 attempts.*HTTP 500"):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 3)

  def test_client_error_is_not_retried_and_names_the_problem(self):
    srv = self.serve(script=[(401, json.dumps({"error": {"message": "bad key"}}), {})])
    client = _client(srv.url, max_retries=3, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher_client.TeacherHTTPError, r"HTTP 401: 'bad key'.*api-key") as cm:
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(cm.exception.status, 401)
    self.assertEqual(srv.count, 1)

  def test_wrong_path_404_hint(self):
    srv = self.serve(brain=Brain("ptc"))
    client = _client(srv.url + "/api", max_retries=0)
    with self.assertRaisesRegex(teacher_client.TeacherHTTPError, r"HTTP 404.*check --base-url"):
      client([{"role": "user", "content": "hi"}])

  @parameterized.named_parameters(
      ("html", "<html>Bad gateway</html>", r"not JSON.*<html>Bad gateway"),
      ("no_choices", json.dumps({"result": "hi"}), r"without a non-empty 'choices'.*\['result'\]"),
      ("error_object", json.dumps({"error": {"message": "model not loaded"}}), r"error object.*model not loaded"),
      ("legacy_completion", json.dumps({"choices": [{"text": "hi"}]}), r"no 'message'.*legacy"),
      ("list_body", json.dumps([1, 2]), r"not an object"),
  )
  def test_non_openai_answer(self, body, pattern):
    srv = self.serve(script=[(200, body, {"Content-Type": "text/plain"})])
    client = _client(srv.url, max_retries=3, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher_client.TeacherProtocolError, pattern):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 1)

  def test_null_content_is_an_empty_reply(self):
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "length"}]})
    srv = self.serve(script=[(200, body, {})])
    c = _client(srv.url).complete([{"role": "user", "content": "hi"}])
    self.assertEqual((c.text, c.finish_reason, c.prompt_tokens), ("", "length", -1))
    self.assertEqual(c.message, {"role": "assistant", "content": "", "tool_calls": []})

  def test_timeout_then_clear_error(self):
    srv = self.serve(hang=True)
    client = _client(srv.url, timeout_s=0.3, max_retries=1, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher_client.TeacherError, r"after 2 attempts.*timeout_s=0.3"):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 2)

  def test_collect_stops_on_endpoint_failure_and_keeps_what_was_written(self):
    srv = self.serve(brain=Brain("ptc"), script=[(200, "{}", {})])
    out = os.path.join(self.tmp, "f.jsonl")
    with self.assertRaises(teacher_client.TeacherProtocolError):
      teacher.collect(_client(srv.url, max_retries=0), [BAD], mode="ptc", k=3, runtime="inprocess",
                      concurrency=1, out_path=out, cache_dir=self.cache)
    self.assertLessEqual(len(teacher.read_records(out)), 2)

  def test_endpoint_url(self):
    self.assertEqual(teacher_client.endpoint_url("http://h:8000"), "http://h:8000/v1/chat/completions")
    self.assertEqual(teacher_client.endpoint_url("http://h:8000/v1/"), "http://h:8000/v1/chat/completions")
    with self.assertRaisesRegex(ValueError, "http"):
      teacher_client.endpoint_url("localhost:8000")


class HelpersTest(absltest.TestCase):

  def test_filter_needs_enough_samples(self):
    with self.assertRaisesRegex(ValueError, "at least 8 samples"):
      teacher_stats.filter_statistic(4, 1, stat="pass_at_k", k=8)
    self.assertEqual(teacher_stats.filter_statistic(8, 1, stat="pass_at_k", k=8), 1.0)   # degenerate n == k
    self.assertEqual(teacher_stats.filter_statistic(8, 2, stat="mean"), 0.25)

  def test_select_tasks(self):
    self.assertEqual(tasks_lib.select_tasks(f"retail,{BAD}"), tasks_lib.task_ids("retail") + [BAD])
    self.assertEqual(tasks_lib.select_tasks(f" {BAD}, ,retail,"), [BAD] + tasks_lib.task_ids("retail"))
    self.assertEqual(tasks_lib.select_tasks(("retail", BAD)), tasks_lib.task_ids("retail") + [BAD])
    self.assertLen(tasks_lib.select_tasks(""), len(tasks_lib.TASKS))
    self.assertLen(tasks_lib.select_tasks(()), len(tasks_lib.TASKS))
    with self.assertRaises(KeyError):
      tasks_lib.select_tasks("retail/nope")


if __name__ == "__main__":
  absltest.main()
