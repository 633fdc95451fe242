"""PhGPO's train state and its steps: the jit-compiled decision and updates, one warm-up and one RL update.

The maths is in `phgpo.objective` (loss and decision rule) and `phgpo.pheromone` (the pheromone update);
`Compiled` only binds their hyper-parameters from the config and jits them. `warmup_step` and `rl_step` are
the host-side glue of one update (featurize, advantages, epochs, pheromone) used by `phgpo.train`.
"""

from __future__ import annotations

import logging

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from common import estimators
from common.lm import training
from common.lm import updates as kit
from phgpo import classifier_rollout
from phgpo import memory_bank
from phgpo import objective
from phgpo import pheromone as pher_lib
from phgpo import retrieval
from phgpo import policy as policy_lib
from phgpo.problem import Problem

_log = logging.getLogger(__name__)


@flax.struct.dataclass
class TrainState(kit.TrainState):
  """The whole train state of one run, saved as one Orbax checkpoint: the trainer kit's state
  (common.lm.updates.TrainState: params, opt_state, key, step) and the pheromone.

  Attributes:
    pheromone: `phgpo.pheromone.PheromoneState` (unchanged during the warm-up).
  """
  pheromone: pher_lib.PheromoneState


BANK_SEEDS = ("rollouts", "gold")          # config pheromone.bank_seed
BANK_LEAKAGE = ("none", "auto", "task", "chain")   # config pheromone.bank_leakage
INIT_GRAPHS = ("", "train", "prior")       # config pheromone.init_graph


def init_counts(config: ml_collections.ConfigDict, problem: Problem) -> np.ndarray | None:
  """The transition counts i32[N+1, N] the task-agnostic pheromone starts from (config `pheromone.init_graph`):
  None for '' (default: tau_init on the graph's edges, as always); the problem graph's own counts for 'train'
  (`problem.graph.edge_counts`: the training split's transitions, or the prior's when the graph came from the
  prior alone); the catalogue's precomputed graph for 'prior' (`problem.prior_counts`: the PhGPO authors'
  TRAJECT-Bench graph by default, config `data.graph_path`; it counted the held-out queries too).

  Raises:
    ValueError: an unknown value, or 'prior' on a problem built without a prior graph.
  """
  mode = config.pheromone.get("init_graph", "")
  if mode not in INIT_GRAPHS:
    raise ValueError(f"config pheromone.init_graph={mode!r} is not one of {list(INIT_GRAPHS)}")
  if mode == "train":
    return np.asarray(problem.graph.edge_counts)
  if mode == "prior":
    if problem.prior_counts is None:
      raise ValueError("config pheromone.init_graph='prior' needs a problem built with a graph prior "
                       "(phgpo.problem.prepare_problem(config, need_prior=True), or data.format='authors_graph')")
    return np.asarray(problem.prior_counts)
  return None


def init_pheromone(config: ml_collections.ConfigDict, problem: Problem) -> pher_lib.PheromoneState:
  """Pheromone state with tau_init on the graph's edges and tau_min elsewhere (MAX-MIN bounds), or, with config
  `pheromone.init_graph` 'train' / 'prior', rows started from a graph's counts (`init_counts`,
  `phgpo.pheromone.tau_from_counts`), and a bank that is empty (`pheromone.bank_seed = 'rollouts'`, the paper's:
  filled by the policy's own rollouts) or seeded with every training task's gold chain (`'gold'`,
  `seed_bank_from_gold`)."""
  pc = config.pheromone
  g = problem.graph
  counts = init_counts(config, problem)
  pher = pher_lib.init_pheromone(
      len(g.tool_names), g.template_mask.shape[1], tau_init=pc.tau_init, tau_min=pc.tau_min,
      tau_max=pc.tau_max, template_mask=jnp.asarray(g.template_mask),
      bank_per_edge=pc.bank_per_edge,
      edge_mask=jnp.asarray(g.edge_mask),
      edge_counts=None if counts is None else jnp.asarray(counts))
  if pc.get("bank_seed", "rollouts") == "gold":
    pher = seed_bank_from_gold(pher, problem)
  return pher


