"""The policy loss shared by GRPO, GiGPO and PlanPO: a clipped surrogate plus a KL penalty.

loss = surrogate(logp_new, logp_old, A) + kl_coef * KL(pi_theta || pi_ref), over the turn rows of a
batch (each row one response, its tokens padded to T; only the policy's own tokens are in the mask).

Source: SPEC.md "PlanPO" (objective: (1 / sum_i T_i) sum_i sum_t l_{i,t} - beta KL, KL coefficient
0.01, ScienceWorld 1e-3); GiGPO's published setting (clip 0.2, token-mean, k3 "low_var_kl" KL loss
coefficient 0.01; Feng et al. 2025, arXiv:2505.10978); the terms come from `common/losses.py`.
Choices: the ratio per token (the reference framework; 'token') or per response (the paper's
equation; 'response': the length-normalised response ratio of GSPO, clipped per response, responses
weighing equally, i.e. (1 / sum_i T_i) sum_{i,t} l_{i,t}); config keys `planpo.ratio`,
`planpo.clip_low`, `planpo.clip_high`, `planpo.kl_coef`, `planpo.agg_mode`.
"""
import jax

from common import losses

RATIOS = ("token", "response")


def policy_loss(logp_new, logp_old, logp_ref, advantages, mask, *, clip_low=0.2, clip_high=0.2,
                kl_coef=0.01, kl_estimator="k3", agg_mode="token_mean", ratio="token"):
  """Clipped surrogate plus kl_coef times the KL penalty to a reference policy.

  ratio 'token':    surrogate = common.losses.clipped_surrogate_loss (r_it per token, aggregated by
                    agg_mode: 'token_mean' = verl-agent's token-mean, 'seq_mean_token_mean' = the
                    paper's mean over all turn responses of each response's token mean);
  ratio 'response': surrogate = common.losses.gspo_loss (one length-normalised ratio per response).
  KL = common.losses.kl_penalty(logp_new, logp_ref, mask, estimator=kl_estimator, agg_mode=agg_mode)
  (k3: verl's "low_var_kl"). Defaults: clip 0.2 / 0.2, kl_coef 0.01 (ScienceWorld 1e-3), token
  ratio, token-mean. Config keys `planpo.ratio`, `planpo.clip_low`, `planpo.clip_high`,
  `planpo.kl_coef`, `planpo.agg_mode`.

  Args:
    logp_new: f32[B, T] log pi_theta of each response token (carries the gradient).
    logp_old: f32[B, T] log pi_theta_old at sampling time (constant).
    logp_ref: f32[B, T] log pi_ref of the reference policy (constant), or None when kl_coef == 0.
    advantages: f32[B] one advantage per row (GRPO, GiGPO or PlanPO), or f32[B, T] per token
      (ratio 'token' only).
    mask: bool[B, T] the policy's own response tokens. Masked positions may hold NaN or inf.
    clip_low, clip_high: floats >= 0; the ratio is clipped to [1 - clip_low, 1 + clip_high].
    kl_coef: float >= 0 (may be traced when logp_ref is given).
    kl_estimator: 'k1' or 'k3' (static).
    agg_mode: a `common.losses.AGG_MODES` name (static).
    ratio: 'token' or 'response' (static).

  Returns:
    (loss f32[], metrics dict of f32[] without gradient: the surrogate's metrics plus 'pg_loss' and
    'kl' (0 when logp_ref is None)).

  Raises:
    ValueError: unknown ratio, estimator or agg_mode; negative clip range; logp_ref None with a
      nonzero kl_coef.
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  if ratio not in RATIOS:
    raise ValueError(f"Unknown ratio {ratio!r}; valid values are "
                     f"{', '.join(repr(r) for r in RATIOS)} (config key `planpo.ratio`).")
  if ratio == "token":
    pg, metrics = losses.clipped_surrogate_loss(logp_new, logp_old, advantages, mask,
                                                clip_low=clip_low, clip_high=clip_high,
                                                agg_mode=agg_mode)
  else:
    pg, metrics = losses.gspo_loss(logp_new, logp_old, advantages, mask, clip_low=clip_low,
                                   clip_high=clip_high)
  metrics = dict(metrics, pg_loss=jax.lax.stop_gradient(pg))
  if logp_ref is None:
    if isinstance(kl_coef, jax.core.Tracer) or float(kl_coef) != 0.0:
      raise ValueError(f"logp_ref is None but kl_coef = {kl_coef!r}: pass the reference policy's "
                       f"log-probabilities, or set kl_coef to 0 (config key `planpo.kl_coef`).")
    metrics["kl"] = jax.numpy.zeros((), pg.dtype)
    return pg, metrics
  kl = losses.kl_penalty(logp_new, logp_ref, mask, estimator=kl_estimator, agg_mode=agg_mode)
  metrics["kl"] = jax.lax.stop_gradient(kl)
  return pg + kl_coef * kl, metrics
