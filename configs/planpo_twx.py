r"""PlanPO beside GRPO and GiGPO on TextWorldExpress (CPU): one command per table.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx            # main table
  python -m experiments.train --config=configs/planpo_twx.py:ablation --workdir=runs/planpo_twx   # reuses sft, planpo
  python -m experiments.train --config=configs/planpo_twx.py:smoke --workdir=/tmp/planpo_smoke    # seconds
  python -m experiments.train --config=configs/planpo_twx.py:explore --workdir=runs/planpo_explore  # issue 25
  python -m experiments.train --config=configs/planpo_twx.py:explore_smoke --workdir=/tmp/planpo_explore_smoke
  python -m experiments.train --config=configs/planpo_twx.py:explore_coin11 --workdir=runs/planpo_explore11  # replication

Variants: '' (CPU default: the main runs random / sft / grpo / gigpo / planpo, 3 paired seeds), 'ablation'
(sft / planpo and the four published PlanPO ablations; differences against planpo) and 'smoke' (seconds; the
tests); 'smoke' and 'ablation' combine as 'ablation,smoke'. 'explore' (and 'explore_smoke', CI): the explorer
regime, below. The ablation may share the main table's workdir
(it then trains only the four ablations). A real checkpoint on a GPU: --config.model.checkpoint=DIR
(then restore the published prompt: --config.rollout.window.format_text, history 2).

CPU choices (each stated so it can be undone; measured on the 2-core machine):
  game      coin collector, 4 rooms, no doors (`env.kwargs.game_params`); 64 training games (the simulator's
            'train' seeds), the held-out table on its 'test' seeds (unseen instances of the same game).
  prompts   no history (`rollout.window.history_length` 0; verl-agent: 2), observations clipped to 300
            characters (head and tail: the room and its exits stay), a one-line format instruction
            (`rollout.window.format_text`; the published one is common.windowed.FORMAT): rows of ~250-380
            tokens keep the dense attention of a 2-layer, 128-wide decoder affordable on 2 cores.
  turns     `env.max_turns` 10 (the expert needs 2-7 actions here); replies up to 48 tokens (the SFT replies'
            reasoning has 0-3 filler sentences, `sft.think_max_sentences`, so the longest fit).
  SFT       one SFT policy for every seed (`sft.shared`), 12 epochs.
  RL        12 steps of 2 tasks x 8 rollouts at lr 1e-4 per run; log pi_old from the sampler
            (`rl.old_logprobs` 'sampler', one forward pass less per step).
  eval      32 held-out games, one rollout each, sampled at `rl.eval_temperature` 1.0 (the policy as trained;
            greedy decoding would hide the wasteful detours the SFT data teaches).
"""

import ml_collections

from configs import planpo_base
from planpo import tables

SHORT_FORMAT = ("Think inside <think> </think>, then give one admissible action inside <action> </action>.")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  if parts in (["explore"], ["explore_smoke"], ["explore_coin11"]):
    return explore(smoke=parts == ["explore_smoke"], rooms=11 if parts == ["explore_coin11"] else 9)
  if any(p.startswith("explore") for p in parts):
    raise ValueError(f"config variant {arg!r}: the explore variants do not combine with others; give one of "
                     "'explore', 'explore_smoke', 'explore_coin11' alone")
  bad = [p for p in parts if p not in ("ablation", "smoke")]
  if bad:
    raise ValueError(f"unknown config variant {bad}; valid: '', 'ablation', 'smoke', 'ablation,smoke', 'explore', "
                     "'explore_smoke', 'explore_coin11'")
  c = planpo_base.base_config()
  c.env.factory = "common.envs.twx_env:TwxToolEnv"
  c.env.kwargs = dict(game_params={"coin": "numLocations=4,includeDoors=0,numDistractorItems=0"},
                      env_step_limit=50, jvm_heap_mb=256)
  c.env.games = ("coin",)
  c.env.train_split = "train"
  c.env.eval_splits = {"test": "test"}
  c.env.train_tasks, c.env.eval_tasks, c.env.max_turns = 64, 32, 10
  c.rollout.max_response_tokens = 48
  c.rollout.max_observation_chars = 300
  c.rollout.window.history_length = 0
  c.rollout.window.format_text = SHORT_FORMAT
  c.rollout.window.header = "You are an agent in a text game."
  c.sft.epochs, c.sft.think_max_sentences = 12, 3
  c.sft.move_detours = True
  c.sft.harmless_actions = ("look around", "inventory")
  c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task, c.rl.learning_rate = 12, 2, 8, 1e-4
  if "ablation" in parts:
    planpo_base.ablation(c)
  if "smoke" in parts:
    c.seeds = (0,)
    c.env.train_tasks, c.env.eval_tasks, c.env.max_turns, c.env.workers, c.env.sandboxed = 6, 4, 4, 8, False
    c.env.kwargs.game_params = {"coin": "numLocations=2,includeDoors=0,numDistractorItems=0"}
    c.rollout.max_response_tokens = 32
    c.rollout.max_observation_chars = 200
    c.rollout.block_episodes = 2   # sampling blocks (one group each in training): the same in 1 or 2 processes
    c.model.tiny_vocab = 1000
    c.model.tiny_sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.learning_rate, c.sft.shared = 3, 16, 1e-2, False
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 4
    c.stats.resamples = 200
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  return c


