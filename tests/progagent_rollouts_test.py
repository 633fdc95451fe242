"""ProgAgent's GSPO rollouts (progagent/rollouts.py) under a KV cache budget smaller than the step's rows.

A GSPO step's sampling on a tiny random model: 2 tasks x G = 3 rollouts through the common driver with the
step's driver settings (progagent.rollouts.driver_config), sampler options from the config
(progagent.rollouts.sampler_options: `gspo.kv_reuse`, `gspo.kv_cache_max_gb`, `gspo.sample_keys` 'request'),
temperature 1, then the step's batch (progagent.train.gspo_step_batch). With a budget that holds 2 of the 6 rows
the batch equals the unbudgeted step's and the reuse-off step's: the same tokens, log-probs to 1e-5, the same
advantages. The experiment configs that keep the stream from before the pool ('call') are checked too.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
import pytest

from common import chat as chat_lib
from common import rollout as rollout_lib
from common.env_pool import WorkerPool
from common.envs.base import StepResult, ToolEnv
from common.lm import sampler as sampler_lib
from common.lm import testing
from common.lm.config import ModelConfig
from common.trajectory import ByteTokenizer
from configs import progagent as progagent_config
from progagent import rollouts
from progagent import train

# Byte-level tokens (ByteTokenizer: 0..255 and eos 256) for a tiny random decoder.
MODEL = ModelConfig(family="qwen3", vocab_size=257, hidden_size=32, intermediate_size=64, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True, tie_embeddings=False,
                    max_position_embeddings=4096)
PARAMS = jax.tree_util.tree_map(jnp.asarray, testing.random_params(MODEL, seed=5, std=0.3))
# End-of-turn ids: eos and the bytes 0xA0..0xFF, so that the random model ends most replies within a few tokens
# (a reply without a call gets an error note and the episode goes on: multi-turn episodes of varied lengths).
STOPS = tuple(range(0xA0, 257))
CONTEXT = 1024


class EchoEnv(ToolEnv):
  """Answers nothing but its first observation; the replies of a random model hold no calls."""

  def tools(self):
    return [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}]

  def reset(self, task_id, seed):
    return f"task {task_id} seed {seed}"

  def step(self, call):
    return StepResult(str(call.get("arguments", {})), "ok", False, {})


def _config(**gspo):
  c = progagent_config.get_config("smoke")
  c.env.max_turns = 4
  c.env.max_context_tokens = CONTEXT
  c.env.max_response_tokens = 8
  c.lengths.buckets = ()
  for k, v in gspo.items():
    c.gspo[k] = v
  return c


def _gspo_step(config):
  """The step's rollouts and batch under `config`; returns (batch, trajectories, sampler)."""
  g = config.gspo
  rows = g.tasks_per_step * g.rollouts_per_task
  chat = chat_lib.ChatTemplate(ByteTokenizer())
  chat.stop_ids = frozenset(STOPS)
  sampler = sampler_lib.LMSampler(PARAMS, MODEL, key=jax.random.key(11), rows=rows,
                                  max_new_tokens=config.env.max_response_tokens, temperature=float(g.temperature),
                                  top_k=g.top_k, top_p=g.top_p, stop_tokens=STOPS, pad_id=0,
                                  buckets=tuple(config.lengths.buckets), chunk_rows=g.generate_batch_size,
                                  **rollouts.sampler_options(config, MODEL, rows))
  driver_config = rollouts.driver_config(config, seed=3)._replace(stop_on_no_call=False)
  reward = lambda t: float(sum(len(tn.response_ids) for tn in t.turns) % 2)
  with WorkerPool.local(EchoEnv, rows) as pool:
    trajs = rollout_lib.RolloutDriver(pool, sampler, chat, config=driver_config, reward_fn=reward).run(["a", "b"])
  return train.gspo_step_batch(trajs, num_groups=g.tasks_per_step, config=config, pad_id=0), trajs, sampler


class BudgetedGSPOStepTest(absltest.TestCase):

  def test_a_budget_below_the_rows_gives_the_unbudgeted_step(self):
    gib = 2.5 * sampler_lib.row_bytes(MODEL, CONTEXT) / 2 ** 30          # holds 2 of the 6 rows
    budgeted, trajs, sampler = _gspo_step(_config(kv_cache_max_gb=gib, sample_keys="request"))
    self.assertEqual((sampler.rows, sampler.pool_rows, sampler.sample_keys), (6, 2, "request"))
    self.assertTrue(sampler.kv_reuse)
    self.assertLessEqual(sampler.cache_bytes, gib * 2 ** 30)
    self.assertGreater(sampler.overflow_requests, 0)
    self.assertGreater(sampler.reused_tokens, 0)
    turns = [t.num_turns for t in trajs]
    self.assertGreater(max(turns), 2, turns)                                # multi-turn, and varied
    self.assertGreater(len(set(turns)), 1, turns)
    unbudgeted, _, full = _gspo_step(_config(kv_cache_max_gb=0.0, sample_keys="request"))
    off, _, plain = _gspo_step(_config(kv_reuse=False, sample_keys="request"))
    self.assertEqual((full.pool_rows, plain.pool_rows), (6, 0))
    self.assertLess(full.prefill_tokens, sampler.prefill_tokens)
    self.assertLess(sampler.prefill_tokens, plain.prefill_tokens)
    for other in (unbudgeted, off):
      np.testing.assert_array_equal(budgeted.tokens, other.tokens)
      np.testing.assert_array_equal(budgeted.policy, other.policy)
      np.testing.assert_array_equal(budgeted.attn, other.attn)
      np.testing.assert_allclose(budgeted.logp_old, other.logp_old, rtol=1e-5, atol=1e-5)
      np.testing.assert_array_equal(budgeted.adv, other.adv)
    self.assertTrue(budgeted.policy.any())
    self.assertGreater(float(np.abs(budgeted.adv).sum()), 0.0)



class SampleKeysConfigTest(absltest.TestCase):

  @pytest.mark.fast
  def test_experiment_configs_keep_the_stream_before_the_pool(self):
    # the issue 26 tables (and their smoke forms) were produced before the KV pool: 'call' reproduces them
    for variant in ("paradigms_fewshot", "paradigms_fewshot_smoke", "errors_fewshot", "errors_fewshot_smoke",
                    "paradigms_read", "paradigms_read_smoke"):
      c = progagent_config.get_config(variant)
      self.assertEqual(c.gspo.sample_keys, "call", variant)
      self.assertEqual(rollouts.sampler_options(c)["sample_keys"], "call", variant)
      self.assertEqual(rollouts.sampler_options(c, MODEL, 8)["sample_keys"], "call", variant)
    for variant in ("", "smoke", "paradigms"):
      self.assertEqual(progagent_config.get_config(variant).gspo.sample_keys, "request", variant)
    self.assertEqual(train.ADDED_KEYS["gspo.sample_keys"], "call")   # workdirs saved before the key
    c = progagent_config.get_config("smoke")
    c.gspo.sample_keys = "per_call"
    with self.assertRaisesRegex(ValueError, r"gspo.sample_keys`='per_call' must be one of \('request', 'call'\)"):
      train.check_config(c)


if __name__ == "__main__":
  absltest.main()
