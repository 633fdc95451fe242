"""Tests for planpo/train.py: the smoke config end to end, advantages on a mixed batch, resume.

Needs a Java runtime and the `textworld-express` wheel (TextWorldExpress); skipped without them.
"""

import json
import os
import shutil
import tempfile
import time
from unittest import mock

import numpy as np
from absl.testing import absltest

from configs import planpo_twx
from planpo import data
from common.lm import updates as kit
from planpo import tables
from planpo import train

try:
  import textworld_express  # noqa: F401
  HAVE_TWX = shutil.which("java") is not None
except ImportError:
  HAVE_TWX = False


def mixed_batch():
  """One task, 4 rollouts: two wins (2 and 3 turns), two failures (2 and 4 turns); 16 rows, 5 padding."""
  turns = [2, 3, 2, 4]
  won = [True, True, False, False]
  rows = {k: [] for k in ("group_ids", "rollout_ids", "turn", "episode_rewards", "success", "policy_tokens",
                          "env_rewards", "penalties", "invalid", "step_group_ids", "valid")}
  for i, (n, w) in enumerate(zip(turns, won)):
    for t in range(n):
      rows["group_ids"].append(0)
      rows["rollout_ids"].append(i)
      rows["turn"].append(t)
      rows["episode_rewards"].append(10.0 if w else 0.0)
      rows["success"].append(w)
      rows["policy_tokens"].append(10 + 7 * i + 3 * t)
      rows["env_rewards"].append(1.0 if (w and t == n - 1) else 0.0)
      rows["penalties"].append(0.0)
      rows["invalid"].append(False)
      rows["step_group_ids"].append(0 if t == 0 else 1 + len(rows["step_group_ids"]))
      rows["valid"].append(True)
  n = len(rows["valid"])
  out = {}
  for k, v in rows.items():
    a = np.asarray(v)
    pad = np.zeros((16 - n,), a.dtype)
    out[k] = np.concatenate([a, pad]).astype(np.float32 if a.dtype == np.float64 else
                                             (np.int32 if a.dtype.kind == "i" else a.dtype))
  out["step_group_ids"][n:] = np.arange(n, 16)
  return out


class AdvantagesTest(absltest.TestCase):

  def test_ablation_variants(self):
    """The four published ablations (configs/planpo_base.variants) change the advantage as they say."""
    config = planpo_twx.get_config("ablation,smoke")
    b = mixed_batch()
    valid = b["valid"]
    adv = {}
    for name in config.runs:
      if name in ("sft", "random"):
        continue
      method, rc = train.run_config(config, name)
      adv[name] = {k: np.asarray(v) for k, v in
                   train.compute_advantages(method, b, config=rc, num_groups=1, num_rollouts=4, step=1).items()}
    full = adv["planpo"]
    alpha = float(full["alpha"])
    self.assertLess(alpha, 0.1)   # decayed at step 1 of 2
    np.testing.assert_allclose(adv["planpo_no_ae"]["advantages"], alpha * full["step"], atol=1e-6)
    np.testing.assert_allclose(adv["planpo_no_as"]["advantages"], full["episode"], atol=1e-6)
    np.testing.assert_allclose(adv["planpo_constant_alpha"]["advantages"], full["episode"] + 0.1 * full["step"],
                               atol=1e-6)
    self.assertFalse(np.allclose(adv["planpo_unconditional"]["advantages"][valid], full["advantages"][valid]))

  def test_unknown_variant_key_is_named(self):
    config = planpo_twx.get_config("smoke")
    config.variants["planpo_typo"] = {"method": "planpo", "planpo": {"alpah_init": 0.2}}
    with self.assertRaisesRegex(ValueError, "variants.planpo_typo.planpo.alpah_init"):
      train.run_config(config, "planpo_typo")
    config.runs = ("sft", "nope")
    with self.assertRaisesRegex(ValueError, "nope"):
      train.check_config(config)

  def test_three_methods_nonzero_and_ordered(self):
    config = planpo_twx.get_config("smoke")
    b = mixed_batch()
    valid = b["valid"]
    for method in train.RL_METHODS:
      a = np.asarray(train.compute_advantages(method, b, config=config, num_groups=1, num_rollouts=4,
                                              step=0)["advantages"])
      self.assertTrue(np.all(np.abs(a[valid]) > 0), (method, a))
      self.assertTrue(np.all(a[~valid] == 0), (method, a))
      first = {r: a[np.flatnonzero((b["rollout_ids"] == r) & valid)[0]] for r in range(4)}
      self.assertGreater(min(first[0], first[1]), max(first[2], first[3]), method)
    p = train.compute_advantages("planpo", b, config=config, num_groups=1, num_rollouts=4, step=0)
    ep = np.asarray(p["episode"])
    self.assertGreater(ep[0], ep[2])   # the 2-turn win above the 3-turn win
    self.assertGreater(ep[2], ep[5])


