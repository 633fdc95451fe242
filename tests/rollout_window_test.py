"""Tests for the windowed mode of common/rollout.py (common/windowed.py) and its <think>/<action> parser.

A scripted policy plays TextWorldExpress coin collector (in-process pool) through the driver in mode
'window' with a tiny Qwen2-style tokenizer (common.lm.testing.build_tokenizer): window contents,
admissible actions in every prompt, the invalid-action penalty, per-turn rows, anchor ids equal exactly
for equal observations, the turn limit. The parser cases need neither Java nor a tokenizer.
"""

import re
import shutil

import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import tool_calls as tc
from common import windowed as win_lib
from common.chat import ChatTemplate
from common.env_pool import WorkerPool
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy

try:
  import textworld_express  # noqa: F401
  HAVE_TWX = shutil.which("java") is not None
except ImportError:
  HAVE_TWX = False
PARAMS = {"coin": "numLocations=3,includeDoors=0,numDistractorItems=0"}
K = 2            # history window
PENALTY = 0.25   # invalid-action penalty
MAX_TURNS = 8
ANCHOR_OF_EMPTY = 8238016292129134938   # BLAKE2b-64 of b"", shifted right by one bit

# coin/3 (3 rooms, no doors): the coin is one room east of the start.
DETOUR = [
    "<think>I am not sure yet.</think> I will wait and see.",                       # no <action>: invalid
    "<think>Later I will <action>take coin</action>.</think><action>move east</action>",  # decoy in reasoning
    "<think>back</think><action>move west</action>",
    "<think>try</think><action>dance</action>",                                      # not admissible
    "<think>again</think><action> move   east </action>",
    "<think>there it is</think><action>take coin</action>",
]
DIRECT = ["<think>east</think><action>move east</action>", "<think>take</think><action>take coin</action>"]


@pytest.mark.fast
class ParseActionTest(parameterized.TestCase):

  def test_action_becomes_the_call(self):
    p = tc.parse_action("<think>go east then take it</think>\n<action>move east</action>")
    self.assertEqual(p.kind, "call")
    self.assertEqual(p.tool_calls, [{"name": "action", "arguments": {"action": "move east"}}])
    self.assertEqual(p.reasoning, "go east then take it")
    self.assertIsNone(p.error)

  def test_reasoning_is_never_parsed_as_the_action(self):
    p = tc.parse_action("<think>maybe <action>take coin</action>?</think><action>look around</action>")
    self.assertEqual(p.tool_calls[0]["arguments"]["action"], "look around")
    p = tc.parse_action("<think>I would <action>take coin</action></think> no action here")
    self.assertEqual((p.kind, p.error_kind), ("error", "no_action"))
    p = tc.parse_action("<think>only <action>take coin</action> in thought")
    self.assertEqual((p.kind, p.error_kind), ("error", "unclosed_think"))

  def test_opened_by_the_generation_prompt(self):
    p = tc.parse_action("reasoning only</think><action>inventory</action>")   # '<think>' was in the prompt
    self.assertEqual(p.tool_calls[0]["arguments"], {"action": "inventory"})

  @parameterized.named_parameters(
      ("no_think", "<action>move east</action>", "no_think"),
      ("no_action", "<think>x</think> move east", "no_action"),
      ("unclosed_action", "<think>x</think><action>move east", "unclosed_action"),
      ("empty_action", "<think>x</think><action>  </action>", "empty_action"),
      ("multiple_actions", "<think>x</think><action>a</action><action>b</action>", "multiple_actions"),
      ("unclosed_think", "<think>x <action>a</action>", "unclosed_think"),
  )
  def test_named_errors(self, text, kind):
    p = tc.parse_action(text)
    self.assertEqual(p.kind, "error")
    self.assertEqual(p.error_kind, kind)
    self.assertEqual(p.tool_calls, [])
    self.assertTrue(p.error.startswith("invalid action: "))
    self.assertIn(tc.ACTION_SYNTAX, p.error)

  def test_think_optional_and_whitespace(self):
    p = tc.parse_action("<action>\n  open   fridge \n</action>", require_think=False)
    self.assertEqual(p.tool_calls[0]["arguments"]["action"], "open fridge")
    with self.assertRaises(TypeError):
      tc.parse_action(None)


@pytest.mark.fast
class AnchorAndRenderTest(absltest.TestCase):

  def test_anchor_ids_are_stable_hashes(self):
    a = win_lib.anchor_id("You are in the kitchen.")
    self.assertEqual(a, win_lib.anchor_id("You are in the kitchen."))
    self.assertNotEqual(a, win_lib.anchor_id("You are in the pantry."))
    self.assertTrue(0 <= a < 2 ** 63)
    self.assertEqual(win_lib.anchor_id(""), ANCHOR_OF_EMPTY)   # fixed across processes and runs

  def test_window_keeps_the_last_k_pairs_and_cuts_long_lists(self):
    st = win_lib.WindowState("Find it.", "o4", ["a"] * 5,
                             history=[("o0", "x0"), ("o1", "x1"), ("o2", "x2"), ("o3", "x3")])
    text = win_lib.render(st, win_lib.WindowConfig(history_length=2, max_admissible_actions=3))
    self.assertIn("[Observation 3: 'o2', Action 3: 'x2']\n[Observation 4: 'o3', Action 4: 'x3']", text)
    self.assertNotIn("Observation 2", text)
    self.assertIn("already taken 4 step(s)", text)
    self.assertIn("You are now at step 5 and your current observation is: o4", text)
    self.assertIn("['a', 'a', 'a'] (and 2 more not listed)", text)
    self.assertNotIn("admissible actions of", win_lib.render(st, win_lib.WindowConfig(max_admissible_actions=0)))


