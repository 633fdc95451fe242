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

from progagent import teacher
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


class Brain:
  """Decides each reply from the conversation (stateless per request except a per-task counter).

  PTC / Hybrid, good conversation: turn 1 a look-around program, turn 2 the oracle program (2 turns).
  DTC, good: the DTC oracle replayed over the observations in the history (one JSON call per turn).
  Bad: submit_answer(-1) at once (R = 0 for every task used here).
  The first program of a conversation carries a marker comment naming its verdict, so later turns know it.
  """

  def __init__(self, mode, mixed_good=0):
    self.mode = mode
    self.mixed_good = mixed_good
    self.lock = threading.Lock()
    self.first_turns = {}
    self.requests = 0
    self.bodies = []
    self.by_prompt = {t.prompt: t for t in tasks_lib.TASKS.values()}

  def _good(self, task, history):
    if history:
      return "verdict: bad" not in history[0]
    with self.lock:
      n = self.first_turns.get(task.task_id, 0)
      self.first_turns[task.task_id] = n + 1
    if task.task_id == GOOD:
      return True
    if task.task_id == MIXED:
      return n < self.mixed_good
    return False

  def reply(self, messages):
    task = self.by_prompt[messages[1]["content"]]
    assistant = [m["content"] for m in messages if m["role"] == "assistant"]
    good = self._good(task, assistant)
    if self.mode == "dtc":
      if not good:
        return '{"name": "submit_answer", "arguments": {"answer": -1}}'
      names = [t.name for t in task.domain.tools] + [base.SUBMIT_ANSWER.name]
      gen = oracle_lib.dtc_oracle(task.ptc, names)
      try:
        call = next(gen)
        observations = [m["content"] for m in messages[2:] if m["role"] == "user"]
        for obs in observations:
          call = gen.send(obs)
      except StopIteration:
        return "Done."
      finally:
        gen.close()
      return json.dumps(call)
    if not good:
      return "I am sure.\n```python\n# verdict: bad\ntools[\"submit_answer\"](answer=-1)\n```"
    if not assistant:
      return "Let me look first.\n```python\n# verdict: good\nprint(sorted(tools))\n```"
    return f"Now the solution.\n```python\n{task.ptc[0]}```"


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
        text = outer.brain.reply(body["messages"])
        out = {"id": "x", "object": "chat.completion", "model": body["model"],
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"}],
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
  return teacher.ChatClient(url, "teacher-test", api_key="k", **kw)


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
    table = teacher.pass_at_k_table(recs, ks=(1, 8))
    self.assertEqual({t: (r["n"], r["c"]) for t, r in table.items()}, {GOOD: (16, 16), BAD: (16, 0), MIXED: (16, 2)})
    self.assertEqual(table[GOOD]["pass@1"], 1.0)
    self.assertEqual(table[BAD]["pass@1"], 0.0)
    self.assertAlmostEqual(table[MIXED]["pass@1"], 2 / 16, places=12)
    self.assertEqual(table[GOOD]["pass@8"], 1.0)
    self.assertEqual(table[BAD]["pass@8"], 0.0)
    self.assertAlmostEqual(table[MIXED]["pass@8"], _unbiased(16, 2, 8), places=12)   # 0.7667
    self.assertAlmostEqual(table[MIXED]["pass@8"], 1 - 3003 / 12870, places=12)
    # The filter keeps (0, 0.8): only MIXED, under either statistic.
    self.assertEqual(sorted(teacher.difficulty_filter(table, stat="pass_at_k", k=8)), [MIXED])
    self.assertEqual(sorted(teacher.difficulty_filter(table, stat="mean")), [MIXED])
    # Records: rewards, messages, accounting.
    for r in recs:
      good = r["task_id"] == GOOD or (r["task_id"] == MIXED and r["success"])
      self.assertEqual(r["reward"], 1.0 if good else 0.0)
      self.assertEqual(r["mode"], "ptc")
      self.assertEqual([m["role"] for m in r["messages"][:3]], ["system", "user", "assistant"])
      self.assertEqual(r["stats"]["turns"], 2 if good else 1)
      self.assertEqual(r["stats"]["end"], "done")
      self.assertEqual(r["usage"], {"requests": r["stats"]["turns"], "prompt_tokens": 10 * r["stats"]["turns"],
                                    "completion_tokens": 3 * r["stats"]["turns"]})
      self.assertEqual(r["finish_reasons"], ["stop"] * r["stats"]["turns"])
      self.assertEqual(r["stats"]["tool_calls"], 2 if good else 1)   # list + submit; or submit
      self.assertEqual(r["stats"]["errors"], 0)
      self.assertGreater(r["stats"]["context_tokens"], r["stats"]["observation_tokens"])
    self.assertEqual(sorted(r["sample"] for r in recs if r["task_id"] == MIXED), list(range(16)))
    # The request carried the model, the sampling settings and the harness's messages.
    body = srv.brain.bodies[0]
    self.assertEqual(body["model"], "teacher-test")
    self.assertEqual(body["temperature"], 1.0)
    self.assertIn("tools[\"<tool>\"]", body["messages"][0]["content"])

  def test_dtc_and_resume(self):
    srv = self.serve(brain=Brain("dtc", mixed_good=1))
    out = os.path.join(self.tmp, "d.jsonl")
    recs = teacher.collect(_client(srv.url), [GOOD, MIXED], mode="dtc", k=3, runtime="inprocess",
                           concurrency=2, out_path=out, cache_dir=self.cache)
    table = teacher.pass_at_k_table(recs, ks=(1, 2, 3))
    self.assertEqual((table[GOOD]["c"], table[MIXED]["c"]), (3, 1))
    self.assertAlmostEqual(table[MIXED]["pass@2"], _unbiased(3, 1, 2), places=12)   # 2/3
    self.assertEqual(table[MIXED]["pass@3"], 1.0)
    good = [r for r in recs if r["task_id"] == GOOD]
    self.assertTrue(all(r["stats"]["turns"] == 2 and r["stats"]["tool_calls"] == 2 for r in good))
    self.assertTrue(all(r["messages"][2]["content"].startswith('{"name"') for r in good))
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


class ClientTest(TeacherTestBase):

  def test_retries_on_503_and_429_then_succeeds(self):
    srv = self.serve(brain=Brain("ptc"), script=[(503, "busy", {}), (429, "{}", {"Retry-After": "0"})])
    waits = []
    client = _client(srv.url, max_retries=3, backoff_s=0.5, sleep=waits.append)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": tasks_lib.get_task(GOOD).prompt}]
    text = client(msgs)
    self.assertIn("```python", text)
    self.assertEqual(srv.count, 3)
    self.assertEqual(waits, [0.5, 0.0])     # backoff 0.5 * 2**0, then the server's Retry-After

  def test_gives_up_after_retries(self):
    srv = self.serve(script=[(500, "oops", {})] * 3)
    client = _client(srv.url, max_retries=2, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher.TeacherHTTPError, r"3 attempts.*HTTP 500"):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 3)

  def test_client_error_is_not_retried_and_names_the_problem(self):
    srv = self.serve(script=[(401, json.dumps({"error": {"message": "bad key"}}), {})])
    client = _client(srv.url, max_retries=3, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher.TeacherHTTPError, r"HTTP 401: 'bad key'.*api-key") as cm:
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(cm.exception.status, 401)
    self.assertEqual(srv.count, 1)

  def test_wrong_path_404_hint(self):
    srv = self.serve(brain=Brain("ptc"))
    client = _client(srv.url + "/api", max_retries=0)
    with self.assertRaisesRegex(teacher.TeacherHTTPError, r"HTTP 404.*check --base-url"):
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
    with self.assertRaisesRegex(teacher.TeacherProtocolError, pattern):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 1)

  def test_null_content_is_an_empty_reply(self):
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "length"}]})
    srv = self.serve(script=[(200, body, {})])
    c = _client(srv.url).complete([{"role": "user", "content": "hi"}])
    self.assertEqual((c.text, c.finish_reason, c.prompt_tokens), ("", "length", -1))

  def test_timeout_then_clear_error(self):
    srv = self.serve(hang=True)
    client = _client(srv.url, timeout_s=0.3, max_retries=1, sleep=lambda s: None)
    with self.assertRaisesRegex(teacher.TeacherError, r"after 2 attempts.*timeout_s=0.3"):
      client([{"role": "user", "content": "hi"}])
    self.assertEqual(srv.count, 2)

  def test_collect_stops_on_endpoint_failure_and_keeps_what_was_written(self):
    srv = self.serve(brain=Brain("ptc"), script=[(200, "{}", {})])
    out = os.path.join(self.tmp, "f.jsonl")
    with self.assertRaises(teacher.TeacherProtocolError):
      teacher.collect(_client(srv.url, max_retries=0), [BAD], mode="ptc", k=3, runtime="inprocess",
                      concurrency=1, out_path=out, cache_dir=self.cache)
    self.assertLessEqual(len(teacher.read_records(out)), 2)

  def test_endpoint_url(self):
    self.assertEqual(teacher.endpoint_url("http://h:8000"), "http://h:8000/v1/chat/completions")
    self.assertEqual(teacher.endpoint_url("http://h:8000/v1/"), "http://h:8000/v1/chat/completions")
    with self.assertRaisesRegex(ValueError, "http"):
      teacher.endpoint_url("localhost:8000")


class HelpersTest(absltest.TestCase):

  def test_filter_needs_enough_samples(self):
    with self.assertRaisesRegex(ValueError, "at least 8 samples"):
      teacher.filter_statistic(4, 1, stat="pass_at_k", k=8)
    self.assertEqual(teacher.filter_statistic(8, 1, stat="pass_at_k", k=8), 1.0)   # degenerate n == k
    self.assertEqual(teacher.filter_statistic(8, 2, stat="mean"), 0.25)

  def test_select_tasks(self):
    self.assertEqual(teacher.select_tasks(f"retail,{BAD}"), tasks_lib.task_ids("retail") + [BAD])
    self.assertLen(teacher.select_tasks(""), len(tasks_lib.TASKS))
    with self.assertRaises(KeyError):
      teacher.select_tasks("retail/nope")


if __name__ == "__main__":
  absltest.main()
