r"""PlanPO beside GRPO and GiGPO on TextWorldExpress (CPU): one command per table.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx            # main table
  python -m experiments.train --config=configs/planpo_twx.py:ablation --workdir=runs/planpo_twx   # reuses sft, planpo
  python -m experiments.train --config=configs/planpo_twx.py:smoke --workdir=/tmp/planpo_smoke    # seconds

Variants: '' (CPU default: the main runs random / sft / grpo / gigpo / planpo, 3 paired seeds), 'ablation'
(sft / planpo and the four published PlanPO ablations; differences against planpo) and 'smoke' (seconds; the
tests); 'smoke' and 'ablation' combine as 'ablation,smoke'. The ablation may share the main table's workdir
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

SHORT_FORMAT = ("Think inside <think> </think>, then give one admissible action inside <action> </action>.")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or "").split(",") if p]
  bad = [p for p in parts if p not in ("ablation", "smoke")]
  if bad:
    raise ValueError(f"unknown config variant {bad}; valid: '', 'ablation', 'smoke', 'ablation,smoke'")
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
    c.model.tiny_vocab = 1000
    c.model.tiny_sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.learning_rate, c.sft.shared = 3, 16, 1e-2, False
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 4
    c.stats.resamples = 200
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  return c