@absltest.skipUnless(HAVE_TWX, "needs java and textworld-express")
class WindowedDriverTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    from common.envs.twx_env import TwxToolEnv
    from common.lm.testing import build_tokenizer
    cls.chat = ChatTemplate(build_tokenizer("qwen2"))
    cls.start = {}
    env = TwxToolEnv(game_params=PARAMS)
    for t in ("coin/3", "coin/1"):
      env.reset(t, 0)
      cls.start[t] = env.episode_info()
    env.close()

    def script(r):
      if r.task_id == "coin/1":
        return "<think>I keep thinking</think>"
      return (DETOUR if r.sample == 0 else DIRECT)[r.turn]

    cls.requests = []
    policy = ScriptedPolicy(lambda r: cls.requests.append(r) or script(r), cls.chat)
    cls.pool = WorkerPool.local(lambda: TwxToolEnv(game_params=PARAMS), 2)
    cfg = RolloutConfig(mode="window", group_size=2, max_turns=MAX_TURNS, max_context_tokens=6000,
                        max_response_tokens=300,
                        window=win_lib.WindowConfig(history_length=K, invalid_action_penalty=PENALTY))
    cls.driver = RolloutDriver(cls.pool, policy, cls.chat, config=cfg)
    cls.trajs = cls.driver.run(["coin/3", "coin/1"])
    cls.pool.close()
    cls.detour, cls.direct, cls.stuck0, cls.stuck1 = cls.trajs

  def _prompt(self, turn):
    return self.chat.decode(turn.prompt_ids)

  def test_outcomes(self):
    self.assertEqual([t.termination for t in self.trajs], ["done", "done", "turn_limit", "turn_limit"])
    self.assertEqual([t.success for t in self.trajs], [True, True, False, False])
    self.assertEqual([t.reward for t in self.trajs], [1.0, 1.0, 0.0, 0.0])
    self.assertEqual([t.num_turns for t in self.trajs], [6, 2, MAX_TURNS, MAX_TURNS])
    self.assertEqual([x.action for x in self.detour.turns],
                     [None, "move east", "move west", "dance", "move east", "take coin"])
    self.assertEqual(self.driver.stats["invalid_actions"], 2 + 2 * MAX_TURNS)
    with self.assertRaisesRegex(TypeError, "one prompt per turn"):
      self.detour.token_ids()

  def test_each_prompt_is_a_whole_rerendered_prompt(self):
    for t in self.trajs:
      for k, turn in enumerate(t.turns):
        text = self._prompt(turn)
        self.assertTrue(text.startswith("<|im_start|>"), text[:80])   # the template's own opening
        self.assertNotIn(win_lib.WINDOW_SYSTEM, text)   # native template: no system message given
        self.assertIn(f"<|im_start|>user\n{win_lib.WindowConfig().header}", text)
        self.assertTrue(text.endswith("<|im_start|>assistant\n"))
        self.assertEqual(text.count("<|im_start|>user"), 1)
        self.assertIn(f"You are now at step {k + 1} and your current observation is:", text)
        self.assertEqual(turn.observation_ids, [])
    # the policy saw exactly the turn's prompt (no context carried over)
    seen = {(r.episode, r.turn): r.token_ids for r in self.requests}
    for t in self.trajs:
      for k, turn in enumerate(t.turns):
        self.assertEqual(seen[(t.episode, k)], turn.prompt_ids)

  def test_window_contents(self):
    turns = self.detour.turns
    info = self.start["coin/3"]
    p0 = self._prompt(turns[0])
    self.assertTrue(info["instruction"].startswith("Your task is to search"))
    self.assertIn(f"text-based environment.\n{info['instruction']}\n", p0)
    self.assertIn(f"text-based environment. {info['instruction']}\n", self._prompt(turns[1]))
    self.assertNotIn("Observation 1:", p0)
    p4 = self._prompt(turns[4])   # history: [invalid, move east, move west, dance]; window k = 2
    self.assertIn("already taken 4 step(s). Below are the most recent 2 observations", p4)
    self.assertNotIn("Observation 2:", p4)
    self.assertIn(f"[Observation 3: '{turns[2].window_observation}', Action 3: 'move west']", p4)
    self.assertIn(f"[Observation 4: '{turns[3].window_observation}', Action 4: 'dance']", p4)
    self.assertIn(f"your current observation is: {turns[4].window_observation}", p4)
    self.assertEqual(turns[4].window_observation, turns[3].observation)   # "Unknown action ..."
    p2 = self._prompt(turns[2])
    self.assertIn(f"Action 1: '{win_lib.INVALID_HISTORY_ACTION}'", p2)
    self.assertIn("Action 2: 'move east'", p2)

  def test_admissible_actions_in_every_prompt(self):
    self.assertEqual(self.detour.turns[0].admissible_actions, self.start["coin/3"]["admissible_actions"])
    for t in self.trajs:
      for turn in t.turns:
        self.assertNotEmpty(turn.admissible_actions)
        listed = re.search(r"admissible actions of the current situation are: \[(.*)\]\.", self._prompt(turn))
        self.assertEqual(listed.group(1), ", ".join(f"'{a}'" for a in turn.admissible_actions))
    self.assertIn("take coin", self.detour.turns[-1].admissible_actions)

  def test_invalid_action_penalty(self):
    t0, t3 = self.detour.turns[0], self.detour.turns[3]
    self.assertEqual((t0.status, t0.invalid, t0.penalty, t0.step_reward), ("parse_error", True, PENALTY, -PENALTY))
    self.assertEqual(t0.calls, [])                                      # no env step
    self.assertIn("no <action>", t0.parse_error)
    self.assertIn("Your previous response was invalid: invalid action: no <action>", self._prompt(self.detour.turns[1]))
    self.assertEqual(self.detour.turns[1].window_observation, t0.window_observation)   # state unchanged
    self.assertEqual((t3.status, t3.invalid, t3.penalty, t3.step_reward), ("invalid", True, PENALTY, -PENALTY))
    self.assertIn("Unknown action", t3.observation)                     # the env answered it
    for k in (1, 2, 4):
      self.assertEqual((self.detour.turns[k].invalid, self.detour.turns[k].penalty), (False, 0.0))
    last = self.detour.turns[-1]
    self.assertEqual((last.env_reward, last.step_reward, last.done), (1.0, 1.0, True))
    for t in (self.stuck0, self.stuck1):
      self.assertTrue(all(x.invalid and x.step_reward == -PENALTY for x in t.turns))
      self.assertTrue(all(x.parse_error and "no <action>" in x.parse_error for x in t.turns))

  def test_per_turn_rows(self):
    rows = win_lib.turn_rows(self.trajs)
    self.assertLen(rows, sum(t.num_turns for t in self.trajs))
    r = rows[5]   # the detour's winning turn
    self.assertEqual((r["episode"], r["group"], r["sample"], r["turn"], r["success"]), (0, 0, 0, 5, True))
    for row, turn in zip(rows, [x for t in self.trajs for x in t.turns]):
      self.assertEqual(row["policy_tokens"], len(turn.response_ids))
      self.assertEqual(row["response_ids"][-1], self.chat.end_id)
    b = win_lib.collate_rows(rows)
    n = len(rows)
    self.assertEqual(b["tokens"].shape[0], n)
    np.testing.assert_array_equal(b["policy_mask"].sum(1), b["policy_tokens"])
    np.testing.assert_array_equal(b["lengths"], b["prompt_lengths"] + b["policy_tokens"])
    np.testing.assert_array_equal(b["turn"], [x["turn"] for x in rows])
    np.testing.assert_allclose(b["step_rewards"], [x["step_reward"] for x in rows])
    np.testing.assert_array_equal(b["success"], [True] * 8 + [False] * (2 * MAX_TURNS))
    first = rows[0]
    np.testing.assert_array_equal(b["tokens"][0, :len(first["prompt_ids"])], first["prompt_ids"])

  def test_anchor_ids_equal_exactly_for_equal_observations(self):
    turns = [x for t in self.trajs for x in t.turns]
    groups = [t.group for t in self.trajs for _ in t.turns]
    for x in turns:
      self.assertEqual(x.anchor_id, win_lib.anchor_id(x.window_observation))
    for a in turns:
      for b in turns:
        self.assertEqual(a.anchor_id == b.anchor_id, a.window_observation == b.window_observation)
    d, s = self.detour.turns, self.direct.turns
    self.assertEqual(d[0].anchor_id, s[0].anchor_id)        # two rollouts, same start
    self.assertEqual(d[1].anchor_id, d[0].anchor_id)        # invalid reply: same state
    self.assertEqual(d[2].anchor_id, s[1].anchor_id)        # the east room, turn 2 vs turn 1
    self.assertEqual(d[2].window_observation, s[1].window_observation)
    sg = win_lib.collate_rows(win_lib.turn_rows(self.trajs))["step_group_ids"]
    for i in range(len(turns)):
      for j in range(len(turns)):
        same = groups[i] == groups[j] and turns[i].anchor_id == turns[j].anchor_id
        self.assertEqual(sg[i] == sg[j], same)


if __name__ == "__main__":
  absltest.main()
