r"""PhGPO on TRAJECT-Bench: the main table and the ablation table, both splits, 5 paired seeds.

Main table (the README's main job): the no-training nearest-training-query baseline, warm-up only, GRPO
without the curriculum, GRPO with the curriculum and beta = 0, and PhGPO, on the random query split and the
split that holds out whole tool chains:
  python -m experiments.train --config=configs/phgpo_traject.py --workdir=runs/phgpo_traject
Ablation table (the paper's six rows and PhGPO with the authors' schedule; into the same workdir it reuses the
main table's PhGPO and beta = 0 runs):
  python -m experiments.train --config=configs/phgpo_traject.py:ablation --workdir=runs/phgpo_traject
Retrieval table (issue 24: is the pheromone's help visible once the policy is as good as retrieval?): the
training-free nearest copy and 3- / 5-neighbour position votes, the retrieval-augmented policy
(policy.kind 'retrieval_mlp') after warm-up, + GRPO with the curriculum (beta = 0; also decoded with the
pheromone at test only), + PhGPO with the bank from rollouts, + PhGPO with the bank seeded from gold, + PhGPO
with the authors' schedule, and the main table's encoder-MLP PhGPO; every graph edge allowed
(graph.edges 'all'), the bank read without leakage (pheromone.bank_leakage 'auto'); primary cell: d match
ratio (PhGPO with the gold bank - GRPO) on each split:
  python -m experiments.train --config=configs/phgpo_traject.py:retrieval --workdir=runs/phgpo_ra
CPU-sized variants used by the tests (a few tasks, 1 seed, a handful of steps; smoke_lm: the language-model
policy on a tiny random Qwen2 checkpoint written locally):
  python -m experiments.train --config=configs/phgpo_traject.py:smoke --workdir=/tmp/phgpo_smoke
  python -m experiments.train --config=configs/phgpo_traject.py:smoke --config.data.format=authors_graph \
      --workdir=/tmp/phgpo_smoke_authors     # the PhGPO authors' graph files as the tool catalogue
  python -m experiments.train --config=configs/phgpo_traject.py:smoke_lm --workdir=/tmp/phgpo_smoke_lm
  python -m experiments.train --config=configs/phgpo_traject.py:ablation_smoke --workdir=/tmp/phgpo_ablation_smoke

Overrides: --config.seeds=0,1 --config.splits=random --config.runs=warmup,phgpo --config.pheromone.rho=0.05 ...
(a mistyped key fails: the config is locked; an unknown run, split or seed is a named error).
Published defaults (SPEC.md, PhGPO): K = 20, T = 0.7, beta_max = 0.7, M = 5, at most 20 steps.
"""

import ml_collections

from configs import schema

