"""PhGPO training and evaluation on TRAJECT-Bench: warm-up, GRPO with pheromone-guided sampling, held-out table.

Source: PhGPO, arXiv 2602.13691 (SPEC.md, PhGPO). One RL step:
  1. sample `rl.tasks_per_step` training tasks (only those within the curriculum's horizon);
  2. roll out M = `rl.rollouts_per_task` trajectories per task against the replay environment; each decision
     takes the policy's top-K tools and samples from exp(log pi + beta log tau(prev, . | x)) at temperature T
     (`phgpo.sampling`), then an argument template from tau_arg; with probability p_tf (stage 2) the gold
     call is executed instead;
  3. reward R = match ratio of the executed tool sequence (config `rl.reward`), GRPO advantages per task;
  4. `rl.epochs` passes of the clipped surrogate on the policy's own decisions plus lambda times the
     supervised loss on teacher-forced ones, minus gamma times the entropy (plus an optional KL to the
     warm-up policy, `rl.kl_coef`);
  5. pheromone update from the scored trajectories: evaporation, deposit alpha * q, MAX-MIN clip, and
     memory-bank writes for the task-dependent pheromone.
The importance ratio compares log pi_theta at temperature 1 over all tools at two parameter versions
(sampling time vs now); the pheromone and the temperature only change which actions get sampled.

Host/device split: the decision function and the update are jit-compiled pure functions over padded
arrays; the loop over turns and the environment calls are host Python, because the environment is an
external process in general (`phgpo.env.ToolEnv`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import tqdm

from common import checkpoint as ckpt_lib
from common import estimators
from common import losses
from common import metric_writer
from phgpo import curriculum
from phgpo import data as data_lib
from phgpo import env as env_lib
from phgpo import graph as graph_lib
from phgpo import metrics as metrics_lib
from phgpo import pheromone as pher_lib
from phgpo import policy as policy_lib
from phgpo import sampling as sampling_lib

RUN_KINDS = ("warmup", "grpo", "phgpo")


# --------------------------------------------------------------------------------------------------------
# The problem: data, graph, features (host side, built once per process).


@dataclasses.dataclass
class Problem:
  """Everything a run needs that does not change during training.

  Attributes:
    tasks: all tasks, in loader order.
    train_idx, eval_idx: i64 indices into `tasks` (the held-out split is fixed by `data.split_seed`).
    tool_specs: the tool catalogue, in graph order (tool n of the graph is tool_specs[n]).
    graph: the tool-transition graph built from the training tasks only.
    query_emb: f32[num_tasks, D] sentence embeddings of the queries.
    tool_emb: f32[N, D] sentence embeddings of "name: description".
    gold_tools, gold_templates: i32[num_tasks, H] gold calls, -1 padded (H = env.max_steps).
    gold_status: i32[num_tasks, H] STATUS_CODES of the recorded gold observations.
    gold_len: i32[num_tasks], min(number of gold calls, H).
  """
  tasks: list
  train_idx: np.ndarray
  eval_idx: np.ndarray
  tool_specs: list
  graph: Any
  query_emb: np.ndarray
  tool_emb: np.ndarray
  gold_tools: np.ndarray
  gold_templates: np.ndarray
  gold_status: np.ndarray
  gold_len: np.ndarray


def _status_code(status: str) -> int:
  return policy_lib.STATUS_CODES.get(status, policy_lib.STATUS_CODES["invalid"])


def prepare_problem(config: ml_collections.ConfigDict) -> Problem:
  """Loads TRAJECT-Bench, splits it, builds the graph from the training split and embeds all texts.

  Raises:
    FileNotFoundError: the data is neither at ../shared/data/traject_bench nor at `config.data.path`
      (the message says what to download and where).
  """
  from common import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from phgpo import features  # pylint: disable=g-import-not-at-top

  root = data_lib.find_traject_bench(config.data.path or None)
  logging.warning("TRAJECT-Bench data from %s", root)
  tasks = data_lib.load_tasks(root, domains=list(config.data.domains) or None)
  if config.data.max_tasks:
    rng = np.random.default_rng(config.data.split_seed)
    keep = np.sort(rng.permutation(len(tasks))[: config.data.max_tasks])
    tasks = [tasks[i] for i in keep]
  train_tasks, eval_tasks = data_lib.split_tasks(
      tasks, held_out_fraction=config.data.held_out_fraction, seed=config.data.split_seed)
  pos = {t.task_id: i for i, t in enumerate(tasks)}
  train_idx = np.array([pos[t.task_id] for t in train_tasks], np.int64)
  eval_idx = np.array([pos[t.task_id] for t in eval_tasks], np.int64)

  tool_specs = data_lib.load_tool_catalogue(root, tasks)
  graph = graph_lib.build_tool_graph(
      [s.name for s in tool_specs],
      [[(c.name, c.arg_keys) for c in t.calls] for t in train_tasks],
      edges=config.graph.edges, max_templates=config.graph.max_templates,
      fallback_templates={s.name: tuple(sorted(s.required)) for s in tool_specs})

  h = config.env.max_steps
  n_tasks = len(tasks)
  gold_tools = np.full((n_tasks, h), -1, np.int32)
  gold_templates = np.full((n_tasks, h), -1, np.int32)
  gold_status = np.zeros((n_tasks, h), np.int32)
  gold_len = np.zeros((n_tasks,), np.int32)
  for i, t in enumerate(tasks):
    calls = t.calls[:h]
    gold_len[i] = len(calls)
    for k, c in enumerate(calls):
      n = graph.tool_index(c.name)
      gold_tools[i, k] = n
      gold_templates[i, k] = graph.template_index(n, c.arg_keys)
      gold_status[i, k] = _status_code("ok" if c.status == "success" else "failed")

  cache_dir = config.encoder.cache_dir or None
  enc = encoder_lib.SentenceEncoder.from_package(max_length=config.encoder.max_length)
  query_emb = features.embed_texts(enc, [t.query for t in tasks], cache_dir=cache_dir,
                                   batch_size=config.encoder.batch_size)
  tool_emb = features.embed_texts(enc, [f"{s.name}: {s.description}" for s in tool_specs],
                                  cache_dir=cache_dir, batch_size=config.encoder.batch_size)
  return Problem(tasks, train_idx, eval_idx, tool_specs, graph, np.asarray(query_emb, np.float32),
                 np.asarray(tool_emb, np.float32), gold_tools, gold_templates, gold_status, gold_len)


def make_policy(config: ml_collections.ConfigDict, problem: Problem) -> policy_lib.ToolPolicy:
  """Builds the policy named by `config.policy.kind` ('encoder_mlp' or 'lm').

  Raises:
    ValueError: unknown policy kind (the message lists the valid ones).
  """
  kind = config.policy.kind
  if kind == "encoder_mlp":
    return policy_lib.EncoderMLPPolicy(problem.tool_emb, problem.query_emb, hidden=config.policy.hidden,
                                       max_steps=config.env.max_steps)
  if kind == "lm":
    from phgpo import lm_policy  # pylint: disable=g-import-not-at-top
    return lm_policy.make_lm_policy(config, problem)
  raise ValueError(f"unknown policy.kind {kind!r}; valid: 'encoder_mlp', 'lm'")


# --------------------------------------------------------------------------------------------------------
# Train state.


def init_pheromone(config: ml_collections.ConfigDict, problem: Problem) -> pher_lib.PheromoneState:
  """Pheromone state with tau_init on the graph's edges and tau_min elsewhere (MAX-MIN bounds)."""
  pc = config.pheromone
  g = problem.graph
  state = pher_lib.init_pheromone(
      len(g.tool_names), g.template_mask.shape[1], tau_init=pc.tau_init, tau_min=pc.tau_min,
      tau_max=pc.tau_max, template_mask=jnp.asarray(g.template_mask),
      bank_capacity=pc.bank_capacity, embed_dim=problem.query_emb.shape[1],
      edge_mask=jnp.asarray(g.edge_mask))
  return state


