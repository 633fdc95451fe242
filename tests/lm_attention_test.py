"""Memory-efficient attention (jax.nn.dot_product_attention in query blocks) and blocked log-probs equal the
dense float32 reference to 1e-5, values and gradients; compiled training memory stays far below the dense
path's at long context."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from common.lm import model as model_lib
from common.lm import testing
from common.lm.config import ModelConfig

BASE = ModelConfig(family="qwen3", vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True, tie_embeddings=False)
DENSE = BASE.replace(attention_impl="dense", logits_chunk=0)
PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(BASE, seed=3, std=0.3))


def _batch(b=3, t=37, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, 97, (b, t)).astype(np.int32)
  mask = np.ones((b, t), np.int32)
  mask[1, :9] = 0      # left padding
  mask[2, -5:] = 0     # right padding
  return jnp.asarray(tokens), jnp.asarray(mask)


class AttendTest(parameterized.TestCase):

  @parameterized.named_parameters(("one_block", 64), ("blocks", 8), ("ragged_blocks", 5))
  def test_equals_dense_reference(self, chunk):
    rng = np.random.default_rng(1)
    b, t, h, k, hd = 2, 21, 6, 2, 8
    q = jnp.asarray(rng.normal(size=(b, t, h, hd)), jnp.float32)
    kk = jnp.asarray(rng.normal(size=(b, t, k, hd)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, k, hd)), jnp.float32)
    valid = jnp.asarray(rng.random((b, t)) > 0.2)
    slots = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    ref = model_lib.attend_reference(q, kk, v, model_lib.slot_mask(slots, valid))
    out = model_lib.attend(q, kk, v, slots, valid, chunk=chunk)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)

    def loss(fn, q, kk, v):
      return jnp.sum(jnp.sin(fn(q, kk, v)))
    g_ref = jax.grad(lambda *a: loss(lambda q, kk, v: model_lib.attend_reference(
        q, kk, v, model_lib.slot_mask(slots, valid)), *a), argnums=(0, 1, 2))(q, kk, v)
    g = jax.grad(lambda *a: loss(lambda q, kk, v: model_lib.attend(
        q, kk, v, slots, valid, chunk=chunk), *a), argnums=(0, 1, 2))(q, kk, v)
    for x, y in zip(g, g_ref):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=1e-5)

  def test_per_row_cache_slots(self):
    """Rows at different lengths (per-row query slots) with a fully masked query stay finite and exact."""
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.normal(size=(2, 3, 4, 8)), jnp.float32)
    kk = jnp.asarray(rng.normal(size=(2, 10, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(2, 10, 2, 8)), jnp.float32)
    slots = jnp.asarray([[4, 5, 6], [0, 1, 10]], jnp.int32)
    valid = jnp.asarray(np.arange(10)[None] < np.asarray([[7], [2]]))
    ref = model_lib.attend_reference(q, kk, v, model_lib.slot_mask(slots, valid))
    out = model_lib.attend(q, kk, v, slots, valid, chunk=2)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)
    self.assertTrue(np.all(np.isfinite(np.asarray(out))))


class DecodeAttentionTest(parameterized.TestCase):
  """attend_flat (config model.decode_attention='flat'), the one-query path that reads the cache in place."""

  @parameterized.named_parameters(("gqa", 9, 3), ("mha", 4, 4), ("mqa", 6, 1))
  def test_flat_equals_dense_reference(self, h, k):
    rng = np.random.default_rng(4)
    b, s, hd = 3, 40, 8
    q = jnp.asarray(rng.normal(size=(b, 1, h, hd)), jnp.float32)
    kk = jnp.asarray(rng.normal(size=(b, s, k, hd)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, s, k, hd)), jnp.float32)
    slots = jnp.asarray([[30], [5], [39]], jnp.int32)
    valid = jnp.asarray(np.stack([np.arange(s) < 31, np.arange(s) >= 10, rng.random(s) > 0.3]))   # row 1: no key
    ref = model_lib.attend_reference(q, kk, v, model_lib.slot_mask(slots, valid))
    out = model_lib.attend_flat(q, kk, v, slots, valid)
    self.assertEqual(out.shape, (b, 1, h, hd))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-6, rtol=1e-6)
    grouped = model_lib.attend(q, kk, v, slots, valid, decode="grouped")
    np.testing.assert_allclose(np.asarray(model_lib.attend(q, kk, v, slots, valid, decode="flat")),
                               np.asarray(grouped), atol=1e-6, rtol=1e-6)
    # a bad choice is refused on every path ('dense' included), naming the config key
    for impl in ("xla", "dense"):
      with self.assertRaisesRegex(ValueError, "model.decode_attention"):
        model_lib.attend(q, kk, v, slots, valid, implementation=impl, decode="Flat")
    if h % 2:   # heads that do not group over 2 kv heads
      with self.assertRaisesRegex(ValueError, "not a multiple"):
        model_lib.attend_flat(q, kk[:, :, :1].repeat(2, axis=2), v[:, :, :1].repeat(2, axis=2), slots, valid)

  def test_decode_steps_agree_and_the_choice_is_checked(self):
    """A cached decode through the whole model: 'flat' and 'grouped' give the same logits to float rounding;
    an unknown value is refused, naming the config key."""
    cfg = BASE.replace(num_heads=4, num_kv_heads=2)
    tokens, mask = _batch(b=3, t=12)
    cache = model_lib.init_cache(cfg, 3, 16)
    out = {}
    for mode in ("flat", "grouped"):
      c = cfg.replace(decode_attention=mode)
      dec = model_lib.Decoder(c)
      valid = jnp.concatenate([mask, jnp.zeros((3, 4), jnp.int32)], 1).astype(bool)
      _, filled = dec.apply({"params": PARAMS}, tokens, jnp.cumsum(mask, 1) - 1, valid, cache, 0)
      step_valid = valid.at[:, 12].set(True)
      hidden, _ = dec.apply({"params": PARAMS}, tokens[:, -1:], jnp.sum(mask, 1, keepdims=True), step_valid,
                            filled, 12)
      out[mode] = np.asarray(dec.apply({"params": PARAMS}, hidden, method=model_lib.Decoder.logits))
    np.testing.assert_allclose(out["flat"], out["grouped"], atol=1e-5, rtol=1e-5)
    with self.assertRaisesRegex(ValueError, r"model\.decode_attention"):
      BASE.replace(decode_attention="paged")


class ModelParityTest(parameterized.TestCase):

  @parameterized.named_parameters(("attention_blocks", dict(attention_chunk=8, logits_chunk=0)),
                                  ("logit_blocks", dict(attention_chunk=1024, logits_chunk=7)),
                                  ("both", dict(attention_chunk=5, logits_chunk=16)))
  def test_logprobs_and_grads_equal_dense(self, overrides):
    cfg = BASE.replace(**overrides)
    tokens, mask = _batch()

    def loss(params, config):
      lp = model_lib.token_logprobs(params, tokens, mask, config=config, temperature=0.9)
      return jnp.sum(lp * jnp.linspace(0.5, 1.5, lp.shape[1])), lp

    (l_ref, lp_ref), g_ref = jax.jit(jax.value_and_grad(lambda p: loss(p, DENSE), has_aux=True))(PARAMS)
    (l, lp), g = jax.jit(jax.value_and_grad(lambda p: loss(p, cfg), has_aux=True))(PARAMS)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(lp_ref), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(l), float(l_ref), rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_ref)):
      scale = float(np.max(np.abs(np.asarray(b)))) + 1.0    # f32 summation order differs between the paths
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5 * scale, rtol=1e-4)

  def test_bf16_close_to_f32(self):
    cfg = BASE.replace(dtype="bfloat16", attention_chunk=8)
    tokens, mask = _batch()
    lp = model_lib.token_logprobs(PARAMS, tokens, mask, config=cfg)
    ref = model_lib.token_logprobs(PARAMS, tokens, mask, config=DENSE)
    self.assertEqual(lp.dtype, jnp.float32)
    diff = np.abs(np.asarray(lp) - np.asarray(ref))
    self.assertLess(diff.mean(), 0.05)      # bf16 rounding, not a different function
    self.assertLess(diff.max(), 0.5)

  def test_config_refuses_unknown_implementation(self):
    with self.assertRaisesRegex(ValueError, "attention_impl"):
      BASE.replace(attention_impl="flash")
    with self.assertRaisesRegex(ValueError, "attention_chunk"):
      BASE.replace(attention_chunk=0)


def train_step_temp_bytes(config: ModelConfig, length: int, batch: int = 1) -> int:
  """Compiled temporary memory (bytes) of value_and_grad of the summed log-probs at `length` tokens (not run)."""
  params = model_lib.abstract_params(config)
  tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)

  def loss(p, t):
    return jnp.sum(model_lib.token_logprobs(p, t, None, config=config))
  compiled = jax.jit(jax.grad(loss)).lower(params, tokens).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


class MemoryTest(absltest.TestCase):

  def test_blocked_training_memory_grows_linearly(self):
    """At 4k tokens the dense path holds [H, T, T] f32 scores; the blocked path one block's, growing linearly."""
    cfg = BASE.replace(num_layers=2, attention_chunk=128, logits_chunk=256)
    dense = train_step_temp_bytes(cfg.replace(attention_impl="dense", logits_chunk=0), 4096)
    blocked = train_step_temp_bytes(cfg, 4096)
    blocked_8k = train_step_temp_bytes(cfg, 8192)
    scores = 4 * 4096 * 4096 * 4            # one layer's f32 scores, 4 heads
    self.assertGreater(dense, scores)
    self.assertLess(blocked, scores / 4)
    self.assertLess(blocked_8k, 2.5 * blocked)


if __name__ == "__main__":
  absltest.main()