def seed_bank_from_gold(pher: pher_lib.PheromoneState, problem: Problem) -> pher_lib.PheromoneState:
  """The bank with every training task's gold chain written as a trajectory of match score 1
  (`phgpo.memory_bank.write`, in training-row order; an edge over `pheromone.bank_per_edge` entries keeps the
  module's eviction order), the pheromone tables untouched: the paper's bank "distilled from successful
  trajectories" (SPEC.md "PhGPO"), here from the gold ones. Reading it without leakage needs
  `pheromone.bank_leakage` (`bank_groups`)."""
  rows = np.sort(np.asarray(problem.train_idx, np.int64))
  tools = np.asarray(problem.gold_tools, np.int32)[rows]
  start = np.full((len(rows), 1), problem.graph.start_index, np.int32)
  prev = np.concatenate([start, tools[:, :-1]], axis=1)
  bank = memory_bank.write(pher, jnp.asarray(prev), jnp.asarray(tools), jnp.asarray(tools >= 0),
                           jnp.ones((len(rows),), jnp.float32), jnp.asarray(rows, jnp.int32))
  return pher._replace(**bank)


def bank_groups(config: ml_collections.ConfigDict, problem: Problem) -> np.ndarray | None:
  """Leakage groups of every task row for reading the bank (config `pheromone.bank_leakage`): 'none' (the
  paper's: a training task reads its own entries), 'task' / 'chain' (entries of the reader's own task / gold
  chain are invisible, `phgpo.retrieval.leakage_groups`) or 'auto' (the split's: 'task' on 'random', 'chain'
  on 'chain'). Returns None for 'none'.

  Raises:
    ValueError: an unknown value.
  """
  mode = config.pheromone.get("bank_leakage", "none")
  if mode not in BANK_LEAKAGE:
    raise ValueError(f"config pheromone.bank_leakage={mode!r} is not one of {list(BANK_LEAKAGE)}")
  if mode == "none":
    return None
  if mode == "auto":
    mode = "chain" if problem.split == "chain" else "task"
  return retrieval.leakage_groups(problem.tasks, mode=mode)


def make_optimizer(config: ml_collections.ConfigDict, learning_rate: float, policy=None):
  """common.lm.updates.make_optimizer of config `optim.*` (Adam, `optim.name` 'adam', with global-norm clipping
  `optim.grad_clip`; float32 master weights with `optim.master_weights`) at `learning_rate`; only the policy's
  trainable leaves (e.g. LoRA adapters and the tool head) move when the policy defines `trainable_mask(params)`."""
  return kit.make_optimizer(kit.optim_settings(config.optim, learning_rate),
                            trainable=getattr(policy, "trainable_mask", None))


def place(state: TrainState, policy) -> TrainState:
  """The state on the policy's mesh (parameters by the logical-axis rules, optimizer state beside them,
  pheromone, key and step replicated) when the policy has one (the LM policy, config `mesh.shape`), else
  committed to the default device (common.lm.updates.place)."""
  return kit.place(state, getattr(policy, "mesh", None), getattr(policy, "rules", None))


def init_state(config, policy, problem: Problem, *, seed: int, learning_rate: float,
               params=None) -> TrainState:
  """A fresh train state: params (new from `seed`, or the given ones), optimizer state (with float32 master
  weights when `optim.master_weights`), pheromone, key. Not yet placed: see `place`."""
  key = jax.random.key(seed)
  key, init_key = jax.random.split(key)
  if params is None:
    params = policy.init(init_key)
  settings = kit.optim_settings(config.optim, learning_rate)
  trainable_mask = getattr(policy, "trainable_mask", None)
  opt = kit.make_optimizer(settings, trainable=trainable_mask)
  trainable = trainable_mask(params) if trainable_mask is not None else None
  opt_state = training.init_opt_state(opt, params, master_weights=settings.master_weights, trainable=trainable)
  return TrainState(params=params, opt_state=opt_state, pheromone=init_pheromone(config, problem),
                    key=jax.random.key_data(key), step=jnp.zeros((), jnp.int32))


def micro_batches(config) -> int:
  """Config `policy.micro_batches` for the LM policy (1 = one pass; other policies: 1)."""
  return int(config.policy.get("micro_batches", 1)) if config.policy.get("kind", "") == "lm" else 1


