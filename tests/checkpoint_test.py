"""Tests for common/checkpoint.py: whole-state round trip and the strict structure check."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from common import checkpoint


def _state(width=4):
  return {
      "params": {"dense": {"kernel": jnp.arange(3 * width, dtype=jnp.float32).reshape(3, width),
                           "bias": jnp.ones((width,), jnp.float32)}},
      "key": jax.random.key_data(jax.random.key(7)),
      "step": jnp.asarray(5, jnp.int32),
  }


class CheckpointTest(absltest.TestCase):

  def test_round_trip_and_latest(self):
    d = self.create_tempdir().full_path
    ck = checkpoint.Checkpointer(d, max_to_keep=2)
    self.assertIsNone(ck.latest_step())
    s = _state()
    ck.save(1, s)
    s2 = jax.tree.map(lambda x: x + 1, s)
    ck.save(2, s2)
    ck.close()
    ck = checkpoint.Checkpointer(d)
    restored, step = ck.restore_or_init(_state())
    self.assertEqual(step, 2)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(s2)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ck.close()

  def test_init_when_empty(self):
    d = self.create_tempdir().full_path
    ck = checkpoint.Checkpointer(d)
    s = _state()
    out, step = ck.restore_or_init(s)
    self.assertIsNone(step)
    self.assertIs(out, s)
    ck.close()

  def test_mismatch_lists_keys_and_shapes(self):
    d = self.create_tempdir().full_path
    ck = checkpoint.Checkpointer(d)
    ck.save(3, _state(width=4))
    target = _state(width=8)
    target["params"]["extra"] = jnp.zeros((2,), jnp.float32)
    del target["step"]
    with self.assertRaises(checkpoint.CheckpointMismatchError) as cm:
      ck.restore(3, target)
    msg = str(cm.exception)
    self.assertIn("shape mismatch at params/dense/kernel: checkpoint (3, 4) vs train state (3, 8)", msg)
    self.assertIn("shape mismatch at params/dense/bias: checkpoint (4,) vs train state (8,)", msg)
    self.assertNotIn("dtype mismatch", msg)
    self.assertIn("only in checkpoint: step", msg)
    self.assertIn("only in train state: params/extra", msg)
    ck.close()

  def test_dtype_mismatch_is_named(self):
    # A float32 checkpoint restored into a bfloat16 state (e.g. a changed model.param_dtype) is refused,
    # naming every leaf whose dtype differs, with both dtypes; nothing is cast or partly restored.
    d = self.create_tempdir().full_path
    ck = checkpoint.Checkpointer(d)
    ck.save(3, _state())
    target = _state()
    target["params"] = jax.tree.map(lambda x: x.astype(jnp.bfloat16), target["params"])
    target["step"] = target["step"].astype(jnp.int16)
    with self.assertRaises(checkpoint.CheckpointMismatchError) as cm:
      ck.restore(3, target)
    msg = str(cm.exception)
    self.assertIn("(3 differences)", msg)
    self.assertIn("dtype mismatch at params/dense/kernel: checkpoint float32 vs train state bfloat16", msg)
    self.assertIn("dtype mismatch at params/dense/bias: checkpoint float32 vs train state bfloat16", msg)
    self.assertIn("dtype mismatch at step: checkpoint int32 vs train state int16", msg)
    self.assertNotIn("shape mismatch", msg)
    # The same state with the saved dtypes restores.
    restored = ck.restore(3, _state())
    self.assertEqual(restored["params"]["dense"]["kernel"].dtype, jnp.float32)
    ck.close()

  def test_shape_and_dtype_mismatch_on_one_leaf(self):
    lines = checkpoint.structure_mismatches({"w": jnp.zeros((2, 3), jnp.float32)},
                                            {"w": jnp.zeros((3, 2), jnp.bfloat16)})
    self.assertEqual(lines, ["shape mismatch at w: checkpoint (2, 3) vs train state (3, 2)",
                             "dtype mismatch at w: checkpoint float32 vs train state bfloat16"])

  def test_structure_mismatches_empty_for_equal(self):
    self.assertEqual(checkpoint.structure_mismatches(_state(), _state()), [])


if __name__ == "__main__":
  absltest.main()