class MicroBatchTest(absltest.TestCase):
  """rl_update accumulated over micro-batches equals the step on the whole minibatch."""

  def test_accumulation_is_exact(self):
    import jax
    from common.lm import testing as lm_testing
    from common.lm.config import ModelConfig
    cfg = ModelConfig(family="qwen2", vocab_size=64, hidden_size=16, intermediate_size=32, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=8)
    params = lm_testing.random_params(cfg, seed=0)
    rng = np.random.default_rng(0)
    rows, length = 8, 12
    tok = rng.integers(1, 64, size=(rows, length)).astype(np.int32)
    attn = np.ones((rows, length), bool)
    attn[5:, 9:] = False
    mask = np.zeros((rows, length), bool)
    for i in range(rows):
      mask[i, 4:4 + 1 + i % 5] = True
    mask[6] = False   # a row without policy tokens
    mask &= attn
    lp_old = np.asarray(kit.score(params, tok, attn, model=cfg, temperature=1.0)) + 0.05 * rng.normal(
        size=(rows, length)).astype(np.float32)
    lp_ref = lp_old - 0.1
    adv = rng.normal(size=(rows,)).astype(np.float32)
    for agg in ("token_mean", "seq_mean_token_mean"):
      kw = tuple(sorted(dict(clip_low=0.2, clip_high=0.2, kl_coef=0.01, agg_mode=agg, ratio="token").items()))
      out = {}
      for micro in (8, 3):
        optim = kit.OptimSettings(1e-2, 1.0)
        state = kit.init_state(params, optim)
        state, m = train.rl_update(state, tok, attn, mask, lp_old, lp_ref, adv, model=cfg, optim=optim,
                                   temperature=1.0, loss_kw=kw, micro_rows=micro)
        out[micro] = (state.params, m)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), out[8][0], out[3][0])
      for k in ("loss", "kl", "grad_norm"):
        np.testing.assert_allclose(out[8][1][k], out[3][1][k], rtol=1e-5, atol=1e-6, err_msg=f"{agg} {k}")