def make_optimizer(learning_rate: float, grad_clip: float, policy=None) -> optax.GradientTransformation:
  """Adam with global-norm clipping; only the policy's trainable leaves (e.g. LoRA adapters) move when the
  policy defines `trainable_mask(params)`."""
  tx = optax.chain(optax.clip_by_global_norm(grad_clip), optax.adam(learning_rate))
  if policy is not None and hasattr(policy, "trainable_mask"):
    labels = lambda params: jax.tree.map(lambda m: "train" if m else "freeze", policy.trainable_mask(params))
    tx = optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()}, labels)
  return tx


def _commit(tree):
  """Places every leaf on the default device as a committed array.

  Arrays restored by Orbax are committed and freshly made ones are not; jit keys its cache on that, so
  without this a resumed run would recompile every step function once more.
  """
  dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.device_put(tree, dev)


def init_state(config, policy, problem, *, seed: int, learning_rate: float, params=None) -> dict:
  """The whole train state as one pytree: params, optimizer state, pheromone, RNG key data, step."""
  key = jax.random.key(seed)
  key, init_key = jax.random.split(key)
  if params is None:
    params = policy.init(init_key)
  opt = make_optimizer(learning_rate, config.optim.grad_clip, policy)
  return {
      "params": params,
      "opt_state": opt.init(params),
      "pheromone": init_pheromone(config, problem),
      "key": jax.random.key_data(key),
      "step": jnp.zeros((), jnp.int32),
  }


# --------------------------------------------------------------------------------------------------------
# Jit-compiled pieces.


