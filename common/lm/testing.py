"""Tiny random Hugging Face checkpoints for tests and smoke configs, written without torch or any download.

`make_tiny_checkpoint(dir, family)` writes config.json (transformers' config class), a small byte-level BPE
tokenizer trained on a few sentences (plus any extra text, e.g. tool names) with a chat template, and
random safetensors weights, in the same layout a real Qwen2 / Qwen3 / Llama checkpoint has.
transformers' AutoModelForCausalLM and AutoTokenizer load the result, and so does `common.lm.loading`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import jax
import numpy as np

from common.lm import loading
from common.lm import model as model_lib
from common.lm.config import ModelConfig, load_config

QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# Tool-use templates written for the tests, modelled on the behaviour of the real Qwen3 and Llama-3.1
# templates (not their text): tools in the system turn, calls in the family's native syntax, results in
# the tool role; Qwen3's <think> block (kept for replies after the last user message, dropped before it)
# and the enable_thinking switch (False opens the reply with an empty think block).
QWEN3_TOOL_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nFunctions you can call, one JSON signature per line inside <tools></tools>:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\n</tools>\n\nTo call one, reply with its name and arguments as JSON inside <tool_call></tool_call>:"
    "\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{%- set body = m.content or '' %}{%- set thought = '' %}"
    "{%- if m.reasoning_content is string %}{%- set thought = m.reasoning_content %}"
    "{%- elif '</think>' in body %}"
    "{%- set thought = body.split('</think>')[0].split('<think>')[-1] %}"
    "{%- set body = body.split('</think>')[-1].lstrip('\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\n' }}"
    "{%- if loop.index0 > ns.last_user and (loop.last or thought) %}"
    "{{- '<think>\n' + thought.strip('\n') + '\n</think>\n\n' }}"
    "{%- endif %}"
    "{{- body }}"
    "{%- for call in m.tool_calls or [] %}"
    "{%- set f = call.function if call.function is defined else call %}"
    "{%- if body or not loop.first %}{{- '\n' }}{%- endif %}"
    "{{- '<tool_call>\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}"
    "{{- '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}")
LLAMA31_TOOL_TEMPLATE = (
    "{{- bos_token }}"
    "{%- set ns = namespace(system='', rest=messages) %}"
    "{%- if messages and messages[0].role == 'system' %}"
    "{%- set ns.system = messages[0].content | trim %}{%- set ns.rest = messages[1:] %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\n' }}{%- endif %}"
    "{{- 'Knowledge cutoff: 2023-12\n\n' + ns.system + '<|eot_id|>' }}"
    "{%- if tools %}"
    "{%- if not ns.rest or ns.rest[0].role != 'user' %}"
    "{{- raise_exception('tools need a first user message') }}{%- endif %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\n\nAnswer with one JSON function call "
    "{\"name\": function name, \"parameters\": dictionary of arguments}, using these functions:\n\n' }}"
    "{%- for t in tools %}{{- (t | tojson(indent=4)) + '\n\n' }}{%- endfor %}"
    "{{- (ns.rest[0].content | trim) + '<|eot_id|>' }}"
    "{%- set ns.rest = ns.rest[1:] %}"
    "{%- endif %}"
    "{%- for m in ns.rest %}"
    "{%- if m.role == 'tool' or m.role == 'ipython' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + m.content + '<|eot_id|>' }}"
    "{%- elif m.tool_calls %}"
    "{%- if m.tool_calls | length != 1 %}{{- raise_exception('one tool call per message') }}{%- endif %}"
    "{%- set f = m.tool_calls[0].function if m.tool_calls[0].function is defined else m.tool_calls[0] %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"' + f.name + '\", \"parameters\": '"
    " + (f.arguments | tojson) + '}<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}")

CORPUS = (
    "The agent reads the task, picks a tool, reads the observation and decides the next call.",
    "search the web for flights from Paris to Tokyo and book the cheapest one",
    "get weather forecast for Berlin tomorrow then send an email summary",
    "The quick brown fox jumps over the lazy dog. 0123456789 {} [] () : , ; \" ' _ -",
    "user assistant system tool observation result error ok failed unavailable invalid",
    "list files, read file, write file, run query, call api, translate text, convert currency",
)


def _specials(family: str) -> dict[str, Any]:
  if family == "llama":
    return dict(tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>", "<|pad|>"],
                bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|pad|>", template=LLAMA_TEMPLATE)
  return dict(tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              bos=None, eos="<|im_end|>", pad="<|endoftext|>", template=QWEN_TEMPLATE)


def build_tokenizer(family: str = "qwen2", *, extra_text: Sequence[str] = (), vocab_size: int = 400,
                    chat_template: str | None = None):
  """A transformers PreTrainedTokenizerFast: byte-level BPE trained on CORPUS + extra_text, family-style
  special tokens and chat template. Any text encodes (byte fallback through the 256-byte alphabet).

  chat_template: the template to set (e.g. QWEN3_TOOL_TEMPLATE); None: the family's plain one; '': none
  (common.chat then uses its fallback format)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  sp = _specials(family)
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=sp["tokens"], show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(CORPUS) + list(extra_text), trainer)
  kw = dict(tokenizer_object=tok, eos_token=sp["eos"], pad_token=sp["pad"])
  if sp["bos"]:
    kw["bos_token"] = sp["bos"]
  fast = transformers.PreTrainedTokenizerFast(**kw)
  fast.chat_template = sp["template"] if chat_template is None else (chat_template or None)
  return fast


