"""Tests of ProgAgent training: SFT data in the native chat format, rollouts through the common driver and
their masks, the shared tiny-checkpoint resolver, and the smoke run (SFT then GSPO) with resume."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import psutil

import procs
from common import checkpoint as ckpt_lib
from common import io
from common import policy_io
from common.lm import checkpoints as lm_checkpoints
from common.lm import sampler as sampler_lib
from configs import progagent as progagent_config
from common.lm import stages
from common.lm import updates as kit
from progagent import harness
from progagent import rollouts
from progagent import sft_data
from progagent import tasks as tasks_lib
from progagent import train
from progagent import updates
from progagent.task_env import ProgTaskEnv

_CACHE = None
TASK = "retail/pending_over_500"
PTC_TOOL = "programmatic_tool_call"


def setUpModule():
  global _CACHE
  _CACHE = tempfile.mkdtemp(prefix="progagent-train-test-")


def tearDownModule():
  shutil.rmtree(_CACHE, ignore_errors=True)


# SFT epochs of the tests' smoke runs: 24 of the config's 80 (the loss falls from 7.6 to about 1 nat per token,
# enough for every check here; the other epochs only memorise the three programs and cost a CPU minute each run).
SMOKE_SFT_EPOCHS = 24


def smoke_config():
  c = progagent_config.get_config('smoke')
  c.model.cache_dir = os.path.join(_CACHE, "models")
  c.sft.epochs = SMOKE_SFT_EPOCHS
  return c


def program_message(code: str) -> dict:
  return {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": PTC_TOOL, "arguments": {"code": code}}}]}


class Scripted:
  """A driver Policy answering call k with messages[k] (assistant messages or plain text) for every request,
  in the chat template's native format; calls in `cut` lose their end-of-turn token."""

  def __init__(self, chat, messages, *, cut=()):
    self.chat, self.messages, self.cut, self.k = chat, list(messages), set(cut), 0
    self.requests = []

  def __call__(self, requests):
    self.requests.append(list(requests))
    m = self.messages[min(self.k, len(self.messages) - 1)]
    ids = self.chat.assistant_ids(m if isinstance(m, dict) else {"role": "assistant", "content": m})
    if self.k in self.cut:
      ids = ids[:-1]
    self.k += 1
    return [policy_io.PolicyOutput(ids[:r.max_new_tokens], [-0.5] * len(ids[:r.max_new_tokens]))
            for r in requests]


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


class ResolverTest(absltest.TestCase):

  def test_tiny_written_once_keyed_by_corpus_and_errors_named(self):
    d = self.create_tempdir().full_path
    a = lm_checkpoints.resolve_checkpoint("tiny:qwen2", corpus=["alpha beta"], cache_dir=d, vocab_size=300)
    self.assertTrue(os.path.isfile(os.path.join(a, "config.json")))
    mtime = os.path.getmtime(os.path.join(a, "config.json"))
    self.assertEqual(lm_checkpoints.resolve_checkpoint("tiny:qwen2", corpus=["alpha beta"], cache_dir=d,
                                                       vocab_size=300), a)
    self.assertEqual(os.path.getmtime(os.path.join(a, "config.json")), mtime)
    b = lm_checkpoints.resolve_checkpoint("tiny:qwen2", corpus=["gamma"], cache_dir=d, vocab_size=300)
    self.assertNotEqual(a, b)
    self.assertEqual(lm_checkpoints.resolve_checkpoint(a), a)           # a local folder is returned as is
    self.assertEqual([p for p in os.listdir(d) if p.startswith(".tiny-")], [])   # no half-written folder left
    with self.assertRaisesRegex(ValueError, "policy.lm_checkpoint is empty"):
      lm_checkpoints.resolve_checkpoint("", config_key="policy.lm_checkpoint")
    with self.assertRaisesRegex(ValueError, "no config.json"):
      lm_checkpoints.resolve_checkpoint(d)
    with self.assertRaisesRegex(ValueError, "unknown tiny family"):
      lm_checkpoints.resolve_checkpoint("tiny:gpt2", cache_dir=d)


