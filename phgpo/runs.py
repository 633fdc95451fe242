"""The rows of PhGPO's tables, in table order: `RUN_SPECS` says what each run changes, `run_config` applies it.

Shared by the trainer (`phgpo/train.py`) and the notebook helpers (`phgpo/analysis.py`), which re-derive the
config a finished run trained with; neither imports the other for it.
"""

from __future__ import annotations

import ml_collections

# What each run changes in the config, applied by `run_config`. 'nearest' and the k-neighbour position votes
# 'vote3' / 'vote5' train nothing (phgpo.evaluation.nearest_query / vote_query); 'warmup' trains nothing after
# the warm-up; the others run stages 2-3 from the warm-up policy.
RUN_SPECS = {
    "nearest": dict(kind="nearest"),
    "vote3": dict(kind="vote", k=3),
    "vote5": dict(kind="vote", k=5),
    "warmup": dict(kind="warmup"),
    "grpo_vanilla": dict(kind="rl", pheromone=False, curriculum=False),
    "grpo": dict(kind="rl", pheromone=False, curriculum=True),
    "phgpo": dict(kind="rl", pheromone=True, curriculum=True),
    "no_curriculum": dict(kind="rl", pheromone=True, curriculum=False),
    "rho0": dict(kind="rl", pheromone=True, curriculum=True, no_evaporation=True),
    "agnostic_only": dict(kind="rl", pheromone=True, curriculum=True, task_dependent=False),
    "frozen": dict(kind="rl", pheromone=True, curriculum=True, freeze=True),
    "authors": dict(kind="rl", pheromone=True, curriculum=True, authors=True),
    # PhGPO with the task-agnostic pheromone started from a graph's counts (config ablation.init_graph)
    "init_graph": dict(kind="rl", pheromone=True, curriculum=True, init_graph=True),
    # the retrieval table (configs/phgpo_traject.py:retrieval): the bank from the policy's rollouts or seeded
    # from the training tasks' gold chains, and the encoder-MLP PhGPO of the main table beside them
    "phgpo_rollouts": dict(kind="rl", pheromone=True, curriculum=True, bank_seed="rollouts"),
    "phgpo_gold": dict(kind="rl", pheromone=True, curriculum=True, bank_seed="gold"),
    "phgpo_encoder": dict(kind="rl", pheromone=True, curriculum=True, policy="encoder_mlp",
                          bank_seed="rollouts", bank_leakage="none"),
}
RUN_KINDS = tuple(RUN_SPECS)
# The rows of each table of config `table` (configs/phgpo_traject.py holds the same tuples); a run of a subset
# writes results_<table>_<runs>.* beside the full table.
TABLE_RUNS = {"main": ("nearest", "warmup", "grpo_vanilla", "grpo", "phgpo"),
              "ablation": ("phgpo", "no_curriculum", "grpo", "rho0", "agnostic_only", "frozen", "authors",
                           "init_graph"),
              "retrieval": ("nearest", "vote3", "vote5", "warmup", "grpo", "phgpo_rollouts", "phgpo_gold",
                            "authors", "phgpo_encoder")}


def run_config(config: ml_collections.ConfigDict, run: str) -> ml_collections.ConfigDict:
  """The config one RL run trains with: `config` with its `RUN_SPECS` entry applied.

  beta = 0 runs set pheromone.beta_max = pheromone.w_max = 0 (the pheromone is still updated, never used);
  no-curriculum runs set curriculum.steps = 0 and the curriculum floors curriculum.lambda_floor =
  curriculum.p_tf_floor = 0 (stage 3 from the first step: no teacher forcing, no SL term, full horizon); 'rho0' sets pheromone.rho = pheromone.arg_rho = 0; 'agnostic_only' sets pheromone.w_max = 0;
  'frozen' sets pheromone.freeze_at = ablation.freeze_at; 'authors' switches every schedule choice to the
  authors' released trainer: curriculum.lambda_floor = 0.3, curriculum.p_tf_floor = 0.05,
  curriculum.beta_start_fraction = 1.0, pheromone.first_step = False, rl.sl_steps = 'all'; 'init_graph' sets
  pheromone.init_graph = ablation.init_graph ('prior': the graph prior's counts, 'train': the training graph's;
  phgpo/steps.py init_counts); entries naming
  `bank_seed`, `bank_leakage` or `policy` set pheromone.bank_seed, pheromone.bank_leakage or policy.kind.

  Raises:
    ValueError: an unknown run name.
  """
  if run not in RUN_SPECS:
    raise ValueError(f"unknown run {run!r}; valid: {list(RUN_SPECS)}")
  spec = RUN_SPECS[run]
  cfg = ml_collections.ConfigDict(config.to_dict())
  if not spec.get("pheromone", True):
    cfg.pheromone.beta_max = 0.0
    cfg.pheromone.w_max = 0.0
  if not spec.get("curriculum", True):
    cfg.curriculum.steps = 0
    cfg.curriculum.lambda_floor = 0.0
    cfg.curriculum.p_tf_floor = 0.0
  if spec.get("no_evaporation"):
    cfg.pheromone.rho = 0.0
    cfg.pheromone.arg_rho = 0.0
  if spec.get("task_dependent") is False:
    cfg.pheromone.w_max = 0.0
  if spec.get("freeze"):
    cfg.pheromone.freeze_at = int(config.ablation.freeze_at)
  if spec.get("init_graph"):
    cfg.pheromone.init_graph = config.ablation.get("init_graph", "prior")
  if spec.get("authors"):
    cfg.curriculum.lambda_floor = 0.3
    cfg.curriculum.p_tf_floor = 0.05
    cfg.curriculum.beta_start_fraction = 1.0
    cfg.pheromone.first_step = False
    cfg.rl.sl_steps = "all"
  for key, node in (("bank_seed", cfg.pheromone), ("bank_leakage", cfg.pheromone)):
    if key in spec:
      node[key] = spec[key]
  if "policy" in spec:
    cfg.policy.kind = spec["policy"]
  cfg.lock()
  return cfg