class Compiled:
  """The jit-compiled decision and update functions for one policy and config."""

  def __init__(self, config: ml_collections.ConfigDict, policy: policy_lib.ToolPolicy, problem: Problem):
    self.config = config
    self.policy = policy
    self.num_tools = policy.num_tools
    self.start = problem.graph.start_index
    self.template_mask = jnp.asarray(problem.graph.template_mask)
    pc, rc = config.pheromone, config.rl

    def decide(params, pher, batch, prev, task_emb, bank_sim, key, beta, w, temperature):
      logits = policy.apply(params, batch)
      logp_all = jax.nn.log_softmax(logits, axis=-1)
      rows = pher_lib.pheromone_rows(pher, prev, task_emb, w=w, kappa=pc.kappa,
                                     top_k_similar=pc.top_k_similar, tau_min=pc.tau_min,
                                     tau_max=pc.tau_max, bank_sim=bank_sim)
      k_tool, k_tmpl = jax.random.split(key)
      tools, has = sampling_lib.sample_tools(k_tool, logits, jnp.log(rows), top_k=config.sampling.top_k,
                                             temperature=temperature, beta=beta)
      # Effective (lazily evaporated) tau_arg rows of the chosen tools only: O(B Tm), not O(N Tm).
      tmpl_rows = pher_lib.arg_rows(pher, tools, tau_min=pc.tau_min)
      row_of = jnp.where(tools >= 0, jnp.arange(tools.shape[0], dtype=jnp.int32), -1)
      templates = sampling_lib.sample_templates(k_tmpl, tmpl_rows,
                                                pher_lib.take_rows(self.template_mask, tools), row_of)
      logp = jnp.take_along_axis(logp_all, jnp.maximum(tools, 0)[:, None], axis=1)[:, 0]
      return tools, templates, logp, has

    self.decide = jax.jit(decide)
    self.bank_similarity = jax.jit(pher_lib.bank_similarity)
    self.optimizer = make_optimizer(rc.learning_rate, config.optim.grad_clip, policy)
    self.warmup_optimizer = make_optimizer(config.warmup.learning_rate, config.optim.grad_clip, policy)

    def rl_loss(params, flat_batch, actions, logp_old, adv, pg_mask, sl_mask, ref_logp, sl_weight,
                kl_coef):
      b, h = actions.shape
      logits = policy.apply(params, flat_batch)
      logp_all = jax.nn.log_softmax(logits, axis=-1)
      logp = jnp.take_along_axis(logp_all, jnp.maximum(actions, 0).reshape(-1, 1), axis=1).reshape(b, h)
      pg, m = losses.clipped_surrogate_loss(
          logp, logp_old, adv, pg_mask, clip_low=rc.clip_low, clip_high=rc.clip_high,
          agg_mode=rc.agg_mode)
      sl = losses.masked_mean(-logp, sl_mask)
      any_mask = (pg_mask | sl_mask).reshape(-1)
      ent = losses.masked_mean(losses.entropy_from_logits(logits), any_mask)
      kl = losses.masked_mean(losses.kl_k3(logp, ref_logp), pg_mask)
      has_pg = jnp.any(pg_mask).astype(jnp.float32)
      has_sl = jnp.any(sl_mask).astype(jnp.float32)
      loss = (has_sl * sl_weight * sl + has_pg * (1.0 - sl_weight) * pg - rc.entropy_coef * ent
              + kl_coef * kl)
      return loss, {"loss": loss, "pg_loss": pg, "sl_loss": sl, "entropy": ent, "kl": kl, **m}

    def rl_update(params, opt_state, *args):
      (_, aux), grads = jax.value_and_grad(rl_loss, has_aux=True)(params, *args)
      updates, opt_state = self.optimizer.update(grads, opt_state, params)
      aux["grad_norm"] = optax.tree.norm(grads)
      return optax.apply_updates(params, updates), opt_state, aux

    self.rl_update = jax.jit(rl_update)

    def logp_of(params, flat_batch, actions):
      b, h = actions.shape
      logits = policy.apply(params, flat_batch)
      logp_all = jax.nn.log_softmax(logits, axis=-1)
      return jnp.take_along_axis(logp_all, jnp.maximum(actions, 0).reshape(-1, 1), axis=1).reshape(b, h)

    self.logp_of = jax.jit(logp_of)

    def sl_loss(params, batch, labels, mask):
      logits = policy.apply(params, batch)
      logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), jnp.maximum(labels, 0)[:, None], 1)[:, 0]
      loss = losses.masked_mean(-logp, mask)
      acc = losses.masked_mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32), mask)
      return loss, {"loss": loss, "accuracy": acc}

    def sl_update(params, opt_state, batch, labels, mask):
      (_, aux), grads = jax.value_and_grad(sl_loss, has_aux=True)(params, batch, labels, mask)
      updates, opt_state = self.warmup_optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, aux

    self.sl_update = jax.jit(sl_update)

    def pher_update(pher, tools, templates, mask, scores, task_emb):
      return pher_lib.update_pheromone(
          pher, tools, templates, mask, scores, task_emb, rho=pc.rho, alpha=pc.alpha, tau_min=pc.tau_min,
          tau_max=pc.tau_max, arg_rho=pc.arg_rho, arg_alpha=pc.arg_alpha)

    # Donated: the update writes B*H entries in place instead of copying the [N+1, N] tables.
    self.pher_update = jax.jit(pher_update, donate_argnums=0)


# --------------------------------------------------------------------------------------------------------
# Rollouts against the environment.


