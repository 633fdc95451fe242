r"""PlanPO, GRPO and GiGPO on household tasks (offline ALFWorld, common/envs/household), CPU sized.

  python -m experiments.train --config=configs/planpo_household.py --workdir=runs/planpo_household
  python -m experiments.train --config=configs/planpo_household.py:ablation --workdir=runs/planpo_household_abl
  python -m experiments.train --config=configs/planpo_household.py:smoke --workdir=/tmp/planpo_household_smoke

Variants (comma-separated, e.g. 'smoke,ablation'): '' (CPU default: the main rows, 3 seeds), 'ablation'
(configs.planpo_base.ablation: the PlanPO ablation rows), 'smoke' (seconds; the tests). Everything not set
here is configs/planpo_base.py's.

Environment: HouseholdToolEnv, each worker in a sandboxed process (`env.sandboxed`; in this process for
'smoke'). Before the workers start, `env.prepare` (common.envs.household.env:prepare_host) generates every
training and held-out game in this process and the sandboxes mount the game cache read-only.
Games are generated offline from the ALFRED floor plans and solved by ALFWorld's hand-coded expert once,
into `env.kwargs.cache_dir` ('' = $AGENTIC_RL_CACHE/household_games/v1, else
~/.cache/agentic-rl-jax/household_games/v1; never the read-only shared data folder), so a second run reuses
them. Splits: train and valid_seen from the seen rooms, valid_unseen from ALFRED's held-out rooms
(`env.eval_splits` {'seen': 'valid_seen', 'unseen': 'valid_unseen'}).

CPU choices (measured on the 2-core machine while other jobs ran, load average 5-9; idle is faster):
  task types     `env.games` = pick_and_place_simple and look_at_obj_in_light: the two types with the
                 shortest expert plans and the cheapest rooms. Hand-coded expert plans of the first 12
                 training games per type (the expert's own search of the receptacles included):
                   pick_and_place_simple  6 6 6 7 8 10 10 12 13 14 20 26
                   look_at_obj_in_light   4 4 5 6 7 9 13 27 28 29 51 53
                 (heat / cool / clean: 8-15; pick_two_obj_and_place often ~100.)
  games          generated once into the cache (~1-9 s a game: the expert's solve; 192 training + 16
                 held-out games ~2-4 min); a second run reads them (< 1 ms a game).
  env cost       a step ~20 ms with the engine's text caches (53 ms without), a reset of a loaded game
                 0.03-0.1 s, the first load of a game 0.15-0.3 s (common/envs/household/engine.py).
  turn limit     `env.max_turns` = 10 (published: 50). An episode that is not won runs to the limit and
                 every turn is a training row, so the limit sets the RL update cost. Of the 192 training games'
                 expert plans 80 have <= 8 actions and 98 <= 10: with up to `sft.max_detours` = 2 detours
                 about 80 fit as SFT episodes; the others are dropped from the SFT data and stay RL tasks.
                 `env.kwargs.max_steps` = the same limit.
  prompts        no history (`rollout.window.history_length` = 0; verl-agent: 2): with one pair, the
                 history and the invalid replies it quotes made RL rows of up to 960 tokens (the update
                 cost grows with rows x length);
                 observations clipped at `rollout.max_observation_chars` = 400 (a room description here is
                 180-510 characters); up to `rollout.window.max_admissible_actions` = 50 admissible
                 actions listed (12-42 here; the sorted list ends with 'take' / 'use', so it is never cut);
                 a one-line format instruction (`rollout.window.format_text`). Gold-replay prompts: 238
                 tokens on average, at most 419 (vocabulary `policy.tiny_vocab` = 2000; 287 / 489 with one
                 history pair).
  run time       measured 2026-12-01 ~08:25-08:45 UTC beside another training job (load 2-4), one seed,
                 192 training games: generating and expert-solving the games once ~2 min (cached afterwards);
                 the SFT episodes (two gold replays of every training game through the sandboxed workers)
                 ~6 min; SFT ~20 steps per epoch; an RL step of 2 tasks x 4 rollouts x 10 turns (96 rows of
                 384-512 tokens) 3-8 s of rollouts + 5-20 s of update. The 3-seed default is timed in the
                 closing note of issue 10.
  learning       with 16 SFT epochs on those ~80 episodes the SFT policy won 0 of 16 held-out games (invalid
                 actions 44-56%); the random admissible-action baseline also wins 0 within 10 turns. The
                 2-layer, 128-wide policy trained from scratch does not learn these tasks at this size: the
                 table then shows no method effect (issue 10's note).
  SFT detours    `sft.harmless_actions` = ('look', 'inventory') (always admissible, never change the
                 state); `sft.move_detours` False (ALFWorld has no reversible 'move <dir>').
  regime gate    `gate.*`, printed before any RL: the SFT policy must win >= 60 % of 16 'valid_seen' games with
                 turns among its wins >= 1.5 x the expert path's ('gold'); at CPU size it fails, and with
                 `gate.on_fail` 'report' the table is still written, its header saying so and naming the GPU run.
A real checkpoint on a GPU: --config.model.checkpoint=DIR, and the published turn limit
--config.env.max_turns=50 --config.env.kwargs.max_steps=50.
"""