class Compiled:
  """The jit-compiled decision and update functions for one policy and config.

  Attributes:
    decide(params, pher, batch, prev, task_sim, key, beta, w, temperature, hot_edges=None)
      -> objective.Decision (hot_edges static: see `phgpo.objective.decide`)
    hot_edge_counts(bank_task) -> i32[N + 1]: `phgpo.memory_bank.hot_edge_counts` at `pheromone.top_k_similar`
    task_similarity(task_idx) -> f32[B, T]: cosine similarity of the tasks' queries to every task's query,
      the memory bank's evidence weights (`phgpo.memory_bank.bank_similarity`); 0 for tasks of the reader's own
      leakage group when `pheromone.bank_leakage` is not 'none' (`bank_groups`)
    rl_update(params, opt_state, flat_batch, actions, logp_old, adv, pg_mask, sl_mask, ref_logp, sl_labels,
      is_weight, sl_weight, kl_coef) -> (params, opt_state, aux)      (`phgpo.objective.phgpo_loss`)
    logp_of(params, flat_batch, actions) -> f32[B, H]      (`phgpo.objective.action_log_probs`)
    sl_update(params, opt_state, batch, labels, mask) -> (params, opt_state, aux)
      (`phgpo.objective.warmup_loss`)
    pher_update(pher, tools, templates, mask, scores, task_ids) -> PheromoneState (state donated)
    place_rows(tree) -> tree: batch rows sharded over the policy mesh's (data, fsdp) axes when the row count
      is a multiple of their size (else left as is, replicated by jit, with a warning once per row count);
      identity without a mesh.
  The updates apply gradients with common.lm.training.apply_gradients (float32 master weights when the state
  holds them, `optim.master_weights`); their forward pass runs in `policy.micro_batches` micro-batches.
  """

  def __init__(self, config: ml_collections.ConfigDict, policy: policy_lib.ToolPolicy, problem: Problem):
    self.config = config
    self.policy = policy
    self.num_tools = policy.num_tools
    self.start = problem.graph.start_index
    self.template_mask = jnp.asarray(problem.graph.template_mask)
    pc, rc = config.pheromone, config.rl
    decide_hp = dict(top_k=config.sampling.top_k, kappa=pc.kappa, top_k_similar=pc.top_k_similar,
                     tau_min=pc.tau_min, tau_max=pc.tau_max, dep_units=pc.dep_units,
                     sim_threshold=pc.sim_threshold, first_step_pheromone=pc.first_step)
    loss_hp = dict(entropy_coef=rc.entropy_coef, clip_low=rc.clip_low, clip_high=rc.clip_high,
                   agg_mode=rc.agg_mode)
    pher_hp = dict(rho=pc.rho, alpha=pc.alpha, tau_min=pc.tau_min, tau_max=pc.tau_max, arg_rho=pc.arg_rho,
                   arg_alpha=pc.arg_alpha, bank_min_score=pc.bank_min_score)
    self.optimizer = make_optimizer(config, rc.learning_rate, policy)
    self.warmup_optimizer = make_optimizer(config, config.warmup.learning_rate, policy)
    self.mesh, self.rules = getattr(policy, "mesh", None), getattr(policy, "rules", None)
    n_micro = micro_batches(config)
    # The updates' forward pass: in `policy.micro_batches` strided micro-batches under jax.checkpoint (the
    # loss normalises several terms over the whole batch, so the logits are gathered, not the losses summed).
    train_apply = lambda params, batch: training.micro_batched_apply(policy.apply, params, batch, n_micro)

    def decide(params, pher, batch, prev, task_sim, key, beta, w, temperature, hot_edges=None):
      return objective.decide(key, policy.apply(params, batch), pher, prev, task_sim, self.template_mask,
                              beta=beta, w=w, temperature=temperature, hot_edges=hot_edges, **decide_hp)

    def rl_loss(params, flat_batch, actions, logp_old, adv, pg_mask, sl_mask, ref_logp, sl_labels, is_weight,
                sl_weight, kl_coef):
      return objective.phgpo_loss(train_apply(params, flat_batch), actions, logp_old, adv, pg_mask,
                                  sl_mask, ref_logp, sl_weight=sl_weight, kl_coef=kl_coef, sl_labels=sl_labels,
                                  is_weight=is_weight, **loss_hp)

    def rl_update(params, opt_state, *args):
      (_, aux), grads = jax.value_and_grad(rl_loss, has_aux=True)(params, *args)
      aux["grad_norm"] = optax.tree.norm(grads)
      params, opt_state = training.apply_gradients(self.optimizer, grads, opt_state, params)
      return params, opt_state, aux

    def logp_of(params, flat_batch, actions):
      return objective.action_log_probs(policy.apply(params, flat_batch), actions)

    def sl_loss(params, batch, labels, mask):
      return objective.warmup_loss(train_apply(params, batch), labels, mask)

    def sl_update(params, opt_state, batch, labels, mask):
      (_, aux), grads = jax.value_and_grad(sl_loss, has_aux=True)(params, batch, labels, mask)
      params, opt_state = training.apply_gradients(self.warmup_optimizer, grads, opt_state, params)
      return params, opt_state, aux

    def pher_update(pher, tools, templates, mask, scores, task_ids):
      return pher_lib.update_pheromone(pher, tools, templates, mask, scores, task_ids, **pher_hp)

    task_keys = jnp.asarray(problem.query_emb, jnp.float32)
    groups = bank_groups(config, problem)
    if groups is None:
      sim_of = jax.jit(lambda q, gq: memory_bank.bank_similarity(task_keys, q))
    else:   # entries of the reader's own leakage group are invisible (similarity 0: no evidence)
      key_groups = jnp.asarray(groups, jnp.int32)
      sim_of = jax.jit(lambda q, gq: memory_bank.masked_bank_similarity(task_keys, q, key_groups, gq))
    group_of = np.zeros(len(problem.query_emb), np.int32) if groups is None else np.asarray(groups, np.int32)
    self.task_similarity = lambda task_idx: sim_of(jnp.asarray(problem.query_emb[np.asarray(task_idx)]),
                                                   jnp.asarray(group_of[np.asarray(task_idx)]))

    self.decide = jax.jit(decide, static_argnames="hot_edges")
    top_k_similar = int(pc.top_k_similar)
    self.hot_edge_counts = jax.jit(lambda bank_task: memory_bank.hot_edge_counts(bank_task, top_k_similar))
    shards = 1 if self.mesh is None else training.batch_shards(self.mesh, self.rules)

    replicated: set[int] = set()

    def place_rows(tree):
      if self.mesh is None:
        return tree
      rows = jax.tree.leaves(tree)[0].shape[0]
      if rows % shards == 0:
        return training.place_batch(tree, self.mesh, self.rules)
      if rows not in replicated:   # said once per row count: every device then computes the whole batch
        replicated.add(rows)
        _log.warning("PhGPO: a batch of %d rows does not divide over the mesh's %d batch shards (data x fsdp), "
                     "so it runs replicated; make rl.tasks_per_step x rl.rollouts_per_task (and the warm-up "
                     "batch) a multiple of %d to shard it", rows, shards, shards)
      return tree
    self.place_rows = place_rows
    self.rl_update = jax.jit(rl_update)
    self.logp_of = jax.jit(logp_of)
    self.sl_update = jax.jit(sl_update)
    # Donated: the update writes B*H entries in place instead of copying the [N+1, N] tables.
    self.pher_update = jax.jit(pher_update, donate_argnums=0)


