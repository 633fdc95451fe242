"""PhGPO log-prior sampling: the policy's top-K tools re-weighted by the pheromone prior.

  C_t = top-K tools of pi_theta(. | s_t) (invalid tools excluded)
  p(a | s_t, a_{t-1}) ∝ exp( (log pi_theta(a | s_t) + beta log tau(a_{t-1}, a | x)) / T ),  a in C_t
  u_t ~ tau_arg(a_t, .) normalised over the tool's templates.

Source: PhGPO, arXiv:2602.13691, sec. "Pheromone-guided sampling" (SPEC.md "PhGPO",
"Sampling"). The policy gradient and importance ratios use pi_theta only (at temperature 1 over
all tools, computed by the caller); these functions only decide which actions get sampled.

Both samplers are jit-compiled (`top_k` static); every rollout draws with its own key from
`jax.random.split(key, B)`. Pass different keys to `sample_tools` and `sample_templates`.
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp

from phgpo import edges

NO_CANDIDATE = -1


def _row_gumbel(key: jax.Array, batch: int, width: int) -> jax.Array:
  """f32[batch, width] Gumbel noise, one key per row from jax.random.split(key, batch)."""
  keys = jax.random.split(key, batch)
  return jax.vmap(lambda k: jax.random.gumbel(k, (width,), jnp.float32))(keys)


def _sample_tools(key, logits, log_prior, *, top_k, temperature, beta, valid_mask, with_logp):
  """`sample_tools`, plus the behaviour log-probability when with_logp (static); see the public docstrings."""
  chex.assert_rank([logits, log_prior], 2)
  chex.assert_type([logits, log_prior], float)
  chex.assert_equal_shape([logits, log_prior])
  if valid_mask is not None:
    chex.assert_type(valid_mask, bool)
    chex.assert_equal_shape([logits, valid_mask])
  if int(top_k) < 1:
    raise ValueError(f"top_k must be >= 1 (config key sampling.top_k), got {top_k}.")
  b, n = logits.shape
  k = min(int(top_k), n)
  logits = logits.astype(jnp.float32)
  valid = ~jnp.isnan(logits) & (logits > -jnp.inf)
  if valid_mask is not None:
    valid = valid & valid_mask
  masked = jnp.where(valid, logits, -jnp.inf)
  row_max = jnp.max(jnp.where(valid, logits, -jnp.inf), axis=-1, keepdims=True)
  shifted = jnp.where(valid, masked - jnp.where(jnp.isfinite(row_max), row_max, 0.0), -jnp.inf)
  log_z = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))
  log_pi = jnp.where(valid, shifted - log_z, -jnp.inf)

  top_vals, cand = jax.lax.top_k(masked, k)
  cand_lp = jnp.take_along_axis(log_pi, cand, axis=-1)
  cand_prior = jnp.take_along_axis(log_prior.astype(jnp.float32), cand, axis=-1)
  beta = jnp.asarray(beta, jnp.float32)
  prior_term = jnp.where(beta == 0, 0.0, beta * jnp.where(beta == 0, 0.0, cand_prior))
  score = cand_lp + prior_term
  ok = (top_vals > -jnp.inf) & ~jnp.isnan(score) & (score > -jnp.inf)
  score = jnp.where(ok, score, -jnp.inf)
  has_candidate = jnp.any(ok, axis=-1)

  temperature = jnp.asarray(temperature, jnp.float32)
  noise_scale = jnp.where(temperature > 0, temperature, 0.0)
  perturbed = jnp.where(ok, score + noise_scale * _row_gumbel(key, b, k), -jnp.inf)
  pick = jnp.argmax(perturbed, axis=-1)
  tools = jnp.take_along_axis(cand, pick[:, None], axis=-1)[:, 0].astype(jnp.int32)
  tools = jnp.where(has_candidate, tools, NO_CANDIDATE)
  if not with_logp:
    return tools, has_candidate, None
  # log softmax(score / T) over the candidates, at the pick; 0 for T <= 0 (argmax) or no candidate.
  sampled = has_candidate & (temperature > 0)
  z = jnp.where(ok, score / jnp.where(temperature > 0, temperature, 1.0), -jnp.inf)
  z_max = jnp.where(has_candidate, jnp.max(z, axis=-1), 0.0)
  log_z = z_max + jnp.log(jnp.sum(jnp.where(ok, jnp.exp(z - z_max[:, None]), 0.0), axis=-1))
  z_pick = jnp.take_along_axis(z, pick[:, None], axis=-1)[:, 0]
  logp = jnp.where(sampled, jnp.where(sampled, z_pick, 0.0) - jnp.where(sampled, log_z, 0.0), 0.0)
  return tools, has_candidate, logp


@functools.partial(jax.jit, static_argnames=("top_k",))
def sample_tools(key: chex.PRNGKey, logits: chex.Array, log_prior: chex.Array, *,
                 top_k: int = 20, temperature=0.7, beta=0.0,
                 valid_mask: chex.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Samples one tool per rollout from the pheromone-re-weighted top-K of the policy.

  log pi = log_softmax(logits) over the valid tools; C = top-K of logits among valid tools;
  score(a) = log pi(a) + beta * log_prior(a) for a in C;
  a ~ softmax(score / T) over C for T > 0 (Gumbel-max: argmax(score + T g), g ~ Gumbel(0, 1)),
  a = argmax score over C for T <= 0 (no division by T anywhere).
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", "Sampling"); published defaults K = 20,
  T = 0.7, beta ramped to beta_max = 0.7. The temperature divides the whole score, prior
  included, as the SPEC writes it (the authors' code tempers only the policy term).

  Args:
    key: PRNG key; split into B per-rollout keys.
    logits: f32[B, N], policy logits over all tools; -inf or NaN marks an invalid tool.
    log_prior: f32[B, N], log tau(a_{t-1}, . | x), e.g. log of `phgpo.pheromone.pheromone_rows`.
      Ignored (never multiplied) when beta == 0, so it may then hold anything.
    top_k: K (static, config `sampling.top_k`); K > N uses all N tools.
    temperature: T (config `sampling.temperature`; `eval.temperature` when evaluating); may be
      traced. T <= 0 takes the argmax.
    beta: prior weight (ramped by the curriculum to config `pheromone.beta_max`); may be traced.
      beta = 0 samples the policy's own top-K distribution at temperature T.
    valid_mask: optional bool[B, N], tools allowed at this step (False excluded).
  Returns:
    tools: i32[B], the sampled tool, or -1 (`NO_CANDIDATE`) for a row without any valid
      candidate (never 0 by default).
    has_candidate: bool[B], False exactly where tools == -1.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError if top_k < 1.
  Notes:
    Rows are independent: B may be sharded. Ties at T <= 0 go to the higher logit, then the
    lower tool index (the order of `jax.lax.top_k`).
  """
  tools, has_candidate, _ = _sample_tools(key, logits, log_prior, top_k=top_k, temperature=temperature,
                                         beta=beta, valid_mask=valid_mask, with_logp=False)
  return tools, has_candidate