import ml_collections

from configs import planpo_base

VARIANTS = ("", "ablation", "smoke")
GAMES = ("pick_and_place_simple", "look_at_obj_in_light")
HEADER = "You are an expert agent operating in a household (the ALFRED Embodied Environment)."
FORMAT_TEXT = "Think inside <think> </think>, then give one admissible action inside <action> </action>."


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  if any(p not in VARIANTS for p in parts):
    raise ValueError(f"unknown config variant {arg!r}; valid: '', 'ablation', 'smoke' (comma-separated)")
  c = planpo_base.base_config()
  max_turns = 10
  c.env.factory = "common.envs.household.env:make_household_env"
  c.env.kwargs = dict(games_dir="", cache_dir="", seed=0, max_steps=max_turns, expert_max_steps=150)
  c.env.games = GAMES
  c.env.train_split = "train"
  c.env.eval_splits = {"seen": "valid_seen", "unseen": "valid_unseen"}
  c.env.train_tasks = 96            # per task type: 192 training games (~80 fit the turn limit as SFT episodes)
  c.env.eval_tasks = 4              # per task type and split: 8 seen + 8 unseen games
  c.env.max_turns = max_turns
  c.env.workers = 8
  c.env.sandboxed = True
  c.env.prepare = "common.envs.household.env:prepare_host"
  c.env.ro_paths = ()
  c.rollout.max_response_tokens = 40
  c.rollout.max_context_tokens = 2048
  c.rollout.max_observation_chars = 400
  c.rollout.window.history_length = 0
  c.rollout.window.max_admissible_actions = 50
  c.rollout.window.header = HEADER
  c.rollout.window.format_text = FORMAT_TEXT
  c.sft.epochs, c.sft.batch_size, c.sft.learning_rate = 8, 32, 3e-3
  c.sft.max_detours = 2
  c.sft.think_max_sentences = 2
  c.sft.harmless_actions = ("look", "inventory")
  c.sft.move_detours = False
  c.rl.steps = 8
  c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 4
  # the regime gate (issue 25, item 7): the SFT policy against the expert's own path on 8 'valid_seen' games per
  # type; at CPU size it fails (SFT wins nothing), so the table's header says the RL rows are in the wrong regime
  c.gate.update(dict(split="valid_seen", tasks=8, reference="gold", on_fail="report",
                     fix=("a real checkpoint on a GPU with the published turn limit: --config.model.checkpoint=DIR "
                          "--config.env.max_turns=50 --config.env.kwargs.max_steps=50")))
  if "smoke" in parts:
    c.seeds = (0,)
    c.env.train_tasks, c.env.eval_tasks, c.env.workers, c.env.sandboxed = 2, 1, 4, False
    c.env.max_turns = c.env.kwargs.max_steps = 8
    c.rollout.max_response_tokens = 24
    c.rollout.max_observation_chars = 200
    c.rollout.window.max_admissible_actions = 20
    c.model.tiny_vocab = 600
    c.model.tiny_sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.learning_rate = 2, 16, 1e-2
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 2
    c.gate.tasks = 1
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  if "ablation" in parts:
    c = planpo_base.ablation(c)
  return c
