"""LMToolPolicy (PhGPO's language-model policy) and the tool head, on a tiny torch-free checkpoint."""

import shutil
import tempfile

from absl.testing import absltest
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.lm import model as model_lib
from common.lm import testing
from phgpo import lm_tool_head as tool_head
from phgpo import lm_tool_policy as tool_policy

TOOLS = ["search_flights", "book_hotel", "get_weather", "send_email", "convert_currency"]
_STATE = {}


def setUpModule():
  _STATE["dir"] = tempfile.mkdtemp(prefix="lm_tool_policy_test_")
  testing.make_tiny_checkpoint(_STATE["dir"], "qwen2", extra_text=[" ".join(TOOLS)], seed=3)
  _STATE["policy"] = tool_policy.LMToolPolicy(_STATE["dir"], TOOLS, lora_rank=4, lora_alpha=8.0,
                                              max_length=96)
  _STATE["params"] = _STATE["policy"].init(jax.random.key(0))


def tearDownModule():
  shutil.rmtree(_STATE["dir"], ignore_errors=True)


QUERIES = ["book a hotel in Tokyo and send an email", "what is the weather"]
HISTORIES = [[("search_flights", "found 3 flights"), ("book_hotel", "ok")], []]


class ToolHeadTest(chex.TestCase):

  def test_rows_are_mean_name_embeddings(self):
    pol, params = _STATE["policy"], _STATE["params"]
    emb = np.asarray(params["lm"]["embed"], np.float64)
    kernel = np.asarray(params["tool_head"]["kernel"])
    self.assertEqual(kernel.shape, (pol.config.hidden_size, len(TOOLS)))
    for n, name in enumerate(TOOLS):
      ids = pol.tokenizer.encode(name, add_special_tokens=False)
      ref = np.mean([emb[i] for i in ids], axis=0)
      np.testing.assert_allclose(kernel[:, n], ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(params["tool_head"]["bias"]), 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  def test_last_token_hidden_and_logits(self):
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    head = {"kernel": jnp.asarray(rng.standard_normal((4, 6)), jnp.float32),
            "bias": jnp.asarray(rng.standard_normal(6), jnp.float32)}
    got = self.variant(lambda h, m: tool_head.tool_logits(head, tool_head.last_token_hidden(h, m)))(
        jnp.asarray(hidden), jnp.asarray(mask))
    last = [4, 2, 4]
    ref = np.stack([hidden[b, last[b]].astype(np.float64) @ np.asarray(head["kernel"], np.float64)
                    + np.asarray(head["bias"], np.float64) for b in range(3)])
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)

  def test_bad_names(self):
    with self.assertRaisesRegex(ValueError, "no tokens"):
      tool_head.tool_name_token_ids(_STATE["policy"].tokenizer, ["ok", ""])
    with self.assertRaisesRegex(ValueError, "at least one tool"):
      tool_policy.LMToolPolicy(_STATE["dir"], [])


class LMToolPolicyTest(absltest.TestCase):

  def test_render_and_truncation(self):
    pol = _STATE["policy"]
    text = pol.render(QUERIES[0], HISTORIES[0])
    for part in (QUERIES[0], "call search_flights", "observation: found 3 flights", "call book_hotel",
                 "<|im_start|>assistant\n"):
      self.assertIn(part, text)
    self.assertTrue(text.endswith("<|im_start|>assistant\n"))
    long_history = [("get_weather", "sunny " * 30)] * 6
    ids = pol.state_tokens("weather", long_history)
    self.assertLessEqual(len(ids), pol.max_length)
    dropped = pol.tokenizer.decode(ids)
    self.assertIn("weather", dropped)                      # the query survives; oldest pairs were dropped
    self.assertLess(dropped.count("call get_weather"), 6)

  def test_apply_shapes_padding_invariance_and_manual(self):
    pol, params = _STATE["policy"], _STATE["params"]
    batch = pol.encode(QUERIES, HISTORIES)
    self.assertEqual(batch.tokens.dtype, np.int32)
    self.assertEqual(batch.tokens.shape[1] % 16, 0)
    apply = jax.jit(pol.apply)
    # One compile for both: the policy's logits and the decoder's hidden states (for the manual check).
    both = jax.jit(lambda p, b: (pol.apply(p, b), model_lib.hidden_states(
        p["lm"], jnp.asarray(b.tokens), jnp.asarray(b.mask), config=pol.config)))
    logits, h = (np.asarray(x) for x in both(params, batch))
    self.assertEqual(logits.shape, (2, len(TOOLS)))
    self.assertTrue(np.isfinite(logits).all())
    # Rows are independent: row 1 in a batch of its own copies (same shape, no retrace) scores the same.
    alone = tool_policy.LMPolicyBatch(np.stack([batch.tokens[1]] * 2), np.stack([batch.mask[1]] * 2))
    np.testing.assert_allclose(np.asarray(both(params, alone)[0])[0], logits[1], rtol=1e-5, atol=1e-5)
    self.assertGreater(int((batch.mask[1] == 0).sum()), 0)      # row 1 really is left-padded
    # Manual: hidden state at the last token through the head.
    ref = np.asarray(h[:, -1], np.float64) @ np.asarray(params["tool_head"]["kernel"], np.float64)
    np.testing.assert_allclose(logits, ref, rtol=1e-5, atol=1e-5)

  def test_mesh_placement(self):
    from common.lm import sharding  # pylint: disable=g-import-not-at-top
    mesh = sharding.make_mesh((2, 2, 2))
    pol = tool_policy.LMToolPolicy(_STATE["dir"], TOOLS, lora_rank=4, lora_alpha=8.0, mesh=mesh)
    params = pol.init(jax.random.key(0))
    for leaf in jax.tree_util.tree_leaves(params):
      self.assertEqual(leaf.sharding.mesh, mesh)
    self.assertEqual(params["tool_head"]["kernel"].sharding.spec, jax.sharding.PartitionSpec("fsdp", None))
    q = params["lm"]["layers"]["attn"]["q_proj"]
    self.assertEqual(q["kernel"].sharding.spec, jax.sharding.PartitionSpec(None, "fsdp", "tensor"))
    self.assertEqual(q["lora_a"].sharding.spec, jax.sharding.PartitionSpec(None, "fsdp", None))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                           params["tool_head"], _STATE["params"]["tool_head"])

  def test_one_step_trains_adapters_and_head_only(self):
    pol, params = _STATE["policy"], _STATE["params"]
    batch = pol.encode(QUERIES, HISTORIES)
    target = jnp.asarray([1, 2])
    tx = pol.optimizer(optax.adam(1e-2))
    opt_state = tx.init(params)

    def loss(p):
      lp = jax.nn.log_softmax(pol.apply(p, batch), axis=-1)
      return -jnp.mean(lp[jnp.arange(2), target])

    @jax.jit
    def step(p, s):
      l, g = jax.value_and_grad(loss)(p)
      u, s = tx.update(g, s, p)
      return optax.apply_updates(p, u), s, l

    new, opt_state, l0 = step(params, opt_state)
    _, _, l1 = step(new, opt_state)                 # l1 = loss at `new`
    self.assertLess(float(l1), float(l0))
    mask = pol.trainable_mask(params)
    for (path, a), b, m in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree_util.tree_leaves(new),
                               jax.tree_util.tree_leaves(mask)):
      name = jax.tree_util.keystr(path)
      changed = not np.array_equal(np.asarray(a), np.asarray(b))
      if not m:
        self.assertFalse(changed, name)
      elif name.endswith("['lora_b']") or "tool_head" in name:
        self.assertTrue(changed, name)


if __name__ == "__main__":
  absltest.main()
