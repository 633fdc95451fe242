"""Tests for common/tool_calls.py: the first complete JSON call wins, bad text never crashes."""

from absl.testing import absltest, parameterized

from common.tool_calls import parse_tool_call


class ParseToolCallTest(parameterized.TestCase):

  def test_call_followed_by_prose_parses_to_first_object(self):
    r = parse_tool_call('{"name": "search", "arguments": {"q": "x"}} done {ok}')
    self.assertEqual(r.kind, "call")
    self.assertEqual(r.call, {"name": "search", "arguments": {"q": "x"}})
    self.assertEqual(r.span, (0, 43))
    self.assertIsNone(r.error)

  def test_broken_call_is_an_error_observation(self):
    r = parse_tool_call('{"name": "search", "arguments": {"q": "x"} done {ok}')
    self.assertEqual(r.kind, "error")
    self.assertIsNone(r.call)
    obs = r.error_observation()
    self.assertTrue(obs.startswith("Error: could not read a tool call"))
    self.assertIn("never closed", obs)
    self.assertIn('"arguments"', obs)  # tells the agent the expected format

  def test_inner_object_of_a_broken_call_is_not_taken_as_a_call(self):
    r = parse_tool_call('{"name": "create_user", "arguments": {"name": "Bob"}')
    self.assertEqual(r.kind, "error")

  @parameterized.named_parameters(
      ("prose_braces_before_call", 'I will use {tool} now: {"name": "a", "arguments": {"k": 1}}',
       {"name": "a", "arguments": {"k": 1}}),
      ("missing_arguments", '{"name": "status"}', {"name": "status", "arguments": {}}),
      ("arguments_as_json_string", '{"name": "f", "arguments": "{\\"a\\": 1}"}',
       {"name": "f", "arguments": {"a": 1}}),
      ("parameters_alias", '{"name": "f", "parameters": {"a": 2}}', {"name": "f", "arguments": {"a": 2}}),
      ("tool_call_tags", '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>',
       {"name": "g", "arguments": {}}),
      ("code_fence", 'Sure.\n```json\n{"name": "g", "arguments": {"x": [1, 2]}}\n```\nThanks',
       {"name": "g", "arguments": {"x": [1, 2]}}),
      ("braces_inside_strings", '{"name": "w", "arguments": {"s": "}{\\"}"}} {"name": "later"}',
       {"name": "w", "arguments": {"s": '}{"}'}}),
      ("non_call_object_skipped", '{"thought": "hm"} {"name": "h", "arguments": {}}',
       {"name": "h", "arguments": {}}),
      ("name_is_stripped", '{"name": "  a  ", "arguments": {}}', {"name": "a", "arguments": {}}),
  )
  def test_calls(self, text, expected):
    r = parse_tool_call(text)
    self.assertEqual(r.kind, "call", msg=r.error)
    self.assertEqual(r.call, expected)

  @parameterized.named_parameters(
      ("name_not_string", '{"name": 3, "arguments": {}}', "non-empty string"),
      ("empty_name", '{"name": "", "arguments": {}}', "non-empty string"),
      ("arguments_list", '{"name": "f", "arguments": [1]}', "must be an object"),
      ("arguments_bad_string", '{"name": "f", "arguments": "{oops"}', "not valid JSON"),
      ("no_name", '{"tool": "f"}', 'no "name"'),
      ("invalid_json", "{'name': 'f'}", "invalid JSON"),
      ("unclosed", '{"name": "f", "arguments": {', "never closed"),
  )
  def test_errors(self, text, fragment):
    r = parse_tool_call(text)
    self.assertEqual(r.kind, "error")
    self.assertIn(fragment, r.error)

  @parameterized.parameters("", "The answer is 42.", "no braces here ]")
  def test_plain_prose_is_none(self, text):
    r = parse_tool_call(text)
    self.assertEqual(r.kind, "none")
    self.assertIn("no tool call", r.error_observation())

  def test_never_crashes_on_garbage(self):
    import random
    rng = random.Random(0)
    alphabet = '{}[]":,\\ abn0123456789truefalsnul'
    for _ in range(2000):
      text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
      r = parse_tool_call(text)
      self.assertIn(r.kind, ("call", "error", "none"))
      if r.kind == "call":
        self.assertIsInstance(r.call["arguments"], dict)

  def test_non_str_raises_type_error(self):
    with self.assertRaisesRegex(TypeError, "decoded text"):
      parse_tool_call(b'{"name": "a"}')


if __name__ == "__main__":
  absltest.main()
