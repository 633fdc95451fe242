"""The trainer kit (common.lm.updates, common.lm.stages) from a notebook's point of view: a GRPO update built
from a policy and the kit in a few lines, and a stage that resumes."""

import inspect
import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl.testing import absltest

from common.lm import stages
from common.lm import updates as kit
from configs import schema


def grpo_update_cell(cache_dir: str, micro: int = 2):
  """The notebook cell of the README's "Trainer kit" section: load a tiny policy, score four rollouts of two
  tasks, GRPO advantages, one clipped-surrogate update. Returns (state before, state after, metrics)."""
  import common
  from common.lm import model as lm
  policy = stages.load_policy(schema.model_config(checkpoint="tiny:qwen2", cache_dir=cache_dir), corpus=["a b c"])
  optim = kit.OptimSettings(learning_rate=1e-2)
  state = kit.init_state(policy.params, optim)
  tokens = jax.random.randint(jax.random.key(0), (4, 16), 3, 200)             # 4 rollouts of 2 tasks
  attn, mask = jnp.ones((4, 16), bool), jnp.arange(16)[None, :].repeat(4, 0) >= 8   # prompt 8, reply 8
  adv = common.compute_advantages("grpo", jnp.asarray([1., 0., 0., 1.]), jnp.asarray([0, 0, 1, 1]), num_groups=2)
  logp_old = kit.score(state.params, tokens, attn, model=policy.model)
  loss_fn = lambda p, mb: common.clipped_surrogate_loss(lm.token_logprobs(p, mb[0], mb[1], config=policy.model),
                                                        mb[3], mb[4], mb[2])
  update = jax.jit(kit.policy_update, static_argnames=("loss_fn", "micro", "optim"))
  new, metrics = update(state, loss_fn, (tokens, attn, mask, logp_old, adv), mask.sum(1) * 1.0, micro=micro, optim=optim)
  return state, new, metrics


class TrainerKitTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp(prefix="kit-test-")
    self.addCleanup(shutil.rmtree, self.dir, True)

  def test_a_grpo_update_fits_in_a_notebook_cell(self):
    body = inspect.getsource(grpo_update_cell).split('"""')[-1].strip().splitlines()
    self.assertLess(len(body), 15)
    before, after, metrics = grpo_update_cell(os.path.join(self.dir, "ckpt"))
    self.assertAlmostEqual(float(metrics["ratio_mean"]), 1.0, places=5)   # logp_old from the same params
    self.assertGreater(float(metrics["grad_norm"]), 0.0)
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before.params, after.params)
    self.assertTrue(any(jax.tree.leaves(moved)))

  def test_micro_batches_give_the_one_pass_update(self):
    # the shares W_j / W make the micro-batched loss and gradient the whole batch's
    _, _, m2 = grpo_update_cell(os.path.join(self.dir, "ckpt"), micro=2)
    _, _, m1 = grpo_update_cell(os.path.join(self.dir, "ckpt"), micro=1)
    for k in ("loss", "grad_norm", "ratio_mean", "clip_fraction"):
      np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    # (not the parameters: Adam's first step moves each weight by about lr x sign(g), so a gradient entry near
    # 0 flips with float32 summation order; the gradient's norm above is the check)

  def test_open_stage_resumes_and_cuts_logs_back(self):
    config = ml_collections.ConfigDict(dict(checkpoint=dict(every=1, max_to_keep=2),
                                            logging=dict(tensorboard=False)))
    state = kit.init_state({"w": jnp.ones((3,))}, kit.OptimSettings(1e-2))
    d = os.path.join(self.dir, "stage")
    with stages.open_stage(d, state, config, jsonl=("rollouts.jsonl",)) as st:
      self.assertEqual(st.start, 0)
      for step in (1, 2):
        st.writer.write(step, {"x": step})
        with open(os.path.join(d, "rollouts.jsonl"), "a") as f:
          f.write(f'{{"step": {step}}}\n')
        if step == 1:
          st.save(step, state.replace(step=jnp.asarray(1, jnp.int32)), force=True)
    with stages.open_stage(d, state, config, jsonl=("rollouts.jsonl",)) as st:
      self.assertEqual(st.start, 1)
      self.assertEqual(int(st.state.step), 1)
    from common import io
    self.assertEqual([r["step"] for r in io.read_jsonl(os.path.join(d, "metrics.jsonl"))], [1])
    self.assertEqual([r["step"] for r in io.read_jsonl(os.path.join(d, "rollouts.jsonl"))], [1])

  def test_optim_settings_and_model_schema_name_bad_keys(self):
    with self.assertRaisesRegex(ValueError, "optim.name"):
      kit.optim_settings({"name": "sgd"}, 1e-3)
    with self.assertRaisesRegex(KeyError, "model.lr"):
      schema.model_config(lr=1.0)
    with self.assertRaisesRegex(ValueError, "model.lora_rank"):
      stages.check_model_config(schema.model_config(lora_rank=-1), None)


if __name__ == "__main__":
  absltest.main()
