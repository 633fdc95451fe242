"""The rollout driver's Policy for a language model: batched common.lm.sampling.generate (LMSampler).

  sampler = LMSampler(params, model_config, key=key, rows=64, max_new_tokens=256, temperature=1.0,
                      stop_tokens=eos_ids + chat.stop_ids, pad_id=0)
  trajectories = common.rollout.RolloutDriver(pool, sampler, chat, config=...).run(task_ids)

Shared by ProgAgent's GSPO rollouts (progagent/rollouts.py) and PlanPO's windowed rollouts
(planpo/rollouts.py). Everything runs on one device (`commit`).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from common import rollout as rollout_lib
from common.lm import sampling
from common.lm.config import ModelConfig


def commit(tree):
  """Committed single-device arrays (restored and fresh arrays then hit the same jit cache entry)."""
  return jax.device_put(tree, jax.sharding.SingleDeviceSharding(jax.devices()[0]))


class LMSampler:
  """The driver's Policy for a language model: batched common.lm.sampling.generate.

  Call t (one driver tick) samples with fold_in(key, t), generate chunk c of it with fold_in(that, c). The batch
  is always padded to `rows` rows (absent episodes become 1-token rows with a 0-token limit) and the prompt to a
  length bucket (`lengths.buckets`), so a rollout compiles once per bucket.

  Args:
    params: model parameters (committed to one device here).
    model: the ModelConfig.
    key: PRNG key of this GSPO step.
    rows: most episodes per call (gspo.tasks_per_step x gspo.rollouts_per_task).
    max_new_tokens: response cap (`env.max_response_tokens`); requests may ask for fewer.
    temperature, top_k, top_p: `gspo.temperature`, `gspo.top_k`, `gspo.top_p`.
    stop_tokens: ids ending a response (the model's eos ids and the chat template's end-of-turn id).
    pad_id: padding id.
    buckets: padded prompt lengths.
    chunk_rows: rows per generate call (`gspo.generate_batch_size`; 0 = all rows at once).
  """

  def __init__(self, params, model: ModelConfig, *, key, rows: int, max_new_tokens: int, temperature: float,
               top_k: int = 0, top_p: float = 1.0, stop_tokens: Sequence[int], pad_id: int,
               buckets: Sequence[int] = (), chunk_rows: int = 0):
    self.params, self.model, self.key, self.rows = commit(params), model, key, rows
    self.max_new_tokens = max_new_tokens
    self.sampling = sampling.SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    self.stop_ids = tuple(sorted(set(int(t) for t in stop_tokens)))
    self.stop = np.asarray(self.stop_ids, np.int32)
    self.pad_id = pad_id
    self.buckets = tuple(buckets)
    self.chunk = chunk_rows if 0 < chunk_rows < rows else rows
    self.calls = 0

  def __call__(self, requests: Sequence[rollout_lib.PolicyRequest]) -> list[rollout_lib.PolicyOutput]:
    n = len(requests)
    if n > self.rows:
      raise ValueError(f"{n} requests for a sampler of {self.rows} rows")
    key = jax.random.fold_in(self.key, self.calls)
    self.calls += 1
    out = []
    for c, i in enumerate(range(0, n, self.chunk)):   # chunks of `chunk` rows (the last one padded)
      part = requests[i:i + self.chunk]
      out += self._generate([r.token_ids for r in part], [r.max_new_tokens for r in part],
                            jax.random.fold_in(key, c))
    return out

  def _generate(self, contexts, max_new, key) -> list[rollout_lib.PolicyOutput]:
    n = len(contexts)
    ctx = [list(c) for c in contexts] + [[self.pad_id]] * (self.chunk - n)
    limit = np.zeros(self.chunk, np.int32)
    limit[:n] = np.minimum(np.asarray(max_new, np.int32), self.max_new_tokens)
    ids, mask = sampling.left_pad(ctx, pad_id=self.pad_id, buckets=self.buckets)
    out = sampling.generate(self.params, jnp.asarray(ids), jnp.asarray(mask), commit(key), config=self.model,
                            max_new_tokens=self.max_new_tokens, sampling=self.sampling, stop_tokens=self.stop,
                            row_max_new_tokens=jnp.asarray(limit), pad_id=self.pad_id)
    toks, lps, lens = jax.device_get((out.tokens, out.logprobs, out.lengths))
    return [rollout_lib.PolicyOutput(toks[i, :lens[i]].tolist(), lps[i, :lens[i]].tolist()) for i in range(n)]
