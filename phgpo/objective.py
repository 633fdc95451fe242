"""PhGPO's objective and decision rule, as pure functions (jit them at the call site).

Objective of the RL stages (stage 2 mixed curriculum, stage 3 full-pheromone GRPO):
  L(theta) = lambda L_SL + (1 - lambda) L_PG - gamma H[pi_theta]  (+ kl_coef KL(pi_theta || pi_ref))
  L_SL = mean over teacher-forced decisions of -log pi_theta(a*_t | s_t);
  L_PG = GRPO clipped surrogate on the policy's own decisions, ratio pi_theta / pi_theta_old at
         temperature 1 over all tools (the pheromone and the temperature only shape sampling);
  H    = mean entropy of pi_theta over every executed decision (own or teacher-forced).
Warm-up (stage 1): L_SL on the gold decisions of the training split.

Decision rule (one tool call per rollout and turn):
  C_t = top-K tools of pi_theta(. | s_t);
  a_t ~ softmax((log pi_theta(a | s_t) + beta log tau(a_{t-1}, a | x)) / T) over C_t  (T <= 0: argmax);
  u_t ~ tau_arg(a_t, .) normalised over the tool's templates;
tau(., . | x) is the fused task-agnostic / task-dependent pheromone (`phgpo.pheromone.pheromone_rows`).
Evaluation decodes with T = `eval.temperature` (0: the argmax of the guided score).

Source: PhGPO, arXiv:2602.13691, "Three-stage schedule" and "Pheromone-guided sampling" (SPEC.md, PhGPO).
GRPO: Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300, eq. 3. k3 KL: Schulman 2020, "Approximating KL
Divergence".

Config keys: lambda is the curriculum's `curriculum.lambda_start` annealed to 0 (`phgpo.curriculum`);
gamma `rl.entropy_coef`; kl_coef `rl.kl_coef`; clip range `rl.clip_low`, `rl.clip_high`; aggregation
`rl.agg_mode`; K `sampling.top_k`; T `sampling.temperature` (training) and `eval.temperature`; beta and w
ramp to `pheromone.beta_max` and `pheromone.w_max`.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from common import losses
from phgpo import edges
from phgpo import pheromone as pher_lib
from phgpo import sampling


class Decision(NamedTuple):
  """One decision per rollout.

  Attributes:
    tools: i32[B], the sampled tool, -1 where the row has no valid candidate.
    templates: i32[B], the sampled argument template, -1 for no tool or a tool without templates.
    logp: f32[B], log pi_theta(tool | s) at temperature 1 over all tools (at tool 0 where tools == -1).
    has_candidate: bool[B], False exactly where tools == -1.
    logp_behaviour: f32[B], log of the probability the sampling distribution (top-K of pi re-weighted by
      tau^beta at temperature T) gave the tool; 0 at T <= 0 and where tools == -1. Feeds the optional
      truncated importance weight (`truncated_is_weight`, config `rl.tis_cap`).
  """
  tools: jax.Array
  templates: jax.Array
  logp: jax.Array
  has_candidate: jax.Array
  logp_behaviour: jax.Array


def action_log_probs(logits: chex.Array, actions: chex.Array) -> jax.Array:
  """log pi_theta(a_t | s_t) of the taken actions, from flat per-decision logits.

  logp[b, t] = log_softmax(logits[b * H + t])[max(actions[b, t], 0)]  (temperature 1, all N tools).

  Args:
    logits: f32[B * H, N], the policy's logits for every decision (row b * H + t = step t of rollout b).
    actions: i32[B, H], the tool taken at each step; -1 (no call) reads tool 0: mask those steps.
  Returns:
    f32[B, H].
  Raises:
    AssertionError at trace time on wrong ranks, dtypes or a row count other than B * H.
  """
  chex.assert_rank([logits, actions], 2)
  chex.assert_type([logits, actions], [float, int])
  b, h = actions.shape
  chex.assert_axis_dimension(logits, 0, b * h)
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  return jnp.take_along_axis(logp_all, jnp.maximum(actions, 0).reshape(-1, 1), axis=1).reshape(b, h)


def phgpo_loss(logits: chex.Array, actions: chex.Array, logp_old: chex.Array, advantages: chex.Array,
               pg_mask: chex.Array, sl_mask: chex.Array, ref_logp: chex.Array, *, sl_weight, kl_coef,
               entropy_coef: float, clip_low: float, clip_high: float, agg_mode: str = "token_mean",
               sl_labels: chex.Array | None = None,
               is_weight: chex.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """PhGPO's RL loss: lambda L_SL + (1 - lambda) L_PG - gamma H + kl_coef KL.

    logp  = log pi_theta(a_t | s_t)                          (`action_log_probs`)
    A_bt  = advantages[b] * sg(is_weight[b, t])              (is_weight = 1 when None)
    L_PG  = clipped_surrogate(logp, logp_old, A, pg_mask)     (common.losses, `agg_mode`)
    L_SL  = mean_{sl_mask} -log pi_theta(y_t | s_t),  y = sl_labels if given, else actions
    H     = mean_{pg_mask | sl_mask} entropy(softmax(logits))
    KL    = mean_{pg_mask} k3(logp, ref_logp)
    L     = 1[any sl] lambda L_SL + 1[any pg] (1 - lambda) L_PG - gamma H + kl_coef KL
  A term with no decision in the batch (e.g. no teacher-forced step) is dropped, so a batch of own
  decisions only is plain GRPO whatever lambda is. Source: PhGPO, arXiv:2602.13691, "Three-stage
  schedule", stage 2 (SPEC.md, PhGPO); the KL term is this implementation's option (default off).

  Options where the paper is silent (defaults = ours, reproducing the loss without them):
  - SL targets (config `rl.sl_steps`). Ours, 'teacher_forced': L_SL on the teacher-forced decisions, whose
    executed action is the gold one (sl_labels None). The authors' released script, 'all': a cross-entropy
    to the gold tool at every executed step that has one, own decisions included (the caller passes the
    gold tools as sl_labels and those steps in sl_mask; an own decision may then be in both masks).
  - Truncated importance weight (config `rl.tis_cap`). Actions are drawn from the pheromone-shaped
    distribution mu (`phgpo.sampling.sample_tools_with_logp`), not from pi_theta_old; is_weight =
    min(pi_theta_old / mu, C) (`truncated_is_weight`) multiplies each decision's clipped surrogate term.
    As the weight is >= 0 it is folded into the per-decision advantage: -min(r w A, clip(r) w A) =
    w * -min(r A, clip(r) A), so the clip decision is unchanged. None (the default, `rl.tis_cap` = 0) is a
    weight of 1. Truncated importance sampling: Ionides 2008, "Truncated Importance Sampling", JCGS 17(2);
    as used for RL by Espeholt et al. 2018, "IMPALA", arXiv:1802.01561, sec. 4.1 (V-trace's truncated
    rho-bar weights), and by Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy
    RL Training" (TIS: a min(pi / mu, C) factor on the PPO loss for a sampler/learner mismatch).

  Args:
    logits: f32[B * H, N], pi_theta's logits at every decision, row b * H + t.
    actions: i32[B, H], executed tools (-1 after the end).
    logp_old: f32[B, H], log pi_theta_old(a_t) recorded at sampling time.
    advantages: f32[B], GRPO advantage per rollout (shared by its decisions).
    pg_mask: bool[B, H], decisions sampled from the policy (the PG term).
    sl_mask: bool[B, H], decisions with a supervised target (the SL term): the teacher-forced ones, or with
      `rl.sl_steps` = 'all' every executed step with a gold tool.
    ref_logp: f32[B, H], log pi_ref(a_t) of the KL reference (any value when kl_coef = 0).
    sl_weight: lambda in [0, 1] (may be traced; `curriculum.lambda_start`, annealed to
      `curriculum.lambda_floor`).
    kl_coef: KL coefficient >= 0 (may be traced; `rl.kl_coef`).
    entropy_coef: gamma (`rl.entropy_coef`).
    clip_low, clip_high: ratio clip range (`rl.clip_low`, `rl.clip_high`).
    agg_mode: aggregation of L_PG over decisions (`rl.agg_mode`, see common.losses.aggregate_loss).
    sl_labels: optional i32[B, H], the SL target tool per decision (a negative label reads tool 0: keep it
      out of sl_mask). None: the executed actions.
    is_weight: optional f32[B, H], a weight >= 0 per decision on the PG term, treated as a constant
      (stop_gradient). None: 1. Masked positions may hold NaN or inf.
  Returns:
    (loss f32[], aux) with aux = {'loss', 'pg_loss', 'sl_loss', 'entropy', 'kl', 'clip_fraction',
    'ratio_mean', 'ratio_max', 'approx_kl'}, all f32[], plus 'is_weight_mean' (mean over pg_mask) when
    is_weight is given.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError on a bad clip range or
    aggregation mode.
  Notes:
    Not checked under jit: is_weight >= 0 (a negative weight would flip the clip's direction).
  """
  chex.assert_rank([logits, actions, logp_old, advantages, pg_mask, sl_mask, ref_logp],
                   [2, 2, 2, 1, 2, 2, 2])
  chex.assert_type([actions, logp_old, advantages, pg_mask, sl_mask, ref_logp],
                   [int, float, float, bool, bool, float])
  chex.assert_equal_shape([actions, logp_old, pg_mask, sl_mask, ref_logp])
  chex.assert_equal_shape_prefix([actions, advantages], 1)
  if sl_labels is not None:
    chex.assert_type(sl_labels, int)
    chex.assert_equal_shape([actions, sl_labels])
  if is_weight is not None:
    chex.assert_type(is_weight, float)
    chex.assert_equal_shape([actions, is_weight])
  logp = action_log_probs(logits, actions)
  pg_adv = advantages
  if is_weight is not None:
    is_weight = jax.lax.stop_gradient(is_weight)
    pg_adv = advantages[:, None] * is_weight
  pg, m = losses.clipped_surrogate_loss(logp, logp_old, pg_adv, pg_mask, clip_low=clip_low,
                                        clip_high=clip_high, agg_mode=agg_mode)
  sl_logp = logp if sl_labels is None else action_log_probs(logits, sl_labels)
  sl = losses.masked_mean(-sl_logp, sl_mask)
  any_mask = (pg_mask | sl_mask).reshape(-1)
  ent = losses.masked_mean(losses.entropy_from_logits(logits), any_mask)
  kl = losses.masked_mean(losses.kl_k3(logp, ref_logp), pg_mask)
  has_pg = jnp.any(pg_mask).astype(jnp.float32)
  has_sl = jnp.any(sl_mask).astype(jnp.float32)
  loss = (has_sl * sl_weight * sl + has_pg * (1.0 - sl_weight) * pg - entropy_coef * ent
          + kl_coef * kl)
  aux = {"loss": loss, "pg_loss": pg, "sl_loss": sl, "entropy": ent, "kl": kl, **m}
  if is_weight is not None:
    aux["is_weight_mean"] = losses.masked_mean(is_weight, pg_mask)
  return loss, aux


def truncated_is_weight(logp_old: chex.Array, logp_behaviour: chex.Array, *, cap) -> jax.Array:
  """Truncated importance weight of the sampling distribution: w = min(exp(logp_old - logp_behaviour), cap).

  w = min(pi_theta_old(a) / mu(a), C), with mu the distribution the action was actually drawn from (the
  pheromone-re-weighted top-K at temperature T, `phgpo.sampling.sample_tools_with_logp`); C <= 0 disables
  the correction (w = 1). For an argmax draw (T <= 0) mu(a) = 1, logp_behaviour = 0 and w = min(pi_old(a), C).
  Source: Ionides 2008, "Truncated Importance Sampling", J. Comput. Graph. Stat. 17(2); Espeholt et al.
  2018, "IMPALA", arXiv:1802.01561, sec. 4.1 (V-trace's truncation rho-bar); Yao et al. 2025, "Your Efficient
  RL Framework Secretly Brings You Off-Policy RL Training" (TIS). Config key `rl.tis_cap` (0: off).
  The PhGPO paper and the authors' script have no such weight (the script instead takes log mu as the
  PPO ratio's denominator); this is our option, off by default.

  Args:
    logp_old: f32[B, H], log pi_theta_old(a_t) at temperature 1 over all tools (`Decision.logp`).
    logp_behaviour: f32[B, H], log mu(a_t) (`sample_tools_with_logp`); any value where the weight is unused.
    cap: C (Python float or traced scalar); C <= 0 gives ones.
  Returns:
    f32[B, H] in [0, C] (C > 0), or ones (C <= 0). Not differentiated (stop_gradient applied). NaN inputs
    give NaN where C > 0: mask them downstream (`phgpo_loss` ignores positions outside pg_mask).
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  """
  chex.assert_rank([logp_old, logp_behaviour], 2)
  chex.assert_type([logp_old, logp_behaviour], float)
  chex.assert_equal_shape([logp_old, logp_behaviour])
  cap = jnp.asarray(cap, jnp.float32)
  d = logp_old.astype(jnp.float32) - logp_behaviour.astype(jnp.float32)
  w = jnp.minimum(jnp.exp(d), cap)
  return jax.lax.stop_gradient(jnp.where(cap > 0, w, 1.0))


def warmup_loss(logits: chex.Array, labels: chex.Array,
                mask: chex.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Stage-1 supervised loss: L_SL = mean_{mask} -log pi_theta(a*_t | s_t), plus top-1 accuracy.

  Source: PhGPO, arXiv:2602.13691, "Three-stage schedule", stage 1 (SPEC.md, PhGPO).

  Args:
    logits: f32[B, N], pi_theta's logits at the gold decision states.
    labels: i32[B], gold tools a*_t (a negative label reads tool 0: mask it).
    mask: bool[B], decisions that count.
  Returns:
    (loss f32[], {'loss', 'accuracy'}) with accuracy = mean_{mask} 1[argmax logits == label].
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  """
  chex.assert_rank([logits, labels, mask], [2, 1, 1])
  chex.assert_type([logits, labels, mask], [float, int, bool])
  chex.assert_equal_shape_prefix([logits, labels, mask], 1)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), jnp.maximum(labels, 0)[:, None], 1)[:, 0]
  loss = losses.masked_mean(-logp, mask)
  acc = losses.masked_mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32), mask)
  return loss, {"loss": loss, "accuracy": acc}


