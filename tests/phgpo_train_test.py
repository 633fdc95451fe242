"""End-to-end PhGPO training on a slice of the real TRAJECT-Bench: smoke run, resume, launcher."""

import json
import os
import subprocess
import sys
import tempfile

import jax
import numpy as np
from absl.testing import absltest

import procs
import shared_runs
from configs import phgpo_traject
from phgpo import classifier_rollout
from phgpo import evaluation
from phgpo import pheromone as pher_lib
from phgpo import problem as problem_lib
from phgpo import runs
from phgpo import steps
from phgpo import train
from phgpo import warmup

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _smoke_config():
  c = phgpo_traject.get_config("smoke")
  c.encoder.cache_dir = shared_runs.CACHE
  c.logging.tensorboard = True
  return c


class PhGPOTrainTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = _smoke_config()
    cls.problem = problem_lib.prepare_problem(cls.config)
    cls.policy = problem_lib.make_policy(cls.config, cls.problem)
    cls.compiled = steps.Compiled(cls.config, cls.policy, cls.problem)

  def test_problem_shapes(self):
    p = self.problem
    n = len(p.tool_specs)
    self.assertEqual(p.tool_emb.shape, (n, 384))
    self.assertEqual(p.query_emb.shape, (len(p.tasks), 384))
    self.assertEqual(len(set(p.train_idx) & set(p.eval_idx)), 0)
    # Gold calls are graph tools, padded with -1 after gold_len.
    for i in range(len(p.tasks)):
      k = p.gold_len[i]
      self.assertTrue((p.gold_tools[i, :k] >= 0).all() and (p.gold_tools[i, :k] < n).all())
      self.assertTrue((p.gold_tools[i, k:] == -1).all())

  def test_gold_rollout_scores_one(self):
    # Forcing every gold action replays the gold trajectory: match ratio exactly 1.
    p = self.problem
    task_idx = p.train_idx[:6]
    envs = classifier_rollout.make_envs(self.config, p, len(task_idx))
    try:
      rb = self._rollout(envs, task_idx, p_tf=1.0)
    finally:
      envs.close()
    np.testing.assert_array_equal(rb.reward, np.ones(6, np.float32))
    np.testing.assert_array_equal(rb.length, p.gold_len[task_idx])
    self.assertTrue(rb.sl_mask.sum() == p.gold_len[task_idx].sum() and not rb.pg_mask.any())

  def _rollout(self, envs, task_idx, p_tf=0.0):
    p = self.problem
    params = self.policy.init(jax.random.key(0))
    pher = steps.init_pheromone(self.config, p)
    return classifier_rollout.rollout(self.compiled, params, pher, p, envs, task_idx, jax.random.key(1),
                                      beta=0.7, w=0.5, temperature=0.7, p_tf=p_tf,
                                      tf_rng=np.random.default_rng(0), reward_kind="match_ratio")

  def test_sampling_blocks_are_keyed_by_block_index(self):
    # issue 28: rollout_blocks with blocks of 2 tasks x 3 samples gives, in one process, each block's own
    # rollout (keys fold in the block index; host RNG [seed..., block]), concatenated in order; with one block
    # (block_tasks 0) it is `rollout` itself, with the key and host RNG given.
    p = self.problem
    groups = p.train_idx[:5]
    params = self.policy.init(jax.random.key(0))
    pher = steps.init_pheromone(self.config, p)
    kw = dict(beta=0.7, w=0.5, temperature=0.7, p_tf=0.3, reward_kind="match_ratio")
    self.assertEqual([list(r) for r in classifier_rollout.task_blocks(5, 2)], [[0, 1], [2, 3], [4]])
    self.assertEqual(classifier_rollout.block_slots(5, 3, 2), 6)
    self.assertEqual(classifier_rollout.block_slots(5, 3, 0), 15)
    envs = classifier_rollout.make_envs(self.config, p, 15)
    try:
      got = classifier_rollout.rollout_blocks(self.compiled, params, pher, p, envs, groups, jax.random.key(1),
                                              group_size=3, block_tasks=2, tf_rng=None, tf_seed=(0, 2, 7), **kw)
      parts = [classifier_rollout.rollout(
          self.compiled, params, pher, p, envs, np.repeat(groups[r.start:r.stop], 3),
          jax.random.fold_in(jax.random.key(1), b), tf_rng=np.random.default_rng([0, 2, 7, b]), **kw)
          for b, r in enumerate(classifier_rollout.task_blocks(5, 2))]
      one = classifier_rollout.rollout_blocks(self.compiled, params, pher, p, envs, groups, jax.random.key(1),
                                              group_size=3, block_tasks=0, tf_rng=np.random.default_rng(4),
                                              tf_seed=(), **kw)
      plain = classifier_rollout.rollout(self.compiled, params, pher, p, envs, np.repeat(groups, 3),
                                         jax.random.key(1), tf_rng=np.random.default_rng(4), **kw)
    finally:
      envs.close()
    want = classifier_rollout.concat(parts)
    np.testing.assert_array_equal(got.task, np.repeat(groups, 3))
    for f in ("tools", "templates", "status", "length", "reward", "sl_mask", "logp_old"):
      np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
      np.testing.assert_array_equal(getattr(one, f), getattr(plain, f))
    self.assertEqual(got.end_reason, want.end_reason)
    bad = _smoke_config()
    bad.rl.block_tasks = -1
    with self.assertRaisesRegex(ValueError, "rl.block_tasks must be an integer >= 0"):
      train.check_config(bad)

  def test_sandboxed_equals_in_process(self):
    task_idx = self.problem.train_idx[:8]
    c = _smoke_config()
    c.env.sandboxed = False
    local = classifier_rollout.make_envs(c, self.problem, len(task_idx))
    remote = classifier_rollout.make_envs(self.config, self.problem, len(task_idx))
    self.assertFalse(remote.pool.in_process)
    self.assertTrue(local.pool.in_process)
    try:
      a, b = self._rollout(local, task_idx), self._rollout(remote, task_idx)
    finally:
      remote.close()
      local.close()
    for f in ("tools", "templates", "status", "length", "reward"):
      np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    self.assertEqual(a.end_reason, b.end_reason)

  def test_killed_worker_ends_its_episodes_and_is_replaced(self):
    import psutil  # pylint: disable=g-import-not-at-top
    task_idx = self.problem.train_idx[:4]
    envs = classifier_rollout.make_envs(self.config, self.problem, len(task_idx))
    victim = envs.pool.workers[0]
    step_many = envs.step_many
    calls = []

    def kill_mid_episode(items):
      calls.append(len(items))
      if len(calls) == 2:  # after the first call of every episode: kill worker 0's server process
        psutil.Process(victim.server_pid()).kill()
      return step_many(items)

    envs.step_many = kill_mid_episode
    try:
      rb = self._rollout(envs, task_idx, p_tf=1.0)
      envs.step_many = step_many
      # Worker 0 served episodes 0 and 2: they end with 'env_error'; the others finish normally.
      self.assertEqual([rb.end_reason[i] for i in (0, 2)], ["env_error", "env_error"])
      self.assertEqual([rb.length[i] for i in (0, 2)], [1, 1])
      self.assertEqual([rb.reward[i] for i in (1, 3)], [1.0, 1.0])
      rb2 = self._rollout(envs, task_idx, p_tf=1.0)   # the pool is whole again
      np.testing.assert_array_equal(rb2.reward, np.ones(4, np.float32))
      self.assertIsNot(envs.pool.workers[0], victim)
    finally:
      envs.close()
    me = psutil.Process()
    self.assertEqual([c for c in me.children(recursive=True) if "env_server" in procs.cmdline(c)], [])

  def test_resume_equals_uninterrupted(self):
    c, p, comp = self.config, self.problem, self.compiled
    params = self.policy.init(jax.random.key(3))
    d1, d2 = self.create_tempdir().full_path, self.create_tempdir().full_path
    full = train.run_rl(c, p, comp, d1, seed=0, init_params=params,
                        progress=False)
    train.run_rl(c, p, comp, d2, seed=0, init_params=params, progress=False,
                 stop_after=1)
    resumed = train.run_rl(c, p, comp, d2, seed=0, init_params=params,
                           progress=False)
    self.assertIsInstance(resumed, steps.TrainState)
    self.assertEqual(int(resumed.step), c.rl.steps)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    self.assertEqual(json.load(open(os.path.join(d1, "first_success.json"))),
                     json.load(open(os.path.join(d2, "first_success.json"))))
    rows1 = [json.loads(l) for l in open(os.path.join(d1, "metrics.jsonl"))]
    rows2 = [json.loads(l) for l in open(os.path.join(d2, "metrics.jsonl"))]
    self.assertEqual(rows1, rows2)

  def test_pheromone_stays_in_bounds_after_training(self):
    c, p = self.config, self.problem
    st = train.run_rl(c, p, self.compiled, self.create_tempdir().full_path, seed=1,
                      init_params=self.policy.init(jax.random.key(0)), progress=False)
    pher = st.pheromone
    self.assertGreater(int(pher.num_updates), 0)
    for table in (pher_lib.effective_tau(pher, tau_min=c.pheromone.tau_min),
                  pher_lib.effective_tau_arg(pher, tau_min=c.pheromone.tau_min)):
      table = np.asarray(table)
      self.assertGreaterEqual(table.min(), c.pheromone.tau_min - 1e-7)
      self.assertLessEqual(table.max(), c.pheromone.tau_max + 1e-7)

  def test_comparison_writes_table_and_artifacts(self):
    """The launcher's smoke run (tests/shared_runs.py, shared with phgpo_notebook_test), then train.run on a
    copy of its workdir: every run is finished, so it trains nothing and prints the launcher's table."""
    shared = shared_runs.phgpo_smoke()
    d = str(shared_runs.copy_of(shared, self.create_tempdir().full_path))
    self.assertEqual(tuple(self.config.runs), shared_runs.PHGPO_SMOKE_RUNS)
    lines = []
    results = train.run(self.config, d, progress=False, log=lines.append)
    self.assertIn(lines[-2], (shared / "stdout.txt").read_text())   # the same table, code commit included
    self.assertEqual(set(results), {"random"})
    by_run = results["random"][0]
    self.assertEqual(set(by_run), {"nearest", "warmup", "grpo", "phgpo"})
    for r in by_run.values():
      self.assertBetween(r["match_ratio"], 0.0, 1.0)
      self.assertEqual(r["num_tasks"], len(self.problem.eval_idx))
      self.assertLen(r["per_task"]["pred"], len(self.problem.eval_idx))
    for run in ("grpo", "phgpo"):
      fs = by_run[run]["first_success"]
      self.assertEqual(fs["visited"], len(json.load(open(os.path.join(d, "random", "seed_0", run,
                                                                      "first_success.json")))["visited"]))
    name = "results_main_nearest-warmup-grpo-phgpo"
    table = open(os.path.join(d, name + ".txt")).read()
    for row in ("nearest training query", "warm-up only", "GRPO + curriculum (beta = 0)", "PhGPO", "reference"):
      self.assertIn(row, table)
    saved = json.load(open(os.path.join(d, name + ".json")))
    self.assertLen(saved["code"]["commit"], 40)
    self.assertLen(saved["data"]["sha256"], 64)
    self.assertLen(saved["data"]["embeddings_sha256"], 64)
    self.assertEqual(saved["config"]["runs"], list(self.config.runs))
    self.assertIn("random", saved["tables"])
    # The pheromone snapshots the heat maps read: effective tau after 0, 2 and 4 RL steps.
    snaps = sorted(os.listdir(os.path.join(d, "random", "seed_0", "phgpo", "pheromone")))
    self.assertEqual(snaps, ["tau_step_0.npy", "tau_step_2.npy", "tau_step_4.npy"])
    self.assertTrue(os.listdir(os.path.join(d, "random", "seed_0", "phgpo", "tb")))
    # Running again skips the finished runs and prints the same table.
    lines2 = []
    again = train.run(self.config, d, progress=False, log=lines2.append)
    self.assertEqual(json.loads(json.dumps(again)), json.loads(json.dumps(results)))
    self.assertEqual(lines2[-2], lines[-2])

  def test_frozen_pheromone_is_bit_identical_after_an_update(self):
    # Issue 11 case: with the pheromone frozen an RL update changes the policy and leaves tau, tau_arg and
    # the memory bank exactly as they were; unfrozen, the same update changes them.
    c, p = self.config, self.problem
    state = steps.init_state(c, self.policy, p, seed=0, learning_rate=c.rl.learning_rate)
    task_idx = np.repeat(p.train_idx[:4], 2)
    envs = classifier_rollout.make_envs(c, p, len(task_idx))
    try:
      rb = classifier_rollout.rollout(self.compiled, state.params, state.pheromone, p, envs, task_idx,
                                      jax.random.key(1), beta=0.7, w=0.5, temperature=0.7, p_tf=0.5,
                                      tf_rng=np.random.default_rng(0), reward_kind="match_ratio")
    finally:
      envs.close()
    before = jax.device_get(state.pheromone)
    kw = dict(group_ids=np.repeat(np.arange(4), 2), num_groups=4, sl_weight=0.5, ref_params=state.params, step=0)
    frozen, _ = steps.rl_step(self.compiled, state, p, rb, frozen=True, **kw)
    for a, b in zip(jax.device_get(frozen.pheromone), before):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    moved, _ = steps.rl_step(self.compiled, state, p, rb, **kw)
    self.assertFalse(np.array_equal(np.asarray(moved.pheromone.tau), np.asarray(before.tau)))
    self.assertGreater(int((np.asarray(moved.pheromone.bank_task) >= 0).sum()), 0)

  def test_chain_split_holds_out_whole_chains(self):
    p = problem_lib.prepare_problem(self.config, "chain")
    chain = lambda i: tuple(t.name for t in p.tasks[i].calls)
    train_chains = {chain(i) for i in p.train_idx}
    self.assertGreater(len(p.eval_idx), 0)
    self.assertFalse(any(chain(i) in train_chains for i in p.eval_idx))
    with self.assertRaisesRegex(ValueError, "unknown split 'tools'"):
      problem_lib.prepare_problem(self.config, "tools")

  def test_bad_overrides_are_named(self):
    c = _smoke_config()
    c.runs = ("warmup,grpo",)
    c.splits = ("random,chain",)
    train.check_config(c)
    self.assertEqual(c.runs, ("warmup", "grpo"))
    self.assertEqual(c.splits, ("random", "chain"))
    for key, value, message in (("runs", ("warmup", "gpro"), "unknown run names.*gpro"),
                                ("runs", ("phgpo", "phgpo"), "repeats"),
                                ("splits", ("random", "queries"), "splits must be.*queries"),
                                ("seeds", ("zero",), "seeds must be"),
                                ("seeds", (0, 0), "seeds must be distinct"),
                                ("reference", "phgop", "reference 'phgop' is not a run name")):
      bad = _smoke_config()
      setattr(bad, key, value)
      with self.assertRaisesRegex(ValueError, message):
        train.check_config(bad)
    bad = _smoke_config()
    bad.rl.sl_steps = "every"
    with self.assertRaisesRegex(ValueError, "rl.sl_steps"):
      train.check_config(bad)

  def test_run_configs_change_what_the_row_names(self):
    c = phgpo_traject.get_config()
    self.assertEqual(runs.TABLE_RUNS["main"], phgpo_traject.MAIN_RUNS)
    self.assertEqual(runs.TABLE_RUNS["ablation"], phgpo_traject.ABLATION_RUNS)
    self.assertEqual(phgpo_traject.get_config("ablation").runs, phgpo_traject.ABLATION_RUNS)
    get = lambda run: runs.run_config(c, run)
    self.assertEqual((get("grpo").pheromone.beta_max, get("grpo").curriculum.steps), (0.0, c.curriculum.steps))
    self.assertEqual((get("grpo_vanilla").pheromone.beta_max, get("grpo_vanilla").curriculum.steps), (0.0, 0))
    self.assertEqual(get("phgpo").to_dict(), c.to_dict())
    self.assertEqual(get("no_curriculum").curriculum.steps, 0)
    self.assertEqual((get("rho0").pheromone.rho, get("rho0").pheromone.arg_rho), (0.0, 0.0))
    self.assertEqual((get("agnostic_only").pheromone.w_max, get("agnostic_only").pheromone.beta_max), (0.0, 0.7))
    self.assertEqual(get("frozen").pheromone.freeze_at, c.ablation.freeze_at)
    authors = get("authors")
    self.assertEqual((authors.curriculum.lambda_floor, authors.curriculum.p_tf_floor,
                      authors.curriculum.beta_start_fraction, authors.pheromone.first_step, authors.rl.sl_steps),
                     (0.3, 0.05, 1.0, False, "all"))
    with self.assertRaisesRegex(ValueError, "unknown run 'ppo'"):
      runs.run_config(c, "ppo")


