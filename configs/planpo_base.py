r"""The settings every PlanPO config shares (configs/planpo_<env>.py start from `base_config`).

Not a config itself (no `get_config`). Keys:
  method            'planpo' (the launcher runs planpo.train.run).
  seeds             paired seeds: every run of seed s starts from the same SFT policy and evaluates the same tasks.
  runs              the table's rows, in order: 'random' (uniform admissible action, no training), 'sft', or a
                    name of `variants`.
  variants          run name -> {'method': 'grpo'|'gigpo'|'planpo', and overrides of `planpo.*` / `gigpo.*` / `rl.*`}.
  reference         the run every paired difference is taken against (the paper compares with GRPO).
  table             'main' or 'ablation': names the outputs results_<table>.{json,txt}, curves_<table>.png
                    (with other rows than the table's planpo.tables.TABLE_RUNS: results_<table>_<run-run...>).
                    `runs` may be given as --config.runs=grpo,planpo (split by planpo.train.check_config).
  env.factory       'module:Class' of the ToolEnv (served from sandboxed processes with env.sandboxed).
  env.kwargs        its constructor arguments.
  env.games         task families / types passed to the env's `task_ids` query (None: the env's default).
  env.train_split   split of the training tasks; env.eval_splits {label: split} of the held-out tables.
  env.train_tasks / env.eval_tasks   tasks per game/type (the env's `limit`).
  env.max_turns     turn limit (published: 50 household, 20 ScienceWorld).
  env.prepare       '' or 'module:callable' run in this (trusted) process before sandboxed workers start:
                    prepare(kwargs, requests) -> (kwargs, ro_paths) (planpo.rollouts.make_pool), e.g. the
                    household games generated once into a cache the sandboxes mount read-only.
  env.backend       'local' (the workers on this machine) or 'ray': the same workers hosted by Ray actors on the
                    nodes of the cluster at `env.ray_address` ('HOST:PORT', 'auto', '' = Ray's default;
                    common.env_pool_ray). Every node needs `env.ro_paths` and what `env.prepare` returns at the
                    same path (a shared file system): checked as each worker starts.
  sft.shared        every seed's RL starts from one SFT policy (trained once, first seed) instead of its own.
  sft.harmless_actions   the detour actions of the SFT data (valid, unneeded); sft.move_detours: also a move
                    and the move back (TextWorldExpress 'move <dir>' only). sft.env_retries: a gold replay the
                    environment fails (crash, timeout) is played again from the same random state this many times.
  rl.truncated_responses  'keep' (default, as verl): a reply cut by `rollout.max_response_tokens` is an invalid
                    action (no env step) whose row is trained on like any other; 'mask': such rows leave the policy
                    loss (DAPO's overlong filtering). Its return still counts in its group's advantages.
  rl.turn_penalty   a cost per turn (reward units) in every method's return, beside the invalid-action penalty
                    `rollout.window.invalid_action_penalty` (one rule: planpo/advantages.py); 0 by default, 0.1 in
                    the 'grpo_turn_penalty' row (GRPO + an unconditional length penalty).
  planpo.alpha_decay_steps  alpha(k)'s decay length; 0: rl.steps. planpo.alpha_constant: alpha(k) = alpha_init.
  model.*, optim.*, mesh.*   the policy, its optimizer and the device mesh (configs/schema.py, the same keys in
                    every method; model.checkpoint 'tiny:qwen2' is a tiny random checkpoint trained from scratch).
  sft.micro_batch_size  rows per SFT micro-batch (gradient accumulation; 0 = one pass); rl.micro_batch_size: rows per RL
                    micro-batch and per scoring chunk (>= 1).
                    Update rows are padded to a multiple of data x fsdp; sampling runs on one device.
  rollout.kv_reuse  the sampler keeps each episode's KV cache across turns and prefills only new tokens (window
                    mode re-renders each prompt, so only the common prefix is reused); False: full re-prefill.
                    rollout.kv_cache_max_gb: the cache pool's budget (0 = no limit): episodes beyond the rows
                    that fit are re-prefilled each turn (common.lm.sampler).
  rollout.sample_keys  the sampler's random keys (common.lm.sampler): 'request' (default) draws each episode's
                    turn with its own key, the same tokens at any budget, with or without reuse; 'call' is the
                    stream before the KV pool (one key per call and cache block), which the tables made before it
                    need (configs/planpo_twx.py:explore; workdirs saved without the key resume with 'call').
  rollout.block_episodes  episodes per sampling block (whole groups: max(1, this // G) tasks; one sampler, one
                    key fold_in(key, block), one batch): a step's and an evaluation's tasks are cut into blocks that
                    the processes of a multi-process run share out (planpo.rollouts.run_blocks), so the samples do
                    not depend on the process count. 0 (default): one block, the single-process layout before.
  stats.*           paired bootstrap of the differences against `reference` (scipy.stats.bootstrap, BCa).
  gate.*            the regime gate printed before any RL (planpo.train.regime_gate): split '' = none; else the
                    SFT policy on `gate.tasks` games of that split must reach success >= `gate.min_success` with
                    turns among successes >= `gate.min_turn_ratio` x the scripted `gate.reference`'s ('depth_first',
                    or 'gold': the expert's path), or the run stops (`gate.on_fail` 'stop':
                    common.lm.stages.RegimeGateFailed) or goes on with the failure at the top of the table
                    ('report'); `gate.fix` names the fix the message gives ('' = grow the policy).
  primary.*         the primary cell, named before the run: d turns among successes, `primary.run` -
                    `primary.reference`, with success non-inferior by `primary.success_margin` (planpo.tables.primary;
                    run '' = none).
  sft.source        'gold' (planpo.data: gold paths with detours) or 'explorers' (planpo.explorers: the wins of
                    oracle-free scripted explorers `sft.explorers`, `sft.explorer_rollouts` episodes per task each).
The published PlanPO / GiGPO settings (SPEC.md) are the defaults of `planpo.*` / `gigpo.*`.
"""

