"""Tests for phgpo/features.py: the on-disk embedding cache and TaskFeatures (with a fake, counting encoder)."""
import hashlib
import os
import pathlib
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from phgpo import data
from phgpo import features

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes


class FakeEncoder:
  """Deterministic unit vectors from the text's hash; records what it was asked to embed."""

  def __init__(self, model_id="fake/model@1", max_length=128, dim=8):
    self.model_id, self.max_length, self.dim = model_id, max_length, dim
    self.calls: list[list[str]] = []

  def vector(self, text):
    seed = int.from_bytes(hashlib.sha1(f"{self.max_length}:{text}".encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).normal(size=self.dim)
    return (v / np.linalg.norm(v)).astype(np.float32)

  def encode(self, texts, *, batch_size=64):
    del batch_size
    self.calls.append(list(texts))
    return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


class EmbedTextsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.cache = self.create_tempdir().full_path

  def test_second_call_hits_cache(self):
    enc = FakeEncoder()
    texts = ["b", "a", "b", "c"]
    first = features.embed_texts(enc, texts, self.cache)
    self.assertEqual(enc.calls, [["b", "a", "c"]])  # duplicates embedded once
    np.testing.assert_array_equal(first, np.stack([enc.vector(t) for t in texts]))
    second = features.embed_texts(enc, ["c", "a", "d"], self.cache)
    self.assertEqual(enc.calls[1:], [["d"]])  # only the new text
    np.testing.assert_array_equal(second, np.stack([enc.vector(t) for t in ["c", "a", "d"]]))
    features.embed_texts(enc, texts + ["d"], self.cache)
    self.assertLen(enc.calls, 2)
    self.assertEqual(first.dtype, np.float32)
    folder = pathlib.Path(self.cache) / "embeddings" / "fake_model_1-len128"
    self.assertTrue((folder / "index.json").is_file())
    self.assertLen(list(folder.glob("shard-*.npy")), 2)

  def test_keyed_by_model_and_max_length(self):
    features.embed_texts(FakeEncoder(), ["x"], self.cache)
    other_len = FakeEncoder(max_length=64)
    out = features.embed_texts(other_len, ["x"], self.cache)
    self.assertEqual(other_len.calls, [["x"]])
    np.testing.assert_array_equal(out[0], other_len.vector("x"))
    other_model = FakeEncoder(model_id="fake/other")
    features.embed_texts(other_model, ["x"], self.cache)
    self.assertEqual(other_model.calls, [["x"]])

  def test_missing_shard_is_re_embedded(self):
    enc = FakeEncoder()
    features.embed_texts(enc, ["x", "y"], self.cache)
    for shard in pathlib.Path(self.cache).glob("embeddings/*/shard-*.npy"):
      shard.unlink()
    with self.assertLogs(level="WARNING"):
      out = features.embed_texts(enc, ["x", "y"], self.cache)
    self.assertEqual(enc.calls[1], ["x", "y"])
    np.testing.assert_array_equal(out[1], enc.vector("y"))

  def test_empty(self):
    self.assertEqual(features.embed_texts(FakeEncoder(), [], self.cache).shape, (0, 8))

  def test_never_inside_shared(self):
    shared = data.repo_root().parent / "shared" / "cache"
    with self.assertRaisesRegex(ValueError, "read-only shared folder"):
      features.embed_texts(FakeEncoder(), ["x"], shared)

  def test_default_dir_from_env(self):
    with mock.patch.dict(os.environ, {features.CACHE_ENV: self.cache}):
      self.assertEqual(features.default_cache_dir(), pathlib.Path(self.cache))
      features.embed_texts(FakeEncoder(), ["x"])
    self.assertTrue(list(pathlib.Path(self.cache).glob("embeddings/*/index.json")))
    with mock.patch.dict(os.environ):
      os.environ.pop(features.CACHE_ENV, None)
      self.assertEqual(features.default_cache_dir(), pathlib.Path.home() / ".cache" / "agentic-rl-jax")


class TaskFeaturesTest(absltest.TestCase):

  def test_build(self):
    call = data.ToolCall(name="t1", arguments={}, arg_keys=(), status="success", output="o")
    tasks = [data.Task(task_id=f"D/{i}", domain="D", query=f"query {i}", calls=(call,), final_answer="")
             for i in range(3)]
    tools = [data.ToolSpec(name=n, description=f"does {n}", domain="D", required=(), optional=(),
                           input_schema={"type": "object", "properties": {}, "required": []}) for n in ("t1", "t2")]
    enc = FakeEncoder()
    f = features.TaskFeatures.build(enc, tasks, tools, cache_dir=self.create_tempdir().full_path)
    self.assertEqual((f.query_emb.shape, f.tool_emb.shape), ((3, 8), (2, 8)))
    self.assertEqual(f.tool_names, ("t1", "t2"))
    np.testing.assert_array_equal(f.tool_emb[1], enc.vector("t2: does t2"))
    np.testing.assert_array_equal(f.query_emb[2], enc.vector("query 2"))
    self.assertEqual(f.task_row("D/1"), 1)
    with self.assertRaisesRegex(KeyError, "D/9"):
      f.task_row("D/9")


if __name__ == "__main__":
  absltest.main()