MAIN_RUNS = ("nearest", "warmup", "grpo_vanilla", "grpo", "phgpo")
# The six published ablation rows, PhGPO with the authors' schedule choices, and PhGPO with its pheromone started
# from a precomputed graph's counts (ablation.init_graph; phgpo/runs.py RUN_SPECS).
ABLATION_RUNS = ("phgpo", "no_curriculum", "grpo", "rho0", "agnostic_only", "frozen", "authors", "init_graph")
RETRIEVAL_RUNS = ("nearest", "vote3", "vote5", "warmup", "grpo", "phgpo_rollouts", "phgpo_gold", "authors",
                  "phgpo_encoder")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.method = "phgpo_compare"
  c.seeds = (0, 1, 2, 3, 4)
  c.splits = ("random", "chain")
  c.runs = MAIN_RUNS
  c.table = "main"
  c.reference = "phgpo"
  c.primary = ""        # the table's primary cell, named before the run and printed in its header ('' = none)

  # split 'random': the authors' stratified query split; 'chain': whole gold tool chains held out per domain.
  # split 'long' (SYNTHETIC): two tasks of one domain joined under one query, long_min_calls..long_max_calls.
  # format: the catalogue reader (phgpo/catalogue.py): 'traject_bench' (TRAJECT-Bench's tools/ and sequential/)
  # or 'authors_graph' (the PhGPO authors' mcp_rl_graph.json: tools, argument variants, edge counts; queries from
  # TRAJECT-Bench, joined by tool name). path: the TRAJECT-Bench folder ('' = --data_dir, else $TRAJECT_BENCH_DIR,
  # else the shared copy; a given folder is used as given). graph_path: the authors' graph (folder or file; '' =
  # the shared phgpo_graphs/traject_bench), the catalogue under 'authors_graph' and the prior otherwise.
  c.data = dict(path="", domains=(), held_out_fraction=0.2, split_seed=0, max_tasks=0, tool_scope="used",
                long_min_calls=6, long_max_calls=20, format="traject_bench", graph_path="")
  c.encoder = dict(max_length=128, batch_size=64, cache_dir="")
  # min_trajectories: a training split with fewer gold trajectories takes the graph prior alone as its graph
  # (phgpo/problem.py; the prior of data.format / data.graph_path)
  c.graph = dict(edges="observed", max_templates=8, min_trajectories=10)
  # policy.kind 'encoder_mlp' (frozen MiniLM embeddings + MLP scorer, width `hidden`), 'retrieval_mlp' (the
  # same scorer plus gated votes of the nearest training queries, phgpo/retrieval_policy.py: vote_ks neighbour
  # counts, vote_scale the initial gate of the 3-neighbour vote, leakage 'auto' | 'task' | 'chain' the
  # neighbour mask of training queries) or 'lm' (the language model of `model.*` with a tool head;
  # lm_max_length: its prompt length; micro_batches: the update's forward pass in that many micro-batches).
  # The LM policy's model, optimizer and device mesh are the shared schema (configs/schema.py): the published
  # LoRA rank 64, alpha 128 (lora_rank 0 = full fine-tuning).
  c.policy = dict(kind="encoder_mlp", hidden=256, lm_max_length=256, micro_batches=1, vote_ks=(1, 3, 5),
                  vote_scale=4.0, leakage="auto")
  c.model = schema.model_config(lora_rank=64, lora_alpha=128.0, tiny_vocab=400)
  c.mesh = schema.mesh_config()
  # env.backend: 'local' (the replay workers on this machine) or 'ray' (hosted by Ray actors on the nodes of the
  # cluster at env.ray_address: 'HOST:PORT', 'auto', '' = Ray's default; phgpo.classifier_rollout.make_envs)
  c.env = dict(max_steps=20, horizon="gold", sandboxed=True, num_workers=2, step_timeout_s=60.0, backend="local",
               ray_address="")

  c.optim = schema.optim_config(name="adam")
  # The warm-up's state handed to RL (phgpo/warmup.py): 'last', or 'validation' (the best free-running match
  # ratio on `validation_fraction` of the training tasks, held out of the warm-up, scored at step 0 and every
  # `eval_every` steps).
  c.warmup = dict(steps=300, batch_size=256, learning_rate=1e-3, select="last", validation_fraction=0.1,
                  eval_every=50)
  # rl.block_tasks / eval.block_tasks: tasks per sampling block (whole groups), the unit the processes of a
  # multi-process run share out; block b samples with fold_in(key, b). 0 = one block (the single-process stream
  # of before issue 28, run by process 0 alone). phgpo.classifier_rollout.rollout_blocks.
  c.rl = dict(
      steps=60, tasks_per_step=16, rollouts_per_task=5, learning_rate=1e-4, epochs=2,
      clip_low=0.2, clip_high=0.2, agg_mode="token_mean", entropy_coef=1e-3, kl_coef=0.0,
      reward="match_ratio", sl_steps="teacher_forced", tis_cap=0.0,
      advantage=dict(estimator="grpo", eps=1e-6, ddof=0), block_tasks=0)
  # Ours: lambda and p_tf anneal to 0 and beta ramps from 0. The authors' trainer: lambda_floor=0.3,
  # p_tf_floor=0.05, beta_start_fraction=1.0, pheromone.first_step=False, rl.sl_steps='all'.
  c.curriculum = dict(steps=20, lambda_start=0.5, p_tf_start=0.5, horizon_start=3, lambda_floor=0.0,
                      p_tf_floor=0.0, beta_start_fraction=0.0)
  # sim_threshold 0.6: 87% of held-out queries' same-chain training queries lie above it, 1.6% of the others.
  # bank_seed: 'rollouts' (the paper's: the bank fills from the policy's own rollouts) or 'gold' (every
  # training task's gold chain written first, phgpo/steps.py seed_bank_from_gold); bank_leakage: 'none' (a
  # training task reads its own entries) or 'auto' / 'task' / 'chain' (entries of its own task or gold chain
  # are invisible to it, as they are to a held-out task).
  c.pheromone = dict(
      rho=0.05, alpha=0.02, tau_init=0.5, tau_min=0.1, tau_max=1.0, arg_rho=0.05, arg_alpha=0.02,
      beta_max=0.7, w_max=0.5, kappa=1.0, bank_per_edge=16, top_k_similar=16, sim_threshold=0.6,
      dep_units="tau_range", bank_min_score=0.0, first_step=True, freeze_at=-1, bank_seed="rollouts",
      bank_leakage="none", init_graph="")
  # init_graph: the task-agnostic pheromone's start: '' (tau_init on the graph's edges), 'train' (from the
  # training graph's counts) or 'prior' (from the graph prior's counts, phgpo/steps.py init_counts; mapping:
  # phgpo/pheromone.py tau_from_counts). ablation.freeze_at: RL step after which the 'frozen' row's pheromone
  # stops changing; ablation.init_graph: the 'init_graph' row's pheromone.init_graph.
  c.ablation = dict(freeze_at=30, init_graph="prior")
  c.sampling = dict(top_k=20, temperature=0.7)
  # test_pheromone: beta = 0 runs are also decoded with the pheromone (the sub-row 'pheromone at test only')
  c.eval = dict(temperature=0.0, success_threshold=0.7, test_pheromone=False, block_tasks=0)
  c.stats = dict(confidence=0.95, resamples=10000, method="BCa")
  # The regime gate printed before each seed's RL runs (phgpo/train.py regime_gate): run `policy` against the
  # training-free run `baseline` on held-out match ratio, PASS within `tolerance` points ('' = no gate).
  c.gate = dict(policy="", baseline="", tolerance=0.0)
  c.checkpoint = dict(every=25, max_to_keep=2)
  c.logging = dict(every=5, tensorboard=True, pheromone_snapshots=(0, 20, 60))

  if arg == "ablation":
    c.runs = ABLATION_RUNS
    c.table = "ablation"
  elif arg in ("retrieval", "retrieval_smoke"):
    c.runs = RETRIEVAL_RUNS
    c.table = "retrieval"
    c.reference = "grpo"
    c.primary = "d match ratio, PhGPO with the gold bank (phgpo_gold) - GRPO + curriculum (grpo), each split"
    c.policy.kind = "retrieval_mlp"
    c.graph.edges = "all"
    c.pheromone.bank_seed = "gold"
    c.pheromone.bank_leakage = "auto"
    c.pheromone.bank_per_edge = 64      # keeps 99 % of the training tasks' gold entries (16: 81 %)
    c.eval.test_pheromone = True
    c.gate.policy, c.gate.baseline = "warmup", "vote3"
    # Teacher-forced fitting makes the retrieval policy better at a chain's first step and worse from its third
    # (its own errors enter the history); the state RL starts from is chosen on held-out training tasks.
    c.warmup.select = "validation"
    if arg == "retrieval_smoke":
      c.seeds = (0,)
      c.data.max_tasks = 120
      c.encoder.max_length = 32
      c.policy.hidden = 32
      c.warmup.steps = 6
      c.warmup.eval_every = 3
      c.warmup.batch_size = 32
      c.rl.steps = 4
      c.rl.tasks_per_step = 4
      c.curriculum.steps = 2
      c.checkpoint.every = 2
      c.logging.every = 1
      c.logging.pheromone_snapshots = (0, 2, 4)
      c.stats.resamples = 500
  elif arg in ("smoke", "smoke_lm", "ablation_smoke"):
    c.seeds = (0,)
    c.splits = ("random",)
    c.runs = ("nearest", "warmup", "grpo", "phgpo")
    if arg == "ablation_smoke":   # the ablation table's rows at smoke size
      c.runs = ABLATION_RUNS
      c.table = "ablation"
    c.data.max_tasks = 120
    c.encoder.max_length = 32
    c.policy.hidden = 32
    c.warmup.steps = 6
    c.warmup.batch_size = 32
    c.rl.steps = 4
    c.rl.tasks_per_step = 4
    c.curriculum.steps = 2
    c.ablation.freeze_at = 2
    c.checkpoint.every = 2
    c.logging.every = 1
    c.logging.pheromone_snapshots = (0, 2, 4)
    c.stats.resamples = 500
    if arg == "smoke_lm":
      # The language-model policy on a tiny random Qwen2 checkpoint written locally (no download).
      c.policy.kind = "lm"
      c.model.checkpoint = "tiny:qwen2"
      c.policy.lm_max_length = 128
      c.model.lora_rank = 4
      c.model.lora_alpha = 8.0
      c.data.max_tasks = 40
      c.rl.tasks_per_step = 2
      c.warmup.batch_size = 8
  elif arg not in (None, ""):
    raise ValueError(f"unknown config variant {arg!r}; valid: '' (main table), 'ablation', 'retrieval', "
                     "'retrieval_smoke', 'smoke', 'smoke_lm', 'ablation_smoke'")
  return c