@functools.partial(jax.jit, static_argnames=("top_k",))
def sample_tools_with_logp(key: chex.PRNGKey, logits: chex.Array, log_prior: chex.Array, *,
                           top_k: int = 20, temperature=0.7, beta=0.0,
                           valid_mask: chex.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`sample_tools`, plus the log-probability of each draw under the distribution it was drawn from.

  The same draw as `sample_tools` for the same arguments (same key, same tools), and
    mu(a) = softmax(score / T)[a] over the candidates C, score = log pi + beta * log_prior (as in `sample_tools`),
    logp_behaviour = log mu(a) = score(a) / T - logsumexp_{c in C} score(c) / T   for T > 0,
  the behaviour policy of off-policy corrections such as the truncated importance weight
  `phgpo.objective.truncated_is_weight` (config `rl.tis_cap`): the PG ratio uses pi_theta at temperature 1
  over all tools, while the actions come from mu.
  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", "Sampling"). The authors' released training script
  keeps the analogous quantity (the log of its fused top-K probability) as the action's old log-prob.

  Args:
    key, logits, log_prior, top_k, temperature, beta, valid_mask: as in `sample_tools`.
  Returns:
    tools: i32[B], as `sample_tools`.
    has_candidate: bool[B], as `sample_tools`.
    logp_behaviour: f32[B], log mu(tools) <= 0; exactly 0 where T <= 0 (the argmax is deterministic:
      mu(a) = 1) and where has_candidate is False. exp(log_softmax) sums to 1 over C.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes; ValueError if top_k < 1.
  Notes:
    Rows are independent: B may be sharded. No gradient is meant to flow through logp_behaviour (it is
    a sampling-time constant).
  """
  return _sample_tools(key, logits, log_prior, top_k=top_k, temperature=temperature, beta=beta,
                       valid_mask=valid_mask, with_logp=True)


@jax.jit
def sample_templates(key: chex.PRNGKey, tau_arg: chex.Array, template_mask: chex.Array,
                     tools: chex.Array) -> jax.Array:
  """Samples one argument template per rollout: u ~ tau_arg(a, .) / sum over valid templates.

  Source: PhGPO, arXiv:2602.13691 (SPEC.md "PhGPO", "Sampling": "draw the argument template
  u_t from tau_arg(a_t, .) normalised (no extra network)").

  Args:
    key: PRNG key; split into B per-rollout keys.
    tau_arg: f32[N, Tm], argument pheromone (> 0 where valid, e.g. `PheromoneState.tau_arg`).
    template_mask: bool[N, Tm], existing templates (`ToolGraph.template_mask`).
    tools: i32[B], chosen tools; -1 (no candidate) or any index outside [0, N) gives -1.
  Returns:
    i32[B], the template index, or -1 for an invalid tool or a tool without templates.
  Raises:
    AssertionError at trace time on wrong ranks, shapes or dtypes.
  Notes:
    Rows are independent: B may be sharded; the tables are replicated.
  """
  chex.assert_rank([tau_arg, template_mask, tools], [2, 2, 1])
  chex.assert_type([tau_arg, template_mask, tools], [float, bool, int])
  chex.assert_equal_shape([tau_arg, template_mask])
  n, tm = tau_arg.shape
  tools = tools.astype(jnp.int32)
  in_range = (tools >= 0) & (tools < n)
  row = edges.take_rows(tau_arg, tools).astype(jnp.float32)
  ok = edges.take_rows(template_mask, tools) & in_range[:, None] & (row > 0)
  logits = jnp.where(ok, jnp.log(jnp.where(ok, row, 1.0)), -jnp.inf)
  perturbed = jnp.where(ok, logits + _row_gumbel(key, tools.shape[0], tm), -jnp.inf)
  pick = jnp.argmax(perturbed, axis=-1).astype(jnp.int32)
  return jnp.where(jnp.any(ok, axis=-1), pick, NO_CANDIDATE)