class LauncherTest(absltest.TestCase):

  def _run(self, *args):
    env = dict(os.environ, AGENTIC_RL_CACHE=os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache"))
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)

  def test_config_typo_fails_loudly(self):
    out = self._run("--config=configs/phgpo_traject.py:smoke", "--workdir=" + self.create_tempdir().full_path,
                    "--config.pheromone.rhoo=0.1")
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("rhoo", out.stderr)

  def test_changed_config_in_used_workdir_is_refused(self):
    d = self.create_tempdir().full_path
    c = phgpo_traject.get_config("smoke")
    with open(os.path.join(d, "config.json"), "w") as f:
      f.write(c.to_json_best_effort())
    os.makedirs(os.path.join(d, "random", "seed_0", "warmup"))
    with open(os.path.join(d, "random", "seed_0", "warmup", "metrics.jsonl"), "w") as f:   # a used workdir
      f.write("{}\n")
    out = self._run("--config=configs/phgpo_traject.py:smoke", "--workdir=" + d, "--config.pheromone.rho=0.3")
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("pheromone.rho: 0.05 -> 0.3", out.stderr)
    self.assertIn("Use a new --workdir", out.stderr)

  def test_comma_separated_runs_and_unknown_names(self):
    out = self._run("--config=configs/phgpo_traject.py:smoke", "--workdir=" + self.create_tempdir().full_path,
                    "--config.runs=warmup,grpox", "--noprogress")
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("unknown run names ['grpox']", out.stderr)
    out = self._run("--config=configs/phgpo_traject.py:smoke", "--workdir=" + self.create_tempdir().full_path,
                    "--config.splits=random,chian", "--noprogress")
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("'chian'", out.stderr)

  def test_unknown_domain_is_named(self):
    # (The missing-data path itself: tests/phgpo_data_test.py, which hides the shared folder.)
    out = self._run("--config=configs/phgpo_traject.py:smoke", "--workdir=" + self.create_tempdir().full_path,
                    "--config.data.domains=NoSuchDomain")
    self.assertNotEqual(out.returncode, 0)
    self.assertIn("NoSuchDomain", out.stderr)


