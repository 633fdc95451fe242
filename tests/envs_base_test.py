"""Tests for common/envs/base.py: the helpers the text-game environments share."""

from absl.testing import absltest
import pytest

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes


class TextGameHelpersTest(absltest.TestCase):
  """common.envs.base helpers shared by the text-game environments (ScienceWorld, TWX, household)."""

  def test_read_action(self):
    from common.envs import base
    self.assertEqual(base.read_action({"name": "action", "arguments": {"action": " go "}}, example="look"),
                     (" go ", None))
    for call in ({"name": "act", "arguments": {}}, "action", None):
      action, err = base.read_action(call, example="look")
      self.assertIsNone(action)
      self.assertIn("unknown tool", err)
    for args in ({}, {"action": "  "}, {"action": 3}, ["look"]):
      action, err = base.read_action({"name": "action", "arguments": args}, example="look")
      self.assertIsNone(action)
      self.assertIn('"arguments": {"action": "look"}', err)

  def test_split_task_id(self):
    from common.envs import base
    self.assertEqual(base.split_task_id("a/b/7", env="X", form="'t/0'", number="seed"), ("a/b", 7))
    with self.assertRaisesRegex(ValueError, "X task ids look like 't/0'"):
      base.split_task_id("nope", env="X", form="'t/0'", number="seed")
    with self.assertRaisesRegex(ValueError, "seed in 't/x' must be an integer"):
      base.split_task_id("t/x", env="X", form="'t/0'", number="seed")


if __name__ == "__main__":
  absltest.main()