@absltest.skipUnless(HAVE_TWX, "needs java and textworld-express")
class SmokeTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp(prefix="planpo_smoke_")
    os.environ.setdefault("AGENTIC_RL_CACHE", os.path.join(cls.root, "cache"))
    cls.config = planpo_twx.get_config("smoke")
    t0 = time.monotonic()
    cls.results = train.run(cls.config, os.path.join(cls.root, "full"))
    cls.seconds = time.monotonic() - t0

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_end_to_end(self):
    print(f"smoke run: {self.seconds:.1f} s")
    self.assertEqual(set(self.results), {"random", "sft", "grpo", "gigpo", "planpo"})
    with open(os.path.join(self.root, "full", "results_main.json")) as f:
      saved = json.load(f)
    self.assertEqual(saved["runs"], json.loads(json.dumps(
        {r: {str(s): v for s, v in by_seed.items()} for r, by_seed in self.results.items()})))
    ev = saved["runs"]["planpo"]["0"]["test"]
    for m in tables.METRICS:
      self.assertIn(m, ev["metrics"])
    self.assertLen(ev["episodes"], self.config.env.eval_tasks)
    # paired: every run evaluates the same tasks in the same order
    ids = [e["task_id"] for e in ev["episodes"]]
    for run in self.results:
      self.assertEqual([e["task_id"] for e in saved["runs"][run]["0"]["test"]["episodes"]], ids, run)
    self.assertEqual(set(saved["differences"]["test"]), {"random", "sft", "gigpo", "planpo"})
    self.assertEqual(set(saved["task_types"].values()), {"coin"})
    rows = [json.loads(x) for x in open(os.path.join(self.root, "full", "seed_0", "planpo", "metrics.jsonl"))]
    self.assertEqual([r["step"] for r in rows], [1, 2])
    self.assertIn("planpo/alpha", rows[0])
    self.assertTrue(os.path.exists(os.path.join(self.root, "full", "curves_main.png")))
    with open(os.path.join(self.root, "full", "results_main.txt")) as f:
      text = f.read()
    self.assertIn("paired difference, run - grpo", text)
    self.assertRegex(saved["code"]["commit"], "^([0-9a-f]{40}|unknown)$")   # the table names its code
    self.assertTrue(text.startswith(f"code: commit {saved['code']['commit']}"))
    self.assertIn("per task type", text)

  def test_policy_is_kept_in_the_workdir(self):
    # A rerun in this workdir reloads the tokenizer and initial weights its checkpoints were trained with,
    # whatever corpus it is given now; without a workdir, another corpus gives another tokenizer.
    d = os.path.join(self.root, "full")
    other = ["zebra quokka xylophone " * 50]
    kept = train.load_policy(self.config, other, d)
    self.assertEqual(kept.checkpoint, os.path.join(d, "policy"))
    fresh = train.load_policy(self.config, other)
    self.assertNotEqual(fresh.checkpoint, kept.checkpoint)
    text = "You are an agent in a text game. move north"
    self.assertNotEqual(fresh.chat.encode(text), kept.chat.encode(text))

  def test_subset_rerun_keeps_the_full_table_and_replays_nothing(self):
    # A finished workdir rerun with two of its rows: nothing is trained or replayed (the kept policy, the
    # saved evaluations), and the subset's table is written beside the full one, never over it.
    d = os.path.join(self.root, "full")
    with open(os.path.join(d, "results_main.json")) as f:
      before = f.read()
    config = planpo_twx.get_config("smoke")
    config.runs = ("grpo,planpo",)   # what --config.runs=grpo,planpo gives
    with mock.patch.object(data, "gold_episodes", wraps=data.gold_episodes) as replays:
      sub = train.run(config, d)
    self.assertEqual(replays.call_count, 0)
    self.assertEqual(tuple(config.runs), ("grpo", "planpo"))
    self.assertEqual(set(sub), {"grpo", "planpo"})
    with open(os.path.join(d, "results_main.json")) as f:
      self.assertEqual(f.read(), before)
    with open(os.path.join(d, "results_main_grpo-planpo.json")) as f:
      self.assertEqual(set(json.load(f)["runs"]), {"grpo", "planpo"})
    self.assertEqual(json.loads(json.dumps(sub["planpo"])), json.loads(json.dumps(self.results["planpo"])))

  def test_no_sft_data_is_a_named_error(self):
    policy = train.load_policy(self.config, [], os.path.join(self.root, "full"))
    with self.assertRaisesRegex(ValueError, "SFT has no data.*env.max_turns"):
      train.run_sft(self.config, policy, [], os.path.join(self.root, "empty_sft"), 0)

  def test_resume_gives_same_result(self):
    d = os.path.join(self.root, "stopped")
    self.assertIsNone(train.run(self.config, d, stop_after=3))   # stops inside gigpo (2 grpo steps + 1)
    self.assertFalse(os.path.exists(os.path.join(d, "results_main.json")))
    resumed = train.run(self.config, d)
    self.assertEqual(json.loads(json.dumps(resumed)), json.loads(json.dumps(self.results)))
    for method in ("grpo", "gigpo", "planpo"):   # the losses, KL and advantages, step by step
      rows = [[{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
               for x in open(os.path.join(root, "seed_0", method, "metrics.jsonl"))]
              for root in (os.path.join(self.root, "full"), d)]
      self.assertEqual(rows[0], rows[1], method)


@absltest.skipUnless(HAVE_TWX, "needs java and textworld-express")
class GoldEpisodesTest(absltest.TestCase):
  """SFT episodes are played by THE rollout driver (a ScriptedPolicy): their rows are the driver's turns."""

  def test_rows_are_driver_prompts(self):
    from common import chat as chat_lib
    from common import rollout as rollout_lib
    from common import windowed as win_lib
    from common.lm import testing as lm_testing
    from planpo import data
    from planpo import rollouts
    config = planpo_twx.get_config("smoke")
    config.sft.detour_prob, config.sft.max_detours, config.env.max_turns = 1.0, 1, 8   # one detour per episode
    pool = rollouts.make_pool(config, num_workers=1)
    self.addCleanup(pool.close)
    tasks = rollouts.task_ids(pool.workers[0], config, config.env.train_split, 3)
    corpus = data.tokenizer_corpus(data.gold_episodes(pool, tasks, config=config, seed=0))
    chat = chat_lib.ChatTemplate(lm_testing.build_tokenizer(extra_text=corpus))
    episodes = data.gold_episodes(pool, tasks, config=config, seed=0, chat=chat)
    self.assertLen(episodes, 3)
    self.assertEqual(data.tokenizer_corpus(episodes), corpus)   # the same play, whatever the chat
    self.assertGreater(data.episode_stats(episodes)["sft/detour_turns"], 0)
    rows = data.sft_rows(episodes)
    self.assertLen(rows, sum(len(e) for e in episodes))
    first = episodes[0][0]
    self.assertTrue(chat.native)
    self.assertEqual(first.prompt_ids, chat.prompt_ids([{"role": "user", "content": first.prompt_text}]))
    for prompt, response in rows:
      self.assertEqual(response[-1], chat.end_id)
    # a random policy run by the same driver config shows the same first prompt (prompts are the driver's)
    traj = rollout_lib.RolloutDriver(pool, rollout_lib.ScriptedPolicy(lambda r: "<think>x</think>", chat), chat,
                                     config=data.driver_config(config)._replace(max_turns=1)).run(tasks[:1])[0]
    self.assertEqual(traj.turns[0].prompt_ids, first.prompt_ids)
    self.assertIsInstance(traj, win_lib.WindowTrajectory)

  def test_a_failed_environment_replays_the_same_episode(self):
    # A worker killed in the middle of a gold replay (what a step past the driver's timeout does on a loaded
    # machine) ends that episode 'env_error'; the replay is played again from the random state it started
    # with, so the episodes are the same as without the failure. A worker that keeps failing is a named
    # error after sft.env_retries retries.
    import psutil  # pylint: disable=import-outside-toplevel
    from planpo import rollouts
    config = planpo_twx.get_config("smoke")
    config.sft.detour_prob, config.sft.max_detours, config.env.max_turns = 0.5, 2, 10
    config.env.sandboxed = True   # a worker process to kill
    pool = rollouts.make_pool(config, num_workers=1)
    self.addCleanup(pool.close)
    tasks = rollouts.task_ids(pool.workers[0], config, config.env.train_split, 3)
    clean = data.gold_episodes(pool, tasks, config=config, seed=0)
    calls, script_call = [], data._GoldScript.__call__

    def kill_on(which):
      def call(script, request):
        calls.append(request.task_id)
        reply = script_call(script, request)   # (a detour may query the worker first)
        if which(calls, request):
          psutil.Process(script.driver.worker_for(request.episode).server_pid()).kill()
        return reply
      return call

    once = lambda c, r: r.task_id == tasks[1] and c.count(tasks[1]) == 2   # 2nd turn of the 2nd task, once
    with mock.patch.object(data._GoldScript, "__call__", kill_on(once)), \
         self.assertLogs(data._log, "WARNING") as logs:
      again = data.gold_episodes(pool, tasks, config=config, seed=0)
    self.assertTrue(any("replaying it from the same random state (retry 1 of 3)" in m for m in logs.output),
                    logs.output)
    self.assertEqual(data.tokenizer_corpus(again), data.tokenizer_corpus(clean))
    self.assertEqual(data.episode_stats(again), data.episode_stats(clean))
    calls.clear()
    config.sft.env_retries = 1
    always = lambda c, r: r.task_id == tasks[0] and r.turn == 1
    with mock.patch.object(data._GoldScript, "__call__", kill_on(always)), \
         self.assertRaisesRegex(data.GoldReplayEnvError, rf"{tasks[0]}.*failed 2 times in a row.*sft.env_retries"):
      data.gold_episodes(pool, tasks, config=config, seed=0)

  def test_train_state_is_a_dataclass(self):
    import jax.numpy as jnp
    state = kit.init_state({"w": jnp.ones((2,))}, kit.OptimSettings(1e-3, 1.0))
    self.assertIsInstance(state, kit.TrainState)
    self.assertEqual(int(state.step), 0)
    self.assertEqual(int(state.replace(step=jnp.asarray(3)).step), 3)


if __name__ == "__main__":
  absltest.main()


class WorkdirSharingTest(absltest.TestCase):
  """The ablation table may run in the main table's workdir (runs are folders); a training key may not change."""

  def test_report_keys_may_differ(self):
    from experiments import train as launcher
    d = tempfile.mkdtemp(prefix="planpo_wd_")
    self.addCleanup(shutil.rmtree, d, True)
    launcher._check_same_config(d, planpo_twx.get_config("smoke"))
    os.makedirs(os.path.join(d, "sft", "seed_0"))
    with open(os.path.join(d, "sft", "seed_0", "metrics.jsonl"), "w") as f:   # the run wrote something
      f.write("{}\n")
    launcher._check_same_config(d, planpo_twx.get_config("ablation,smoke"))   # runs, table, reference differ
    changed = planpo_twx.get_config("smoke")
    changed.rl.learning_rate = 0.5
    with self.assertRaisesRegex(ValueError, "rl.learning_rate"):
      launcher._check_same_config(d, changed)

  def test_reference_must_be_a_run(self):
    config = planpo_twx.get_config("smoke")
    config.reference = "nope"
    with self.assertRaisesRegex(ValueError, "reference"):
      train.check_config(config)
    config = planpo_twx.get_config("ablation,smoke")
    config.variants.planpo_constant_alpha.planpo.alpha_final = 0.5
    with self.assertRaisesRegex(ValueError, "variants.planpo_constant_alpha"):
      train.check_config(config)
