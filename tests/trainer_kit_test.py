"""The trainer kit (common.lm.updates, common.lm.stages) from a notebook's point of view: a GRPO update built
from a policy and the kit in a few lines, and a stage that resumes."""

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
  """The README's "Trainer kit" cell with a cache folder and a micro-batch count, the update jitted (as the
  README advises): load a tiny policy, score four rollouts of two tasks, GRPO advantages, one clipped-surrogate
  update. Returns (state before, after, metrics)."""
  import common
  from common.lm import model as lm
  policy = stages.load_policy(schema.model_config(checkpoint="tiny:qwen2", cache_dir=cache_dir), corpus=["a b c"])
  optim = kit.OptimSettings(learning_rate=1e-2)
  state = kit.init_state(policy.params, optim)
  tokens = jax.random.randint(jax.random.key(0), (4, 16), 3, 200)                  # 4 rollouts of 2 tasks
  attn, mask = jnp.ones((4, 16), bool), jnp.arange(16)[None, :].repeat(4, 0) >= 8   # prompt 8, reply 8
  adv = common.compute_advantages("grpo", jnp.asarray([1., 0., 0., 1.]), jnp.asarray([0, 0, 1, 1]), num_groups=2)
  logp_old = kit.score(state.params, tokens, attn, model=policy.model)
  loss = lambda p, b: common.clipped_surrogate_loss(lm.token_logprobs(p, *b[:2], config=policy.model), *b[3:], b[2])
  update = jax.jit(kit.policy_update, static_argnames=("loss_fn", "micro", "optim"))
  new, metrics = update(state, loss, (tokens, attn, mask, logp_old, adv), 1. * mask.sum(1), micro=micro, optim=optim)
  return state, new, metrics


class TrainerKitTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp(prefix="kit-test-")
    self.addCleanup(shutil.rmtree, self.dir, True)

  def test_the_readme_cell_runs_as_printed_in_under_15_lines(self):
    readme = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")).read()
    start = readme.index("    import common, jax, jax.numpy as jnp\n")
    cell = [line[4:] for line in readme[start:readme.index("\n\n", start)].splitlines()]
    self.assertLess(len(cell), 15)
    old = os.environ.get("AGENTIC_RL_CACHE")
    os.environ["AGENTIC_RL_CACHE"] = os.path.join(self.dir, "cache")
    try:
      scope = {}
      exec("\n".join(cell), scope)   # pylint: disable=exec-used
    finally:
      if old is None:
        os.environ.pop("AGENTIC_RL_CACHE")
      else:
        os.environ["AGENTIC_RL_CACHE"] = old
    self.assertAlmostEqual(float(scope["metrics"]["ratio_mean"]), 1.0, places=5)   # logp_old from the same params
    self.assertGreater(float(scope["metrics"]["grad_norm"]), 0.0)
    before = scope["policy"].params
    moved = jax.tree.map(lambda x, y: bool(jnp.any(x != y)), before, scope["state"].params)
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

  def test_truncate_keeps_the_writers_encoding(self):
    from common import io
    path = os.path.join(self.dir, "r.jsonl")
    io.append_jsonl(path, [{"step": 1, "text": "caf\u00e9 \u2014"}, {"step": 2, "text": "x"}], ensure_ascii=False)
    first = open(path, encoding="utf-8").readline()
    io.truncate_jsonl(path, 1)
    self.assertEqual(open(path, encoding="utf-8").read(), first)   # byte for byte, no \u escapes

  def test_every_trainer_checks_optim_and_planpo_rl_keys_before_writing(self):
    from configs import phgpo_traject, planpo_twx, progagent as progagent_config
    from phgpo import train as phgpo_train
    from planpo import train as planpo_train
    from progagent import train as progagent_train
    for get, check in ((lambda: progagent_config.get_config("smoke"), progagent_train.check_config),
                       (lambda: planpo_twx.get_config("smoke"), planpo_train.check_config),
                       (lambda: phgpo_traject.get_config("smoke"), phgpo_train.check_config)):
      for key, value in (("name", "sgd"), ("grad_clip", 0.0), ("b2", 1.0), ("eps", -1.0)):
        c = get()
        c.optim[key] = value
        with self.assertRaisesRegex(ValueError, f"optim.*{key}"):
          check(c)
    for key, value in (("micro_batch_size", 0), ("old_logprobs", "recomputed")):
      c = planpo_twx.get_config("smoke")
      c.rl[key] = value
      with self.assertRaisesRegex(ValueError, f"rl.{key}"):
        planpo_train.check_config(c)

  def test_run_sft_is_the_hand_loop_and_resumes_mid_stage(self):
    policy = stages.load_policy(schema.model_config(checkpoint="tiny:qwen2", cache_dir=os.path.join(self.dir, "c")),
                                corpus=["a b c"])
    rng = np.random.default_rng(0)
    rows = [(rng.integers(3, 200, size=int(n)), int(p)) for n, p in ((7, 3), (12, 4), (9, 2), (16, 8), (5, 1))]

    def batch_of(idx):   # 5 rows, batches of 2: every epoch ends with one row, padded with a masked copy
      tok, attn, mask = np.zeros((len(idx), 16), np.int32), np.zeros((len(idx), 16), bool), np.zeros((len(idx), 16), bool)
      for i, j in enumerate(idx):
        t, p = rows[j]
        tok[i, :len(t)], attn[i, :len(t)], mask[i, p:len(t)] = t, True, True
      return tok, attn, mask

    def config(steps):
      return ml_collections.ConfigDict(dict(
          sft=schema.sft_config(learning_rate=1e-2, batch_size=2, epochs=2, steps=steps),
          checkpoint=dict(every=1, max_to_keep=2), logging=dict(every=1, tensorboard=False)))

    optim = kit.OptimSettings(learning_rate=1e-2)
    run = lambda d, steps: stages.run_sft(d, kit.init_state(policy.params, optim, key=3), config(steps), examples=5,
                                          batch_of=batch_of, model=policy.model, optim=optim, seed=3)
    whole = run(os.path.join(self.dir, "whole"), 0)
    self.assertEqual(int(whole.step), 6)   # 2 epochs of ceil(5 / 2) updates
    # the same stage stopped after 4 updates (a fixed sft.steps), then resumed to its 2 epochs
    run(os.path.join(self.dir, "cut"), 4)
    resumed = run(os.path.join(self.dir, "cut"), 0)
    # the hand loop: fresh order per epoch, a short batch padded with a masked copy of its first row
    state = kit.init_state(policy.params, optim, key=3)
    for epoch in range(2):
      order = np.random.default_rng([3, 11, epoch]).permutation(5)
      for i in range(3):
        tok, attn, mask = batch_of(list(order[2 * i:2 * i + 2]))
        if len(tok) == 1:
          tok, attn, mask = (np.concatenate([tok, tok]), np.concatenate([attn, attn]),
                             np.concatenate([mask, np.zeros_like(mask)]))
        state, _ = kit.sft_update(state, tok, attn, mask, model=policy.model, optim=optim)
    for got in (whole, resumed):
      jax.tree.map(np.testing.assert_array_equal, got.params, state.params)
    from common import io
    self.assertEqual([r["step"] for r in io.read_jsonl(os.path.join(self.dir, "cut", "metrics.jsonl"))],
                     [1, 2, 3, 4, 5, 6])
    with self.assertRaisesRegex(ValueError, "SFT has no rows"):
      stages.run_sft(os.path.join(self.dir, "none"), state, config(0), examples=0, batch_of=batch_of,
                     model=policy.model, optim=optim, seed=3)

  def test_optim_settings_and_model_schema_name_bad_keys(self):
    with self.assertRaisesRegex(KeyError, "sft.epochs is a key of the shared SFT schema"):
      schema.sft_config(extra=dict(epochs=3))
    with self.assertRaisesRegex(ValueError, "optim.name"):
      kit.optim_settings({"name": "sgd"}, 1e-3)
    with self.assertRaisesRegex(KeyError, "model.lr"):
      schema.model_config(lr=1.0)
    with self.assertRaisesRegex(ValueError, "model.lora_rank"):
      stages.check_model_config(schema.model_config(lora_rank=-1), None)


if __name__ == "__main__":
  absltest.main()