def random_params(config: ModelConfig, *, seed: int = 0, std: float = 0.1) -> dict:
  """Host (numpy) parameters: kernels / embeddings N(0, std^2), biases N(0, std^2), norm scales
  1 + N(0, 0.1^2) (not all ones, so a missing norm shows up in parity tests)."""
  rng = np.random.default_rng(seed)
  abstract = model_lib.abstract_params(config)
  dtype = np.dtype(jax.numpy.dtype(config.param_dtype))

  def draw(path, x):
    last = str(getattr(path[-1], "key", path[-1]))
    if last == "scale":
      v = 1.0 + 0.1 * rng.standard_normal(x.shape)
    elif last == "lora_b":
      v = np.zeros(x.shape)
    else:
      v = std * rng.standard_normal(x.shape)
    return v.astype(np.float32).astype(dtype)

  return jax.tree_util.tree_map_with_path(draw, abstract)


def make_tiny_checkpoint(path: str, family: str = "qwen2", *, hidden_size: int = 32, num_layers: int = 2,
                         num_heads: int = 4, num_kv_heads: int = 2, head_dim: int | None = None,
                         intermediate_size: int = 64, tie_embeddings: bool | None = None,
                         rope_type: str = "default", seed: int = 0, num_shards: int = 1,
                         dtype: str = "float32", extra_text: Sequence[str] = (), tokenizer_vocab: int = 400,
                         init_std: float = 0.1, chat_template: str | None = None) -> ModelConfig:
  """Write a tiny random checkpoint directory (config.json, tokenizer, safetensors) and return its config.

  Args:
    path: directory to create (may exist).
    family: 'qwen2', 'qwen3' or 'llama'.
    hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size: shapes (tiny defaults).
    tie_embeddings: default True for qwen2 / qwen3, False for llama.
    rope_type: 'default', 'linear' or 'llama3' (llama3 uses factor 8, low 1, high 4, original 64).
    seed: weights' random seed.
    num_shards: > 1 writes model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
    dtype: 'float32' or 'bfloat16' storage.
    extra_text: more training text for the tokenizer (e.g. tool names, so they get few tokens).
    tokenizer_vocab: BPE vocabulary size; the embedding gets that many rows rounded up to 16.
    init_std: standard deviation of the random weights.
    chat_template: the tokenizer's chat template (build_tokenizer; None: the family's plain one).
  Returns:
    The ModelConfig of the written checkpoint (as `common.lm.config.load_config(path)` would read it).
  """
  tok = build_tokenizer(family, extra_text=extra_text, vocab_size=tokenizer_vocab, chat_template=chat_template)
  vocab = int(math.ceil(len(tok) / 16) * 16)
  rope = {}
  if rope_type == "linear":
    rope = dict(rope_factor=2.0)
  elif rope_type == "llama3":
    rope = dict(rope_factor=8.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
                rope_original_max_position=64)
  eos = tok.convert_tokens_to_ids(tok.eos_token)
  config = ModelConfig(
      family=family, vocab_size=vocab, hidden_size=hidden_size, intermediate_size=intermediate_size,
      num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
      head_dim=head_dim or hidden_size // num_heads, rms_norm_eps=1e-6, rope_theta=10000.0,
      rope_type=rope_type, max_position_embeddings=2048, qkv_bias=family == "qwen2",
      qk_norm=family == "qwen3",
      tie_embeddings=(family != "llama") if tie_embeddings is None else tie_embeddings,
      bos_token_id=tok.bos_token_id, eos_token_ids=(int(eos),), pad_token_id=tok.pad_token_id,
      param_dtype=dtype, **rope)
  params = random_params(config, seed=seed, std=init_std)
  total = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(params))
  shard_bytes = total + 1 if num_shards <= 1 else max(1, total // num_shards)
  os.makedirs(path, exist_ok=True)
  loading.export_pretrained(params, config, path, tokenizer=tok, dtype=dtype, max_shard_bytes=shard_bytes)
  return load_config(path)


def make_torch_checkpoint(path: str, family: str = "qwen2", *, hidden_size: int = 32, num_layers: int = 2,
                          num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 64,
                          tie_embeddings: bool | None = None, rope_scaling: dict | None = None,
                          seed: int = 0, max_shard_size: str | None = None, init_std: float = 0.1,
                          extra_text: Sequence[str] = ()):
  """A reference checkpoint written by transformers' own PyTorch classes (tests only: imports torch).

  Norm weights are drawn as 1 + N(0, 0.1^2) and biases as N(0, std^2) (transformers initialises them to
  1 and 0, which would hide a missing norm or bias). Returns the transformers model (eval mode, float32).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  tok = build_tokenizer(family, extra_text=extra_text)
  vocab = int(math.ceil(len(tok) / 16) * 16)
  common = dict(vocab_size=vocab, hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=2048, rms_norm_eps=1e-6, initializer_range=init_std,
                tie_word_embeddings=(family != "llama") if tie_embeddings is None else tie_embeddings,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id)
  rope = {"rope_type": "default", "rope_theta": 10000.0}
  if rope_scaling:
    rope = {**rope, **rope_scaling}
  common["rope_parameters"] = rope
  cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
         "llama": transformers.LlamaConfig}[family]
  if family == "qwen3":
    common["head_dim"] = hidden_size // num_heads
  cfg = cls(**common)
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.float32).eval()
  gen = torch.Generator().manual_seed(seed + 1)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
      elif name.endswith("bias"):
        p.copy_(init_std * torch.randn(p.shape, generator=gen))
      else:
        p.copy_(init_std * torch.randn(p.shape, generator=gen))
  kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
  model.save_pretrained(path, **kw)
  tok.save_pretrained(path)
  return model
