"""Frozen sentence embeddings of task queries and tool descriptions, with an on-disk cache.

The main job embeds the ~1,670 TRAJECT-Bench queries and ~381 tool texts with all-MiniLM-L6-v2 once; later
runs (other seeds, resumed runs, evaluation) read them back from the cache.

Cache layout (default folder: $AGENTIC_RL_CACHE, else ~/.cache/agentic-rl-jax; never inside the shared data
folder):
    <cache_dir>/embeddings/<slug of model id>-len<max_length>/
        index.json        {"model_id", "max_length", "dim", "entries": {sha1(text): [shard file, row]}}
        shard-*.npy       f32[rows, dim], one shard per batch of newly embedded texts
Entries are keyed by model id + max_length (the folder) and the sha1 of the UTF-8 text (the index key).
Writers take an exclusive `fcntl` lock on `.lock`, re-read the index, write a new shard under a unique
name and replace index.json atomically, so concurrent runs (e.g. three seeds started together) never
corrupt it. An index entry whose shard is missing or unreadable is treated as a miss and re-embedded.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import pathlib
import re
import uuid
from typing import Any, Iterator, Protocol, Sequence

import numpy as np
from absl import logging

from common import io
from phgpo import data as data_lib

CACHE_ENV = "AGENTIC_RL_CACHE"


class TextEncoder(Protocol):
  """What `embed_texts` needs from an encoder (common.encoder.SentenceEncoder fits)."""
  model_id: str
  max_length: int
  dim: int

  def encode(self, texts: list[str], *, batch_size: int = 64) -> np.ndarray:
    ...


def default_cache_dir() -> pathlib.Path:
  """$AGENTIC_RL_CACHE if set, else ~/.cache/agentic-rl-jax."""
  env = os.environ.get(CACHE_ENV)
  return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "agentic-rl-jax"


def _check_not_shared(path: pathlib.Path) -> None:
  shared = (data_lib.repo_root().parent / "shared").resolve()
  resolved = path.resolve()
  if resolved == shared or shared in resolved.parents:
    raise ValueError(f"cache_dir {path} lies inside the read-only shared folder {shared}; pick another folder "
                     f"(set ${CACHE_ENV} or pass cache_dir=...)")


def text_key(text: str) -> str:
  """sha1 hex digest of the UTF-8 text: the index key."""
  return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _slug(model_id: str) -> str:
  return re.sub(r"[^A-Za-z0-9._=-]+", "_", model_id).strip("_")[:120] or "model"


@contextlib.contextmanager
def _locked(folder: pathlib.Path) -> Iterator[None]:
  with open(folder / ".lock", "a+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(fh, fcntl.LOCK_UN)


class EmbeddingCache:
  """The on-disk cache of one (model id, max_length) pair; see the module docstring for the layout."""

  def __init__(self, cache_dir: str | os.PathLike | None, *, model_id: str, max_length: int, dim: int):
    root = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    _check_not_shared(root)
    self.model_id, self.max_length, self.dim = model_id, int(max_length), int(dim)
    self.folder = root / "embeddings" / f"{_slug(model_id)}-len{self.max_length}"
    self.folder.mkdir(parents=True, exist_ok=True)

  def _read_index(self) -> dict[str, Any]:
    path = self.folder / "index.json"
    empty = {"model_id": self.model_id, "max_length": self.max_length, "dim": self.dim, "entries": {}}
    if not path.exists():
      return empty
    try:
      index = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
      logging.warning("embedding cache index %s unreadable (%s); starting a new one", path, e)
      return empty
    if (index.get("model_id"), index.get("max_length"), index.get("dim")) != (self.model_id, self.max_length,
                                                                               self.dim):
      logging.warning("embedding cache %s belongs to another model (%s); ignoring it", path, index.get("model_id"))
      return empty
    return index

  def lookup(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """key -> f32[dim] for the keys found (unreadable shards count as misses)."""
    entries = self._read_index()["entries"]
    by_shard: dict[str, list[tuple[str, int]]] = {}
    for k in keys:
      if k in entries:
        shard, row = entries[k]
        by_shard.setdefault(shard, []).append((k, row))
    found: dict[str, np.ndarray] = {}
    for shard, items in by_shard.items():
      try:
        arr = np.load(self.folder / shard, mmap_mode="r")
        if arr.ndim != 2 or arr.shape[1] != self.dim:
          raise ValueError(f"shape {arr.shape}")
        for k, row in items:
          found[k] = np.array(arr[row], np.float32)
      except (OSError, ValueError, IndexError) as e:
        logging.warning("embedding cache shard %s unreadable (%s); re-embedding %d texts", shard, e, len(items))
    return found

  def store(self, keys: Sequence[str], vectors: np.ndarray) -> None:
    """Writes f32[len(keys), dim] as a new shard and adds it to the index (under the lock)."""
    if not len(keys):
      return
    vectors = np.asarray(vectors, np.float32)
    if vectors.shape != (len(keys), self.dim):
      raise ValueError(f"vectors must be f32[{len(keys)}, {self.dim}], got {vectors.shape}")
    with _locked(self.folder):
      index = self._read_index()
      shard = f"shard-{uuid.uuid4().hex[:12]}.npy"
      np.save(self.folder / shard, vectors)
      for row, k in enumerate(keys):
        index["entries"][k] = [shard, row]
      io.write_json(self.folder / "index.json", index, indent=None)


def embed_texts(encoder: TextEncoder, texts: Sequence[str], cache_dir: str | os.PathLike | None = None, *,
                batch_size: int = 64) -> np.ndarray:
  """Embeds texts through the on-disk cache: only texts not cached yet reach the encoder.

  Args:
    encoder: has model_id, max_length, dim and encode(texts, batch_size=...) -> f32[n, dim].
    texts: n strings (duplicates are embedded once).
    cache_dir: cache root; None means $AGENTIC_RL_CACHE or ~/.cache/agentic-rl-jax.
    batch_size: passed to encoder.encode.
  Returns:
    f32[n, dim] in the order of `texts`.
  Raises:
    ValueError: cache_dir inside the shared data folder.
  """
  texts = list(texts)
  cache = EmbeddingCache(cache_dir, model_id=encoder.model_id, max_length=encoder.max_length, dim=encoder.dim)
  keys = [text_key(t) for t in texts]
  found = cache.lookup(sorted(set(keys)))
  missing: dict[str, str] = {}
  for k, t in zip(keys, texts):
    if k not in found and k not in missing:
      missing[k] = t
  if missing:
    logging.info("embedding %d new texts (%d cached) with %s", len(missing), len(set(keys)) - len(missing),
                 encoder.model_id)
    new = np.asarray(encoder.encode(list(missing.values()), batch_size=batch_size), np.float32)
    cache.store(list(missing), new)
    found.update(zip(missing, new))
  out = np.zeros((len(texts), encoder.dim), np.float32)
  for i, k in enumerate(keys):
    out[i] = found[k]
  return out


def tool_text(spec: data_lib.ToolSpec) -> str:
  """The text a tool is embedded from: "name: description"."""
  return f"{spec.name}: {spec.description}"


@dataclasses.dataclass(frozen=True)
class TaskFeatures:
  """Frozen embeddings of the tasks' queries and of the tools.

  Attributes:
    task_ids: the tasks' ids, row order of `query_emb`.
    tool_names: the tools' names, row order of `tool_emb` (the tool index order).
    query_emb: f32[num_tasks, D] unit rows.
    tool_emb: f32[N, D] unit rows, from tool_text(spec) = "name: description".
  """
  task_ids: tuple[str, ...]
  tool_names: tuple[str, ...]
  query_emb: np.ndarray
  tool_emb: np.ndarray

  @classmethod
  def build(cls, encoder: TextEncoder, tasks: Sequence[data_lib.Task], tools: Sequence[data_lib.ToolSpec], *,
            cache_dir: str | os.PathLike | None = None, batch_size: int = 64) -> "TaskFeatures":
    """Embeds every query and tool text (through the cache)."""
    return cls(task_ids=tuple(t.task_id for t in tasks), tool_names=tuple(s.name for s in tools),
               query_emb=embed_texts(encoder, [t.query for t in tasks], cache_dir, batch_size=batch_size),
               tool_emb=embed_texts(encoder, [tool_text(s) for s in tools], cache_dir, batch_size=batch_size))

  @functools.cached_property
  def _rows(self) -> dict[str, int]:
    return {t: i for i, t in enumerate(self.task_ids)}

  def task_row(self, task_id: str) -> int:
    """Row of `task_id` in `query_emb`. Raises KeyError naming the id."""
    if task_id not in self._rows:
      raise KeyError(f"task {task_id!r} not in these features ({len(self.task_ids)} tasks)")
    return self._rows[task_id]
