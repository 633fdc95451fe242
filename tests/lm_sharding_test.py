"""Sharded (8 fake CPU devices, two mesh shapes) forward, log-probs and generation equal single-device;
parameters load straight into their shardings; optimizer state follows the parameters."""

import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from common.lm import loading
from common.lm import model as model_lib
from common.lm import sampling
from common.lm import sharding
from common.lm import testing
from common.lm.config import ModelConfig

CONFIG = ModelConfig(family="qwen3", vocab_size=80, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True, tie_embeddings=False)
PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(CONFIG, seed=2, std=0.3))
RNG = np.random.default_rng(0)
PROMPTS = [list(RNG.integers(1, 80, n)) for n in (3, 8, 5, 1, 8, 2, 7, 4)]
IDS, MASK = sampling.left_pad(PROMPTS, length=8)
MESHES = {"data8": (8, 1, 1), "data2_fsdp2_tensor2": (2, 2, 2)}


@jax.jit
def _fwd_and_logprobs(params, ids, mask):
  logits = model_lib.forward(params, ids, mask, config=CONFIG)
  return logits, model_lib.token_logprobs(params, ids, mask, config=CONFIG, temperature=0.8)


def _generate(params, ids, mask):
  return sampling.generate(params, ids, mask, jax.random.key(0), config=CONFIG, max_new_tokens=8,
                           sampling=sampling.SamplingConfig(temperature=0.0), stop_tokens=[-1])


_REF = {}


def setUpModule():
  ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
  _REF["fwd"] = jax.device_get(_fwd_and_logprobs(PARAMS, ids, mask))
  _REF["gen"] = jax.device_get(_generate(PARAMS, ids, mask))


class ShardedEqualsSingleDeviceTest(parameterized.TestCase):

  @parameterized.named_parameters(*MESHES.items())
  def test_forward_logprobs_generation(self, shape):
    self.assertEqual(jax.device_count(), 8)
    mesh = sharding.make_mesh(shape)
    params = sharding.shard_params(PARAMS, mesh)
    ids, mask = sharding.shard_batch((IDS, MASK), mesh)
    self.assertEqual(ids.sharding.spec, P(("data", "fsdp"), None))
    q = params["layers"]["attn"]["q_proj"]["kernel"]
    if shape[2] > 1:   # really sharded over fsdp and tensor
      self.assertEqual(q.sharding.spec, P(None, "fsdp", "tensor"))
      self.assertEqual(q.addressable_shards[0].data.shape, (2, 16, 16))
    logits, lps = _fwd_and_logprobs(params, ids, mask)
    np.testing.assert_allclose(np.asarray(logits), _REF["fwd"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lps), _REF["fwd"][1], rtol=1e-5, atol=1e-5)
    out = _generate(params, ids, mask)
    np.testing.assert_array_equal(np.asarray(out.tokens), _REF["gen"].tokens)
    np.testing.assert_array_equal(np.asarray(out.mask), _REF["gen"].mask)
    np.testing.assert_allclose(np.asarray(out.logprobs), _REF["gen"].logprobs, rtol=1e-5, atol=1e-5)


class LayoutTest(absltest.TestCase):

  def test_logical_to_spec_rules_and_fallbacks(self):
    mesh = sharding.make_mesh((2, 1, 4))
    spec = sharding.logical_to_spec(("layers", "embed", "heads"), (2, 32, 32), mesh)
    self.assertEqual(spec, P(None, None, "tensor"))          # fsdp has size 1: not used
    spec = sharding.logical_to_spec(("embed", "kv_heads"), (32, 6), mesh)
    self.assertEqual(spec, P(None, None))                     # 6 kv features do not divide over 4
    spec = sharding.logical_to_spec(("batch", "length"), (8, 5), mesh)
    self.assertEqual(spec, P("data", None))
    spec = sharding.logical_to_spec(("heads", "mlp"), (8, 8), mesh)
    self.assertEqual(spec, P("tensor", None))                 # an axis is used once per array
    mesh = sharding.make_mesh((2, 2, 2))
    spec = sharding.logical_to_spec(("batch",), (4,), mesh)
    self.assertEqual(spec, P(("data", "fsdp")))
    spec = sharding.logical_to_spec(("batch",), (2,), mesh)
    self.assertEqual(spec, P("data"))                         # partial fallback keeps the divisible prefix
    with self.assertRaisesRegex(ValueError, "device"):
      sharding.make_mesh((3, 1, 1))
    with self.assertRaisesRegex(ValueError, "multiple of 8"):
      sharding.shard_batch(np.zeros((6, 2)), sharding.make_mesh((8, 1, 1)))

  def test_every_parameter_has_logical_axes(self):
    axes = model_lib.param_logical_axes(PARAMS)
    flat = jax.tree_util.tree_leaves(axes, is_leaf=lambda x: isinstance(x, tuple))
    self.assertTrue(all(None not in a for a in flat), flat)
    self.assertEqual(axes["embed"], ("vocab", "embed"))
    self.assertEqual(axes["layers"]["attn"]["k_norm"]["scale"], ("layers", "head_dim"))
    self.assertEqual(axes["layers"]["mlp"]["down_proj"]["kernel"], ("layers", "mlp", "embed"))

  def test_load_straight_into_sharding(self):
    mesh = sharding.make_mesh((2, 2, 2))
    with tempfile.TemporaryDirectory() as d:
      cfg = testing.make_tiny_checkpoint(d, "qwen2", num_shards=3)
      abstract = model_lib.abstract_params(cfg)
      shardings = sharding.param_shardings(abstract, mesh)
      params = loading.load_params(d, cfg, shardings=shardings)
      plain = loading.load_params(d, cfg)
    for a, b, s in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(plain),
                       jax.tree_util.tree_leaves(shardings)):
      self.assertEqual(a.sharding, s)
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    self.assertEqual(params["embed"].sharding.spec, P("tensor", "fsdp"))

  def test_optimizer_state_follows_parameters(self):
    mesh = sharding.make_mesh((2, 2, 2))
    params = sharding.shard_params(PARAMS, mesh)
    tx = optax.adamw(1e-3)
    state = sharding.init_opt_state(tx, params, mesh)
    mu = state[0].mu
    for p, m in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(mu)):
      self.assertEqual(m.sharding, p.sharding)
    self.assertEqual(state[0].count.sharding, NamedSharding(mesh, P()))


if __name__ == "__main__":
  absltest.main()