def explore(smoke: bool = False, rooms: int = 9) -> ml_collections.ConfigDict:
  """The explorer regime (issue 25): where GRPO can succeed wastefully and PlanPO's length terms have signal.

  'explore_coin11' is the replication: the same with 11 rooms.

  game      coin collector, 9 rooms, no doors, `env.max_turns` 40 (a depth-first explorer needs about 7.5 turns
            among its wins, a uniformly random one wins 47 % of games within 40 turns).
  prompts   no history window; instead the one-line summary (`rollout.window.summary`): "Your previous action:
            'A'. Places visited so far: x, y." A 2-observation history window would add two clipped observations
            (about 600 characters) to every row; the summary adds about 90, and it holds what an explorer
            needs (where it came from, which rooms it has entered).
  SFT       the wins of oracle-free scripted explorers (`sft.source` 'explorers': uniformly random and one-step-
            memory walks, `sft.explorer_rollouts` 2 episodes per training game each; failures dropped), never
            the simulator's hindsight path to a coin the agent cannot see.
  gate      printed before any RL: on 64 'dev' games the SFT policy must win >= 60 % within 40 turns with turns
            among its wins >= 1.5 x the depth-first explorer's; else the run stops (`gate.*`).
  rows      random, depth_first (reference), sft, grpo, gigpo, grpo_turn_penalty (GRPO + 0.1 reward per turn
            taken off every return), planpo, planpo_no_ae, planpo_no_as; 64 test games x 2 samples, 3 paired seeds.
  primary   named before the run: d turns among successes, planpo - grpo, success non-inferior by 0.05.
  """
  c = get_config()
  c.table = "explore"
  c.runs = tables.EXPLORE_RUNS
  c.reference = "grpo"
  c.primary = dict(run="planpo", reference="grpo", success_margin=0.05)
  c.env.kwargs = dict(game_params={"coin": f"numLocations={int(rooms)},includeDoors=0,numDistractorItems=0"},
                      env_step_limit=50, jvm_heap_mb=256)
  c.env.train_tasks, c.env.eval_tasks, c.env.max_turns = 64, 64, 40
  c.rl.eval_samples = 2
  c.rollout.window.summary = True
  # 'call': the sampler's random stream before the KV pool (common.lm.sampler), so that 'explore', 'explore_smoke'
  # and 'explore_coin11' reproduce the explorer table produced before it (issue 25)
  c.rollout.sample_keys = "call"
  # 'grouped': the decode attention before 'flat' (common.lm.model.attend_flat), for the same reason: 'flat' agrees
  # to float rounding, which can flip a sampled token
  c.model.decode_attention = "grouped"
  c.sft.source = "explorers"
  c.sft.explorers = ("random", "memory_walk")
  c.sft.explorer_rollouts = 2
  c.sft.epochs = 4
  c.sft.move_detours = False
  c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 12, 4, 8
  c.gate.update(dict(split="dev", tasks=64, min_success=0.6, min_turn_ratio=1.5, reference="depth_first"))
  # the non-learned pre-check (planpo/precheck.py): a bag-of-words softmax policy trained by the same advantages
  c.precheck = dict(seeds=tuple(range(10)), methods=("grpo", "planpo", "grpo_turn_penalty"), steps=40,
                    features=1 << 14, learning_rate=0.05, bc_epochs=3, bc_learning_rate=0.05)
  if smoke:
    c.seeds = (0,)
    c.runs = ("random", "depth_first", "sft", "grpo", "planpo")
    c.env.train_tasks, c.env.eval_tasks, c.env.max_turns, c.env.workers, c.env.sandboxed = 6, 4, 8, 8, False
    c.env.kwargs.game_params = {"coin": "numLocations=3,includeDoors=0,numDistractorItems=0"}
    c.rl.eval_samples = 1
    c.rollout.max_response_tokens = 32
    c.rollout.max_observation_chars = 200
    c.model.tiny_vocab = 1000
    c.model.tiny_sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.learning_rate, c.sft.shared, c.sft.explorer_rollouts = 2, 16, 1e-2, False, 1
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 4
    c.gate.update(dict(tasks=4, min_success=0.0, min_turn_ratio=0.0))
    c.precheck.seeds, c.precheck.steps, c.precheck.bc_epochs = (0, 1), 2, 1
    c.stats.resamples = 200
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  return c
