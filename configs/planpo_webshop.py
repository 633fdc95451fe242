r"""PlanPO, GRPO and GiGPO on WebShop (common/envs/webshop, offline), CPU sized.

  python -m experiments.train --config=configs/planpo_webshop.py --workdir=runs/planpo_webshop
  python -m experiments.train --config=configs/planpo_webshop.py:ablation --workdir=runs/planpo_webshop
  python -m experiments.train --config=configs/planpo_webshop.py:smoke --workdir=/tmp/planpo_webshop_smoke

Variants (comma-separated, e.g. 'ablation,smoke'): '' (CPU default: the main rows random / sft / grpo / gigpo /
planpo, 3 paired seeds), 'ablation' (configs.planpo_base.ablation: the PlanPO ablation rows), 'smoke' (the sandboxed
env end to end in a few minutes; tests/planpo_webshop_test.py). Everything not set here is configs/planpo_base.py's.

Environment: WebShopToolEnv (the 1,000-product small mode, synthetic goals, verl-agent's setting), each worker in a
sandboxed process (`env.sandboxed`, the smoke run too). Before the workers start, `env.prepare`
(common.envs.webshop.env:prepare_host) finds the data folder (`env.kwargs.data_dir`, else $WEBSHOP_DATA, else
../shared/data/webshop) and the sandboxes mount it read-only. Tasks 'goal/<k>': training goals from 500 on, the
held-out table on goals 0.. of the 'valid' split (`env.eval_splits` {'valid': 'valid'}), the first `env.train_tasks`
/ `env.eval_tasks` of each (`env.games` None: all five product categories, in goal order; the per-type table is by
category). Metrics per split (planpo.rollouts.episode_metrics): success (reward 1.0), score (WebShop's reward in
[0, 1]; the papers print both x100), turns, response tokens.

Published settings (verl-agent / GiGPO / PlanPO on WebShop): 15 actions (`env.kwargs.max_steps`, `env.max_turns`),
history 2, verl-agent's observation format (`env.kwargs.observation_format` 'verl_agent'). The outcome reward here is
`rl.reward_scale` x WebShop's reward (partial credit counts); verl-agent pays 10 only on reward 1.0.
A ceiling to read the tables against: WebShop's option rule (common/envs/webshop/reward.py: a synthetic goal's option
is matched as the text of its (name, value) pair against colour-normalised values) leaves 458 of the 6,910 goals below
reward 1.0 even for the exact product and options (38 of the 500 'valid' goals: success at most 0.924, score at most
0.988), the random admissible policy gets success 0 and score 0.107 on goals 0-199 (python -m
common.envs.webshop.baseline --goals 200).

CPU choices (each undoable by its key):
  turns          `env.max_turns` = `env.kwargs.max_steps` = 10 (published 15): the expert path (search, next page
                 when needed, product, options, buy) is 4-9 actions (5 for most goals), and every turn of an unfinished
                 episode is a training row.
  prompts        no history (`rollout.window.history_length` 0), observations in the 'page' format (WebShop's text
                 after the instruction, no quotes) clipped at `rollout.max_observation_chars` = 600 (a results page is
                 ~1,600 characters: the clip keeps its head and tail; the admissible list still names every ASIN of
                 the page), up to `rollout.window.max_admissible_actions` = 30 actions listed, the one-line format
                 instruction (`rollout.window.format_text`).
  sizes          `env.train_tasks` = 64 training goals, `env.eval_tasks` = 32 'valid' goals, `rl.steps` = 8 of 2
                 goals x 4 rollouts.
  replies        up to `rollout.max_response_tokens` = 256 tokens: the expert (and the random row) searches the whole
                 instruction (167 characters on average, up to 274; the instruction finds the product on the first
                 results page for 92% of training goals, its first 90 characters for 52%), and the SFT reply writes the
                 action twice ('<think>I will search[...].</think><action>search[...]</action>'): ~150-300 tokens with
                 a small trained vocabulary. Clicks take ~20-40.
  SFT            the expert paths with reasoning of 0-2 filler sentences; the only detour WebShop has that changes
                 nothing is 'click[search]' on the search page (`sft.harmless_actions`; WebShop lists it and performs
                 nothing), so the SFT episodes are wasteful mostly in reply length, not in turns.
  regime gate    off (`gate.split` ''): WebShop has no held-out split besides the table's 'valid' goals.
A real checkpoint on a GPU, the published setting:
  python -m experiments.train --config=configs/planpo_webshop.py --workdir=runs/planpo_webshop_gpu \
    --config.model.checkpoint=DIR --config.env.max_turns=15 --config.env.kwargs.max_steps=15 \
    --config.env.kwargs.observation_format=verl_agent --config.rollout.window.history_length=2 \
    --config.rollout.max_observation_chars=4000 --config.env.eval_tasks=500
"""