class FormatAndRolloutTest(absltest.TestCase):
  """SFT data and rollouts through the common driver, with scripted policies (no model compile)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = smoke_config()
    cls.policy = train.load_policy(cls.config, tasks_lib.select_tasks(cls.config.tasks))
    cls.chat = cls.policy.chat
    cls.tok = cls.chat.tokenizer if hasattr(cls.chat, "tokenizer") else cls.chat.tok

  def _decode(self, ids):
    return self.tok.decode(list(ids), skip_special_tokens=False)

  def _rollout(self, policy, *, tasks=(TASK,), group_size=1, **overrides):
    c = smoke_config()
    c.gspo.rollouts_per_task = group_size
    for k, v in overrides.items():
      node, *path = k.split(".")
      target = c if not path else c[node]
      target[path[-1] if path else node] = v
    pool = rollouts.make_pool(c, len(tasks) * group_size)
    try:
      return rollouts.run_rollouts(pool, policy, self.chat, list(tasks), config=c, seed=0)
    finally:
      pool.close()

  def test_trajectory_tokens_follow_the_chat_template(self):
    tools = sft_data.mode_tools(TASK, "ptc")
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "do it"},
            program_message("print(1)\n"), {"role": "tool", "name": PTC_TOOL, "content": "1"},
            {"role": "assistant", "content": "Done."}]
    t = sft_data.messages_to_trajectory(msgs, self.chat, tools=tools, task_id=TASK, reward=1.0)
    self.assertLen(t.turns, 2)
    self.assertEqual(t.turns[0].prompt_ids, self.chat.prompt_ids(msgs[:2], tools))
    self.assertEqual(t.turns[1].prompt_ids, self.chat.observation_ids([msgs[3]], after=t.turns[0].response_ids))
    text = self._decode(t.token_ids().tolist())
    self.assertIn('<tool_call>\n{"name": "programmatic_tool_call", "arguments": {"code": "print(1)\\n"}}', text)
    self.assertIn("<tool_response>\n1\n</tool_response>", text)
    # The policy mask covers the two assistant replies (end-of-turn included), nothing else.
    segs = _policy_segments(t)
    self.assertEqual(segs, [self.chat.assistant_ids(msgs[2]), self.chat.assistant_ids(msgs[4])])
    self.assertEqual(segs[0][-1], self.chat.end_id)

  def test_sft_trajectory_equals_rollout_of_the_same_replies(self):
    """SFT teaches exactly what the rollouts produce: the oracle conversation as SFT data and a rollout
    replaying its replies through the driver give the same tokens and the same mask."""
    c = self.config
    [sft] = [t for t in sft_data.sft_examples(c, self.chat, [TASK])]
    env = ProgTaskEnv(TASK, 0)
    ep = harness.run_oracle(env, "ptc", seed=c.env.seed)
    env.close()
    replies = [m for m in ep.messages if m["role"] == "assistant"]
    [t] = self._rollout(Scripted(self.chat, replies))
    self.assertEqual((t.reward, t.termination), (1.0, "done"))
    self.assertEqual(t.token_ids().tolist(), sft.token_ids().tolist())
    np.testing.assert_array_equal(t.policy_mask(), sft.policy_mask())

  def test_bad_messages_raise(self):
    with self.assertRaisesRegex(ValueError, "system/user messages and then have assistant"):
      sft_data.messages_to_trajectory([{"role": "user", "content": "x"}], self.chat, tools=[])

  def test_sft_examples_from_oracle_mask_assistant_only(self):
    ex = sft_data.sft_examples(self.config, self.chat, tasks_lib.select_tasks(self.config.tasks))
    self.assertLen(ex, 3)
    for t in ex:
      task = tasks_lib.get_task(t.task_id)
      self.assertEqual(t.reward, 1.0)
      segs = _policy_segments(t)
      self.assertGreaterEqual(len(segs), 1)
      parsed = self.chat.parse(self._decode(segs[0][:-1]))
      self.assertIsNone(parsed.error)
      self.assertEqual([c["name"] for c in parsed.tool_calls], [PTC_TOOL])
      self.assertEqual(parsed.tool_calls[0]["arguments"]["code"].strip(), task.ptc[0].strip())
      self.assertEqual(int(t.policy_mask().sum()), sum(len(tn.response_ids) for tn in t.turns))

  def test_sft_from_teacher_jsonl_keeps_score_at_least_min(self):
    env = ProgTaskEnv(TASK, 0)
    good = harness.run_oracle(env, "ptc")
    env.close()
    path = os.path.join(self.create_tempdir().full_path, "t.jsonl")
    with open(path, "w") as f:
      for r in (1.0, 0.0, 1.0):
        f.write(json.dumps({"task_id": TASK, "mode": "ptc", "scale": 0, "sample": 0, "reward": r,
                            "messages": good.messages}) + "\n")
    c = smoke_config()
    c.sft.teacher_jsonl = path
    self.assertLen(sft_data.sft_examples(c, self.chat, [TASK]), 2)
    c.sft.teacher_jsonl = path + ".missing"
    with self.assertRaisesRegex(FileNotFoundError, "progagent.teacher"):
      sft_data.sft_examples(c, self.chat, [TASK])

  def test_ptc_multi_turn_rollout_masks_policy_tokens_only(self):
    oracle = tasks_lib.get_task(TASK).ptc[0]
    msgs = [program_message('rows = tools["list_orders"](status="pending")\nprint(len(rows))\n'),
            program_message(oracle)]
    policy = Scripted(self.chat, msgs, cut={0})       # turn 1 is cut before its end-of-turn token
    [t] = self._rollout(policy)
    self.assertEqual((t.reward, t.termination), (1.0, "done"))
    self.assertLen(t.turns, 2)
    # Prompts are extended by appending: turn 2's context = turn 1's context + response + observation prompt.
    self.assertEqual(policy.requests[1][0].token_ids,
                     t.turns[0].prompt_ids + t.turns[0].response_ids + t.turns[1].prompt_ids)
    # The missing end-of-turn token is the first token of the next prompt: a prompt token, not a policy token.
    self.assertEqual(t.turns[1].prompt_ids[0], self.chat.end_id)
    self.assertNotEqual(t.turns[0].response_ids[-1], self.chat.end_id)
    self.assertIn(t.turns[0].observation.strip(), self._decode(t.turns[1].prompt_ids))
    mask, ids = t.policy_mask(), t.token_ids()
    self.assertEqual(ids[mask].tolist(), t.turns[0].response_ids + t.turns[1].response_ids)
    st = rollouts.episode_stats(t)
    self.assertEqual((st["turns"], st["cut_responses"], st["parse_errors"]), (2, 1, 0))
    self.assertEqual(st["action_tokens"], int(mask.sum()))
    self.assertEqual(st["context_tokens"], len(ids))
    np.testing.assert_array_equal(t.logprobs()[mask], -0.5)
    np.testing.assert_array_equal(t.logprobs()[~mask], 0.0)
    b = updates.make_batch([t], 1536, pad_id=0)
    np.testing.assert_array_equal(b.policy[0, :len(ids)], mask)
    self.assertFalse(b.policy[0, len(ids):].any())

  def test_unreadable_call_gets_error_observation_then_call(self):
    oracle = tasks_lib.get_task(TASK).ptc[0]
    bad = "<tool_call>\n{\"name\": \"" + PTC_TOOL + "\", \"arguments\": {\"code\": \n</tool_call>"
    [t] = self._rollout(Scripted(self.chat, [bad, program_message(oracle)]))
    st = rollouts.episode_stats(t)
    self.assertEqual((t.reward, st["turns"], st["parse_errors"]), (1.0, 2, 1))
    self.assertEqual(t.turns[0].status, "parse_error")
    self.assertIn("rror", t.turns[0].observation)

  def test_limits_end_episodes(self):
    loop = [program_message("print('hi')\n")]
    [t] = self._rollout(Scripted(self.chat, loop), **{"env.max_turns": 3})
    self.assertEqual((t.termination, t.num_turns, t.reward), ("turn_limit", 3, 0.0))
    room = len(t.turns[0].prompt_ids) + 30
    [t] = self._rollout(Scripted(self.chat, loop), **{"env.max_context_tokens": room})
    self.assertEqual(t.termination, "length_limit")
    [t] = self._rollout(Scripted(self.chat, ["All done."]))
    self.assertEqual((t.termination, t.reward), ("done", 0.0))

  def test_env_error_rollouts_leave_groups_and_loss(self):
    t_ok = self._rollout(Scripted(self.chat, ["All done."]), group_size=2)
    t_ok[0].termination, t_ok[0].reward = "env_error", 0.0
    t_ok[1].reward = 1.0
    c = smoke_config()
    b = train.gspo_step_batch(t_ok, num_groups=1, config=c, pad_id=0)
    self.assertFalse(b.policy[0].any())
    self.assertTrue(b.policy[1].any())
    self.assertEqual(float(b.adv[1]), 0.0)    # a group of one valid rollout: no advantage

  @absltest.skipUnless(shutil.which("bwrap"), "bubblewrap not installed")
  def test_sandboxed_runtime_keeps_variables_and_leaves_no_process(self):
    oracle = tasks_lib.get_task(TASK).ptc[0]
    msgs = [program_message("x = 41\nprint(x)\n"), program_message(f"print(x + 1)\n{oracle}")]
    trajs = self._rollout(Scripted(self.chat, msgs), group_size=2, runtime="sandboxed")
    for t in trajs:
      self.assertEqual((t.reward, t.termination), (1.0, "done"))
      self.assertIn("41", t.turns[0].observation)
      self.assertIn("42", t.turns[1].observation)   # state kept between programs
    left = [p for p in psutil.Process().children(recursive=True)
            if procs.alive(p)]
    self.assertEqual(left, [])

  def test_config_errors(self):
    for key, value, msg in (("gspo.minibatches", 4, "minibatches=4 must divide"),
                            ("runtime", "docker", "config.runtime"), ("chat.format", "chatml", "chat.format")):
      c = smoke_config()
      node, *rest = key.split(".")
      (c[node] if rest else c)[rest[0] if rest else node] = value
      with self.assertRaisesRegex(ValueError, msg):
        train.run(c, self.create_tempdir().full_path)


class SmokeRunTest(absltest.TestCase):
  """The smoke config end to end (SFT then GSPO), then stop-and-resume against it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = smoke_config()
    cls.workdir = os.path.join(_CACHE, "run_a")
    cls.result = train.run(cls.config, cls.workdir)

  def test_completes_through_sft_and_gspo(self):
    c = self.config
    sft = io.read_jsonl(os.path.join(self.workdir, "sft", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in sft], list(range(c.sft.epochs + 1)))
    self.assertTrue(all(math.isfinite(r["sft/loss"]) for r in sft[1:]))
    # SFT lowers the loss on its own data (token-mean cross-entropy over the assistant tokens).
    self.assertLess(sft[-1]["sft/eval_loss"], 0.5 * sft[0]["sft/eval_loss"])
    gspo = io.read_jsonl(os.path.join(self.workdir, "gspo", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in gspo], [1, 2])
    for r in gspo:
      self.assertTrue(math.isfinite(r["gspo/loss"]))
      self.assertTrue(0.0 <= r["gspo/reward"] <= 1.0)
      # The first update of a step sees the sampling-time parameters: sequence ratio 1.
      self.assertAlmostEqual(r["gspo/ratio_first"], 1.0, delta=1e-5)
      self.assertEqual(r["gspo/updates"], c.gspo.minibatches * c.gspo.epochs)
      self.assertAlmostEqual(sum(r[f"rollout/term_{k}"] for k in ("done", "turn_limit", "length_limit",
                                                                  "env_error")), 1.0)
    self.assertIsInstance(self.result["gspo"], kit.TrainState)
    self.assertEqual(int(self.result["gspo"].step), 2)
    rolls = io.read_jsonl(os.path.join(self.workdir, "gspo", "rollouts.jsonl"))
    self.assertLen(rolls, 2 * c.gspo.tasks_per_step * c.gspo.rollouts_per_task)
    self.assertTrue(all(r["reward"] in (0.0, 1.0) for r in rolls))
    summary = json.load(open(os.path.join(self.workdir, "summary.json")))
    self.assertEqual(summary["sft_examples"], 3)

  def test_real_rollouts_mask_and_ratio_one(self):
    """LM rollouts: the mask is the sampled tokens; recomputed log-probs match the sampler's."""
    state = self.result["sft"]
    policy = train.load_policy(self.config, tasks_lib.select_tasks(self.config.tasks))
    g, e = self.config.gspo, self.config.env
    sampler = sampler_lib.LMSampler(state.params, policy.model, key=jax.random.key(3),
                                    rows=g.tasks_per_step * g.rollouts_per_task, max_new_tokens=e.max_response_tokens,
                                    temperature=1.0, stop_tokens=tuple(policy.chat.stop_ids), pad_id=0, buckets=(1536,))
    pool = rollouts.make_pool(self.config, 6)
    try:
      trajs = rollouts.run_rollouts(pool, sampler, policy.chat, list(self.config.tasks[:2]), config=self.config,
                                    seed=5)
    finally:
      pool.close()
    self.assertLen(trajs, 6)
    batch = updates.make_batch(trajs, 1536, pad_id=0)
    for i, t in enumerate(trajs):
      resp = sum((tn.response_ids for tn in t.turns), [])
      self.assertEqual(batch.tokens[i][batch.policy[i]].tolist(), resp)
    lp = np.asarray(kit.score_rows(state.params, jnp.asarray(batch.tokens), jnp.asarray(batch.attn),
                                   model=policy.model, temperature=1.0, chunk=3))
    np.testing.assert_allclose(lp[batch.policy], batch.logp_old[batch.policy], atol=2e-4, rtol=0)
    # GSPO's first update with logp_old from the same parameters: ratio exactly where it should be.
    adv = np.asarray([1.0, -1.0, 0.5, -0.5, 0.0, 0.0], np.float32)
    b = batch._replace(logp_old=np.where(batch.policy, lp, 0.0).astype(np.float32), adv=adv)
    optim = stages.stage_optim(self.config, self.config.gspo.learning_rate)   # the run's compiled update
    state = kit.init_state(state.params, optim)
    sub = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[:3]), b)
    kw = dict(model=policy.model, optim=optim, temperature=1.0, clip_low=3e-4, clip_high=4e-4)
    s1, m = updates.gspo_update(state, sub, micro=1, **kw)
    p1 = s1.params
    self.assertAlmostEqual(float(m["ratio_mean"]), 1.0, delta=1e-5)
    self.assertGreater(float(m["grad_norm"]), 0.0)
    # Micro-batches (one row each) give the same update as one pass.
    p3 = (s3 := updates.gspo_update(state, sub, micro=3, **kw))[0].params
    m3 = s3[1]
    for k in ("loss", "ratio_mean", "ratio_max", "grad_norm", "approx_kl"):
      self.assertAlmostEqual(float(m3[k]), float(m[k]), delta=1e-5 * max(1.0, abs(float(m[k]))), msg=k)
    for x, y in zip(jax.tree.leaves(p3), jax.tree.leaves(p1)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6, rtol=1e-5)
    # A second update on the same rows is off-policy: the ratio moved, and clipping engages.
    _, m2 = updates.gspo_update(s1, sub, micro=1, **kw)
    self.assertGreater(abs(float(m2["ratio_mean"]) - 1.0) + float(m2["clip_fraction"]), 1e-6)

  def test_sigkill_mid_gspo_then_resume_matches_uninterrupted_run(self):
    """A run killed (SIGKILL) after GSPO step 1 wrote its rows but before any GSPO checkpoint (checkpoint.every
    = 10 > steps): the rerun drops those rows, starts GSPO again, and ends as the uninterrupted run."""
    workdir = os.path.join(_CACHE, "run_killed")
    shutil.copytree(os.path.join(self.workdir, "sft"), os.path.join(workdir, "sft"))  # SFT done: skipped
    code = ("import sys; from configs import progagent as pc; from progagent import train\n"
            "c = pc.get_config('smoke'); c.model.cache_dir = sys.argv[1]; c.sft.epochs = int(sys.argv[3])\n"
            "train.run(c, sys.argv[2])\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", code, self.config.model.cache_dir, workdir,
                             str(SMOKE_SFT_EPOCHS)], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = os.path.join(workdir, "gspo", "metrics.jsonl")
    try:
      deadline = time.monotonic() + 900
      while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(metrics) and io.read_jsonl(metrics):
          break
        time.sleep(0.05)
      self.assertIsNone(proc.poll(), "the run ended before it could be killed")
      os.kill(proc.pid, signal.SIGKILL)
    finally:
      proc.kill()
      proc.wait()
    ck = ckpt_lib.Checkpointer(os.path.join(workdir, "gspo", "checkpoints"))
    latest = ck.latest_step()
    ck.close()
    if latest is not None:
      self.skipTest(f"the kill came after the final checkpoint (step {latest}); nothing to resume")
    self.assertEqual([r["step"] for r in io.read_jsonl(metrics)], [1])   # a row past the checkpoint
    resumed = train.run(self.config, workdir)
    for x, y in zip(jax.tree.leaves(self.result["gspo"]), jax.tree.leaves(resumed["gspo"])):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]
    self.assertEqual(strip(io.read_jsonl(metrics)),
                     strip(io.read_jsonl(os.path.join(self.workdir, "gspo", "metrics.jsonl"))))
    self.assertEqual(io.read_jsonl(os.path.join(workdir, "gspo", "rollouts.jsonl")),
                     io.read_jsonl(os.path.join(self.workdir, "gspo", "rollouts.jsonl")))

  def test_killed_evaluation_resumes_from_finished_units(self):
    # A run killed during its held-out evaluation keeps the (seed, batch) units it finished (eval/units/) and
    # runs only the others when it resumes; the result equals an uninterrupted evaluation's.
    c = smoke_config()
    c.eval.batch_instances = 3            # 3 tasks x 2 levels: two units
    workdir = os.path.join(_CACHE, "run_eval_resume")
    shutil.copytree(self.workdir, workdir)
    for f in ("results.json", "episodes.jsonl", "table.txt"):
      os.remove(os.path.join(workdir, "eval", f))
    real, calls = rollouts.run_rollouts, []

    class Killed(Exception):
      pass

    def killed_after_one_unit(*args, **kwargs):
      if calls:
        raise Killed()
      calls.append(1)
      return real(*args, **kwargs)

    with mock.patch.object(rollouts, "run_rollouts", killed_after_one_unit):
      with self.assertRaises(Killed):
        train.run(c, workdir)
    units = os.path.join(workdir, "eval", "units")
    self.assertEqual(sorted(f for f in os.listdir(units) if f.endswith(".pkl")), ["unit_00000.pkl"])
    counted = []

    def counting(*args, **kwargs):
      counted.append(1)
      return real(*args, **kwargs)

    with mock.patch.object(rollouts, "run_rollouts", counting):
      resumed = train.run(c, workdir)
    self.assertLen(counted, 1)                 # only the unit that had not finished
    self.assertFalse(os.path.exists(units))    # cleared once results.json is written
    fresh = os.path.join(_CACHE, "run_eval_fresh")
    shutil.copytree(workdir, fresh)
    for f in ("results.json", "episodes.jsonl", "table.txt"):
      os.remove(os.path.join(fresh, "eval", f))
    uninterrupted = train.run(c, fresh)
    self.assertEqual(io.read_jsonl(os.path.join(workdir, "eval", "episodes.jsonl")),
                     io.read_jsonl(os.path.join(fresh, "eval", "episodes.jsonl")))
    strip = lambda r: {k: v for k, v in r["eval"].items() if k != "eval_s"}
    self.assertEqual(json.dumps(strip(resumed), sort_keys=True, default=str),
                     json.dumps(strip(uninterrupted), sort_keys=True, default=str))

  def test_resume_gives_identical_state(self):
    workdir = os.path.join(_CACHE, "run_b")
    shutil.copytree(os.path.join(self.workdir, "sft"), os.path.join(workdir, "sft"))  # SFT done: skipped
    train.run(self.config, workdir, stop_after=1)
    ck = ckpt_lib.Checkpointer(os.path.join(workdir, "gspo", "checkpoints"))
    self.assertEqual(ck.latest_step(), 1)
    ck.close()
    rows = io.read_jsonl(os.path.join(workdir, "gspo", "metrics.jsonl"))
    self.assertEqual([r["step"] for r in rows], [1])
    resumed = train.run(self.config, workdir)
    a, b = self.result["gspo"], resumed["gspo"]
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)
    self.assertEqual([p for p, _ in la], [p for p, _ in lb])
    for (path, x), (_, y) in zip(la, lb):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]
    self.assertEqual(strip(io.read_jsonl(os.path.join(workdir, "gspo", "metrics.jsonl"))),
                     strip(io.read_jsonl(os.path.join(self.workdir, "gspo", "metrics.jsonl"))))
    self.assertEqual(io.read_jsonl(os.path.join(workdir, "gspo", "rollouts.jsonl")),
                     io.read_jsonl(os.path.join(self.workdir, "gspo", "rollouts.jsonl")))


if __name__ == "__main__":
  absltest.main()