def gold_decisions(problem: Problem, task_idx: np.ndarray | None = None) -> np.ndarray:
  """i64[P, 2]: every gold decision (task, step) of the task rows `task_idx` (default: the training split),
  the warm-up's data."""
  rows = problem.train_idx if task_idx is None else task_idx
  return np.array([(i, t) for i in rows for t in range(problem.gold_len[i])], np.int64)


def warmup_step(compiled: Compiled, state: TrainState, problem: Problem, decisions: np.ndarray,
                step: int) -> tuple[TrainState, dict]:
  """One supervised update on `decisions` (i64[B, 2] (task, step) pairs): L_SL on the gold tools.

  Returns:
    (the new state with step = step + 1, aux {'loss', 'accuracy'} on device).
  """
  ti, ts = decisions[:, 0], decisions[:, 1]
  obs = ([[c.output for c in problem.tasks[i].calls] for i in ti]
         if compiled.policy.uses_observations else None)
  batch = compiled.policy.featurize(ti, problem.gold_tools[ti], problem.gold_status[ti], ts.astype(np.int32),
                                    obs)
  batch, labels, mask = compiled.place_rows((batch, np.asarray(problem.gold_tools[ti, ts]), np.ones((len(ti),), bool)))
  params, opt_state, aux = compiled.sl_update(state.params, state.opt_state, batch, jnp.asarray(labels),
                                              jnp.asarray(mask))
  return state.replace(params=params, opt_state=opt_state, step=jnp.asarray(step + 1, jnp.int32)), aux


