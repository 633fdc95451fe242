"""Tests of progagent.train: the token format, the rollout driver's masks, and the smoke run (SFT then GSPO)."""

import json
import math
import os
import shutil
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import psutil

from common import checkpoint as ckpt_lib
from common import metric_writer
from configs import progagent_smoke
from progagent import harness
from progagent import tasks as tasks_lib
from progagent import train

_CACHE = None
TASK = "retail/pending_over_500"


def setUpModule():
  global _CACHE
  _CACHE = tempfile.mkdtemp(prefix="progagent-train-test-")


def tearDownModule():
  shutil.rmtree(_CACHE, ignore_errors=True)


def smoke_config():
  c = progagent_smoke.get_config()
  c.model.cache_dir = os.path.join(_CACHE, "models")
  return c


class Scripted:
  """A sampler answering call k with texts[k] for every row (optionally without the end-of-turn token)."""

  def __init__(self, codec, texts, *, end=()):
    self.codec, self.texts, self.no_end, self.k = codec, list(texts), set(end), 0
    self.contexts = []

  def __call__(self, contexts, max_new, key):
    del key
    self.contexts.append([list(c) for c in contexts])
    text = self.texts[self.k]
    ids = self.codec.tok.encode(text) if self.k in self.no_end else self.codec.response(text)
    self.k += 1
    return [(ids[:m], [-0.5] * len(ids[:m])) for m in max_new]


def _policy_segments(t):
  """The token runs where policy_mask is True."""
  ids, mask = t.token_ids(), t.policy_mask()
  runs, cur = [], []
  for i, m in zip(ids, mask):
    if m:
      cur.append(int(i))
    elif cur:
      runs.append(cur)
      cur = []
  if cur:
    runs.append(cur)
  return runs