import ml_collections

from common import windowed as win_lib
from configs import schema
from planpo import tables

MAIN_RUNS = tables.MAIN_RUNS
ABLATION_RUNS = tables.ABLATION_RUNS


def variants() -> dict:
  """The RL runs by name: the three methods and the paper's four PlanPO ablations (SPEC.md, PlanPO)."""
  return {
      "grpo": {"method": "grpo"},
      "grpo_turn_penalty": {"method": "grpo", "rl": {"turn_penalty": 0.1}},   # unconditional: R - 0.1 T_i
      "gigpo": {"method": "gigpo"},
      "planpo": {"method": "planpo"},
      "planpo_no_ae": {"method": "planpo", "planpo": {"use_episode": False}},     # A = alpha(k) A_S
      "planpo_no_as": {"method": "planpo", "planpo": {"alpha_init": 0.0, "alpha_final": 0.0}},   # A = A_E
      "planpo_unconditional": {"method": "planpo", "planpo": {"conditional": False}},
      "planpo_constant_alpha": {"method": "planpo", "planpo": {"alpha_constant": True}},   # alpha = alpha_init
  }


def base_config() -> ml_collections.ConfigDict:
  """The shared PlanPO config; an env config sets `env.*` and sizes, and may override anything."""
  c = ml_collections.ConfigDict()
  c.method = "planpo"
  c.seeds = (0, 1, 2)
  c.runs = MAIN_RUNS
  c.variants = variants()
  c.reference = "grpo"
  c.table = "main"
  c.env = dict(factory="", kwargs={}, games=None, train_split="train", eval_splits={"test": "test"},
               train_tasks=64, eval_tasks=32, max_turns=12, workers=8, sandboxed=True, ro_paths=(), prepare="",
               backend="local", ray_address="")
  w = win_lib.WindowConfig()
  c.rollout = dict(mode="window", max_response_tokens=96, max_context_tokens=4096, max_observation_chars=1200,
                   window=dict(w._asdict()), kv_reuse=True, kv_cache_max_gb=32.0, block_episodes=0,
                   sample_keys="request")
  c.model = schema.model_config(checkpoint="tiny:qwen2", tiny_vocab=2000,
                                 tiny_sizes=dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                                                 intermediate_size=256))
  c.optim = schema.optim_config()
  c.mesh = schema.mesh_config()
  c.sft = schema.sft_config(epochs=8, batch_size=32, learning_rate=3e-3,
                            extra=dict(detour_prob=0.35, max_detours=3, think_min_sentences=0, think_max_sentences=4,
                                       harmless_actions=("look around", "inventory"), move_detours=False,
                                       shared=True, env_retries=3, source="gold",
                                       explorers=("random", "memory_walk"), explorer_rollouts=1))
  c.rl = dict(steps=30, tasks_per_step=4, rollouts_per_task=8, learning_rate=1e-4, temperature=1.0, eval_temperature=1.0,
              eval_samples=1, minibatches=2, micro_batch_size=32, old_logprobs="sampler", reward_scale=10.0,
              turn_penalty=0.0, truncated_responses="keep")
  c.planpo = dict(step_grouping="turn", stats_over="rollouts", norm="std", eps=1e-6, ddof=1, conditional=True,
                  use_episode=True, alpha_constant=False, alpha_init=0.1, alpha_final=0.05, alpha_decay_steps=0,
                  ratio="token",
                  clip_low=0.2, clip_high=0.2, kl_coef=0.01, agg_mode="token_mean")
  c.gigpo = dict(gamma=0.95, step_weight=1.0, norm="std", stats_over="turns", eps=1e-6, ddof=1)
  c.stats = dict(resamples=10000, confidence=0.95, method="BCa")
  c.gate = dict(split="", tasks=64, min_success=0.6, min_turn_ratio=1.5, reference="depth_first", on_fail="stop",
                fix="")
  c.primary = dict(run="", reference="grpo", success_margin=0.05)
  c.checkpoint = dict(every=5, max_to_keep=2)
  c.logging = dict(every=1, tensorboard=True)
  return c


def ablation(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The `:ablation` variant of an env config: the ablation rows instead of the main ones, and the paired
  differences taken against the full PlanPO (the paper's ablation table compares with it)."""
  c.runs = ABLATION_RUNS
  c.table = "ablation"
  c.reference = "planpo"
  return c
