"""PhGPO with a language-model policy: `policy.kind = 'lm'` selects it in `configs/phgpo_traject.py`.

Adapts `phgpo.lm_tool_policy.LMToolPolicy` (a Hugging Face decoder with LoRA adapters and a tool head) to
the trainer's `ToolPolicy` interface: `featurize` renders each decision state (task query, then every
(tool name, observation text) pair so far) with the checkpoint's chat template and tokenizes it on the host;
`apply` returns one logit per tool from the last hidden state. Only the adapters and the tool head train
(`trainable_mask`), as in the published setting (LoRA rank 64, alpha 128; config `model.lora_rank`,
`model.lora_alpha`: the shared `model` schema, configs/schema.py).

Scale knobs (the update itself is phgpo.steps.Compiled): `model.dtype` / `model.param_dtype` (compute and
storage dtypes; 'bfloat16' storage with `optim.master_weights` keeps float32 master weights and optimizer
state), `model.remat` (activation checkpointing per decoder layer), `policy.micro_batches` (the update's
forward pass in that many strided micro-batches under jax.checkpoint, common.lm.training.micro_batched_apply),
and the device mesh of config `mesh.shape` (optional mesh.rules; default (1, 1, 1): one device): the base weights
load straight into their shardings, adapters, tool head and optimizer state are placed beside them, and each
update's rows are sharded over (data, fsdp) when their count is a multiple of data x fsdp.

`model.checkpoint` names a local Hugging Face directory. The value `tiny:<family>` (family 'qwen2', 'qwen3' or
'llama') writes a tiny random checkpoint with a tokenizer trained on the tool names into `model.cache_dir` (else
the embedding cache folder) and uses it: the CPU smoke configuration, with no download.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from common.lm import stages
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


def make_lm_policy(config, problem) -> PhGPOLMPolicy:
  """Builds the LM policy for a `phgpo.problem.Problem` from `config.model` (the checkpoint, resolved by
  common.lm.stages.resolve_checkpoint with a tokenizer trained on the tool names), `config.policy.lm_max_length`
  and the mesh of `mesh.shape`.

  Raises:
    ValueError: empty or missing `model.checkpoint`.
  """
  mc = config.model
  names = list(problem.graph.tool_names)
  path = stages.resolve_checkpoint(mc, corpus=names, cache_dir=config.encoder.cache_dir or None)
  mesh, rules = stages.mesh_of(config)
  lm = tool_policy.LMToolPolicy(path, names, lora_rank=mc.lora_rank, lora_alpha=mc.lora_alpha,
                                max_length=config.policy.lm_max_length, dtype=mc.dtype,
                                param_dtype=mc.param_dtype or None, remat=mc.remat, mesh=mesh, rules=rules)
  return PhGPOLMPolicy(lm, [t.query for t in problem.tasks], names)