@dataclasses.dataclass
class RolloutBatch:
  """Host-side record of B trajectories (all i32/f32/bool [B, H] unless noted).

  tools/templates: executed calls (-1 after the end); status: STATUS_CODES of each observation;
  logp_old: log pi_theta(tool) at sampling time (temperature 1, all tools); pg_mask: decisions sampled
  from the policy; sl_mask: teacher-forced decisions; length: i32[B] calls made; task: i64[B] task
  index; reward: f32[B]; end_reason: list[str] ('horizon', 'done', 'no_candidate', 'env_error');
  observations: B lists of observation texts (recorded only for policies that read them).
  """
  tools: np.ndarray
  templates: np.ndarray
  status: np.ndarray
  logp_old: np.ndarray
  pg_mask: np.ndarray
  sl_mask: np.ndarray
  length: np.ndarray
  task: np.ndarray
  reward: np.ndarray
  end_reason: list
  observations: list


def decision_batch(policy, task_idx: np.ndarray, tools: np.ndarray, status: np.ndarray,
                   observations: list | None):
  """All H decisions of B trajectories as one flat batch of B * H states (row b * H + t = step t of b)."""
  b, h = tools.shape
  rep = lambda x: np.repeat(x, h, axis=0)
  obs = None
  if observations is not None:
    obs = [o for o in observations for _ in range(h)]
  return policy.featurize(rep(task_idx), rep(tools), rep(status), np.tile(np.arange(h, dtype=np.int32), b),
                          obs)


def rollout(compiled: Compiled, params, pher, problem: Problem, envs: EnvGroup,
            task_idx: np.ndarray, key: jax.Array, *, beta: float, w: float, temperature: float,
            p_tf: float, tf_rng: np.random.Generator, reward_kind: str) -> RolloutBatch:
  """Runs one trajectory per entry of `task_idx` against `envs` (one episode slot per trajectory).

  The episode of task x lasts gold_len(x) calls (env.horizon = 'gold'), or stops early when the policy
  has no valid candidate or the environment reports done or an error.
  """
  policy = compiled.policy
  b = len(task_idx)
  h = problem.gold_tools.shape[1]
  names = problem.graph.tool_names
  tools = np.full((b, h), -1, np.int32)
  templates = np.full((b, h), -1, np.int32)
  status = np.zeros((b, h), np.int32)
  logp_old = np.zeros((b, h), np.float32)
  pg_mask = np.zeros((b, h), bool)
  sl_mask = np.zeros((b, h), bool)
  length = np.zeros((b,), np.int32)
  active = np.ones((b,), bool)
  end_reason = ["horizon"] * b
  observations = [[] for _ in range(b)] if policy.uses_observations else None
  horizon = problem.gold_len[task_idx]
  task_emb = jnp.asarray(problem.query_emb[task_idx])
  bank_sim = compiled.bank_similarity(pher, task_emb)   # the task is fixed for the whole episode
  seeds = [int(x) for x in tf_rng.integers(1 << 30, size=b)]
  for i, r in enumerate(envs.reset_all([problem.tasks[j].task_id for j in task_idx], seeds)):
    if isinstance(r, Exception):
      logging.warning("environment reset failed for task %s: %s", problem.tasks[task_idx[i]].task_id, r)
      active[i] = False
      end_reason[i] = "env_error"
  for t in range(int(horizon.max())):
    active &= t < horizon
    if not active.any():
      break
    key, sub = jax.random.split(key)
    step = np.full((b,), t, np.int32)
    batch = policy.featurize(task_idx, tools, status, step, observations)
    prev = tools[:, t - 1] if t > 0 else np.full((b,), compiled.start, np.int32)
    prev = np.where(prev < 0, compiled.start, prev).astype(np.int32)
    a, tm, lp, has = jax.device_get(compiled.decide(params, pher, batch, jnp.asarray(prev), task_emb,
                                                    bank_sim, sub, beta, w, temperature))
    forced = tf_rng.random(b) < p_tf
    chosen = []
    for i in np.nonzero(active)[0]:
      gold = problem.gold_tools[task_idx[i], t]
      if forced[i] and gold >= 0:
        chosen.append((i, int(gold), int(problem.gold_templates[task_idx[i], t]), True))
      elif has[i]:
        chosen.append((i, int(a[i]), int(tm[i]), False))
      else:
        active[i] = False
        end_reason[i] = "no_candidate"
    calls = []
    for i, tool, tmpl, _ in chosen:
      keys = problem.graph.templates[tool][tmpl] if tmpl >= 0 else ()
      calls.append((i, {"name": names[tool], "arguments": {k: "" for k in keys}}))
    for (i, tool, tmpl, teacher), res in zip(chosen, envs.step_many(calls)):
      if isinstance(res, Exception):
        logging.warning("environment error in task %s: %s", problem.tasks[task_idx[i]].task_id, res)
        active[i] = False
        end_reason[i] = "env_error"
        continue
      sl_mask[i, t], pg_mask[i, t] = teacher, not teacher
      tools[i, t], templates[i, t], logp_old[i, t] = tool, tmpl, lp[i]
      status[i, t] = _status_code(res.status)
      if observations is not None:
        observations[i].append(res.observation)
      length[i] = t + 1
      if res.done and t + 1 < horizon[i]:
        active[i] = False
        end_reason[i] = "done"
  reward = score_trajectories(tools, length, problem.gold_tools[task_idx], problem.gold_len[task_idx],
                              kind=reward_kind, horizon=h)
  return RolloutBatch(tools, templates, status, logp_old, pg_mask, sl_mask, length,
                      np.asarray(task_idx), reward, end_reason, observations)