class LMPolicyTrainTest(absltest.TestCase):
  """PhGPO with `policy.kind = 'lm'` on a tiny random Qwen2 checkpoint written by the test."""

  def test_warmup_and_rl_steps_with_lm_policy(self):
    c = phgpo_traject.get_config("smoke_lm")
    c.encoder.cache_dir = self.create_tempdir().full_path  # the tiny checkpoint is written here
    c.data.max_tasks = 20
    c.warmup.steps = 2
    c.rl.steps = 2
    c.curriculum.steps = 1
    c.env.sandboxed = False
    problem = problem_lib.prepare_problem(c)
    policy = problem_lib.make_policy(c, problem)
    self.assertTrue(policy.uses_observations)
    compiled = steps.Compiled(c, policy, problem)
    d = self.create_tempdir().full_path
    warm = warmup.run_warmup(c, problem, compiled, os.path.join(d, "w"), seed=0, progress=False)
    st = train.run_rl(c, problem, compiled, os.path.join(d, "r"), seed=0, init_params=warm.params,
                      progress=False)
    self.assertEqual(int(st.step), 2)
    rows = [json.loads(l) for l in open(os.path.join(d, "r", "metrics.jsonl"))]
    self.assertTrue(all(np.isfinite(r["rl/loss"]) for r in rows))
    # Only the LoRA adapters and the tool head moved; the base weights are the checkpoint's.
    base = policy.lm.base_params()
    moved = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
                         st.params["lm"]["embed"], base["embed"])
    self.assertFalse(any(jax.tree.leaves(moved)))
    head_moved = np.any(np.asarray(st.params["tool_head"]["kernel"])
                        != np.asarray(warm.params["tool_head"]["kernel"]))
    self.assertTrue(head_moved)
    res = evaluation.evaluate(c, compiled, st.params, st.pheromone, problem, beta=0.7, w=0.5,
                         task_idx=problem.eval_idx[:3])
    self.assertBetween(res["match_ratio"], 0.0, 1.0)


if __name__ == "__main__":
  absltest.main()