def rl_step(compiled: Compiled, state: TrainState, problem: Problem, rb: classifier_rollout.RolloutBatch,
            *, group_ids: np.ndarray, num_groups: int, sl_weight: float, ref_params,
            step: int, frozen: bool = False) -> tuple[TrainState, dict]:
  """One RL update from scored rollouts: GRPO advantages, `rl.epochs` passes of the PhGPO loss, pheromone.

  The SL term covers the teacher-forced decisions (config `rl.sl_steps` = 'teacher_forced', ours) or, with
  'all' (the authors'), the gold tool at every executed step that has one. With `rl.tis_cap` > 0 each
  policy-gradient term is weighted by min(pi_old / mu, tis_cap), mu the pheromone-shaped sampling
  distribution (`phgpo.objective.truncated_is_weight`); 0 (default) weights every term 1.

  Args:
    rb: the rollouts (B = num_groups * M trajectories).
    group_ids: i32[B], the task group of each rollout.
    num_groups: G, tasks in the batch.
    sl_weight: lambda of this step (the curriculum's).
    ref_params: the KL reference policy (used when `rl.kl_coef` > 0).
    step: steps done before this one.
    frozen: leave the pheromone (tables and memory bank) exactly as it is (config `pheromone.freeze_at`).
  Returns:
    (the new state with step = step + 1, aux of the last epoch on device).
  """
  rc = compiled.config.rl
  adv = estimators.compute_advantages(
      rc.advantage.estimator, jnp.asarray(rb.reward), jnp.asarray(np.asarray(group_ids, np.int32)),
      num_groups=num_groups,
      eps=rc.advantage.eps, ddof=rc.advantage.ddof)
  flat = classifier_rollout.decision_batch(compiled.policy, rb.task, rb.tools, rb.status, rb.observations)
  args = (flat, jnp.asarray(rb.tools), jnp.asarray(rb.logp_old), adv, jnp.asarray(rb.pg_mask),
          jnp.asarray(rb.sl_mask))
  ref_logp = (compiled.logp_of(ref_params, flat, args[1]) if rc.kl_coef > 0
              else jnp.asarray(rb.logp_old))
  sl_mask, sl_labels = rb.sl_mask, rb.tools
  if rc.sl_steps == "all":
    # The authors' SL term: the gold tool at every executed step that has one, own decisions included.
    gold = problem.gold_tools[rb.task]
    sl_mask = (rb.tools >= 0) & (gold >= 0)
    sl_labels = np.where(sl_mask, gold, rb.tools)
  is_weight = objective.truncated_is_weight(jnp.asarray(rb.logp_old), jnp.asarray(rb.logp_behaviour),
                                            cap=float(rc.tis_cap))
  args = args[:5] + (jnp.asarray(sl_mask),)
  rest = (ref_logp, jnp.asarray(sl_labels, jnp.int32), is_weight)
  if compiled.mesh is not None:   # the flat batch's B * H rows and the [B, H] arrays' B rows
    args = (compiled.place_rows(args[0]),) + tuple(compiled.place_rows(a) for a in args[1:])
    rest = tuple(compiled.place_rows(a) for a in rest)
  params, opt_state = state.params, state.opt_state
  for _ in range(rc.epochs):
    params, opt_state, aux = compiled.rl_update(params, opt_state, *args, *rest,
                                                jnp.float32(sl_weight), jnp.float32(rc.kl_coef))
  exec_mask = jnp.asarray(rb.tools >= 0)
  pher = state.pheromone
  if not frozen:
    pher = compiled.pher_update(pher, jnp.asarray(rb.tools), jnp.asarray(rb.templates), exec_mask,
                                jnp.asarray(rb.reward), jnp.asarray(np.asarray(rb.task, np.int32)))
  return state.replace(params=params, opt_state=opt_state, pheromone=pher,
                       step=jnp.asarray(step + 1, jnp.int32)), aux