import ml_collections

from configs import planpo_base

VARIANTS = ("", "ablation", "smoke")
FACTORY = "common.envs.webshop.env:WebShopToolEnv"
HEADER = "You are an expert autonomous agent operating in the WebShop e-commerce platform."
FORMAT_TEXT = "Think inside <think> </think>, then give one admissible action inside <action> </action>."


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The WebShop config; `arg`: '', 'ablation', 'smoke' or a comma-separated combination.

  Raises:
    ValueError: an unknown variant.
  """
  parts = [p for p in (arg or "").split(",") if p]
  if any(p not in VARIANTS for p in parts):
    raise ValueError(f"unknown config variant {arg!r}; valid: '', 'ablation', 'smoke' (comma-separated)")
  c = planpo_base.base_config()
  max_turns = 10
  c.env.factory = FACTORY
  c.env.kwargs = dict(data_dir="", human_goals=False, seed=42, shuffle_seed=-1, max_steps=max_turns,
                      observation_format="page", analyzer="lucene", scorer="lucene", show_attrs=False,
                      lowercase_actions=True)
  c.env.games = None
  c.env.train_split = "train"
  c.env.eval_splits = {"valid": "valid"}
  c.env.train_tasks = 64
  c.env.eval_tasks = 32
  c.env.max_turns = max_turns
  c.env.workers = 8
  c.env.sandboxed = True
  c.env.prepare = "common.envs.webshop.env:prepare_host"
  c.env.ro_paths = ()
  c.rollout.max_response_tokens = 256
  c.rollout.max_context_tokens = 2048
  c.rollout.max_observation_chars = 600
  c.rollout.window.history_length = 0
  c.rollout.window.max_admissible_actions = 30
  c.rollout.window.header = HEADER
  c.rollout.window.format_text = FORMAT_TEXT
  c.sft.epochs, c.sft.batch_size, c.sft.learning_rate = 8, 32, 3e-3
  c.sft.max_detours = 1
  c.sft.think_max_sentences = 2
  c.sft.harmless_actions = ("click[search]",)
  c.sft.move_detours = False
  c.rl.steps = 8
  c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 4
  if "smoke" in parts:
    c.seeds = (0,)
    c.env.train_tasks, c.env.eval_tasks, c.env.workers = 4, 2, 4
    c.env.max_turns = c.env.kwargs.max_steps = 8
    c.rollout.max_response_tokens = 160
    c.rollout.max_observation_chars = 300
    c.rollout.window.max_admissible_actions = 16
    c.model.tiny_vocab = 600
    c.model.tiny_sizes = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.sft.epochs, c.sft.batch_size, c.sft.learning_rate = 2, 16, 1e-2
    c.rl.steps, c.rl.tasks_per_step, c.rl.rollouts_per_task = 2, 2, 2
    c.stats.resamples = 200
    c.checkpoint.every = 1
    c.logging.tensorboard = False
  if "ablation" in parts:
    c = planpo_base.ablation(c)
  return c
