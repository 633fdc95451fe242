"""Tests for common/tool_wire.py: decoding and error rules, ToolError, truncation, the program-run rule."""

import pickle
import sys
import threading

from absl.testing import absltest, parameterized
import pytest

from common import tool_wire as tw

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes


def _text(t, **extra):
  return dict({"content": [{"type": "text", "text": t}]}, **extra)


class DecodeTest(parameterized.TestCase):
  """The result -> value rule and the error rule, on wire dicts and SDK objects (no kernel)."""

  @parameterized.named_parameters(
      ("structured", {"content": [{"type": "text", "text": "{}"}], "structuredContent": {"a": 1}},
       {"a": 1}),
      ("wrapped_result", {"content": [], "structuredContent": {"result": [1, 2]}}, [1, 2]),
      ("json_text", _text('[1, {"b": null}]'), [1, {"b": None}]),
      ("python_repr", _text("{'a': (1, 2), 'b': None}"), {"a": (1, 2), "b": None}),
      ("raw_text", _text("hello world"), "hello world"),
      ("number_text", _text("42"), 42),
      ("leading_zero_text_stays_text", _text("007"), "007"),
      ("empty", {"content": []}, None),
      ("two_items", {"content": [{"type": "text", "text": "1"}, {"type": "text", "text": "x"}]},
       [1, "x"]),
      ("record_with_error_field_is_data", _text('{"id": 5, "error": "disk full", "host": "a"}'),
       {"id": 5, "error": "disk full", "host": "a"}),
      ("error_word_later_is_data", _text("no Error: here"), "no Error: here"),
      ("null_error_is_data", _text('{"error": null}'), {"error": None}),
  )
  def test_value(self, wire, expected):
    self.assertIsNone(tw.error_message(wire))
    self.assertEqual(tw.decode_result(wire, "t"), expected)

  @parameterized.named_parameters(
      ("is_error_true", _text("permission denied", isError=True), "permission denied"),
      ("is_error_structured_only", {"content": [], "structuredContent": {"error": "bad"},
                                    "isError": True}, "bad"),
      ("error_prefix", _text("Error: no such row"), "Error: no such row"),
      ("error_prefix_lowercase", _text("  error: nope"), "error: nope"),
      ("sdk_wording", _text("Error executing tool lookup: KeyError 7"),
       "Error executing tool lookup: KeyError 7"),
      ("exception_prefix", _text("ValueError: id must be positive"), "ValueError: id must be positive"),
      ("traceback", _text("Traceback (most recent call last):\n  ...\nKeyError: 7"),
       "Traceback (most recent call last):\n  ...\nKeyError: 7"),
      ("json_error_object", _text('{"error": "table x does not exist"}'), "table x does not exist"),
      ("json_error_with_code", _text('{"error": {"message": "not found"}, "code": 404}'), "not found"),
      ("structured_error_object", {"content": [], "structuredContent": {"error": "quota",
                                                                         "message": "try later"}},
       "quota: try later"),
  )
  def test_error(self, wire, message):
    self.assertEqual(tw.error_message(wire), message)
    with self.assertRaises(tw.ToolError) as cm:
      tw.decode_result(wire, "lookup")
    self.assertEqual(cm.exception.message, message)
    self.assertEqual(cm.exception.tool, "lookup")
    self.assertIn(message, str(cm.exception))

  def test_sdk_result_object(self):
    import mcp_types as types
    ok = types.CallToolResult(content=[types.TextContent(type="text", text='{"x": 1}')],
                              structured_content={"x": 1})
    self.assertEqual(tw.decode_result(tw.to_wire(ok)), {"x": 1})
    err = types.CallToolResult(content=[types.TextContent(type="text", text="boom")], is_error=True)
    with self.assertRaisesRegex(tw.ToolError, "boom"):
      tw.decode_result(tw.to_wire(err))
    silent = types.CallToolResult(content=[types.TextContent(type="text", text="Error: gone")])
    with self.assertRaisesRegex(tw.ToolError, "Error: gone"):
      tw.decode_result(tw.to_wire(silent))

  def test_step_result(self):
    from common.envs.base import StepResult
    self.assertEqual(tw.to_wire(StepResult("[1]", "ok", False, {})),
                     {"content": [{"type": "text", "text": "[1]"}]})
    self.assertTrue(tw.to_wire(StepResult("no such tool", "invalid", False, {}))["isError"])

  def test_bad_result_type(self):
    with self.assertRaisesRegex(TypeError, "CallToolResult"):
      tw.to_wire(3.5)
    with self.assertRaisesRegex(TypeError, "wire form"):
      tw.to_wire({"value": 1})

  def test_describe_tools(self):
    s = tw.describe_tools([{"name": "add", "description": "Adds.", "inputSchema": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a"]}}])
    self.assertEqual(s, "add(a: number, b?: number) - Adds.")

  def test_describe_tools_shows_the_output_schema(self):
    """A tool with an outputSchema is listed with what a program's call returns (the structured content)."""
    s = tw.describe_tools([{"name": "read_text_file", "description": "Reads.", "inputSchema": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "outputSchema": {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}}])
    self.assertEqual(s, "read_text_file(path: string) -> {content: string} - Reads.")

  def test_describe_schema(self):
    d = tw.describe_schema
    self.assertEqual(d({"type": "array", "items": {"type": "integer"}}), "list[integer]")
    self.assertEqual(d({"enum": ["a", "b"]}), '"a"|"b"')
    self.assertEqual(d({"type": ["string", "null"]}), "string|null")
    self.assertEqual(d({"anyOf": [{"type": "string"}, {"type": "object", "properties": {"x": {"type": "number"}},
                                                       "required": ["x"]}]}), "string|{x: number}")
    self.assertEqual(d({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "object", "properties": {"c": {"type": "object", "properties": {"d": {}}}}}}}}}),
        "{a?: {b?: {c?: object}}}")
    self.assertEqual(d({"type": "object"}), "object")
    self.assertEqual(d(None), "any")
    long = d({"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(100)}})
    self.assertLen(long, tw.MAX_SCHEMA_CHARS)
    self.assertTrue(long.endswith("..."))

  def test_structured_content_is_the_data_and_text_is_text(self):
    """structuredContent comes back whole (a single-key object too, as its outputSchema describes it); a text-only
    result comes back as its text (decoded when it is JSON)."""
    self.assertEqual(tw.decode_result({"content": [{"type": "text", "text": "hi"}],
                                       "structuredContent": {"content": "hi"}}), {"content": "hi"})
    self.assertEqual(tw.decode_result({"content": [{"type": "text", "text": "3 numbers, mean 2.0"}]}),
                     "3 numbers, mean 2.0")
    self.assertEqual(tw.decode_result({"content": [{"type": "text", "text": '{"count": 3}'}]}), {"count": 3})


class OutputBufferTest(parameterized.TestCase):
  """Streaming head+tail truncation equals cutting the whole string, in characters."""

  @parameterized.product(
      total=[0, 5, 10, 11, 37, 200], max_chars=[0, 1, 10, 11], mode=["head_tail", "head"],
      chunk=[1, 3, 1000])
  def test_matches_reference(self, total, max_chars, mode, chunk):
    s = "".join(chr(0x4E00 + (i * 7919) % 20000) if i % 3 else "é" for i in range(total))
    buf = tw.OutputBuffer(max_chars, mode)
    for i in range(0, len(s), chunk):
      buf.write(s[i:i + chunk])
    head_n = max_chars if mode == "head" else (max_chars + 1) // 2
    tail_n = max_chars - head_n
    out = buf.getvalue()
    if total <= max_chars:
      self.assertEqual(out, s)
      self.assertEqual(buf.cut, 0)
    else:
      self.assertEqual(buf.cut, total - max_chars)
      head, rest = out[:head_n], out[head_n:]
      self.assertEqual(head, s[:head_n])
      self.assertTrue(rest.startswith(f"\n[... {total - max_chars} characters cut"), rest)
      self.assertEqual(rest[rest.index("...]\n") + 5:], s[len(s) - tail_n:] if tail_n else "")
    out.encode("utf-8")  # no character split into invalid pieces

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "truncation"):
      tw.OutputBuffer(10, "tail")
    with self.assertRaisesRegex(ValueError, ">= 0"):
      tw.OutputBuffer(-1)


class ToolErrorTest(absltest.TestCase):

  def test_message_only_and_with_tool(self):
    e = tw.ToolError("no order with id 7")
    self.assertEqual(str(e), "no order with id 7")
    self.assertIsNone(e.tool)
    e = tw.ToolError("Error: gone", "get_order", {"content": []})
    self.assertEqual(str(e), "tool 'get_order' failed: Error: gone")
    self.assertEqual((e.message, e.tool, e.result), ("Error: gone", "get_order", {"content": []}))

  def test_pickles(self):
    e = pickle.loads(pickle.dumps(tw.ToolError("m", "t", {"content": []})))
    self.assertEqual((str(e), e.tool, e.result), ("tool 't' failed: m", "t", {"content": []}))

  def test_one_class_everywhere(self):
    from progagent import tool_proxy
    from progagent.tasks import base, oracle
    for mod in (tool_proxy, base, oracle):
      self.assertIs(mod.ToolError, tw.ToolError, mod.__name__)


class TruncateAndFormatTest(absltest.TestCase):

  def test_truncate_output(self):
    self.assertEqual(tw.truncate_output("abc", 3), "abc")
    out = tw.truncate_output("é" * 10, 4)
    self.assertEqual(out, "éé\n[... 6 characters cut: the output had 10, at most 4 are kept ...]\néé")
    self.assertTrue(tw.truncate_output("é" * 10, 4, "head").startswith("éééé\n[... 6 characters cut"))

  def test_format_exec(self):
    self.assertEqual(tw.format_exec(tw.ExecResult("", None)), "(no output)")
    self.assertEqual(tw.format_exec(tw.ExecResult("a", "Boom")), "a\nError:\nBoom")
    self.assertEqual(tw.format_exec(tw.ExecResult("x\nBoom: y\n", "Boom: y")), "x\nBoom: y\n")


class RunProgramTest(absltest.TestCase):

  def run_one(self, code, ns=None, sources=None):
    out = []
    ns = {} if ns is None else ns
    err = tw.run_program(code, ns, out.append, [] if sources is None else sources)
    return "".join(out), err

  def test_final_expression_repr_and_none(self):
    self.assertEqual(self.run_one("x = {'a': (1, 2)}\nx"), ("{'a': (1, 2)}\n", None))
    self.assertEqual(self.run_one("print('p')\nNone"), ("p\n", None))
    self.assertEqual(self.run_one("'s'"), ("'s'\n", None))
    self.assertEqual(self.run_one(""), ("", None))

  def test_stdout_and_stderr_in_order(self):
    out, err = self.run_one("import sys\nprint(1)\nprint(2, file=sys.stderr)\nsys.stdout.write('3\\n')\n"
                            "sys.stderr.write('4\\n')")
    self.assertEqual((out, err), ("1\n2\n3\n4\n2\n", None))   # the final write()'s value, 2, is shown

  def test_traceback_program_frames_only(self):
    sources, ns = [], {}
    self.assertEqual(self.run_one("import json\ndef f(s):\n  return json.loads(s)\n", ns, sources)[1], None)
    out, err = self.run_one("y = 1\nf('{')", ns, sources)
    self.assertTrue(err.startswith("JSONDecodeError: Expecting property name"), err)
    lines = out.splitlines()
    self.assertEqual(lines[:3], ["Traceback (most recent call last):", "  line 2: f('{')",
                                 "  line 3 of program 1: return json.loads(s)"])
    self.assertEqual(lines[3], err)
    self.assertNotIn("json/", out)

  def test_syntax_error_and_system_exit(self):
    out, err = self.run_one("x = 2\ndef f(:\n  pass")
    self.assertEqual(err, "SyntaxError: invalid syntax")
    self.assertIn("  line 2: def f(:", out)
    out, err = self.run_one("raise SystemExit(3)")
    self.assertEqual(err, "SystemExit: 3")

  def test_lone_surrogates_escaped_with_a_note(self):
    # issue 27 review, F6: the same rule as the kernel's (tests/security_kernel_test.py)
    out, err = self.run_one("print('a\\ud800'); print('\\udfff', '\\udc00')\n'\\ud801'")
    self.assertIsNone(err)
    self.assertEqual(out.splitlines()[:3], ["a\\ud800", "\\udfff \\udc00", "'\\ud801'"])
    self.assertIn("[runtime] The output held 3 lone surrogates", out)   # repr() escapes its own
    self.assertIn("(the first: \\ud800)", out)
    out, err = self.run_one("raise KeyError('\\ud800')")
    self.assertEqual(err, "KeyError: '\\ud800'")
    out.encode("utf-8")
    self.assertEqual(tw.escape_surrogates("ok \u00e9"), ("ok \u00e9", 0, None))
    buf = tw.OutputBuffer(100)   # what reaches the host from elsewhere (a kernel message) is escaped too
    buf.write("x\ud800")
    self.assertEqual(buf.getvalue(), "x\\ud800")

  def test_future_flags_do_not_leak(self):
    out, err = self.run_one("def f(x: int): pass\nf.__annotations__")
    self.assertEqual((out, err), ("{'x': <class 'int'>}\n", None))

  def test_streams_routed_per_thread(self):
    seen = {}

    def other():
      seen["other"] = self.run_one("import time\nfor i in range(50):\n  print('B', i)\n  time.sleep(0.001)")

    t = threading.Thread(target=other)
    t.start()
    mine = self.run_one("import time\nfor i in range(50):\n  print('A', i)\n  time.sleep(0.001)")
    t.join()
    self.assertEqual(mine[0], "".join(f"A {i}\n" for i in range(50)))
    self.assertEqual(seen["other"][0], "".join(f"B {i}\n" for i in range(50)))
    print("outside a program goes through", file=sys.stderr)


if __name__ == "__main__":
  absltest.main()