def decide(key: chex.PRNGKey, logits: chex.Array, pher: pher_lib.PheromoneState, prev_tools: chex.Array,
           task_sim: chex.Array, template_mask: chex.Array, *, beta, w, temperature, top_k: int,
           kappa: float, top_k_similar: int, tau_min: float, tau_max: float,
           dep_units: str = "tau_range", sim_threshold=0.0, first_step_pheromone: bool = True,
           hot_edges: int | None = None) -> Decision:
  """PhGPO's decision rule: top-K of pi re-weighted by tau^beta at temperature T, then a template.

    tau_b   = pheromone_rows(pher, a_{t-1}, x_b; w)               (fused pheromone row, f32[N])
    C_b     = top-K tools of logits_b
    a_b     ~ softmax((log pi(a) + beta log tau_b(a)) / T) over C_b   (T <= 0: argmax, the eval decode)
    u_b     ~ tau_arg(a_b, .) over the tool's templates
    logp_b  = log pi(a_b)  (temperature 1, all tools: what the importance ratio uses)
  Source: PhGPO, arXiv:2602.13691, "Pheromone-guided sampling" (SPEC.md, PhGPO, "Sampling"). The
  temperature divides the whole score, prior included (`phgpo.sampling.sample_tools`).

  Args:
    key: PRNG key, split once into the tool and template draws.
    logits: f32[B, N], pi_theta's logits at the current decision states.
    pher: the `PheromoneState`.
    prev_tools: i32[B], previous tool per rollout (START = N at the first decision).
    task_sim: f32[B, T], `phgpo.memory_bank.bank_similarity` of each rollout's task to every task row the
      memory bank may name (constant over an episode).
    template_mask: bool[N, Tm], the graph's templates (`ToolGraph.template_mask`).
    beta: weight of log tau (may be traced; ramps to `pheromone.beta_max`; 0 ignores the pheromone).
    w: task-dependent pheromone weight (may be traced; ramps to `pheromone.w_max`).
    temperature: T (may be traced; `sampling.temperature`, `eval.temperature` at evaluation).
    top_k: K (static; `sampling.top_k`).
    kappa, top_k_similar, tau_min, tau_max, dep_units, sim_threshold: the pheromone fusion's
      (`pheromone.<name>`, see `phgpo.pheromone.pheromone_rows`).
    first_step_pheromone: static; False samples the first decision (prev = START) from the policy alone,
      as the authors' trainer does (config `pheromone.first_step`; True, ours, applies the START row).
    hot_edges: static bound on the memory-bank edges to rank per row (None: every edge; see
      `phgpo.memory_bank.dependent_pheromone`; the rollout driver passes one, same result, faster).
  Returns:
    `Decision`.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError on bad static options.
  Notes:
    Rows are independent: B may be sharded; the pheromone tables are replicated.
  """
  chex.assert_rank([logits, prev_tools, task_sim, template_mask], [2, 1, 2, 2])
  chex.assert_type([logits, prev_tools, task_sim, template_mask], [float, int, float, bool])
  chex.assert_equal_shape_prefix([logits, prev_tools, task_sim], 1)
  chex.assert_equal_shape_prefix([template_mask, pher.tau_arg], 2)
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  rows = pher_lib.pheromone_rows(pher, prev_tools, task_sim, w=w, kappa=kappa,
                                 top_k_similar=top_k_similar, tau_min=tau_min, tau_max=tau_max,
                                 dep_units=dep_units, sim_threshold=sim_threshold, hot_edges=hot_edges)
  log_prior = jnp.log(rows)
  if not first_step_pheromone:
    # No pheromone at the first decision: a flat prior there (log 1 = 0) leaves the policy's own scores.
    log_prior = jnp.where((prev_tools >= pher.tau.shape[1])[:, None], 0.0, log_prior)
  k_tool, k_tmpl = jax.random.split(key)
  tools, has, logp_behaviour = sampling.sample_tools_with_logp(k_tool, logits, log_prior, top_k=top_k,
                                                               temperature=temperature, beta=beta)
  # Effective (lazily evaporated) tau_arg rows of the chosen tools only: O(B Tm), not O(N Tm).
  tmpl_rows = pher_lib.arg_rows(pher, tools, tau_min=tau_min)
  row_of = jnp.where(tools >= 0, jnp.arange(tools.shape[0], dtype=jnp.int32), -1)
  templates = sampling.sample_templates(k_tmpl, tmpl_rows, edges.take_rows(template_mask, tools),
                                        row_of)
  logp = jnp.take_along_axis(logp_all, jnp.maximum(tools, 0)[:, None], axis=1)[:, 0]
  return Decision(tools, templates, logp, has, logp_behaviour)
