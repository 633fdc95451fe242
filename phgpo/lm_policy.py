"""PhGPO with a language-model policy: `policy.kind = 'lm'` selects it in `configs/phgpo_traject.py`.

Adapts `phgpo.lm_tool_policy.LMToolPolicy` (a Hugging Face decoder with LoRA adapters and a tool head) to
the trainer's `ToolPolicy` interface: `featurize` renders each decision state (task query, then every
(tool name, observation text) pair so far) with the checkpoint's chat template and tokenizes it on the host;
`apply` returns one logit per tool from the last hidden state. Only the adapters and the tool head train
(`trainable_mask`), as in the published setting (LoRA rank 64, alpha 128; config `policy.lora_rank`,
`policy.lora_alpha`).

Scale knobs (the update itself is phgpo.steps.Compiled): `policy.dtype` / `policy.param_dtype` (compute and
storage dtypes; 'bfloat16' storage with `policy.master_weights` keeps float32 master weights and optimizer
state), `policy.remat` (activation checkpointing per decoder layer), `policy.micro_batches` (the update's
forward pass in that many strided micro-batches under jax.checkpoint, common.lm.training.micro_batched_apply),
and the device mesh of config `mesh.shape` (optional mesh.rules; default (1, 1, 1): one device): the base weights
load straight into their shardings, adapters, tool head and optimizer state are placed beside them, and each
update's rows are sharded over (data, fsdp) when their count is a multiple of data x fsdp.

`policy.lm_checkpoint` names a local Hugging Face directory. The value `tiny:<family>` (family 'qwen2',
'qwen3' or 'llama') writes a tiny random checkpoint with a tokenizer trained on the tool names into the
embedding cache folder and uses it: the CPU smoke configuration, with no download.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from common.lm import checkpoints
from common.lm import training
from phgpo import lm_tool_policy as tool_policy


class PhGPOLMPolicy:
  """`ToolPolicy` over an `LMToolPolicy` (see the module docstring).

  Args:
    lm: the language-model tool policy (its tool order is the graph's tool order).
    queries: the task query texts, row = task index.
    tool_names: the N tool names.
  """
  uses_observations = True

  def __init__(self, lm: tool_policy.LMToolPolicy, queries: Sequence[str], tool_names: Sequence[str]):
    self.lm = lm
    self.queries = list(queries)
    self.tool_names = list(tool_names)
    self.num_tools = lm.num_tools
    self.mesh, self.rules = lm.mesh, lm.rules

  def featurize(self, task_idx, history_tools, history_status, step, observations=None):
    """Renders B decision states to an `LMPolicyBatch` (left-padded token ids and mask, numpy).

    Raises:
      ValueError: observation texts missing (the trainer records them when `uses_observations`).
    """
    del history_status  # the observation text carries it
    if observations is None:
      raise ValueError("the LM policy reads observation texts; pass observations to featurize")
    histories = []
    for b, k in enumerate(np.asarray(step)):
      hist = []
      for t in range(int(k)):
        tool = int(history_tools[b, t])
        if tool < 0:
          break
        obs = observations[b][t] if t < len(observations[b]) else ""
        hist.append((self.tool_names[tool], obs))
      histories.append(hist)
    return self.lm.encode([self.queries[int(i)] for i in task_idx], histories)

  def init(self, key):
    return self.lm.init(key)

  def apply(self, params, batch):
    return self.lm.apply(params, batch)

  def trainable_mask(self, params) -> Any:
    return self.lm.trainable_mask(params)


def resolve_checkpoint(spec: str, tool_names: Sequence[str], cache_dir: str | None) -> str:
  """A checkpoint directory for `policy.lm_checkpoint`: a path, or `tiny:<family>` with a tokenizer trained on
  the tool names (written on first use; common.lm.checkpoints.resolve_checkpoint).

  Raises:
    ValueError: empty value (the message says how to set it) or a folder that is not a checkpoint.
  """
  return checkpoints.resolve_checkpoint(spec, corpus=list(tool_names), cache_dir=cache_dir,
                                        config_key="policy.lm_checkpoint")


def make_lm_policy(config, problem) -> PhGPOLMPolicy:
  """Builds the LM policy for a `phgpo.problem.Problem` from `config.policy` and the mesh of `mesh.shape`."""
  pc = config.policy
  names = list(problem.graph.tool_names)
  path = resolve_checkpoint(pc.lm_checkpoint, names, config.encoder.cache_dir or None)
  mesh, rules = training.mesh_from_config(config.get("mesh", None))
  lm = tool_policy.LMToolPolicy(path, names, lora_rank=pc.lora_rank, lora_alpha=pc.lora_alpha,
                                max_length=pc.lm_max_length, dtype=pc.get("dtype", "float32"),
                                param_dtype=pc.get("param_dtype", None) or None, remat=pc.get("remat", "none"),
                                mesh=mesh, rules=rules)
  return PhGPOLMPolicy(lm, [t.query for t in problem.tasks], names)
