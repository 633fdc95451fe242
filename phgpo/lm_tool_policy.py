"""PhGPO's language-model tool policy: a Hugging Face decoder (LoRA-adapted) plus a tool head.

Selected by config `policy.kind = 'lm'`; implements the `ToolPolicy` interface of `phgpo/policy.py`
(`num_tools`, `init(key) -> params`, `apply(params, batch) -> f32[B, N]` logits at temperature 1), with
its own batch type `LMPolicyBatch` (token ids and attention mask) made on the host by `encode`.

A decision state s_t = (task query x, history ((a_1, o_1), ..., (a_{t-1}, o_{t-1}))) is rendered with the
checkpoint's chat template as
  [system] system_prompt (+ the tool list when list_tools=True)
  [user] x
  [assistant] call a_1      [user] observation: o_1 (cut to max_obs_chars)     ... (one pair per call)
  + the generation prompt (the assistant turn that would name the next tool),
tokenized, and left-truncated by dropping the oldest (call, observation) pairs when longer than
max_length (then, if still too long, keeping the last max_length tokens). The policy is
  pi_theta(a | s) = softmax_a( h(s) . w_a + c_a ),  h(s) = last hidden state of the rendered state,
with w_a initialised to the mean embedding of tool a's name tokens (`phgpo.lm_tool_head`).
Trainable: the LoRA adapters (rank `lora.rank`, alpha `lora.alpha`, published PhGPO setting 64 / 128) and
the tool head; the base weights stay frozen (`optimizer(tx)`); rank 0 fine-tunes everything.
Source: PhGPO (arXiv 2602.13691): pi_theta on a Qwen2.5-7B / Llama3.1-8B backbone with LoRA r 64 /
alpha 128; the rendering and head are our choices (not published).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.lm import lora as lora_lib
from common.lm import model as model_lib
from common.lm import sharding as sharding_lib
from phgpo import lm_tool_head as head_lib
from common.lm.config import load_config
from common.lm.loading import load_params, load_tokenizer
from common.lm.sampling import bucket_length

DEFAULT_SYSTEM_PROMPT = ("You are a tool-using agent. Given the user's task and the calls made so far with "
                         "their observations, name the next tool to call.")


class LMPolicyBatch(NamedTuple):
  """Rendered decision states.

  Attributes:
    tokens: i32[B, L] left-padded token ids of the rendered states.
    mask: i32[B, L], 1 = real token.
  """
  tokens: Any
  mask: Any


class LMToolPolicy:
  """Language-model tool policy over a local Hugging Face checkpoint (see the module docstring).

  Args:
    checkpoint_dir: local directory with config.json, safetensors weights and tokenizer.
    tool_names: the N tool names, in the environment's tool order (logit n is tool n).
    lora_rank, lora_alpha, lora_targets: adapters (config `model.lora_rank`, `model.lora_alpha`); rank 0 = full
      fine-tuning.
    dtype, param_dtype: compute / storage dtype.
    remat: activation checkpointing policy.
    max_length: longest rendered state in tokens (PhGPO config `policy.lm_max_length`).
    length_buckets: padded lengths to use (default: powers of two >= 16, capped at max_length).
    system_prompt: text of the system turn.
    list_tools: also list all tool names in the system turn.
    max_obs_chars: observations are cut to this many characters.
    mesh: optional (data, fsdp, tensor) device mesh (`common.lm.sharding.make_mesh`); base weights load
      straight into their shardings and `init` places adapters and tool head on the mesh too.
    rules: logical-axis rules for `mesh` (default `common.lm.sharding.DEFAULT_RULES`).
  Raises:
    CheckpointError (from loading) naming the file for a broken checkpoint; ValueError for an empty
    tool list or a tool name that encodes to nothing.
  """

  def __init__(self, checkpoint_dir: str, tool_names: Sequence[str], *, lora_rank: int = 64,
               lora_alpha: float = 128.0,
               lora_targets: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
               dtype: str = "float32", param_dtype: str | None = None, remat: str = "none",
               max_length: int = 1024, length_buckets: Sequence[int] = (),
               system_prompt: str = DEFAULT_SYSTEM_PROMPT, list_tools: bool = False,
               max_obs_chars: int = 400, mesh: Any = None, rules: Any = None):
    if not tool_names:
      raise ValueError("LMToolPolicy needs at least one tool name.")
    overrides = dict(dtype=dtype, param_dtype=param_dtype or dtype, remat=remat)
    if lora_rank:
      overrides.update(lora_rank=int(lora_rank), lora_alpha=float(lora_alpha), lora_targets=tuple(lora_targets))
    self.checkpoint_dir = checkpoint_dir
    self.config = load_config(checkpoint_dir, **overrides)
    self.tokenizer = load_tokenizer(checkpoint_dir, self.config)
    self.tool_names = list(tool_names)
    self.num_tools = len(self.tool_names)
    self.name_token_ids = head_lib.tool_name_token_ids(self.tokenizer, self.tool_names)
    self.max_length = int(max_length)
    self.length_buckets = tuple(length_buckets)
    self.system_prompt = system_prompt
    self.list_tools = list_tools
    self.max_obs_chars = int(max_obs_chars)
    self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
    self.mesh, self.rules = mesh, rules
    self._base = None

  # -- parameters -------------------------------------------------------------------------------------

  def base_params(self) -> Any:
    """The checkpoint's weights (loaded once, then shared by every `init`)."""
    if self._base is None:
      shardings = None
      if self.mesh is not None:
        base = self.config.replace(lora_rank=0, lora_targets=())
        shardings = sharding_lib.param_shardings(model_lib.abstract_params(base), self.mesh, self.rules)
      self._base = load_params(self.checkpoint_dir, self.config, shardings=shardings)
    return self._base

  def init(self, key: jax.Array) -> dict:
    """{'lm': base weights (+ fresh LoRA adapters from `key`), 'tool_head': {'kernel' [D, N], 'bias' [N]}}."""
    lm = self.base_params()
    if self.config.lora_rank:
      lm = lora_lib.add_adapters(key, lm, self.config)
    head = head_lib.init_tool_head(lm["embed"], self.name_token_ids, dtype=jnp.dtype(self.config.param_dtype))
    params = {"lm": lm, "tool_head": head}
    if self.mesh is not None:
      params = sharding_lib.shard_params(params, self.mesh, self.rules)
    return params

  def trainable_mask(self, params: Any) -> Any:
    """bool pytree: adapters and tool head (everything when lora rank is 0)."""
    if not self.config.lora_rank:
      return jax.tree_util.tree_map(lambda _: True, params)
    return lora_lib.trainable_mask(params, extra=("tool_head",))

  def optimizer(self, tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` restricted to the trainable leaves (frozen base weights get zero updates and no state)."""
    if not self.config.lora_rank:
      return tx
    def labels(params):
      return jax.tree_util.tree_map(lambda m: "train" if m else "frozen", self.trainable_mask(params))
    return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)

  # -- forward ----------------------------------------------------------------------------------------

  def apply(self, params: Any, batch: Any) -> jax.Array:
    """Logits f32[B, N] at temperature 1 over all tools.

    Args:
      params: from `init`.
      batch: LMPolicyBatch (or a dict with 'tokens' i32[B, L] and 'mask' i32/bool[B, L]).
    Raises:
      AssertionError at trace time on wrong ranks or dtypes.
    """
    tokens, mask = (batch["tokens"], batch["mask"]) if isinstance(batch, dict) else (batch.tokens, batch.mask)
    tokens, mask = jnp.asarray(tokens), jnp.asarray(mask)
    chex.assert_rank([tokens, mask], 2)
    chex.assert_type(tokens, jnp.int32)
    h = model_lib.hidden_states(params["lm"], tokens, mask, config=self.config)
    return head_lib.tool_logits(params["tool_head"], head_lib.last_token_hidden(h, mask))

  # -- rendering (host side) --------------------------------------------------------------------------

  def messages(self, query: str, history: Sequence[tuple[str, str]]) -> list[dict]:
    system = self.system_prompt
    if self.list_tools:
      system = f"{system}\nTools: {', '.join(self.tool_names)}"
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": query}]
    for tool, obs in history:
      msgs.append({"role": "assistant", "content": f"call {tool}"})
      msgs.append({"role": "user", "content": f"observation: {str(obs)[:self.max_obs_chars]}"})
    return msgs

  def render(self, query: str, history: Sequence[tuple[str, str]] = ()) -> str:
    """The chat-template text of one state (ending with the assistant generation prompt)."""
    return self.tokenizer.apply_chat_template(self.messages(query, history), tokenize=False,
                                              add_generation_prompt=True)

  def state_tokens(self, query: str, history: Sequence[tuple[str, str]] = ()) -> list[int]:
    """Token ids of one rendered state, truncated to max_length (oldest history pairs dropped first)."""
    history = list(history)
    while True:
      ids = list(self.tokenizer(self.render(query, history), add_special_tokens=False)["input_ids"])
      if len(ids) <= self.max_length or not history:
        return ids[-self.max_length:]
      history = history[1:]

  def encode(self, queries: Sequence[str], histories: Sequence[Sequence[tuple[str, str]]]) -> LMPolicyBatch:
    """Render, tokenize and left-pad a batch of states (numpy; pad length = bucket of the longest)."""
    if len(queries) != len(histories):
      raise ValueError(f"encode: {len(queries)} queries but {len(histories)} histories.")
    seqs = [self.state_tokens(q, h) for q, h in zip(queries, histories)]
    longest = max(len(s) for s in seqs)
    length = min(bucket_length(longest, buckets=self.length_buckets), max(self.max_length, longest))
    ids = np.full((len(seqs), length), self.pad_id, np.int32)
    mask = np.zeros((len(seqs), length), np.int32)
    for i, s in enumerate(seqs):
      ids[i, length - len(s):] = s
      mask[i, length - len(s):] = 1
    return LMPolicyBatch(ids, mask)
