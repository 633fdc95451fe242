"""LoRA: a no-op at initialisation, only adapters move under the adapter optimizer, merge equals the adapted
model, export merges."""

import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.lm import loading
from common.lm import lora
from common.lm import model as model_lib
from common.lm import testing
from common.lm.config import ModelConfig

BASE = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, tie_embeddings=False)
CFG = BASE.with_lora(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "o_proj", "down_proj"))
BASE_PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(BASE, seed=1, std=0.2))
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 10)), jnp.int32)
MASK = jnp.asarray(np.arange(10)[None, :] >= np.array([[0], [3]]), jnp.int32)
_forward = jax.jit(model_lib.forward, static_argnames="config")


def _loss(params, config):
  lp = model_lib.token_logprobs(params, TOKENS, MASK, config=config)
  return -jnp.sum(lp) / jnp.sum(MASK[:, 1:])


def _names(path):
  return "/".join(str(getattr(p, "key", p)) for p in path)


class LoRATest(absltest.TestCase):

  def test_adapter_shapes_and_scale(self):
    params = lora.add_adapters(jax.random.key(0), BASE_PARAMS, CFG)
    q = params["layers"]["attn"]["q_proj"]
    self.assertEqual(q["lora_a"].shape, (2, 32, 4))
    self.assertEqual(q["lora_b"].shape, (2, 4, 32))
    self.assertNotIn("lora_a", params["layers"]["attn"]["k_proj"])
    self.assertNotIn("lora_a", params["layers"]["mlp"]["up_proj"])
    self.assertEqual(CFG.lora_scale, 2.0)
    self.assertNotIn("lora_a", BASE_PARAMS["layers"]["attn"]["q_proj"])  # input untouched
    trainable, total = lora.count(params)
    expected = 2 * 4 * ((32 + 32) + (32 + 16) + (32 + 32) + (48 + 32))
    self.assertEqual(trainable, expected)
    self.assertEqual(total, BASE.num_params() + expected)
    self.assertEqual(CFG.num_params(include_lora=True), total)

  def test_init_is_a_no_op(self):
    params = lora.add_adapters(jax.random.key(0), BASE_PARAMS, CFG)
    np.testing.assert_array_equal(np.asarray(_forward(params, TOKENS, MASK, config=CFG)),
                                  np.asarray(_forward(BASE_PARAMS, TOKENS, MASK, config=BASE)))

  def test_one_step_moves_only_adapters(self):
    params = lora.add_adapters(jax.random.key(0), BASE_PARAMS, CFG)
    tx = lora.adapter_optimizer(optax.adam(1e-2), params, extra=())
    remat = CFG.replace(remat="full")     # the training step also exercises activation checkpointing

    @jax.jit
    def step(params, opt_state):
      loss, grads = jax.value_and_grad(_loss)(params, remat)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, loss

    opt_state = tx.init(params)
    # Frozen leaves hold no optimizer state: only adapter-shaped moments exist.
    state_sizes = sum(x.size for x in jax.tree_util.tree_leaves(opt_state) if x.ndim)
    self.assertEqual(state_sizes, 2 * lora.count(params, extra=())[0])
    one, opt_state, loss0 = step(params, opt_state)
    two, opt_state, _ = step(one, opt_state)
    _, _, loss2 = step(two, opt_state)
    moved = {}
    for (path, a), b, c in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree_util.tree_leaves(one),
                               jax.tree_util.tree_leaves(two)):
      moved[_names(path)] = (not np.array_equal(np.asarray(a), np.asarray(b)),
                             not np.array_equal(np.asarray(a), np.asarray(c)))
    for name, (after_one, after_two) in moved.items():
      if name.endswith("lora_b"):
        self.assertTrue(after_one, name)
      elif name.endswith("lora_a"):
        # dL/dA = 0 while B = 0, so A first moves on the second step.
        self.assertFalse(after_one, name)
        self.assertTrue(after_two, name)
      else:
        self.assertFalse(after_one or after_two, name)
    self.assertLess(float(loss2), float(loss0))

  def test_partition_and_combine(self):
    params = lora.add_adapters(jax.random.key(1), BASE_PARAMS, CFG)
    params["tool_head"] = {"kernel": jnp.ones((32, 3))}
    train, frozen = lora.partition(params)
    leaves = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(train)}
    self.assertLen(leaves, 9)                   # 4 targets x (A, B) + the tool head
    self.assertTrue(all(k.endswith(("['lora_a']", "['lora_b']")) or "tool_head" in k for k in leaves))
    self.assertEqual(len(jax.tree_util.tree_leaves(frozen)),
                     len(jax.tree_util.tree_leaves(params)) - 9)
    rebuilt = lora.combine(train, frozen)
    self.assertEqual(jax.tree_util.tree_structure(rebuilt), jax.tree_util.tree_structure(params))
    jax.tree_util.tree_map(np.testing.assert_array_equal, rebuilt, params)

  def test_merge_equals_adapted_model_and_export_merges(self):
    params = lora.add_adapters(jax.random.key(2), BASE_PARAMS, CFG)
    rng = np.random.default_rng(3)
    for grp, name in (("attn", "q_proj"), ("attn", "v_proj"), ("attn", "o_proj"), ("mlp", "down_proj")):
      params["layers"][grp][name]["lora_b"] = jnp.asarray(0.1 * rng.standard_normal(
          params["layers"][grp][name]["lora_b"].shape), jnp.float32)
    adapted = np.asarray(_forward(params, TOKENS, MASK, config=CFG))
    merged = lora.merge(params, CFG)
    self.assertEqual(jax.tree_util.tree_structure(merged), jax.tree_util.tree_structure(BASE_PARAMS))
    np.testing.assert_allclose(np.asarray(_forward(merged, TOKENS, MASK, config=BASE)), adapted,
                               rtol=1e-5, atol=1e-5)
    self.assertFalse(np.allclose(adapted, np.asarray(_forward(BASE_PARAMS, TOKENS, MASK, config=BASE)),
                                 atol=1e-3))
    # Manual merge of one kernel against a float64 loop.
    q = params["layers"]["attn"]["q_proj"]
    for layer in range(2):
      ref = (np.asarray(q["kernel"][layer], np.float64)
             + 2.0 * np.asarray(q["lora_a"][layer], np.float64) @ np.asarray(q["lora_b"][layer], np.float64))
      np.testing.assert_allclose(np.asarray(merged["layers"]["attn"]["q_proj"]["kernel"][layer]), ref,
                                 rtol=1e-5, atol=1e-6)
    with tempfile.TemporaryDirectory() as d:
      loading.export_pretrained(params, CFG, d)
      back = loading.load_params(d, BASE)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6),
                           back, merged)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "lora_rank > 0"):
      lora.add_adapters(jax.random.key(0), BASE_PARAMS, BASE)
    with self.assertRaisesRegex(ValueError, "lora_targets"):
      BASE.with_lora(rank=4, alpha=8, targets=("qkv",))


if __name__ == "__main__":
  absltest.main()
