r"""PlanPO, GRPO and GiGPO on TextWorldExpress (CPU): one command for the main table.

  python -m experiments.train --config=configs/planpo_twx.py --workdir=runs/planpo_twx
  python -m experiments.train --config=configs/planpo_twx.py:smoke --workdir=/tmp/planpo_smoke

Variants: '' (CPU default: coin collector, 3 seeds) and 'smoke' (seconds; the tests). A real checkpoint on
a GPU: --config.policy.lm_checkpoint=DIR. The published settings (SPEC.md, PlanPO and GiGPO) are the
defaults of `planpo.*` and `gigpo.*`; alpha_decay_steps = rl.steps.
"""

import ml_collections

from common import windowed as win_lib


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  if arg not in (None, "", "smoke"):
    raise ValueError(f"unknown config variant {arg!r}; valid: '', 'smoke'")
  c = ml_collections.ConfigDict()
  c.method = "planpo"
  c.seeds = (0, 1, 2)
  c.runs = ("sft", "grpo", "gigpo", "planpo")
  c.env = dict(games=("coin",), game_params={"coin": "numLocations=4,includeDoors=0,numDistractorItems=0"},
               train_split="train", eval_split="dev", train_tasks=64, eval_tasks=32, max_turns=12,
               env_step_limit=50, workers=8, sandboxed=True, jvm_heap_mb=256)
  w = win_lib.WindowConfig()
  c.rollout = dict(mode="window", max_response_tokens=96, max_context_tokens=4096, max_observation_chars=1200,
                   window=dict(history_length=w.history_length, invalid_action_penalty=w.invalid_action_penalty,
                               require_think=w.require_think, max_admissible_actions=w.max_admissible_actions,
                               header=w.header))
  c.policy = dict(lm_checkpoint="tiny:qwen2", cache_dir="", tiny_vocab=600, dtype="float32",
                  param_dtype="float32",
                  sizes=dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128))
  c.optim = dict(grad_clip=1.0)
  c.sft = dict(epochs=20, batch_size=32, lr=3e-3, detour_prob=0.35, max_detours=3, think_min_sentences=0,
               think_max_sentences=4)
  c.rl = dict(steps=30, tasks_per_step=4, rollouts_per_task=8, lr=1e-4, temperature=1.0, eval_temperature=0.0,
              minibatches=2, reward_scale=10.0)
  c.planpo = dict(step_grouping="turn", stats_over="rollouts", norm="std", eps=1e-6, ddof=1, conditional=True,
                  alpha_init=0.1, alpha_final=0.05, alpha_decay_steps=c.rl.steps, ratio="token", clip_low=0.2,
                  clip_high=0.2, kl_coef=0.01, agg_mode="token_mean")
  c.gigpo = dict(gamma=0.95, step_weight=1.0, norm="std", stats_over="turns", eps=1e-6, ddof=1)
  c.checkpoint = dict(every=5, max_to_keep=2)
  c.logging = dict(every=1, tensorboard=True)
  if arg == "smoke":
    c.seeds = (0,)
    c.env.train_tasks, c.env.eval_tasks, c.env.max_turns, c.env.workers, c.env.sandboxed = 6, 4, 4, 8, False
    c.env.game_params = {"coin": "numLocations=2,includeDoors=0,numDistractorItems=0"}
    c.rollout.max_response_tokens = 32
    c.rollout.max_observation_chars = 200
    c.rollout.window.history_length = 1
    c.policy.tiny_vocab = 1000
    c.policy.sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.lr = 3, 16, 1e-2
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 4
    c.planpo.alpha_decay_steps = c.rl.steps
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  return c
