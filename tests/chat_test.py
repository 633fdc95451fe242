"""Tests for common/chat.py: native chat formats (Qwen3-style, Llama-3.1-style, fallback), token-exact.

A PTC-like episode (one tool `programmatic_tool_call` with a `code` argument) runs end to end through the
rollout driver over a local worker pool with a tiny tokenizer carrying a Qwen3-style template: the prompt
lists the tool, a reply's <think> block holds code and a call that are never run, the tool result comes
back in the tool role, and the trajectory's tokens equal the template's render of the whole conversation.
"""

import json

from absl.testing import absltest, parameterized
import pytest

from common import chat as chat_lib
from common.chat import ChatBoundaryError, ChatTemplate, tool_schemas
from common.envs.base import StepResult, ToolEnv
from common.lm import testing
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

PTC_TOOL = {"name": "programmatic_tool_call", "description": "Run a Python program in the episode's runtime.",
            "inputSchema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}
SYSTEM = "Solve the task by writing programs."


class FakePTCEnv(ToolEnv):
  """A PTC-shaped env: every call runs (here: records) a program; 'submit(' in the code ends the episode."""

  def __init__(self):
    self.programs = []

  def tools(self):
    return [dict(PTC_TOOL)]

  def reset(self, task_id, seed):
    self.programs = []
    return f"Task {task_id}: compute 6 * 7 and submit it."

  def step(self, call):
    if call["name"] != "programmatic_tool_call":
      return StepResult(f"unknown tool {call['name']}", "invalid", False, {})
    code = call["arguments"]["code"]
    self.programs.append(code)
    if "submit(" in code:
      return StepResult("submitted", "ok", True, {"reward": 1.0, "programs": list(self.programs)})
    return StepResult(f"ran {len(self.programs)} program(s); output: 42", "ok", False, {})


def _call(code):
  body = json.dumps({"name": "programmatic_tool_call", "arguments": {"code": code}})
  return "<tool_call>\n" + body + "\n</tool_call>"


THINK_0 = ("<think>\nMaybe first run print('FROM_THOUGHT'):\n" + _call("print('FROM_THOUGHT')") + "\n</think>\n\n")
REPLY_0 = THINK_0 + _call("x = 6 * 7\nprint(x)")
REPLY_1 = "<think>\nThe output was 42; submit it.\n</think>\n\n" + _call("submit(42)")


def qwen3_tokenizer():
  return testing.build_tokenizer("qwen3", chat_template=testing.QWEN3_TOOL_TEMPLATE,
                                 extra_text=[REPLY_0, REPLY_1, "programmatic_tool_call <tool_call> </tool_call>"])


def llama31_tokenizer():
  tok = testing.build_tokenizer("llama", chat_template=testing.LLAMA31_TOOL_TEMPLATE)
  tok.add_special_tokens({"additional_special_tokens": ["<|python_tag|>", "<|eom_id|>"]})
  return tok


class Qwen3PTCEpisodeTest(absltest.TestCase):
  """The PTC episode through the driver with thinking on; the native format end to end."""

  @classmethod
  def setUpClass(cls):
    cls.tok = qwen3_tokenizer()
    cls.chat = ChatTemplate(cls.tok, enable_thinking=True)
    replies = [REPLY_0, REPLY_1]
    with WorkerPool.local(FakePTCEnv, 2) as pool:
      cls.trajs = RolloutDriver(pool, ScriptedPolicy(lambda r: replies[r.turn], cls.chat), cls.chat,
                                config=RolloutConfig(group_size=2, max_turns=4), system_prompt=SYSTEM).run(["t0"])

  def test_format_and_end_token(self):
    self.assertEqual(self.chat.format, "qwen")
    self.assertEqual(self.chat.end_id, self.tok.convert_tokens_to_ids("<|im_end|>"))

  def test_episode_ends_with_submission_and_thought_code_never_runs(self):
    for t in self.trajs:
      self.assertEqual(t.termination, "done")
      self.assertEqual(t.reward, 1.0)
      self.assertEqual(t.final_info["programs"], ["x = 6 * 7\nprint(x)", "submit(42)"])
      self.assertEqual([x.call["arguments"]["code"] for x in t.turns], ["x = 6 * 7\nprint(x)", "submit(42)"])
      self.assertIn("FROM_THOUGHT", t.turns[0].reasoning)
      self.assertNotIn("FROM_THOUGHT", t.turns[0].observation)

  def test_prompt_lists_the_tool_natively(self):
    text = self.tok.decode(self.trajs[0].turns[0].prompt_ids)
    self.assertIn('"name": "programmatic_tool_call"', text)
    self.assertIn("<tools>", text)
    self.assertTrue(text.startswith("<|im_start|>system\n" + SYSTEM))
    self.assertTrue(text.endswith("<|im_start|>assistant\n"))   # thinking on: no empty think block

  def _messages(self, t):
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": t.initial_observation},
            {"role": "assistant", "content": t.turns[0].response_text},
            {"role": "tool", "name": "programmatic_tool_call", "content": t.turns[0].observation},
            {"role": "assistant", "content": t.turns[1].response_text}]

  def test_observation_is_the_tool_role_and_equals_the_full_render_suffix(self):
    t = self.trajs[0]
    obs = self.tok.decode(t.turns[0].observation_ids)
    self.assertEqual(obs, "\n<|im_start|>user\n<tool_response>\n" + t.turns[0].observation
                     + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    full = self.chat.encode(self.chat.render(self._messages(t)[:4], [PTC_TOOL], add_generation_prompt=True))
    head = len(t.turns[0].prompt_ids) + len(t.turns[0].response_ids)
    self.assertEqual(full[:head], t.turns[0].prompt_ids + t.turns[0].response_ids)
    self.assertEqual(full[head:], t.turns[0].observation_ids)

  def test_trajectory_tokens_equal_the_render_of_the_whole_conversation(self):
    t = self.trajs[0]
    full = self.chat.encode(self.chat.render(self._messages(t), [PTC_TOOL], add_generation_prompt=False))
    self.assertEqual(full, t.token_ids().tolist() + self.chat.encode("\n"))

  def test_encode_conversation_reproduces_the_rollout_tokens(self):
    """SFT data built from the messages has the rollout's token layout (prompt/response split included)."""
    t = self.trajs[0]
    msgs = self._messages(t)
    msgs[2] = chat_lib.assistant_message(self.chat.parse(t.turns[0].response_text), keep_reasoning=True)
    msgs[4] = chat_lib.assistant_message(self.chat.parse(t.turns[1].response_text), keep_reasoning=True)
    pairs = self.chat.encode_conversation(msgs, [PTC_TOOL])
    self.assertEqual([p for p, _ in pairs], [x.prompt_ids for x in t.turns])
    self.assertEqual([r for _, r in pairs], [x.response_ids for x in t.turns])


@pytest.mark.fast
class Qwen3TemplateTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.tok = qwen3_tokenizer()

  @parameterized.parameters(True, False)
  def test_thinking_switch(self, thinking):
    c = ChatTemplate(self.tok, enable_thinking=thinking)
    prompt = self.tok.decode(c.prompt_ids([{"role": "user", "content": "hi"}], [PTC_TOOL]))
    self.assertEqual(prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), not thinking)
    obs = self.tok.decode(c.observation_ids(["out"], after=[c.end_id]))
    self.assertEqual(obs.endswith("<think>\n\n</think>\n\n"), not thinking)

  def test_cut_response_gets_the_end_token_first(self):
    c = ChatTemplate(self.tok)
    ids = c.observation_ids([{"role": "tool", "name": "f", "content": "a"}], after=c.encode("partial"))
    self.assertEqual(ids[0], c.end_id)
    self.assertEqual(c.observation_ids(["a"], after=[5, c.end_id]), ids[1:])

  def test_several_tool_results_share_one_user_turn(self):
    c = ChatTemplate(self.tok, enable_thinking=True)
    text = self.tok.decode(c.observation_ids(["a", "b"], after=[c.end_id]))
    self.assertEqual(text, "\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n"
                           "</tool_response><|im_end|>\n<|im_start|>assistant\n")

  def test_user_note_after_a_reply_with_reasoning(self):
    """A user note drops earlier reasoning on re-render (as Qwen3 does); the stub render is unaffected."""
    c = ChatTemplate(self.tok, enable_thinking=True)
    text = self.tok.decode(c.user_ids("tool call error: x", after=[c.end_id]))
    self.assertEqual(text, "\n<|im_start|>user\ntool call error: x<|im_end|>\n<|im_start|>assistant\n")

  def test_assistant_ids_native_call_syntax(self):
    c = ChatTemplate(self.tok, enable_thinking=False)
    msg = {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nRunning it.",
           "tool_calls": [{"type": "function", "function": {"name": "programmatic_tool_call",
                                                           "arguments": {"code": "print(1)"}}}]}
    ids = c.assistant_ids(msg)
    self.assertEqual(ids[-1], c.end_id)
    text = c.decode(ids)
    self.assertEqual(text, 'Running it.\n<tool_call>\n{"name": "programmatic_tool_call", "arguments": '
                           '{"code": "print(1)"}}\n</tool_call>')
    self.assertEqual(c.parse(text).tool_calls, [{"name": "programmatic_tool_call", "arguments": {"code": "print(1)"}}])

  def test_template_that_does_not_close_the_turn_raises_a_named_error(self):
    tok = qwen3_tokenizer()
    tok.chat_template = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + 'END\\n' }}"
                         "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    c = ChatTemplate(tok)
    with self.assertRaisesRegex(ChatBoundaryError, "did not close the assistant turn"):
      c.observation_ids(["a"], after=[c.end_id])

  def test_template_without_tools_gets_them_in_the_system_text(self):
    tok = testing.build_tokenizer("qwen2")   # the plain ChatML template: no tools support
    c = ChatTemplate(tok)
    self.assertFalse(c.template_has_tools)
    text = tok.decode(c.prompt_ids([{"role": "user", "content": "hi"}], [PTC_TOOL]))
    self.assertIn('"name": "programmatic_tool_call"', text)
    self.assertIn("<tool_call>", text)

  def test_template_without_tools_keeps_calls_and_results_as_text(self):
    # SmolLM2's plain ChatML would drop an assistant's tool_calls and print a bare 'tool' role: calls are written
    # in the <tool_call> syntax the model is asked for, results as Qwen2.5's <tool_response> user turns.
    tok = testing.build_tokenizer("qwen2")
    c = ChatTemplate(tok)
    call = {"type": "function", "function": {"name": "list_books", "arguments": {"author": "Morland"}}}
    msgs = [{"role": "user", "content": "count"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": '{"total": 5}'}, {"role": "tool", "content": '{"ok": true}'}]
    text = tok.decode(c.prompt_ids(msgs, [PTC_TOOL]))
    self.assertIn('<|im_start|>assistant\n<tool_call>\n{"name": "list_books", "arguments": {"author": "Morland"}}\n'
                  '</tool_call><|im_end|>', text)
    self.assertIn('<|im_start|>user\n<tool_response>\n{"total": 5}\n</tool_response>\n<tool_response>\n'
                  '{"ok": true}\n</tool_response><|im_end|>', text)
    self.assertNotIn("<|im_start|>tool", text)
    reply = c.assistant_ids(msgs[1])
    self.assertEqual(c.parse(c.decode(reply)).tool_calls, [{"name": "list_books", "arguments": {"author": "Morland"}}])
    follow = c.observation_ids([msgs[2]], after=reply)   # token-in/token-out: the same text as the whole render
    self.assertEqual(tok.decode(follow), '\n<|im_start|>user\n<tool_response>\n{"total": 5}\n</tool_response>'
                                         '<|im_end|>\n<|im_start|>assistant\n')


@pytest.mark.fast
class Llama31TemplateTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.tok = llama31_tokenizer()
    cls.chat = ChatTemplate(cls.tok)

  def test_format_end_and_stop_tokens(self):
    self.assertEqual(self.chat.format, "llama3")
    self.assertEqual(self.chat.end_id, self.tok.convert_tokens_to_ids("<|eot_id|>"))
    self.assertIn(self.tok.convert_tokens_to_ids("<|eom_id|>"), self.chat.stop_ids)

  def test_tools_in_first_user_turn_and_ipython_results(self):
    c = self.chat
    prompt = self.tok.decode(c.prompt_ids([{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": "task"}], [PTC_TOOL]))
    self.assertIn('"parameters"', prompt)
    self.assertTrue(prompt.endswith("task<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"))
    obs = self.tok.decode(c.observation_ids([{"role": "tool", "name": "f", "content": "out"}], after=[c.end_id]))
    self.assertEqual(obs, "<|start_header_id|>ipython<|end_header_id|>\n\nout<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n")

  def test_python_tag_reply_and_token_exact_follow_up(self):
    c = self.chat
    msgs = [{"role": "user", "content": "task"}]
    prompt = c.prompt_ids(msgs, [PTC_TOOL])
    reply = c.encode('<|python_tag|>{"name": "programmatic_tool_call", "parameters": {"code": "print(1)"}}') + [
        c.end_id]
    parsed = c.parse(c.decode(reply))
    self.assertEqual(parsed.tool_calls, [{"name": "programmatic_tool_call", "arguments": {"code": "print(1)"}}])
    obs = c.observation_ids([{"role": "tool", "name": "programmatic_tool_call", "content": "1"}], after=reply)
    full = c.encode(c.render(msgs + [chat_lib.assistant_message(parsed),
                                     {"role": "tool", "name": "programmatic_tool_call", "content": "1"}],
                             [PTC_TOOL], add_generation_prompt=True))
    self.assertEqual(full[-len(obs):], obs)
    # The template renders the call without the python tag: the same call, in JSON.
    self.assertEqual(c.decode(c.assistant_ids(chat_lib.assistant_message(parsed))),
                     '{"name": "programmatic_tool_call", "parameters": {"code": "print(1)"}}')


@pytest.mark.fast
class FallbackTest(absltest.TestCase):

  def test_byte_tokenizer_uses_the_hand_written_chatml(self):
    c = ChatTemplate(ByteTokenizer())
    self.assertEqual((c.format, c.end_id), ("fallback", 256))
    prompt = c.decode(c.prompt_ids([{"role": "user", "content": "task"}], [PTC_TOOL]))
    self.assertTrue(prompt.startswith("<|im_start|>system\n" + chat_lib.FALLBACK_SYSTEM + "\n\n# Tools\n{"))
    self.assertTrue(prompt.endswith("<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n"))
    ids = c.observation_ids(["out"], after=[65])
    self.assertEqual(ids[0], 256)
    self.assertEqual(c.decode(ids[1:]),
                     "\n<|im_start|>user\n<tool_response>\nout\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    a = c.assistant_ids({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]})
    self.assertEqual((c.decode(a), a[-1]), ('{"name": "f", "arguments": {"a": 1}}', 256))

  def test_hf_tokenizer_without_template_falls_back(self):
    tok = testing.build_tokenizer("qwen2", chat_template="")
    c = ChatTemplate(tok)
    self.assertEqual(c.format, "fallback")
    self.assertEqual(c.end_id, tok.convert_tokens_to_ids("<|im_end|>"))
    self.assertIn("<|im_start|>assistant\n", tok.decode(c.prompt_ids([{"role": "user", "content": "x"}], [])))
    with self.assertRaisesRegex(ValueError, "needs a tokenizer with a chat template"):
      ChatTemplate(tok, format="qwen")

  def test_unknown_format_is_named(self):
    with self.assertRaisesRegex(ValueError, "chat.format must be one of"):
      ChatTemplate(ByteTokenizer(), format="chatml")

  def test_tool_schemas(self):
    self.assertEqual(tool_schemas([PTC_TOOL]), [{"type": "function", "function": {
        "name": "programmatic_tool_call", "description": PTC_TOOL["description"],
        "parameters": PTC_TOOL["inputSchema"]}}])
    self.assertEqual(tool_schemas(tool_schemas([PTC_TOOL])), tool_schemas([PTC_TOOL]))


if __name__ == "__main__":
  absltest.main()
