r"""PhGPO on TRAJECT-Bench: warm-up, GRPO (beta = 0) and PhGPO over 3 seeds, held-out table.

Run (the README's main job):
  python -m experiments.train --config=configs/phgpo_traject.py --workdir=runs/phgpo_traject

CPU-sized variant used by the tests (a few tasks, 1 seed, a handful of steps):
  python -m experiments.train --config=configs/phgpo_traject.py:smoke --workdir=/tmp/phgpo_smoke
The same with the language-model policy on a tiny random Qwen2 checkpoint written locally:
  python -m experiments.train --config=configs/phgpo_traject.py:smoke_lm --workdir=/tmp/phgpo_smoke_lm

Overrides: --config.pheromone.rho=0.05 --config.seeds=0,1 ... (a mistyped key fails: the config is locked).
Published defaults (SPEC.md, PhGPO): K = 20, T = 0.7, beta_max = 0.7, M = 5, at most 20 steps.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.method = "phgpo_compare"
  c.seeds = (0, 1, 2)
  c.runs = ("warmup", "grpo", "phgpo")

  c.data = dict(path="", domains=(), held_out_fraction=0.2, split_seed=0, max_tasks=0, tool_scope="used")
  c.encoder = dict(max_length=128, batch_size=64, cache_dir="")
  c.graph = dict(edges="observed", max_templates=8)
  c.policy = dict(kind="encoder_mlp", hidden=256, lm_checkpoint="", lm_max_length=256, lora_rank=64,
                  lora_alpha=128.0)
  c.env = dict(max_steps=20, horizon="gold", sandboxed=True, num_workers=2, step_timeout_s=60.0)

  c.optim = dict(grad_clip=1.0)
  c.warmup = dict(steps=300, batch_size=256, learning_rate=1e-3)
  c.rl = dict(
      steps=150, tasks_per_step=16, rollouts_per_task=5, learning_rate=1e-4, epochs=2,
      clip_low=0.2, clip_high=0.2, agg_mode="token_mean", entropy_coef=1e-3, kl_coef=0.0,
      reward="match_ratio",
      advantage=dict(estimator="grpo", eps=1e-6, ddof=0))
  c.curriculum = dict(steps=50, lambda_start=0.5, p_tf_start=0.5, horizon_start=3)
  c.pheromone = dict(
      rho=0.05, alpha=0.02, tau_init=0.5, tau_min=0.1, tau_max=1.0, arg_rho=0.05, arg_alpha=0.02,
      beta_max=0.7, w_max=0.5, kappa=1.0, bank_capacity=4096, top_k_similar=16, max_evidence=256,
      dep_units="tau_range", bank_min_score=0.0)
  c.sampling = dict(top_k=20, temperature=0.7)
  c.eval = dict(temperature=0.0, success_threshold=0.7)
  c.checkpoint = dict(every=25, max_to_keep=2)
  c.logging = dict(every=5, tensorboard=True)

  if arg in ("smoke", "smoke_lm"):
    c.seeds = (0,)
    c.data.max_tasks = 120
    c.encoder.max_length = 32
    c.policy.hidden = 32
    c.warmup.steps = 6
    c.warmup.batch_size = 32
    c.rl.steps = 4
    c.rl.tasks_per_step = 4
    c.curriculum.steps = 2
    c.checkpoint.every = 2
    c.logging.every = 1
  if arg == "smoke_lm":
    # The language-model policy on a tiny random Qwen2 checkpoint written locally (no download).
    c.policy.kind = "lm"
    c.policy.lm_checkpoint = "tiny:qwen2"
    c.policy.lm_max_length = 128
    c.policy.lora_rank = 4
    c.policy.lora_alpha = 8.0
    c.data.max_tasks = 40
    c.rl.tasks_per_step = 2
    c.warmup.batch_size = 8
  elif arg not in (None, "", "smoke"):
    raise ValueError(f"unknown config variant {arg!r}; valid: '' (full), 'smoke', 'smoke_lm'")
  return c