class FormatAndRolloutTest(absltest.TestCase):
  """Token format and the rollout driver, with scripted samplers (no model compile)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = smoke_config()
    cls.policy = train.load_policy(cls.config, train.select_tasks(cls.config.tasks))
    cls.codec = cls.policy.codec
    cls.tok = cls.codec.tok.tok

  def _settings(self, mode="ptc", runtime="inprocess", **kw):
    return train.RolloutSettings(mode=mode, runtime=runtime, **kw)

  def test_trajectory_text_equals_chat_template(self):
    env_msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "do it"},
                {"role": "assistant", "content": "```python\nprint(1)\n```"}, {"role": "user", "content": "1"},
                {"role": "assistant", "content": "Done."}, {"role": "user", "content": "(ignored)"}]
    t = train.messages_to_trajectory(env_msgs, self.codec, task_id=TASK, reward=1.0)
    text = self.tok.decode(t.token_ids().tolist(), skip_special_tokens=False)
    want = self.tok.apply_chat_template(env_msgs[:5], tokenize=False)
    self.assertEqual(text + "\n", want)
    self.assertLen(t.turns, 2)
    # The policy mask covers the two assistant replies and their end-of-turn tokens, nothing else.
    got = [self.tok.decode(r, skip_special_tokens=False) for r in _policy_segments(t)]
    self.assertEqual(got, ["```python\nprint(1)\n```<|im_end|>", "Done.<|im_end|>"])

  def test_bad_messages_raise(self):
    with self.assertRaisesRegex(ValueError, "system, user, then assistant"):
      train.messages_to_trajectory([{"role": "user", "content": "x"}], self.codec)

  def test_sft_examples_from_oracle_mask_assistant_only(self):
    ex = train.sft_examples(self.config, self.policy, train.select_tasks(self.config.tasks))
    self.assertLen(ex, 3)
    for t in ex:
      task = tasks_lib.get_task(t.task_id)
      self.assertEqual(t.reward, 1.0)
      segs = _policy_segments(t)
      self.assertLen(segs, 1)
      self.assertEqual(self.tok.decode(segs[0], skip_special_tokens=False),
                       f"```python\n{task.ptc[0]}```<|im_end|>")
      self.assertEqual(int(t.policy_mask().sum()), len(t.turns[0].response_ids))

  def test_sft_from_teacher_jsonl_keeps_score_at_least_min(self):
    env = train.ProgTaskEnv(TASK, 0)
    good = harness.run_oracle(env, "ptc")
    env.close()
    path = os.path.join(self.create_tempdir().full_path, "t.jsonl")
    with open(path, "w") as f:
      for r in (1.0, 0.0, 1.0):
        f.write(json.dumps({"task_id": TASK, "mode": "ptc", "scale": 0, "sample": 0, "reward": r,
                            "messages": good.messages}) + "\n")
    c = smoke_config()
    c.sft.teacher_jsonl = path
    self.assertLen(train.sft_examples(c, self.policy, [TASK]), 2)
    c.sft.teacher_jsonl = path + ".missing"
    with self.assertRaisesRegex(FileNotFoundError, "progagent.teacher"):
      train.sft_examples(c, self.policy, [TASK])

  def test_ptc_multi_turn_rollout_masks_policy_tokens_only(self):
    oracle = tasks_lib.get_task(TASK).ptc[0]
    texts = ["Look.\n```python\nrows = tools[\"list_orders\"](status=\"pending\")\nprint(len(rows))\n```",
             f"```python\n{oracle}```"]
    sampler = Scripted(self.codec, texts, end={0})       # turn 1 is cut before its end-of-turn token
    [t] = train.rollout(sampler, self.codec, [TASK], group_size=1, seed=0, key=jax.random.key(0),
                        settings=self._settings())
    self.assertEqual(t.reward, 1.0)
    self.assertEqual(t.termination, "done")
    self.assertLen(t.turns, 2)
    st = t.final_info["stats"]
    self.assertEqual((st["turns"], st["tool_calls"], st["errors"], st["end"]), (2, 3, 0, "done"))
    # Prompts are extended by appending: turn 2's context = turn 1's context + response + observation prompt.
    self.assertEqual(sampler.contexts[1][0], t.turns[0].prompt_ids + t.turns[0].response_ids + t.turns[1].prompt_ids)
    # The missing end-of-turn token is the first token of the next prompt: a prompt token, not a policy token.
    self.assertEqual(t.turns[1].prompt_ids[0], self.codec.end_id)
    self.assertNotEqual(t.turns[0].response_ids[-1], self.codec.end_id)
    obs_text = self.tok.decode(t.turns[1].prompt_ids, skip_special_tokens=False)
    self.assertTrue(obs_text.startswith("<|im_end|>\n<|im_start|>user\n"), obs_text)
    self.assertIn(t.turns[0].observation.strip(), obs_text)
    mask = t.policy_mask()
    ids = t.token_ids()
    self.assertEqual(ids[mask].tolist(), t.turns[0].response_ids + t.turns[1].response_ids)
    self.assertEqual(int(mask.sum()), st["action_tokens"])
    self.assertEqual(len(ids), st["context_tokens"])
    np.testing.assert_array_equal(t.logprobs()[mask], -0.5)
    np.testing.assert_array_equal(t.logprobs()[~mask], 0.0)
    b = train.make_batch([t], 640, pad_id=0)
    np.testing.assert_array_equal(b.policy[0, :len(ids)], mask)
    self.assertFalse(b.policy[0, len(ids):].any())

  def test_dtc_rollout_parse_error_then_call(self):
    env = train.ProgTaskEnv(TASK, 0)
    harness.run_oracle(env, "ptc")
    answer = env.submitted_answer
    env.close()
    texts = ['{"name": "submit_answer", "arguments": {"answer": ', json.dumps(
        {"name": "submit_answer", "arguments": {"answer": answer}})]
    [t] = train.rollout(Scripted(self.codec, texts), self.codec, [TASK], group_size=1, seed=0,
                        key=jax.random.key(0), settings=self._settings("dtc"))
    st = t.final_info["stats"]
    self.assertEqual((t.reward, st["turns"], st["parse_errors"], st["tool_calls"]), (1.0, 2, 1, 1))
    self.assertEqual(t.turns[0].status, "parse_error")
    self.assertIn("Error", self.tok.decode(t.turns[1].prompt_ids))

  def test_limits_end_episodes(self):
    texts = ["```python\nprint('hi')\n```"] * 5
    [t] = train.rollout(Scripted(self.codec, texts), self.codec, [TASK], group_size=1, seed=0,
                        key=jax.random.key(0), settings=self._settings(max_turns=3))
    self.assertEqual((t.termination, t.num_turns, t.reward), ("turn_limit", 3, 0.0))
    [t] = train.rollout(Scripted(self.codec, texts), self.codec, [TASK], group_size=1, seed=0,
                        key=jax.random.key(0), settings=self._settings(max_context_tokens=len(t.turns[0].prompt_ids) + 30))
    self.assertEqual(t.termination, "length_limit")
    [t] = train.rollout(Scripted(self.codec, ["All done."]), self.codec, [TASK], group_size=1, seed=0,
                        key=jax.random.key(0), settings=self._settings())
    self.assertEqual((t.termination, t.final_info["stats"]["end"], t.reward), ("done", "no_action", 0.0))

  @absltest.skipUnless(shutil.which("bwrap"), "bubblewrap not installed")
  def test_sandboxed_runtime_keeps_variables_and_leaves_no_process(self):
    oracle = tasks_lib.get_task(TASK).ptc[0]
    texts = ["```python\nx = 41\nprint(x)\n```", f"```python\nprint(x + 1)\n{oracle}```"]
    trajs = train.rollout(Scripted(self.codec, texts), self.codec, [TASK], group_size=2, seed=0,
                          key=jax.random.key(0), settings=self._settings(runtime="sandboxed"))
    for t in trajs:
      self.assertEqual((t.reward, t.termination), (1.0, "done"))
      self.assertEqual(t.turns[0].observation.strip(), "41")
      self.assertTrue(t.turns[1].observation.startswith("42\n"), t.turns[1].observation)   # state kept
    left = [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    self.assertEqual(left, [])

  def test_config_errors(self):
    c = smoke_config()
    c.gspo.minibatches = 4
    with self.assertRaisesRegex(ValueError, "minibatches=4 must divide"):
      train.run(c, self.create_tempdir().full_path)
    c = smoke_config()
    c.runtime = "docker"
    with self.assertRaisesRegex(ValueError, "config.runtime"):
      train.run(c, self.create_tempdir().full_path)


class SmokeRunTest(absltest.TestCase):
  """The smoke config end to end (SFT then GSPO), then kill-and-resume against it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = smoke_config()
    cls.workdir = os.path.join(_CACHE, "run_a")
    cls.result = train.run(cls.config, cls.workdir)

  def test_completes_through_sft_and_gspo(self):
    c = self.config
    sft = metric_writer.read_jsonl(os.path.join(self.workdir, "sft", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in sft], list(range(c.sft.epochs + 1)))
    losses = [r["sft/loss"] for r in sft[1:]]
    self.assertTrue(all(math.isfinite(x) for x in losses))
    # SFT lowers the loss on its own data (token-mean cross-entropy over the assistant tokens).
    self.assertLess(sft[-1]["sft/eval_loss"], 0.5 * sft[0]["sft/eval_loss"])
    gspo = metric_writer.read_jsonl(os.path.join(self.workdir, "gspo", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in gspo], [1, 2])
    for r in gspo:
      self.assertTrue(math.isfinite(r["gspo/loss"]))
      self.assertTrue(0.0 <= r["gspo/reward"] <= 1.0)
      # The first update of a step sees the sampling-time parameters: sequence ratio 1.
      self.assertAlmostEqual(r["gspo/ratio_first"], 1.0, delta=1e-5)
      self.assertEqual(r["gspo/updates"], c.gspo.minibatches * c.gspo.epochs)
    self.assertEqual(int(self.result["gspo"]["step"]), 2)
    rolls = metric_writer.read_jsonl(os.path.join(self.workdir, "gspo", "rollouts.jsonl"))
    self.assertLen(rolls, 2 * c.gspo.tasks_per_step * c.gspo.rollouts_per_task)
    self.assertTrue(all(r["reward"] in (0.0, 1.0) for r in rolls))
    summary = json.load(open(os.path.join(self.workdir, "summary.json")))
    self.assertEqual(summary["sft_examples"], 3)

  def test_real_rollouts_mask_and_ratio_one(self):
    """LM rollouts: the mask is the sampled tokens; recomputed log-probs match the sampler's."""
    state = self.result["sft"]
    policy = train.load_policy(self.config, train.select_tasks(self.config.tasks))
    g, e = self.config.gspo, self.config.env
    sampler = train.Sampler(state["params"], policy.model, rows=g.tasks_per_step * g.rollouts_per_task,
                            max_new_tokens=e.max_response_tokens, temperature=1.0,
                            stop_tokens=(policy.codec.end_id,), pad_id=0, buckets=(640,))
    trajs = train.rollout(sampler, policy.codec, list(self.config.tasks[:2]), group_size=3, seed=5,
                          key=jax.random.key(3),
                          settings=train.RolloutSettings("ptc", "inprocess", 0, 2, 640, 72, 400, 1))
    self.assertLen(trajs, 6)
    batch = train.make_batch(trajs, 640, pad_id=0)
    for i, t in enumerate(trajs):
      resp = sum((tn.response_ids for tn in t.turns), [])
      self.assertEqual(batch.tokens[i][batch.policy[i]].tolist(), resp)
      self.assertEqual(int(batch.policy[i].sum()), sum(len(tn.response_ids) for tn in t.turns))
    lp = np.concatenate([np.asarray(train.score(state["params"], jnp.asarray(batch.tokens[i:i + 3]),
                                                jnp.asarray(batch.attn[i:i + 3]), model=policy.model,
                                                temperature=1.0))
                         for i in (0, 3)])
    np.testing.assert_allclose(lp[batch.policy], batch.logp_old[batch.policy], atol=2e-4, rtol=0)
    # GSPO's first update with logp_old from the same parameters: ratio exactly where it should be.
    adv = np.asarray([1.0, -1.0, 0.5, -0.5, 0.0, 0.0], np.float32)
    b = batch._replace(logp_old=np.where(batch.policy, lp, 0.0).astype(np.float32), adv=adv)
    optim = train.optim_settings(self.config, self.config.gspo.learning_rate)   # the run's compiled update
    opt_state = train._commit(train.make_optimizer(optim, state["params"]).init(state["params"]))
    sub = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[:3]), b)
    p1, o1, m = train.gspo_update(state["params"], opt_state, sub, model=policy.model, optim=optim, micro=1,
                                  temperature=1.0, clip_low=3e-4, clip_high=4e-4)
    self.assertAlmostEqual(float(m["ratio_mean"]), 1.0, delta=1e-5)
    self.assertGreater(float(m["grad_norm"]), 0.0)
    # Micro-batches (one row each) give the same update as one pass.
    p3, _, m3 = train.gspo_update(state["params"], opt_state, sub, model=policy.model, optim=optim, micro=3,
                                  temperature=1.0, clip_low=3e-4, clip_high=4e-4)
    for k in ("loss", "ratio_mean", "ratio_max", "grad_norm", "approx_kl"):
      self.assertAlmostEqual(float(m3[k]), float(m[k]), delta=1e-5 * max(1.0, abs(float(m[k]))), msg=k)
    for x, y in zip(jax.tree.leaves(p3), jax.tree.leaves(p1)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6, rtol=1e-5)
    # A second update on the same rows is off-policy: the ratio moved, and clipping engages.
    _, _, m2 = train.gspo_update(p1, o1, sub, model=policy.model, optim=optim, micro=1, temperature=1.0,
                                 clip_low=3e-4, clip_high=4e-4)
    self.assertGreater(abs(float(m2["ratio_mean"]) - 1.0) + float(m2["clip_fraction"]), 1e-6)

  def test_resume_gives_identical_state(self):
    workdir = os.path.join(_CACHE, "run_b")
    shutil.copytree(os.path.join(self.workdir, "sft"), os.path.join(workdir, "sft"))  # SFT done: skipped
    train.run(self.config, workdir, stop_after=1)
    ck = ckpt_lib.Checkpointer(os.path.join(workdir, "gspo", "checkpoints"))
    self.assertEqual(ck.latest_step(), 1)
    ck.close()
    rows = metric_writer.read_jsonl(os.path.join(workdir, "gspo", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in rows], [1])
    resumed = train.run(self.config, workdir)
    a, b = self.result["gspo"], resumed["gspo"]
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)
    self.assertEqual([p for p, _ in la], [p for p, _ in lb])
    for (path, x), (_, y) in zip(la, lb):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]
    self.assertEqual(strip(metric_writer.read_jsonl(os.path.join(workdir, "gspo", "metrics.jsonl"))),
                     strip(metric_writer.read_jsonl(os.path.join(self.workdir, "gspo", "metrics.jsonl"))))
    self.assertEqual(metric_writer.read_jsonl(os.path.join(workdir, "gspo", "rollouts.jsonl")),
                     metric_writer.read_jsonl(os.path.join(self.workdir, "gspo", "rollouts.jsonl")))


if __name__ == "__main__":
  absltest.main()
