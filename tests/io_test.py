"""Tests for common/io.py: atomic writes, JSON-lines read, append and truncate, and MetricWriter's resume."""

import json
import os

import pytest
from absl.testing import absltest

from common import io
from common import metric_writer

pytestmark = pytest.mark.fast


class AtomicWriteTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.create_tempdir().full_path
    self.path = os.path.join(self.dir, "a.json")

  def test_exception_keeps_the_old_file_and_leaves_no_temporary(self):
    io.write_json(self.path, {"old": 1})
    with self.assertRaises(RuntimeError):
      with io.atomic_write(self.path) as f:
        f.write('{"new": ')
        raise RuntimeError("killed mid-write")
    self.assertEqual(io.read_json(self.path), {"old": 1})
    self.assertEqual(os.listdir(self.dir), ["a.json"])

  def test_unserialisable_object_keeps_the_old_file(self):
    io.write_json(self.path, {"old": 1})
    with self.assertRaises(TypeError):
      io.write_json(self.path, {"new": object()})
    self.assertEqual(io.read_json(self.path), {"old": 1})
    self.assertEqual(os.listdir(self.dir), ["a.json"])

  def test_same_bytes_as_json_dump(self):
    obj = {"b": 1.5, "a": [1, 2], "é": "ü"}
    for kw in ({}, {"indent": None}, {"indent": 1, "sort_keys": True}, {"ensure_ascii": False}):
      io.write_json(self.path, obj, **kw)
      with open(self.path, encoding="utf-8") as f:
        self.assertEqual(f.read(), json.dumps(obj, **{"indent": 1, **kw}))
    io.write_json(self.path, obj, indent=None, newline=True)
    with open(self.path, encoding="utf-8") as f:
      self.assertEqual(f.read(), json.dumps(obj) + "\n")

  def test_default_converts(self):
    io.write_json(self.path, {"x": _Scalar(2.5)}, default=float)
    self.assertEqual(io.read_json(self.path), {"x": 2.5})

  def test_binary_and_bad_mode(self):
    p = os.path.join(self.dir, "b.bin")
    with io.atomic_write(p, "wb", fsync=True) as f:
      f.write(b"\x00\x01")
    with open(p, "rb") as f:
      self.assertEqual(f.read(), b"\x00\x01")
    with self.assertRaises(ValueError):
      with io.atomic_write(p, "a"):
        pass


class _Scalar:

  def __init__(self, v):
    self.v = v

  def __float__(self):
    return self.v


class JsonlTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.path = os.path.join(self.create_tempdir().full_path, "m.jsonl")

  def test_truncated_last_line_and_blank_lines_are_skipped(self):
    with open(self.path, "w") as f:
      f.write('{"step": 0}\n\n{"step": 1}\n{"step": 2, "x"')
    self.assertEqual(io.read_jsonl(self.path), [{"step": 0}, {"step": 1}])

  def test_append_then_read(self):
    io.append_jsonl(self.path, [{"step": 0}])
    io.append_jsonl(self.path, [{"step": 1, "s": "é"}, {"step": 2}])
    self.assertEqual(io.read_jsonl(self.path), [{"step": 0}, {"step": 1, "s": "é"}, {"step": 2}])
    with open(self.path) as f:
      self.assertEqual(f.read().splitlines()[1], json.dumps({"step": 1, "s": "é"}))

  def test_truncate_keeps_rows_up_to_the_step(self):
    io.write_jsonl(self.path, [{"step": s, "v": float(s)} for s in range(5)])
    io.truncate_jsonl(self.path, 2)
    self.assertEqual([r["step"] for r in io.read_jsonl(self.path)], [0, 1, 2])

  def test_truncate_none_drops_every_row(self):
    io.write_jsonl(self.path, [{"step": 0}, {"step": 1}])
    io.truncate_jsonl(self.path, None)
    self.assertEqual(io.read_jsonl(self.path), [])
    self.assertTrue(os.path.exists(self.path))

  def test_truncate_missing_file_stays_missing(self):
    io.truncate_jsonl(self.path, 3)
    self.assertFalse(os.path.exists(self.path))

  def test_metric_writer_resume_truncates(self):
    d = os.path.dirname(self.path)
    w = metric_writer.MetricWriter(d, tensorboard=False)
    for s in range(4):
      w.write(s, {"loss": s * 0.5})
    w.close()
    metric_writer.MetricWriter(d, resume_step=1, tensorboard=False).close()
    rows = io.read_jsonl(os.path.join(d, "metrics.jsonl"))
    self.assertEqual(rows, [{"step": 0, "loss": 0.0}, {"step": 1, "loss": 0.5}])
    metric_writer.MetricWriter(d, tensorboard=False).close()
    self.assertEqual(io.read_jsonl(os.path.join(d, "metrics.jsonl")), [])


if __name__ == "__main__":
  absltest.main()
