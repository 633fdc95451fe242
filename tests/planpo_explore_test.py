"""Tests of PlanPO's explorer regime (issue 25): scripted explorers, explorer SFT data, the window's summary line,
the regime gate, turns among successes and the primary cell, the launcher's stop, and the bag-of-words pre-check.

Needs a Java runtime and the `textworld-express` wheel (TextWorldExpress); skipped without them.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from absl.testing import absltest
import pytest

from common import chat as chat_lib
from common import trajectory as traj_lib
from common import windowed as win_lib
from common.lm import stages
from configs import planpo_twx
from planpo import data
from planpo import explorers
from planpo import precheck
from planpo import rollouts
from planpo import tables
from planpo import train

try:
  import textworld_express  # noqa: F401
  HAVE_TWX = shutil.which("java") is not None
except ImportError:
  HAVE_TWX = False

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOM = ("You are in the kitchen. In one part of the room you see a stove. \nTo the North you see the pantry. "
        "To the South you see the bathroom. To the East you see the corridor. ")


class ParsingTest(absltest.TestCase):

  @pytest.mark.fast
  def test_exits_and_location(self):
    self.assertEqual(explorers.exits(ROOM), {"north": "pantry", "south": "bathroom", "east": "corridor"})
    from common.envs.twx_env import location  # pylint: disable=g-import-not-at-top
    self.assertEqual(location(ROOM), "kitchen")
    self.assertIsNone(location("You have nothing in your inventory."))

  @pytest.mark.fast
  def test_walkers(self):
    rng = np.random.default_rng(0)
    adm = ["inventory", "look around", "move east", "move north", "move south"]
    self.assertEqual(explorers._Walker("depth_first", rng).act(ROOM, adm + ["take coin"]), "take coin")
    dfs = explorers._Walker("depth_first", rng)
    self.assertEqual(dfs.act(ROOM, adm), "move north")   # the first exit (N, S, E, W) to a room not entered
    pantry = "You are in the pantry. \nTo the South you see the kitchen. "
    self.assertEqual(dfs.act(pantry, ["move south"]), "move south")   # dead end: back the way it came
    self.assertEqual(dfs.act(ROOM, adm), "move south")   # the pantry is entered now: the next new room
    mem = explorers._Walker("memory_walk", rng)
    chosen = set()
    for _ in range(50):
      mem.prev = "south"   # came in from the north: never straight back north while another exit exists
      chosen.add(mem.act(ROOM, adm))
    self.assertEqual(chosen, {"move east", "move south"})
    rnd = explorers._Walker("random", np.random.default_rng(1))
    self.assertEqual({rnd.act(ROOM, adm) for _ in range(200)}, set(adm))   # every admissible action, looks too
    with self.assertRaisesRegex(ValueError, "sft.explorers"):
      explorers.Explorer("oracle", traj_lib.ByteTokenizer(), 0)


class SummaryLineTest(absltest.TestCase):

  @pytest.mark.fast
  def test_summary_shows_previous_action_and_places(self):
    cfg = win_lib.WindowConfig(history_length=0, summary=True)
    state = win_lib.start("reset", {"instruction": "find the coin", "observation": ROOM,
                                    "admissible_actions": ["move north"], "location": "kitchen"})
    self.assertIn("Your previous action: 'none'. Places visited so far: kitchen.", win_lib.render(state, cfg))
    turn = win_lib.WindowTurn([], [])
    turn.action = "move north"
    win_lib.on_step(turn, state, "ok", "You are in the pantry.", {"location": "pantry",
                                                                   "admissible_actions": ["move south"]}, cfg)
    text = win_lib.render(state, cfg)
    self.assertIn("Your previous action: 'move north'. Places visited so far: kitchen, pantry.", text)
    self.assertNotIn("previous action", win_lib.render(state, win_lib.WindowConfig(history_length=0)))


def _episodes(turns_success):
  """eval.json episodes from (task, turns, success) triples."""
  return [{"task_id": t, "sample": 0, "success": float(s), "score": float(s), "turns": n, "response_tokens": 10.0,
           "episode_tokens": 10 * n, "invalid": 0, "termination": "done", "actions": []} for t, n, s in turns_success]


class TablesTest(absltest.TestCase):

  @pytest.mark.fast
  def test_turns_among_successes_and_primary(self):
    config = planpo_twx.get_config("explore")
    config.stats.resamples = 500
    tasks = [f"coin/{20000 + i}" for i in range(12)]
    grpo = _episodes([(t, 20 + i % 5, True) for i, t in enumerate(tasks)])
    planpo = _episodes([(t, 12 + i % 3, i != 0) for i, t in enumerate(tasks)])   # one fewer success, shorter
    res = {"grpo": {0: {"test": {"episodes": grpo}}}, "planpo": {0: {"test": {"episodes": planpo}}}}
    d = tables.paired(config, res, "planpo", "grpo", "test", "turns_success")
    self.assertEqual(d.n, 11)   # the task without a PlanPO success is left out
    want = np.mean([(12 + i % 3) - (20 + i % 5) for i in range(1, 12)])
    self.assertAlmostEqual(d.mean, want)
    line = tables.primary(config, res, "test")
    self.assertIn("PRIMARY (named before the run): planpo - grpo", line)
    # success dropped by 1/12 = 0.083 > the 0.05 margin: not shown non-inferior
    self.assertIn("NOT shown non-inferior", line)
    self.assertIn("success may have dropped", line)
    res["planpo"][0]["test"]["episodes"] = _episodes([(t, 12 + i % 3, True) for i, t in enumerate(tasks)])
    self.assertIn("cut turns among successes at no loss of success", tables.primary(config, res, "test"))


@absltest.skipUnless(HAVE_TWX, "needs Java and textworld-express")
class ExplorerEpisodesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = planpo_twx.get_config("explore_smoke")
    cls.config.env.kwargs.game_params = {"coin": "numLocations=9,includeDoors=0,numDistractorItems=0"}
    cls.config.env.max_turns = 40
    cls.config.rollout.max_response_tokens = 400   # byte-level replies
    cls.pool = rollouts.make_pool(cls.config, num_workers=4)
    cls.tasks = rollouts.task_ids(cls.pool.workers[0], cls.config, "train", 8)
    cls.chat = chat_lib.ChatTemplate(traj_lib.ByteTokenizer())

  @classmethod
  def tearDownClass(cls):
    cls.pool.close()
    super().tearDownClass()

  def test_depth_first_wins_every_game_in_few_turns(self):
    trajs = rollouts.run_rollouts(self.pool, explorers.Explorer("depth_first", self.chat, 0), self.chat, self.tasks,
                                  config=self.config, group_size=1, seed=0)
    self.assertTrue(all(t.success for t in trajs))
    self.assertLess(np.mean([t.num_turns for t in trajs]), 12)   # 9 rooms: at most 2 x 8 moves + take coin

  def test_gold_replay_row_wins_in_the_expert_turns(self):
    policy = train.scripted_policy("gold", self.chat, 0, pool=self.pool, tasks=self.tasks)
    trajs = rollouts.run_rollouts(self.pool, policy, self.chat, self.tasks, config=self.config, group_size=1, seed=0)
    self.assertTrue(all(t.success for t in trajs))
    self.assertEqual([t.num_turns for t in trajs], [len(policy.gold[t]) for t in self.tasks])

  def test_explorer_data_holds_only_wins_and_is_reproducible(self):
    eps = data.sft_episodes(self.pool, self.tasks, config=self.config, seed=3, chat=self.chat)
    again = data.sft_episodes(self.pool, self.tasks, config=self.config, seed=3, chat=self.chat)
    self.assertEqual([[t.response for t in e] for e in eps], [[t.response for t in e] for e in again])
    self.assertNotEmpty(eps)
    for e in eps:
      self.assertLessEqual(len(e), self.config.env.max_turns)
      self.assertEqual(e[-1].response.rsplit("<action>", 1)[1], "take coin</action>")
      self.assertIn("Your previous action:", e[0].prompt_text)   # the rows are the rollouts' own prompts
      self.assertEqual(self.chat.decode(e[0].prompt_ids).count(e[0].prompt_text[:40]), 1)
    # no hindsight path: the uniformly random explorer's wins hold wasted turns ('look around', 'inventory')
    actions = {t.response.rsplit("<action>", 1)[1] for e in eps for t in e}
    self.assertTrue(actions & {"look around</action>", "inventory</action>"}, actions)


@absltest.skipUnless(HAVE_TWX, "needs Java and textworld-express")
class ExploreSmokeTest(absltest.TestCase):
  """`configs/planpo_twx.py:explore_smoke` through the launcher: the gate line, then the table and the primary."""

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp(prefix="planpo_explore_")
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

  def _launch(self, *flags):
    cmd = [sys.executable, "-m", "experiments.train", "--config=configs/planpo_twx.py:explore_smoke",
           f"--workdir={self.root}/w", *flags]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)

  def test_gate_then_table(self):
    out = self._launch()
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    gate_at = out.stdout.index("regime gate (SFT seed 0, 4 'dev' games x 1)")
    self.assertLess(out.stdout.index("primary cell (named before the run)"), gate_at)
    self.assertLess(gate_at, out.stdout.index("== held-out split 'test'"))
    self.assertIn("PRIMARY (named before the run): planpo - grpo", out.stdout)
    saved = json.load(open(os.path.join(self.root, "w", "results_explore_random-depth_first-sft-grpo-planpo.json")))
    self.assertEqual(set(saved["runs"]), {"random", "depth_first", "sft", "grpo", "planpo"})
    gate = json.load(open(os.path.join(self.root, "w", "seed_0", "gate", "gate.json")))
    self.assertTrue(gate["passed"])
    self.assertEqual(gate["reference_success"], 1.0)   # the depth-first explorer wins every 3-room game
    # the same workdir, a gate the SFT policy cannot pass: it stops before any RL, with one line and exit 3,
    # and nothing already written is lost
    shutil.rmtree(os.path.join(self.root, "w", "seed_0", "grpo"))
    os.remove(os.path.join(self.root, "w", "seed_0", "gate", "gate.json"))
    out = self._launch("--config.gate.min_success=1.0")
    self.assertEqual(out.returncode, 3, out.stderr[-3000:])
    self.assertRegex(out.stderr, r"STOPPED regime gate .* FAIL\. The RL rows would be read in the wrong regime")
    self.assertIn("num_layers=4", out.stderr)
    self.assertFalse(os.path.exists(os.path.join(self.root, "w", "seed_0", "grpo")))
    self.assertTrue(os.path.exists(os.path.join(self.root, "w", "seed_0", "planpo", "eval.json")))
    # gate.on_fail 'report' (the household and ScienceWorld configs): the RL rows run, the table's header says so
    out = self._launch("--config.gate.min_success=1.0", "--config.gate.on_fail=report")
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn("WARNING The RL rows would be read in the wrong regime", out.stdout)
    head = open(os.path.join(self.root, "w", "results_explore_random-depth_first-sft-grpo-planpo.txt")).read()
    head = head.split("\n")
    self.assertRegex(head[1], r"^regime gate .*: FAIL$")
    self.assertIn("num_layers=4", head[2])
    self.assertTrue(os.path.exists(os.path.join(self.root, "w", "seed_0", "grpo", "eval.json")))


class SamplerRowsTest(absltest.TestCase):

  @pytest.mark.fast
  def test_sampler_batch_is_the_pool_size(self):
    # the driver runs at most env.workers episodes at once; a larger batch would only compute padding rows
    import jax  # pylint: disable=g-import-not-at-top
    config = planpo_twx.get_config("explore_smoke")
    policy = train.load_policy(config, ["move north take coin look around " * 20])
    for rows, want in ((128, config.env.workers), (3, 3)):
      s = rollouts.make_sampler(policy.params, policy, key=jax.random.key(0), rows=rows, temperature=1.0,
                                config=config)
      self.assertEqual(s.rows, want)
      self.assertEqual(s.sample_keys, "call")   # rollout.sample_keys: the explorer table's stream (issue 25)

  @pytest.mark.fast
  def test_sample_keys(self):
    # the explorer table's configs keep the sampler's stream from before the KV pool; new configs draw per request
    for variant in ("explore", "explore_smoke", "explore_coin11"):
      self.assertEqual(planpo_twx.get_config(variant).rollout.sample_keys, "call", variant)
    for variant in ("", "smoke"):
      self.assertEqual(planpo_twx.get_config(variant).rollout.sample_keys, "request", variant)
    self.assertEqual(train.ADDED_KEYS["rollout.sample_keys"], "call")   # workdirs saved before the key
    config = planpo_twx.get_config("explore")
    config.rollout.sample_keys = "per_call"
    with self.assertRaisesRegex(ValueError, r"rollout.sample_keys`='per_call' must be one of \('request', 'call'\)"):
      train.check_config(config)


class GateTest(absltest.TestCase):

  @pytest.mark.fast
  def test_bad_gate_keys_are_named(self):
    for key, value, msg in (("tasks", 0, "gate.tasks"), ("min_success", 1.5, "gate.min_success"),
                            ("reference", "sft", "gate.reference")):
      config = planpo_twx.get_config("explore")
      config.gate[key] = value
      with self.assertRaisesRegex(ValueError, msg):
        train.check_config(config)
    config = planpo_twx.get_config("explore")
    config.sft.explorers = ("oracle",)
    with self.assertRaisesRegex(ValueError, "sft.explorers"):
      train.check_config(config)
    config = planpo_twx.get_config("explore")
    config.sft.source = "hindsight"
    with self.assertRaisesRegex(ValueError, "sft.source"):
      train.check_config(config)
    for key, value, msg in (("run", "nope", "primary.run"), ("reference", "nope", "primary.reference"),
                            ("success_margin", -1.0, "primary.success_margin")):
      config = planpo_twx.get_config("explore")
      config.primary[key] = value
      with self.assertRaisesRegex(ValueError, msg):
        train.check_config(config)
    config = planpo_twx.get_config("explore")
    config.gate.split = "train"
    with self.assertRaisesRegex(ValueError, "gate.split.*training split"):
      train.check_config(config)
    with self.assertRaisesRegex(ValueError, "do not combine"):
      planpo_twx.get_config("explore,smoke")

  @pytest.mark.fast
  def test_precheck_config_is_checked(self):
    with self.assertRaisesRegex(ValueError, "no `precheck` node.*:explore"):
      precheck.check_config(planpo_twx.get_config("smoke"))
    for key, value, msg in (("methods", ("nope",), "precheck.methods"), ("steps", 0, "precheck.steps"),
                            ("learning_rate", 0.0, "precheck.learning_rate"), ("seeds", (0, 0), "precheck.seeds")):
      config = planpo_twx.get_config("explore")
      config.precheck[key] = value
      with self.assertRaisesRegex(ValueError, msg):
        precheck.check_config(config)
    config = planpo_twx.get_config("explore")
    config.sft.explorers = ("oracle",)
    with self.assertRaisesRegex(ValueError, "sft.explorers"):
      precheck.check_config(config)
    config = planpo_twx.get_config("explore")
    config.precheck.methods = ("grpo,planpo",)   # what the flag --config.precheck.methods=grpo,planpo gives
    precheck.check_config(config)
    self.assertEqual(tuple(config.precheck.methods), ("grpo", "planpo"))
    self.assertTrue(issubclass(stages.RegimeGateFailed, RuntimeError))

  def test_precheck_launcher_names_a_file_as_workdir_in_one_line(self):
    path = os.path.join(self.create_tempdir().full_path, "notes.txt")
    with open(path, "w") as f:
      f.write("kept\n")
    p = subprocess.run([sys.executable, "-m", "planpo.precheck", "--config=configs/planpo_twx.py:explore_smoke",
                        f"--workdir={path}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    self.assertEqual(p.returncode, 1, p.stderr[-2000:])
    self.assertIn(f"FATAL --workdir {path} is a file; give a folder", p.stderr)
    self.assertNotIn("Traceback", p.stderr)
    with open(path) as f:
      self.assertEqual(f.read(), "kept\n")


@absltest.skipUnless(HAVE_TWX, "needs Java and textworld-express")
class PrecheckTest(absltest.TestCase):

  def test_smoke(self):
    root = tempfile.mkdtemp(prefix="planpo_precheck_")
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    config = planpo_twx.get_config("explore_smoke")
    config.precheck.seeds = (0,)
    config.stats.resamples = 100
    res = precheck.run(config, root)
    self.assertEqual(set(res), {"bc", "grpo", "planpo", "grpo_turn_penalty"})
    self.assertLen(res["planpo"]["0"], config.env.eval_tasks * config.rl.eval_samples)
    text = open(os.path.join(root, "precheck.txt")).read()
    self.assertIn("planpo - grpo_turn_penalty", text)
    self.assertIn("95% BCa bootstrap interval over seeds", text)
    # resumes: a second call trains nothing and gives the same records
    self.assertEqual(precheck.run(config, root), json.loads(json.dumps(res)))
    # a resume with other training settings is refused (the saved seeds would be mixed with new ones)
    config.precheck.steps = 5
    with self.assertRaisesRegex(precheck.WorkdirMismatch, "other settings.*precheck.steps"):
      precheck.run(config, root)

  @pytest.mark.fast
  def test_features_mark_backtracks_and_entered_rooms(self):
    mem = precheck._Memory()
    mem.prev = "move south"
    mem.entered.add("pantry")
    adm = ["look around", "move east", "move north", "move south"]
    phi = precheck.features(ROOM, adm, mem, 1 << 14)
    h = lambda k: precheck._h(k, 1 << 14)
    self.assertIn(h("move:back"), phi[2])        # north undoes the previous 'move south'
    self.assertIn(h("move:entered"), phi[2])     # the pantry was entered
    self.assertIn(h("move:new"), phi[1])         # the corridor was not
    self.assertNotIn(h("move:back"), phi[1])
    self.assertIn(h("kind:look"), phi[0])


if __name__ == "__main__":
  absltest.main()
