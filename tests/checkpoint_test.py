"""Tests for common/checkpoint.py: whole-state round trip and the strict structure check."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from jax.sharding import NamedSharding, PartitionSpec as P

from common import checkpoint
from common.lm import sharding
from common.lm import testing as lm_testing
from common.lm.config import ModelConfig

_QWEN3 = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


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


class ChangedMeshTest(parameterized.TestCase):
  """A state saved on mesh (8, 1, 1) (or (1, 8, 1), where the parameters themselves are split) restores
  onto (2, 2, 2) and onto one device, in the target shardings, with equal values."""

  def _save(self, save_mesh_shape):
    self.assertGreaterEqual(jax.device_count(), 8, "tests/conftest.py sets 8 fake CPU devices")
    self.host = lm_testing.random_params(_QWEN3, seed=0)
    self.rows = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    mesh8 = sharding.make_mesh(save_mesh_shape)
    self.saved = {"params": sharding.shard_params(self.host, mesh8),
                  "rows": sharding.shard_batch(self.rows, mesh8),  # e.g. a per-row table, split over data
                  "key": jax.random.key_data(jax.random.key(3)),
                  "step": jnp.asarray(4, jnp.int32)}
    self.assertFalse(all(x.sharding.is_fully_replicated for x in jax.tree.leaves(self.saved)))
    self.dir = self.create_tempdir().full_path
    ck = checkpoint.Checkpointer(self.dir)
    ck.save(4, self.saved)
    ck.close()

  def _check(self, restored, want_shardings):
    for (path, got), want_sharding in zip(jax.tree_util.tree_flatten_with_path(restored)[0],
                                          jax.tree.leaves(want_shardings)):
      self.assertIsInstance(got, jax.Array, path)
      self.assertEqual(got.sharding, want_sharding, jax.tree_util.keystr(path))
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(self.saved)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  @parameterized.parameters((8, 1, 1), (1, 8, 1))
  def test_restore_onto_2x2x2_from_target_arrays(self, *save_mesh_shape):
    self._save(save_mesh_shape)
    mesh = sharding.make_mesh((2, 2, 2))
    replicated = NamedSharding(mesh, P())
    target = {"params": sharding.shard_params(jax.tree.map(np.zeros_like, self.host), mesh),
              "rows": sharding.shard_batch(np.zeros_like(self.rows), mesh),
              "key": jax.device_put(jnp.zeros((2,), jnp.uint32), replicated),
              "step": jax.device_put(jnp.asarray(0, jnp.int32), replicated)}
    ck = checkpoint.Checkpointer(self.dir)
    restored, step = ck.restore_or_init(target)
    ck.close()
    self.assertEqual(step, 4)
    self._check(restored, jax.tree.map(lambda x: x.sharding, target))
    # Some leaves are really split three ways (fsdp and tensor), not just replicated.
    specs = {str(x.sharding.spec) for x in jax.tree.leaves(restored["params"])}
    self.assertTrue(any("fsdp" in s for s in specs) and any("tensor" in s for s in specs), specs)

  @parameterized.parameters((8, 1, 1), (1, 8, 1))
  def test_restore_onto_one_device_from_a_shardings_tree(self, *save_mesh_shape):
    self._save(save_mesh_shape)
    one = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.saved)
    shardings = {"params": sharding.param_shardings(self.host, one), "rows": NamedSharding(one, P()),
                 "key": NamedSharding(one, P()), "step": NamedSharding(one, P())}
    ck = checkpoint.Checkpointer(self.dir)
    restored = ck.restore(4, abstract, shardings=shardings)
    self._check(restored, shardings)
    for x in jax.tree.leaves(restored):
      self.assertEqual(x.sharding.device_set, {jax.devices()[0]})
    # One Sharding for every leaf; it overrides the target leaves' own shardings.
    single = jax.sharding.SingleDeviceSharding(jax.devices()[1])
    restored = ck.restore(4, self.saved, shardings=single)
    self._check(restored, jax.tree.map(lambda _: single, self.saved))
    ck.close()

  def test_shardings_tree_of_another_structure_is_refused(self):
    self._save((8, 1, 1))
    ck = checkpoint.Checkpointer(self.dir)
    with self.assertRaisesRegex(ValueError, "shardings must have the structure of the restore target"):
      ck.restore(4, self.saved, shardings={"params": None})
    ck.close()

  def test_structure_check_still_applies(self):
    self._save((8, 1, 1))
    ck = checkpoint.Checkpointer(self.dir)
    target = dict(self.saved, step=jnp.asarray(0, jnp.int16))
    with self.assertRaisesRegex(checkpoint.CheckpointMismatchError, "dtype mismatch at step"):
      ck.restore(4, target, shardings=jax.sharding.SingleDeviceSharding(jax.devices()[0]))
    ck.close()


if __name__ == "__main__":
  absltest.main()
