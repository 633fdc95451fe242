"""Tests of the ProgAgent harnesses: action parsing, prompts, the in-process runtime and episode accounting."""

import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from progagent import harness
from progagent.task_env import ProgTaskEnv

_CACHE = None


def setUpModule():
  global _CACHE
  _CACHE = tempfile.mkdtemp(prefix="progharness-test-")


def tearDownModule():
  shutil.rmtree(_CACHE, ignore_errors=True)


def _words(text):
  return len(text.split())


class Script:
  """A policy replying with fixed texts, then 'Done.'."""

  def __init__(self, *replies):
    self.replies = list(replies)
    self.seen = []

  def __call__(self, messages):
    self.seen.append(len(messages))
    return self.replies.pop(0) if self.replies else "Done."


class ParseTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("dtc_call", "dtc", 'I will look.\n{"name": "get_order", "arguments": {"order_id": 3}} thanks', "call"),
      ("dtc_string_args", "dtc", '{"name": "get_order", "arguments": "{\\"order_id\\": 3}"}', "call"),
      ("dtc_prose", "dtc", "The answer is 42.", "none"),
      ("dtc_broken", "dtc", '{"name": "get_order", "arguments": {"order_id": 3}', "error"),
      ("dtc_not_a_call", "dtc", '{"order_id": 3}', "error"),
      ("ptc_block", "ptc", "Plan:\n```python\nprint(1)\n```\nmore", "program"),
      ("ptc_py_tag", "ptc", "```py\nprint(1)\n```", "program"),
      ("ptc_unclosed", "ptc", "```python\nprint(1)\n", "error"),
      ("ptc_empty", "ptc", "```python\n\n```", "error"),
      ("ptc_no_block", "ptc", "All done, nothing to run.", "none"),
      ("ptc_json_is_not_an_action", "ptc", '{"name": "get_order", "arguments": {}}', "none"),
      ("hybrid_program_wins", "hybrid", '```python\nx = {"name": "get_order", "arguments": {}}\n```', "program"),
      ("hybrid_call", "hybrid", '{"name": "get_order", "arguments": {"order_id": 3}}', "call"),
      ("hybrid_prose", "hybrid", "Finished.", "none"),
  )
  def test_parse(self, mode, text, kind):
    act = harness.parse_action(mode, text)
    self.assertEqual(act.kind, kind, act)
    if kind == "call":
      self.assertEqual(act.call, {"name": "get_order", "arguments": {"order_id": 3}})
    if kind == "program":
      self.assertIn("\n", act.code)
      self.assertNotIn("```", act.code)
    if kind == "error":
      self.assertTrue(act.error.startswith("Error:"), act.error)

  def test_program_text_is_exact(self):
    act = harness.parse_action("ptc", "```python\nx = 1\nprint(x)\n```")
    self.assertEqual(act.code, "x = 1\nprint(x)\n")

  def test_bad_mode_and_input(self):
    with self.assertRaisesRegex(ValueError, "harness mode"):
      harness.parse_action("json", "x")
    with self.assertRaisesRegex(TypeError, "reply text"):
      harness.parse_action("dtc", None)

  def test_system_prompts(self):
    env = ProgTaskEnv("retail/pending_over_500")
    tools = env.tools()
    env.close()
    for mode in harness.MODES:
      p = harness.system_prompt(mode, tools)
      for t in tools:
        self.assertIn(f"- {t['name']}(", p)
      self.assertIn("status: string one of ['pending'", p)
      self.assertIn("directory: string (optional)", p)
    self.assertIn("one tool call per reply", harness.system_prompt("dtc", tools))
    self.assertNotIn("```python", harness.system_prompt("dtc", tools))
    self.assertIn("Only what your program prints", harness.system_prompt("ptc", tools))
    self.assertIn("50000 characters", harness.system_prompt("ptc", tools))
    hyb = harness.system_prompt("hybrid", tools)
    self.assertIn("JSON object", hyb)
    self.assertIn("```python", hyb)


class TokensAndRuntimeTest(absltest.TestCase):

  def test_regex_token_count(self):
    self.assertEqual(harness.regex_token_count(""), 0)
    self.assertEqual(harness.regex_token_count('{"id": 12, "name": "Ada Lopez"}'), 16)
    self.assertEqual(harness.regex_token_count("snake_case x2 ..."), 5)

  def test_token_counter_kinds(self):
    class Tok:
      def encode(self, text, add_special_tokens=True):
        assert not add_special_tokens
        return list(text)
    self.assertEqual(harness.make_token_counter(Tok())("abc"), 3)
    self.assertEqual(harness.make_token_counter(_words)("a b c d"), 4)
    self.assertIs(harness.make_token_counter(None), harness.regex_token_count)
    with self.assertRaisesRegex(TypeError, "tokenizer"):
      harness.make_token_counter(3)

  def test_truncate_output(self):
    self.assertEqual(harness.truncate_output("abc", 3), "abc")
    out = harness.truncate_output("é" * 10, 4)
    self.assertEqual(out, "éééé\n[output truncated: 6 more characters were cut]")

  def test_in_process_runtime(self):
    calls = []

    def call_tool(name, args):
      calls.append((name, args))
      if name == "bad":
        return {"content": [{"type": "text", "text": "Error: nope"}], "isError": True}
      return {"content": [{"type": "text", "text": "[1, 2, 3]"}], "isError": False}

    rt = harness.InProcessRuntime(call_tool, ["good", "bad"], max_output_chars=20)
    r = rt.run('x = tools["good"](k=1)\nprint(sum(x))')
    self.assertEqual(r, harness.ExecResult("6\n", None))
    r = rt.run("print(x[::-1])")   # variables persist
    self.assertEqual(r.output, "[3, 2, 1]\n")
    r = rt.run('try:\n    tools["bad"]()\nexcept ToolError as e:\n    print("caught", e)')
    self.assertEqual(r.output, "caught Error: nope\n")
    r = rt.run('y = 1\ntools["bad"]()')
    self.assertIn("line 2: tools[\"bad\"]()", r.error)
    self.assertIn("ToolError: Error: nope", r.error)
    r = rt.run("print('z' * 50)")
    self.assertTrue(r.output.startswith("z" * 20 + "\n[output truncated: 31 more"))
    r = rt.run("x = 2\ndef f(:\n  pass")
    self.assertIn("SyntaxError", r.error)
    self.assertIn("line 2: def f(:", r.error)
    self.assertEqual(calls, [("good", {"k": 1}), ("bad", {}), ("bad", {})])
    rt.close()

  def test_format_exec(self):
    self.assertEqual(harness.format_exec(harness.ExecResult("", None)), "(no output)")
    self.assertEqual(harness.format_exec(harness.ExecResult("a", "Boom")), "a\nError:\nBoom")
    with self.assertRaisesRegex(ValueError, "runtime kind"):
      harness.make_runtime("docker", None)


class EpisodeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.env = ProgTaskEnv("retail/pending_over_500", cache_dir=_CACHE)

  def tearDown(self):
    self.env.close()
    super().tearDown()

  def _check_tokens(self, ep):
    total = sum(_words(m["content"]) for m in ep.messages)
    s = ep.stats
    self.assertEqual(s.context_tokens, total)
    self.assertEqual(s.prompt_tokens + s.action_tokens + s.observation_tokens, total)
    self.assertEqual(s.prompt_tokens, _words(ep.messages[0]["content"]) + _words(ep.messages[1]["content"]))

  def test_dtc_accounting(self):
    self.env.reset(seed=0)
    n = self.env.task.expected(self.env._ctx)   # pylint: disable=protected-access
    policy = Script('{"name": "list_orders", "arguments": {"status": "pending"',      # never closed
                    '{"name": "list_order", "arguments": {"status": "pending"}}',     # unknown tool
                    '{"name": "list_orders", "arguments": {"status": "pending"}}',
                    f'{{"name": "submit_answer", "arguments": {{"answer": {n}}}}}')
    ep = harness.run_episode(self.env, policy, mode="dtc", tokenizer=_words)
    s = ep.stats
    self.assertEqual((s.turns, s.tool_calls, s.tool_errors, s.parse_errors, s.program_errors), (4, 3, 1, 1, 0))
    self.assertEqual(s.errors, 2)
    self.assertEqual((s.reward, s.end), (1.0, "done"))
    self.assertLen(ep.messages, 2 + 2 * 4)
    self.assertEqual(policy.seen, [2, 4, 6, 8])
    self.assertTrue(ep.messages[3]["content"].startswith("Error: could not read a tool call"))
    self.assertTrue(ep.messages[5]["content"].startswith("Error: unknown tool 'list_order'"))
    self.assertTrue(ep.messages[7]["content"].startswith('[{"id": '))   # the raw result
    self._check_tokens(ep)

  def test_ptc_accounting(self):
    policy = Script("```python\nrows = tools['list_orders'](status='pending')\nprint(len(rows) > 0)\n```",
                    "```python\ntools['get_order'](order_id=1)\n```",
                    "```python\nn = sum(1 for o in rows if o['total'] > 500)\ntools['submit_answer'](answer=n)\n```",
                    "never asked")
    ep = harness.run_episode(self.env, policy, mode="ptc", tokenizer=_words)
    s = ep.stats
    self.assertEqual((s.turns, s.tool_calls, s.tool_errors, s.parse_errors, s.program_errors), (3, 3, 1, 0, 1))
    self.assertEqual((s.reward, s.end), (1.0, "done"))
    self.assertEqual(ep.messages[3]["content"], "True\n")         # only what was printed
    self.assertIn("ToolError: Error: no order with id 1", ep.messages[5]["content"])
    self.assertEqual(ep.messages[7]["content"], "(no output)")
    self._check_tokens(ep)

  def test_episode_ends(self):
    ep = harness.run_episode(self.env, Script("I give up."), mode="ptc")
    self.assertEqual((ep.stats.end, ep.stats.turns, ep.stats.reward), ("no_action", 1, 0.0))
    ep = harness.run_episode(self.env, Script(*["```python\nprint(1)\n```"] * 5), mode="hybrid", max_turns=3)
    self.assertEqual((ep.stats.end, ep.stats.turns, ep.stats.tool_calls), ("max_turns", 3, 0))

  def test_ptc_context_is_flat_while_dtc_grows(self):
    ctx = {}
    for level in (0, 3):
      env = ProgTaskEnv("retail/top_gold_customer", level, cache_dir=_CACHE)
      for mode in ("dtc", "ptc"):
        ep = harness.run_oracle(env, mode)
        self.assertEqual(ep.stats.reward, 1.0)
        ctx[mode, level] = ep.stats.context_tokens
      env.close()
    self.assertGreater(ctx["dtc", 3], 5 * ctx["dtc", 0])
    self.assertLess(abs(ctx["ptc", 3] - ctx["ptc", 0]), 0.05 * ctx["ptc", 0])
    self.assertGreater(ctx["dtc", 0], 10 * ctx["ptc", 0])


if __name__ == "__main__":
  absltest.main()
