"""Decoder parity with transformers' PyTorch Qwen2 / Qwen3 / Llama, loading, export, bad checkpoints.

Reference checkpoints are written in the test by transformers' own classes (torch CPU, test-only); nothing
is downloaded.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from common.lm import config as config_lib
from common.lm import loading
from common.lm import model as model_lib
from common.lm import sampling
from common.lm import testing

import torch  # test-only reference implementation  # pylint: disable=g-bad-import-order
import transformers  # pylint: disable=g-bad-import-order

transformers.utils.logging.disable_progress_bar()

FAMILIES = {
    # name: (family, kwargs of make_torch_checkpoint)
    "qwen2_tied": ("qwen2", dict(tie_embeddings=True)),
    "qwen3_untied_sharded": ("qwen3", dict(tie_embeddings=False, max_shard_size="20KB")),
    "llama3_rope": ("llama", dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
}
_CACHE = {}


def setUpModule():
  _CACHE["root"] = tempfile.mkdtemp(prefix="lm_model_test_")
  for name, (family, kw) in FAMILIES.items():
    path = os.path.join(_CACHE["root"], name)
    hf = testing.make_torch_checkpoint(path, family, seed=len(name), **kw)
    _CACHE[name] = (path, hf, loading.load_pretrained(path))


def tearDownModule():
  shutil.rmtree(_CACHE["root"], ignore_errors=True)


_forward = jax.jit(model_lib.forward, static_argnames="config")


def _batch(vocab, seed=0):
  rng = np.random.default_rng(seed)
  toks = rng.integers(0, vocab, (3, 20)).astype(np.int32)
  mask = np.ones_like(toks)
  mask[1, :7] = 0          # left padding
  mask[2, :19] = 0         # a single real token
  return toks, mask


def _hf_logits(hf, toks, mask):
  with torch.no_grad():
    return hf(input_ids=torch.tensor(toks, dtype=torch.long),
              attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy().astype(np.float64)


class ParityTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(n, n) for n in FAMILIES])
  def test_logits_match_transformers(self, name):
    path, hf, pre = _CACHE[name]
    toks, mask = _batch(pre.config.vocab_size)
    ref = _hf_logits(hf, toks, mask)
    ours = np.asarray(_forward(pre.params, jnp.asarray(toks), jnp.asarray(mask), config=pre.config), np.float64)
    real = mask.astype(bool)
    err = np.abs(ours - ref)[real]
    rel = err.max() / np.abs(ref[real]).max()
    print(f"[parity {name}] max abs {err.max():.3e}  max rel {rel:.3e}")
    self.assertLess(rel, 1e-4)
    np.testing.assert_allclose(ours[real], ref[real], rtol=1e-4, atol=1e-4 * np.abs(ref[real]).max())

  @parameterized.named_parameters(*[(n, n) for n in FAMILIES])
  def test_greedy_generation_matches_transformers(self, name):
    path, hf, pre = _CACHE[name]
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(3, pre.config.vocab_size, n)) for n in (5, 9, 3, 9)]
    ids, mask = sampling.left_pad(prompts, length=9, pad_id=0)
    with torch.no_grad():
      ref = hf.generate(input_ids=torch.tensor(ids, dtype=torch.long),
                        attention_mask=torch.tensor(mask, dtype=torch.long), max_new_tokens=32,
                        min_new_tokens=32, do_sample=False, eos_token_id=None, pad_token_id=0).numpy()
    out = sampling.generate(pre.params, jnp.asarray(ids), jnp.asarray(mask), jax.random.key(0),
                            config=pre.config, max_new_tokens=32, sampling=sampling.SamplingConfig(temperature=0),
                            stop_tokens=[-1])
    np.testing.assert_array_equal(np.asarray(out.tokens), ref[:, 9:])
    self.assertTrue(np.asarray(out.mask).all())

  def test_llama3_rope_frequencies_match(self):
    path, hf, pre = _CACHE["llama3_rope"]
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # pylint: disable=g-import-not-at-top
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](hf.config, "cpu")
    np.testing.assert_allclose(pre.config.rope_inv_freq(), ref.numpy(), rtol=1e-6)
    self.assertEqual(pre.config.rope_type, "llama3")
    inv = pre.config.rope_inv_freq()
    plain = pre.config.replace(rope_type="default").rope_inv_freq()
    self.assertFalse(np.allclose(inv, plain))  # the scaling is exercised
    hf_cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                      rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5})
    ref, _ = ROPE_INIT_FUNCTIONS["linear"](hf_cfg, "cpu")
    ours = config_lib.from_hf_config(hf_cfg)
    self.assertEqual((ours.rope_type, ours.rope_factor, ours.rope_theta), ("linear", 4.0, 5e5))
    np.testing.assert_allclose(ours.rope_inv_freq(), ref.numpy(), rtol=1e-6)

  def test_config_fields(self):
    c = _CACHE["qwen2_tied"][2].config
    self.assertEqual((c.family, c.qkv_bias, c.o_bias, c.qk_norm, c.tie_embeddings), ("qwen2", True, False, False, True))
    c = _CACHE["qwen3_untied_sharded"][2].config
    self.assertEqual((c.family, c.qkv_bias, c.qk_norm, c.tie_embeddings), ("qwen3", False, True, False))
    self.assertEqual(c.num_params(), sum(x.size for x in jax.tree_util.tree_leaves(_CACHE["qwen3_untied_sharded"][2].params)))
    self.assertTrue(os.path.isfile(os.path.join(_CACHE["qwen3_untied_sharded"][0], loading.INDEX_FILE)))


class ExportTest(parameterized.TestCase):

  @parameterized.named_parameters(("single", None), ("sharded", 30_000))
  def test_export_round_trip_through_transformers(self, shard_bytes):
    path, hf, pre = _CACHE["qwen3_untied_sharded"]
    out = tempfile.mkdtemp(dir=_CACHE["root"])
    kw = {} if shard_bytes is None else {"max_shard_bytes": shard_bytes}
    files = loading.export_pretrained(pre.params, pre.config, out, tokenizer=pre.tokenizer, **kw)
    self.assertEqual(len(files) > 1, shard_bytes is not None)
    toks, mask = _batch(pre.config.vocab_size, seed=3)
    re_hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    np.testing.assert_array_equal(_hf_logits(re_hf, toks, mask), _hf_logits(hf, toks, mask))
    again = loading.load_pretrained(out)
    self.assertEqual(again.config.replace(), pre.config)
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.params, pre.params)
    self.assertEqual(again.tokenizer.encode("search the web"), pre.tokenizer.encode("search the web"))

  def test_dtype_conversion_on_load(self):
    path, _, pre = _CACHE["qwen2_tied"]
    cfg = config_lib.load_config(path, param_dtype="bfloat16", dtype="bfloat16")
    params = loading.load_params(path, cfg)
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(pre.params)):
      self.assertEqual(a.dtype, jnp.bfloat16)
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b).astype(jnp.bfloat16))
    logits = _forward(params, jnp.zeros((1, 4), jnp.int32), None, config=cfg)
    self.assertEqual(logits.dtype, jnp.float32)
    self.assertTrue(np.isfinite(np.asarray(logits)).all())

  def test_make_tiny_checkpoint_loads_in_transformers(self):
    # Torch-free writer, same architecture as the torch-written qwen2 reference: identical config, and
    # transformers loads it and agrees with us.
    out = os.path.join(_CACHE["root"], "tiny_qwen2")
    cfg = testing.make_tiny_checkpoint(out, "qwen2", num_shards=2, seed=7)
    self.assertTrue(os.path.isfile(os.path.join(out, loading.INDEX_FILE)))
    self.assertEqual(cfg, _CACHE["qwen2_tied"][2].config)
    pre = loading.load_pretrained(out)
    self.assertEqual(pre.config, cfg)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    toks, mask = _batch(cfg.vocab_size, seed=5)
    ours = np.asarray(_forward(pre.params, jnp.asarray(toks), jnp.asarray(mask), config=cfg))
    ref = _hf_logits(hf, toks, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(ours[real], ref[real], rtol=1e-4, atol=1e-4 * np.abs(ref).max())


class BadCheckpointTest(absltest.TestCase):

  def _copy(self, name):
    dst = tempfile.mkdtemp(dir=_CACHE["root"])
    shutil.copytree(_CACHE[name][0], dst, dirs_exist_ok=True)
    return dst

  def test_missing_shard(self):
    d = self._copy("qwen3_untied_sharded")
    with open(os.path.join(d, loading.INDEX_FILE)) as f:
      shard = sorted(set(json.load(f)["weight_map"].values()))[-1]
    os.remove(os.path.join(d, shard))
    with self.assertRaises(config_lib.CheckpointError) as cm:
      loading.load_pretrained(d)
    msg = str(cm.exception)
    self.assertIn(loading.INDEX_FILE, msg)
    self.assertIn(shard, msg)
    self.assertIn("do not exist", msg)

  def test_unsupported_architecture(self):
    d = self._copy("qwen2_tied")
    cfg_file = os.path.join(d, "config.json")
    with open(cfg_file) as f:
      raw = json.load(f)
    raw["model_type"], raw["architectures"] = "gpt2", ["GPT2LMHeadModel"]
    with open(cfg_file, "w") as f:
      json.dump(raw, f)
    with self.assertRaises(config_lib.CheckpointError) as cm:
      loading.load_pretrained(d)
    msg = str(cm.exception)
    self.assertIn(cfg_file, msg)
    self.assertIn("unsupported architecture", msg)
    self.assertIn("gpt2", msg)

  def test_tokenizer_larger_than_embedding(self):
    d = self._copy("qwen2_tied")
    big = testing.build_tokenizer("qwen2", vocab_size=600,
                                  extra_text=[" ".join(f"w{i}x{i * 7}" for i in range(400))])
    self.assertGreater(len(big), _CACHE["qwen2_tied"][2].config.vocab_size)
    big.save_pretrained(d)
    with self.assertRaises(config_lib.CheckpointError) as cm:
      loading.load_pretrained(d)
    msg = str(cm.exception)
    self.assertIn(os.path.join(d, "tokenizer.json"), msg)
    self.assertIn(f"{len(big)} tokens", msg)
    self.assertIn("embedding", msg)

  def test_missing_tensor_and_wrong_shape(self):
    path, _, pre = _CACHE["qwen2_tied"]
    files = loading.weight_files(path)
    name = "model.layers.1.self_attn.q_proj.bias"
    with self.assertRaisesRegex(config_lib.CheckpointError, "model.layers.1.self_attn.q_proj.bias.*missing"):
      loading.load_params(path, pre.config, files={k: v for k, v in files.items() if k != name})
    with self.assertRaisesRegex(config_lib.CheckpointError, r"model.safetensors: tensor 'model.embed_tokens.weight' has shape"):
      loading.load_params(path, pre.config.replace(hidden_size=64, head_dim=16))

  def test_no_weights(self):
    d = tempfile.mkdtemp(dir=_CACHE["root"])
    shutil.copy(os.path.join(_CACHE["qwen2_tied"][0], "config.json"), d)
    with self.assertRaisesRegex(config_lib.CheckpointError, "no model.safetensors"):
      loading.load_params(d, _CACHE["qwen2_tied"][2].config)


if __name__ == "__main__":
  absltest.main()