def score_trajectories(tools, length, gold, gold_len, *, kind: str, horizon: int) -> np.ndarray:
  """Outcome reward in [0, 1] per trajectory: 'match_ratio' (default), 'success' or 'exact'.

  Raises:
    ValueError: unknown reward kind.
  """
  mr = np.asarray(metrics_lib.match_ratio_batch(tools, length, gold, gold_len, horizon=horizon))
  if kind == "match_ratio":
    return mr.astype(np.float32)
  if kind == "success":
    return (mr >= 0.7).astype(np.float32)
  if kind == "exact":
    return np.asarray(metrics_lib.exact_match_batch(tools, length, gold, gold_len)).astype(np.float32)
  raise ValueError(f"unknown rl.reward {kind!r}; valid: 'match_ratio', 'success', 'exact'")


class EnvGroup:
  """B concurrent replay episodes, in-process or in sandboxed environment processes.

  `env.sandboxed = True` (default) serves the replay environment from `env.num_workers` processes started
  by `common.env_client.EnvClient` (bubblewrap, cgroup memory and pids limits, no network, MCP over
  stdio); episode i runs in slot i of worker i % W, and the steps of one decision are submitted together
  so their round trips overlap. A worker that crashes or hangs ends the episodes it was serving with
  reason 'env_error' and is replaced before the next reset. `env.sandboxed = False` steps
  `phgpo.env.ReplayEnv` objects in this process (fastest; for debugging and benchmarks).
  """

  def __init__(self, config, problem: Problem, count: int):
    self.count = count
    self.sandboxed = bool(config.env.sandboxed)
    self._config = config
    self._problem = problem
    self._clients = []
    if self.sandboxed:
      self.num_workers = max(1, min(int(config.env.num_workers), count))
      self._clients = [self._start_worker() for _ in range(self.num_workers)]
    else:
      self._envs = [env_lib.ReplayEnv(problem.tasks, problem.tool_specs, max_steps=config.env.max_steps)
                    for _ in range(count)]

  def _start_worker(self):
    from common import env_client  # pylint: disable=g-import-not-at-top
    from common.envs import replay_env  # pylint: disable=g-import-not-at-top
    spec = replay_env.replay_env_spec(
        self._config.data.path or None, task_ids=[t.task_id for t in self._problem.tasks],
        max_steps=self._config.env.max_steps, horizon=self._config.env.horizon)
    return env_client.EnvClient(spec, step_timeout_s=self._config.env.step_timeout_s)

  def reset_all(self, task_ids: Sequence[str], seeds: Sequence[int]) -> list:
    """Starts episode i on task_ids[i]; returns per episode the first observation or the exception."""
    if not self.sandboxed:
      return [self._guard(lambda i=i: self._envs[i].reset(task_ids[i], seed=seeds[i]))
              for i in range(len(task_ids))]
    for w, c in enumerate(self._clients):   # replace workers that died in the last batch
      if not c.alive:
        logging.warning("replacing environment worker %d (%s)", w, c.pid)
        c.close()
        self._clients[w] = self._start_worker()
    per_worker = [[] for _ in self._clients]
    for i, tid in enumerate(task_ids):
      per_worker[i % self.num_workers].append((i // self.num_workers, tid, seeds[i]))
    futs = [c.submit_reset_batch(items) for c, items in zip(self._clients, per_worker)]
    return self._gather(futs, len(task_ids))

  def step_many(self, items: Sequence[tuple[int, dict]]) -> list:
    """Steps episode i with call for each (i, call); returns StepResults or exceptions, in order."""
    if not self.sandboxed:
      return [self._guard(lambda i=i, c=c: self._envs[i].step(c)) for i, c in items]
    per_worker = [[] for _ in self._clients]
    order = [[] for _ in self._clients]
    for j, (i, call) in enumerate(items):
      per_worker[i % self.num_workers].append((i // self.num_workers, call))
      order[i % self.num_workers].append(j)
    futs = [c.submit_step_batch(b) for c, b in zip(self._clients, per_worker)]
    out = [None] * len(items)
    for w, f in enumerate(futs):
      res = self._guard(f.result)
      for pos, j in enumerate(order[w]):
        out[j] = res[pos] if isinstance(res, list) else res
    return out

  def _gather(self, futs, n: int) -> list:
    """Results of per-worker batch futures back in episode order (worker w holds i % W == w)."""
    out = [None] * n
    for w, f in enumerate(futs):
      res = self._guard(f.result)
      for pos, i in enumerate(range(w, n, self.num_workers)):
        out[i] = res[pos] if isinstance(res, list) else res
    return out

  @staticmethod
  def _guard(fn):
    try:
      return fn()
    except Exception as e:  # pylint: disable=broad-except
      return e

  def close(self) -> None:
    for c in self._clients:
      c.close()
    self._clients = []


def make_envs(config: ml_collections.ConfigDict, problem: Problem, count: int) -> EnvGroup:
  """`count` concurrent replay episodes over all tasks (see EnvGroup)."""
  return EnvGroup(config, problem, count)


# --------------------------------------------------------------------------------------------------------
# Evaluation.


def evaluate(config, compiled: Compiled, params, pher, problem: Problem, *, beta: float, w: float,
             envs=None, task_idx=None, seed: int = 0) -> dict:
  """Held-out evaluation: one rollout per task at `eval.temperature` (0 = argmax of the guided score).

  Returns:
    dict with mean 'match_ratio', 'exact_match', 'lcs', 'success' over the tasks, and 'num_tasks'.
  """
  task_idx = problem.eval_idx if task_idx is None else task_idx
  own = envs is None
  envs = envs or make_envs(config, problem, len(task_idx))
  try:
    rb = rollout(compiled, params, pher, problem, envs, task_idx, jax.random.key(seed), beta=beta, w=w,
                 temperature=config.eval.temperature, p_tf=0.0, tf_rng=np.random.default_rng(seed),
                 reward_kind="match_ratio")
  finally:
    if own:
      envs.close()
  out = summarize_rollouts(rb, problem)
  out["env_errors"] = int(sum(r == "env_error" for r in rb.end_reason))
  return out


def summarize_rollouts(rb: RolloutBatch, problem: Problem) -> dict:
  gold, gold_len = problem.gold_tools[rb.task], problem.gold_len[rb.task]
  h = gold.shape[1]
  mr = np.asarray(metrics_lib.match_ratio_batch(rb.tools, rb.length, gold, gold_len, horizon=h))
  return {
      "match_ratio": float(mr.mean()),
      "exact_match": float(np.mean(metrics_lib.exact_match_batch(rb.tools, rb.length, gold, gold_len))),
      "lcs": float(np.mean(metrics_lib.lcs_score_batch(rb.tools, rb.length, gold, gold_len))),
      "success": float(np.mean(mr >= 0.7)),
      "num_tasks": int(len(rb.task)),
  }


# --------------------------------------------------------------------------------------------------------
# Runs.


def _progress(total: int, initial: int, desc: str, enabled: bool):
  return tqdm.tqdm(total=total, initial=initial, desc=desc, disable=not enabled, dynamic_ncols=True,
                   leave=False)


def _write_json(path: str, obj: dict) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)


def _open_run(config, workdir: str, init: dict):
  """Checkpointer, train state (latest saved, else `init`), first step and metric writer of one run."""
  ck = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=config.checkpoint.max_to_keep,
                             save_every=config.checkpoint.every)
  state, start = ck.restore_or_init(init)
  start = 0 if start is None else start
  writer = metric_writer.MetricWriter(workdir, resume_step=start, tensorboard=config.logging.tensorboard)
  return ck, _commit(state), start, writer


def run_warmup(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int,
               progress: bool = True) -> dict:
  """Stage 1: supervised next-tool learning on the gold trajectories of the training split.

  Saves the whole train state every `checkpoint.every` steps and at the end; resumes from the latest step
  when called again with the same workdir. Returns the final train state.
  """
  os.makedirs(workdir, exist_ok=True)
  wc = config.warmup
  state = init_state(config, compiled.policy, problem, seed=seed, learning_rate=wc.learning_rate)
  ck, state, start, writer = _open_run(config, workdir, state)

  # All gold decisions of the training split: (task, step) pairs.
  tr = problem.train_idx
  pairs = np.array([(i, t) for i in tr for t in range(problem.gold_len[i])], np.int64)
  bs = min(wc.batch_size, len(pairs))
  bar = _progress(wc.steps, start, f"warm-up seed {seed}", progress)
  for step in range(start, wc.steps):
    rng = np.random.default_rng([seed, 1, step])
    sel = pairs[rng.choice(len(pairs), size=bs, replace=False)]
    ti, ts = sel[:, 0], sel[:, 1]
    obs = ([[c.output for c in problem.tasks[i].calls] for i in ti]
           if compiled.policy.uses_observations else None)
    batch = compiled.policy.featurize(ti, problem.gold_tools[ti], problem.gold_status[ti],
                                      ts.astype(np.int32), obs)
    labels = jnp.asarray(problem.gold_tools[ti, ts])
    params, opt_state, aux = compiled.sl_update(state["params"], state["opt_state"], batch, labels,
                                                jnp.ones((bs,), bool))
    state = {**state, "params": params, "opt_state": opt_state, "step": jnp.asarray(step + 1, jnp.int32)}
    if (step + 1) % config.logging.every == 0 or step + 1 == wc.steps:
      aux = jax.device_get(aux)
      writer.write(step + 1, {"warmup/" + k: v for k, v in aux.items()})
      bar.set_postfix(loss=f"{float(aux['loss']):.3f}", acc=f"{float(aux['accuracy']):.3f}")
    ck.maybe_save(step + 1, state, force=step + 1 == wc.steps)
    bar.update(1)
  bar.close()
  if ck.latest_step() != wc.steps:
    ck.save(wc.steps, state)
  writer.close()
  ck.close()
  return state


def run_rl(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int, init_params,
           beta_max: float, w_max: float, progress: bool = True, stop_after: int | None = None) -> dict:
  """Stages 2 and 3: mixed curriculum then GRPO with pheromone-guided sampling (beta_max = 0: plain GRPO).

  Args:
    init_params: the warm-up policy's parameters (also the KL reference when rl.kl_coef > 0).
    beta_max, w_max: pheromone weights reached at the end of the curriculum.
    stop_after: stop (after saving) once this many steps are done; used to test kill-and-resume.

  Returns:
    The final train state.
  """
  os.makedirs(workdir, exist_ok=True)
  rc, cc, pc = config.rl, config.curriculum, config.pheromone
  state = init_state(config, compiled.policy, problem, seed=seed, learning_rate=rc.learning_rate,
                     params=init_params)
  ck, state, start, writer = _open_run(config, workdir, state)
  m = rc.rollouts_per_task
  envs = make_envs(config, problem, rc.tasks_per_step * m)
  try:
    ref_params = init_params
    train_len = problem.gold_len[problem.train_idx]
    bar = _progress(rc.steps, start, f"{'phgpo' if beta_max > 0 else 'grpo'} seed {seed}", progress)
    for step in range(start, rc.steps):
      sv = curriculum.stage_values(
          step, curriculum_steps=cc.steps, lambda_start=cc.lambda_start, p_tf_start=cc.p_tf_start,
          horizon_start=cc.horizon_start, max_steps=config.env.max_steps, beta_max=beta_max, w_max=w_max)
      rng = np.random.default_rng([seed, 2, step])
      pool = problem.train_idx[train_len <= sv.horizon]
      if len(pool) == 0:
        pool = problem.train_idx
      tasks = rng.choice(pool, size=min(rc.tasks_per_step, len(pool)), replace=False)
      task_idx = np.repeat(tasks, m)
      key = jax.random.fold_in(jax.random.wrap_key_data(state["key"]), step)
      rb = rollout(compiled, state["params"], state["pheromone"], problem, envs, task_idx, key,
                   beta=sv.beta, w=sv.w, temperature=config.sampling.temperature, p_tf=sv.p_tf,
                   tf_rng=rng, reward_kind=rc.reward)
      group_ids = np.repeat(np.arange(len(tasks)), m).astype(np.int32)
      adv = estimators.compute_advantages(
          rc.advantage.estimator, jnp.asarray(rb.reward), jnp.asarray(group_ids), num_groups=len(tasks),
          eps=rc.advantage.eps, ddof=rc.advantage.ddof)
      q_emb = jnp.asarray(problem.query_emb[task_idx])
      flat = decision_batch(compiled.policy, task_idx, rb.tools, rb.status, rb.observations)
      args = (flat, jnp.asarray(rb.tools), jnp.asarray(rb.logp_old), adv, jnp.asarray(rb.pg_mask),
              jnp.asarray(rb.sl_mask))
      ref_logp = (compiled.logp_of(ref_params, flat, args[1]) if rc.kl_coef > 0
                  else jnp.asarray(rb.logp_old))
      params, opt_state = state["params"], state["opt_state"]
      for _ in range(rc.epochs):
        params, opt_state, aux = compiled.rl_update(params, opt_state, *args, ref_logp,
                                                    jnp.float32(sv.sl_weight), jnp.float32(rc.kl_coef))
      exec_mask = jnp.asarray(rb.tools >= 0)
      pher = compiled.pher_update(state["pheromone"], jnp.asarray(rb.tools), jnp.asarray(rb.templates),
                                  exec_mask, jnp.asarray(rb.reward), q_emb)
      state = {**state, "params": params, "opt_state": opt_state, "pheromone": pher,
               "step": jnp.asarray(step + 1, jnp.int32)}
      if (step + 1) % config.logging.every == 0 or step + 1 == rc.steps:
        aux = jax.device_get(aux)
        row = {f"rl/{k}": v for k, v in aux.items()}
        row.update({"rl/reward": float(rb.reward.mean()), "rl/match_ratio": float(rb.reward.mean())
                    if rc.reward == "match_ratio" else float("nan"), "rl/beta": sv.beta, "rl/w": sv.w,
                    "rl/p_tf": sv.p_tf, "rl/sl_weight": sv.sl_weight, "rl/horizon": sv.horizon,
                    "rl/stage": sv.stage, "rl/mean_length": float(rb.length.mean())})
        writer.write(step + 1, row)
        bar.set_postfix(loss=f"{float(aux['loss']):.3f}", match=f"{float(rb.reward.mean()):.3f}")
      ck.maybe_save(step + 1, state, force=step + 1 == rc.steps)
      bar.update(1)
      if stop_after is not None and step + 1 >= stop_after:
        ck.save(step + 1, state)
        break
  finally:
    envs.close()
  bar.close()
  writer.close()
  ck.close()
  return state


def run_seed(config, problem: Problem, compiled: Compiled, workdir: str, *, seed: int,
             progress: bool = True) -> dict:
  """Warm-up, then GRPO (beta = 0) and PhGPO from the same warm-up policy; held-out metrics of each.

  Each run's results are written to `<workdir>/seed_<s>/<run>/results.json`; a finished run is not
  repeated, an unfinished one resumes from its latest checkpoint.

  Returns:
    {run kind: metrics dict}.
  """
  out = {}
  base = os.path.join(workdir, f"seed_{seed}")
  wdir = os.path.join(base, "warmup")
  res_path = os.path.join(wdir, "results.json")
  warm = run_warmup(config, problem, compiled, wdir, seed=seed, progress=progress)
  if "warmup" in config.runs:
    if os.path.exists(res_path):
      out["warmup"] = json.load(open(res_path))
    else:
      out["warmup"] = evaluate(config, compiled, warm["params"], warm["pheromone"], problem, beta=0.0,
                               w=0.0, seed=seed)
      _write_json(res_path, out["warmup"])
  pc = config.pheromone
  for kind, beta_max, w_max in (("grpo", 0.0, 0.0), ("phgpo", pc.beta_max, pc.w_max)):
    if kind not in config.runs:
      continue
    rdir = os.path.join(base, kind)
    res_path = os.path.join(rdir, "results.json")
    if os.path.exists(res_path):
      out[kind] = json.load(open(res_path))
      continue
    t0 = time.time()
    st = run_rl(config, problem, compiled, rdir, seed=seed, init_params=warm["params"],
                beta_max=beta_max, w_max=w_max, progress=progress)
    res = evaluate(config, compiled, st["params"], st["pheromone"], problem, beta=beta_max, w=w_max,
                   seed=seed)
    if beta_max > 0:
      # The same policy decoded without the pheromone: what the network itself learned.
      res["policy_only"] = evaluate(config, compiled, st["params"], st["pheromone"], problem, beta=0.0,
                                    w=0.0, seed=seed)
    res["train_seconds"] = time.time() - t0
    _write_json(res_path, res)
    out[kind] = res
  return out


ROW_NAMES = {"warmup": "warm-up only", "grpo": "GRPO (beta = 0)", "phgpo": "PhGPO",
             "phgpo/policy_only": "  PhGPO, no pheromone at test"}


def format_table(results: dict[int, dict[str, dict]], runs: Sequence[str]) -> str:
  """Held-out table: mean +- std (population) over seeds of match ratio, exact match and success (%).

  PhGPO is decoded as trained (argmax of log pi + beta_max log tau); the indented row below it decodes the
  same PhGPO-trained policy with beta = 0, separating what the pheromone adds at test time.
  """
  seeds = sorted(results)
  lines = [f"Held-out TRAJECT-Bench, {len(seeds)} seed(s) {seeds}: mean +- std, percent",
           f"{'policy':<30} {'match ratio':>16} {'exact match':>16} {'success':>16}"]
  rows = []
  for kind in runs:
    rows.append(kind)
    if kind == "phgpo":
      rows.append("phgpo/policy_only")
  for row in rows:
    kind, _, sub = row.partition("/")
    per_seed = [results[s][kind] for s in seeds if kind in results[s]]
    if sub:
      per_seed = [r[sub] for r in per_seed if sub in r]
    cells = []
    for metric in ("match_ratio", "exact_match", "success"):
      vals = np.array([r[metric] for r in per_seed]) * 100
      cells.append(f"{vals.mean():7.2f} +- {vals.std():5.2f}" if len(vals) else "n/a")
    if sub and not per_seed:
      continue
    lines.append(f"{ROW_NAMES.get(row, row):<30} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
  return "\n".join(lines)


def run_comparison(config, workdir: str, *, progress: bool = True,
                   log: Callable[[str], None] = print) -> dict:
  """The main job: for each seed, warm-up / GRPO / PhGPO; prints and saves the held-out table and plot."""
  t0 = time.time()
  problem = prepare_problem(config)
  log(f"TRAJECT-Bench: {len(problem.tasks)} tasks ({len(problem.train_idx)} train, "
      f"{len(problem.eval_idx)} held out), {len(problem.tool_specs)} tools, "
      f"{int(problem.graph.edge_mask.sum())} graph edges; features ready in {time.time() - t0:.0f}s")
  policy = make_policy(config, problem)
  compiled = Compiled(config, policy, problem)
  results = {}
  for seed in config.seeds:
    results[seed] = run_seed(config, problem, compiled, workdir, seed=seed, progress=progress)
  table = format_table(results, config.runs)
  with open(os.path.join(workdir, "results_table.txt"), "w") as f:
    f.write(table + "\n")
  _write_json(os.path.join(workdir, "results.json"), {str(s): r for s, r in results.items()})
  series = {}
  for seed in config.seeds:
    for kind in ("grpo", "phgpo"):
      series[f"{kind} s{seed}"] = os.path.join(workdir, f"seed_{seed}", kind, "metrics.jsonl")
  metric_writer.plot_curves(series, ["rl/reward", "rl/loss", "rl/entropy"],
                            os.path.join(workdir, "learning_curves.png"),
                            title="PhGPO vs GRPO on TRAJECT-Bench (training reward = match ratio)")
  log(table)
  log(f"total {time.time() - t0:.0f}s; table, results.json and learning_curves.png in {workdir}")
  return results
