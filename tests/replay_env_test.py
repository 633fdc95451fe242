"""Tests for phgpo/replay_env.py: ReplayEnv answers from the recording, and every other case explicitly."""
import json
import pickle

from absl.testing import absltest
from absl.testing import parameterized

from common.envs.base import ToolEnv
from phgpo import data
from phgpo import replay_env as env_lib


def _call(name, args, status="success", output=None):
  return data.ToolCall(name=name, arguments=args, arg_keys=tuple(sorted(args)), status=status,
                       output=output if output is not None else f"<{name} output>")


def _spec(name):
  return data.ToolSpec(name=name, description=f"{name} does things", domain="Toy", required=("q",), optional=(),
                       input_schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})


TASK = data.Task(task_id="Toy/0", domain="Toy", query="find x then y", final_answer="done", calls=(
    _call("search", {"q": "x"}, output="found x"),
    _call("fetch", {"id": 1}, status="failed", output="ERROR: Failed after 5 attempts"),
    _call("search", {"q": "y"}, output="found y"),
))
SHORT = data.Task(task_id="Toy/1", domain="Toy", query="just fetch", final_answer="ok",
                  calls=(_call("fetch", {"id": 2}, output="fetched 2"),))
SPECS = [_spec("fetch"), _spec("search"), _spec("weather")]


class ReplayEnvTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.env = env_lib.ReplayEnv([TASK, SHORT], SPECS, max_steps=20)

  def test_tools_mcp_form(self):
    tools = self.env.tools()
    self.assertEqual([t["name"] for t in tools], ["fetch", "search", "weather"])
    self.assertEqual(set(tools[0]), {"name", "description", "inputSchema"})
    tools[0]["name"] = "mutated"
    self.assertEqual(self.env.tools()[0]["name"], "fetch")
    json.dumps(tools)

  def test_gold_replay_returns_recorded_outputs(self):
    self.assertEqual(self.env.reset("Toy/0", seed=3), "find x then y")
    r1 = self.env.step({"name": "search", "arguments": {"q": "x"}})
    self.assertEqual((r1.observation, r1.status, r1.done), ("found x", "ok", False))
    self.assertEqual((r1.info["gold_index"], r1.info["arguments_match"], r1.info["arg_keys_match"]), (0, True, True))
    self.assertEqual(r1.info["seed"], 3)
    r2 = self.env.step({"name": "fetch", "arguments": {"id": 7}})
    self.assertEqual((r2.observation, r2.status, r2.done), ("ERROR: Failed after 5 attempts", "failed", False))
    self.assertEqual((r2.info["arguments_match"], r2.info["arg_keys_match"]), (False, True))
    r3 = self.env.step({"name": "search", "arguments": {"query": "y"}})  # second recorded 'search'
    self.assertEqual((r3.observation, r3.status, r3.done), ("found y", "ok", True))
    self.assertEqual((r3.info["gold_index"], r3.info["step"], r3.info["horizon"]), (2, 3, 3))
    self.assertFalse(r3.info["arg_keys_match"])
    json.dumps(r3.info)
    with self.assertRaisesRegex(RuntimeError, "done"):
      self.env.step({"name": "search", "arguments": {}})

  def test_out_of_order_call_takes_first_unconsumed(self):
    self.env.reset("Toy/0", seed=0)
    r = self.env.step({"name": "fetch", "arguments": {"id": 1}})
    self.assertEqual((r.observation, r.info["gold_index"]), ("ERROR: Failed after 5 attempts", 1))

  def test_unavailable(self):
    self.env.reset("Toy/0", seed=0)
    r = self.env.step({"name": "weather", "arguments": {"q": "paris"}})
    self.assertEqual(r.status, "unavailable")
    self.assertIn("not available in this replay", r.observation)
    self.assertIsNone(r.info["gold_index"])
    self.env.step({"name": "fetch", "arguments": {"id": 1}})
    r = self.env.step({"name": "fetch", "arguments": {"id": 1}})  # its only recording is consumed
    self.assertEqual(r.status, "unavailable")
    self.assertTrue(r.done)  # unavailable calls count towards the horizon

  @parameterized.named_parameters(
      ("not_a_dict", ["search", {}], "must be a dict, got list"),
      ("none", None, "must be a dict, got NoneType"),
      ("missing_name", {"arguments": {}}, "missing 'name'"),
      ("name_not_str", {"name": 3, "arguments": {}}, "'name' must be a non-empty string"),
      ("empty_name", {"name": "  "}, "'name' must be a non-empty string"),
      ("arguments_list", {"name": "search", "arguments": ["x"]}, "'arguments' must be a dict"),
      ("arguments_str", {"name": "search", "arguments": "q=x"}, "'arguments' must be a dict"),
      ("argument_key_int", {"name": "search", "arguments": {1: "x"}}, "keys must be parameter names"),
  )
  def test_malformed_call_is_invalid_not_a_crash(self, call, message):
    self.env.reset("Toy/0", seed=0)
    r = self.env.step(call)
    self.assertEqual(r.status, "invalid")
    self.assertIn(message, r.observation)
    self.assertEqual(r.info["step"], 1)
    # The recording is untouched: the gold call still answers.
    self.assertEqual(self.env.step({"name": "search", "arguments": {"q": "x"}}).observation, "found x")

  def test_unknown_tool_is_invalid_with_hint(self):
    self.env.reset("Toy/0", seed=0)
    r = self.env.step({"name": "serch", "arguments": {"q": "x"}})
    self.assertEqual(r.status, "invalid")
    self.assertIn("unknown tool 'serch'", r.observation)
    self.assertIn("Did you mean ['search'", r.observation)
    self.assertIn("tools()", r.observation)

  def test_missing_arguments_means_empty(self):
    self.env.reset("Toy/1", seed=0)
    r = self.env.step({"name": "fetch"})
    self.assertEqual((r.observation, r.status, r.done, r.info["arg_keys_match"]), ("fetched 2", "ok", True, False))

  @parameterized.parameters(
      ("gold", 20, 3), ("gold", 2, 2), ("max_steps", 5, 5), ("max_steps", 1, 1))
  def test_done_at_horizon(self, horizon, max_steps, expected):
    env = env_lib.ReplayEnv([TASK], SPECS, max_steps=max_steps, horizon=horizon)
    env.reset("Toy/0", seed=0)
    self.assertEqual(env.episode_horizon, expected)
    dones = [env.step({"name": "search", "arguments": {"q": "x"}}).done for _ in range(expected)]
    self.assertEqual(dones, [False] * (expected - 1) + [True])
    with self.assertRaises(RuntimeError):
      env.step({"name": "search", "arguments": {}})

  def test_reset_restores_recording(self):
    self.env.reset("Toy/0", seed=0)
    self.env.step({"name": "search", "arguments": {"q": "x"}})
    self.env.reset("Toy/0", seed=1)
    self.assertEqual(self.env.steps_taken, 0)
    self.assertEqual(self.env.step({"name": "search", "arguments": {"q": "x"}}).observation, "found x")

  def test_protocol_errors(self):
    with self.assertRaisesRegex(RuntimeError, "before reset"):
      self.env.step({"name": "search", "arguments": {}})
    with self.assertRaisesRegex(KeyError, "unknown task id 'Nope/0'.*'Toy/0'"):
      self.env.reset("Nope/0", seed=0)
    with self.assertRaisesRegex(ValueError, "env.horizon"):
      env_lib.ReplayEnv([TASK], SPECS, horizon="forever")
    with self.assertRaisesRegex(ValueError, "env.max_steps"):
      env_lib.ReplayEnv([TASK], SPECS, max_steps=0)
    with self.assertRaisesRegex(ValueError, r"not in tool_specs.*'search'.*load_tool_catalogue"):
      env_lib.ReplayEnv([TASK], [_spec("fetch")])

  def test_pickle_mid_episode(self):
    self.env.reset("Toy/0", seed=0)
    self.env.step({"name": "search", "arguments": {"q": "x"}})
    clone = pickle.loads(pickle.dumps(self.env))
    for e in (self.env, clone):
      r = e.step({"name": "search", "arguments": {"q": "y"}})
      self.assertEqual((r.observation, r.info["gold_index"]), ("found y", 2))

  def test_context_manager(self):
    with env_lib.ReplayEnv([TASK], SPECS) as env:
      self.assertIsInstance(env, ToolEnv)


class RealReplayTest(absltest.TestCase):

  def test_gold_replay_on_traject_bench(self):
    try:
      root = data.find_traject_bench()
    except FileNotFoundError as e:
      self.skipTest(f"TRAJECT-Bench not available: {e}")
    tasks = data.load_tasks(root, domains=["Finance", "Weather"])
    env = env_lib.ReplayEnv(tasks, data.load_tool_catalogue(root, tasks))
    for task in tasks[:: 25]:
      env.reset(task.task_id, seed=0)
      for i, gold in enumerate(task.calls):
        r = env.step({"name": gold.name, "arguments": dict(gold.arguments)})
        self.assertEqual(r.observation, gold.output)
        self.assertEqual(r.status, "ok" if gold.status == "success" else "failed")
        self.assertTrue(r.info["arguments_match"])
        self.assertEqual(r.done, i == len(task.calls) - 1)


if __name__ == "__main__":
  absltest.main()

