"""Policy losses over padded token arrays: masked means, loss aggregation, clipped surrogate, GSPO,
KL estimators and entropy.

Conventions. Token arrays are f32[B, T]: B sequences (rollouts, or turn-responses) padded to T
tokens; `mask` is bool[B, T] (nonzero = a real token). Padding never counts, in a loss or in any
length: every function replaces masked inputs with a finite constant *before* any arithmetic (the
"double-where" trick), so NaN or inf in masked positions changes neither value nor gradient.
Every function is pure, jit-compatible, and works unchanged with the batch axis sharded over a mesh
(reductions over a sharded axis become all-reduces).

Source: SPEC.md, "Common core".
"""
import chex
import jax
import jax.numpy as jnp

from common.rows import safe_div

AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")
KL_ESTIMATORS = ("k1", "k3")

# Bound on |log-ratio| inside exp() (importance ratios, GSPO sequence ratios, k3). exp(20) ~ 4.9e8
# is far beyond any clip range, so the bound only matters for pathological inputs, where it keeps
# value and gradient finite. Beyond the bound the gradient through the log-ratio is 0.
LOG_RATIO_BOUND = 20.0


def _as_valid(mask, like):
  mask = jnp.asarray(mask)
  chex.assert_equal_shape([like, mask])
  return mask if mask.dtype == jnp.bool_ else mask != 0


def _float(x):
  x = jnp.asarray(x)
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def masked_mean(x, mask, axis=None):
  """Mean of `x` over the positions where `mask` is set.

  masked_mean(x, m) = sum(x * m) / sum(m), with x replaced by 0 at masked positions *before* the
  product, so NaN/inf there leak into neither the value nor the gradient. Where no position along
  the reduced axes is valid, the result is 0 (not NaN).

  Args:
    x: f32[...] values.
    mask: bool[...] (nonzero = valid), same shape as x.
    axis: None (all axes), an int or a tuple of ints, as in jnp.sum.

  Returns:
    f32 array with the reduced axes removed (a scalar for axis=None).

  Raises:
    AssertionError: mask shape differs from x shape (at trace time).
  """
  x = _float(x)
  valid = _as_valid(mask, x)
  total = jnp.sum(jnp.where(valid, x, 0.0), axis=axis)
  count = jnp.sum(valid.astype(x.dtype), axis=axis)
  return safe_div(total, count)


def _masked_max(x, valid):
  any_valid = jnp.any(valid)
  return jnp.where(any_valid, jnp.max(jnp.where(valid, x, -jnp.inf)), 0.0)


def _check_mode(mode):
  if mode not in AGG_MODES:
    raise ValueError(f"Unknown loss aggregation mode {mode!r}; valid modes are "
                     f"{', '.join(repr(m) for m in AGG_MODES)} (PhGPO config key `rl.agg_mode`).")


def aggregate_loss(per_token, mask, *, mode, norm_constant=None):
  """Reduces a per-token loss f32[B, T] to a scalar; padding never counts.

  Modes (PhGPO config key `rl.agg_mode`), with n_i = number of valid tokens of sequence i and
  S = {i : n_i > 0} (all-masked rows are not sequences):
    'token_mean':          sum_{i,t} m_it l_it / sum_{i,t} m_it   (every valid token weighs the
                           same; DAPO's token-level loss, Yu et al. 2025, arXiv:2503.14476,
                           sec. 3.3);
    'seq_mean_token_mean': (1/|S|) sum_{i in S} (1/n_i) sum_t m_it l_it   (GRPO as written in
                           DeepSeekMath, Shao et al. 2024, arXiv:2402.03300, eq. 3);
    'seq_mean_token_sum':  (1/|S|) sum_{i in S} (1/C) sum_t m_it l_it, C = norm_constant, default T
                           (the padded maximum length; Dr.GRPO's constant normaliser,
                           Liu et al. 2025, arXiv:2503.20783). No experiment config sets it.
  Example (the issue's case): sequences A = [2, 2, 2, 2] and B = [1]: token_mean 9/5 = 1.8,
  seq_mean_token_mean (2 + 1)/2 = 1.5, seq_mean_token_sum with C = 1: (8 + 1)/2 = 4.5.

  Args:
    per_token: f32[B, T] loss per token. Masked positions may hold NaN or inf.
    mask: bool[B, T] (nonzero = valid token).
    mode: one of AGG_MODES (static).
    norm_constant: positive Python number C for 'seq_mean_token_sum'; None means T. Ignored
      otherwise.

  Returns:
    f32[] the aggregated loss; 0 when no token is valid.

  Raises:
    ValueError: unknown mode (the message lists the valid ones) or norm_constant <= 0.
    AssertionError: wrong rank or shape (at trace time).
  """
  _check_mode(mode)
  chex.assert_rank(per_token, 2)
  x = _float(per_token)
  valid = _as_valid(mask, x)
  x = jnp.where(valid, x, 0.0)
  if mode == "token_mean":
    return safe_div(jnp.sum(x), jnp.sum(valid.astype(x.dtype)))
  n_tokens = jnp.sum(valid.astype(x.dtype), axis=-1)
  has_tokens = n_tokens > 0
  seq_sum = jnp.sum(x, axis=-1)
  if mode == "seq_mean_token_mean":
    per_seq = safe_div(seq_sum, n_tokens)
  else:
    if norm_constant is None:
      norm_constant = x.shape[-1]
    if not float(norm_constant) > 0:
      raise ValueError(f"norm_constant must be > 0 (the fixed length normaliser of "
                       f"'seq_mean_token_sum'), got {norm_constant!r}.")
    per_seq = seq_sum / norm_constant
  return safe_div(jnp.sum(jnp.where(has_tokens, per_seq, 0.0)),
                   jnp.sum(has_tokens.astype(x.dtype)))


def _check_pair(logp_new, logp_old, mask):
  chex.assert_rank([logp_new, logp_old], 2)
  chex.assert_type([logp_new, logp_old], float)
  chex.assert_equal_shape([logp_new, logp_old, mask])


def _check_clip(clip_low, clip_high):
  for name, value in (("clip_low", clip_low), ("clip_high", clip_high)):
    if not isinstance(value, jax.core.Tracer) and not float(value) >= 0:
      raise ValueError(f"{name} must be >= 0 (the ratio is clipped to "
                       f"[1 - clip_low, 1 + clip_high]), got {value!r}.")


def clipped_surrogate_loss(logp_new, logp_old, advantages, mask, *, clip_low=0.2, clip_high=0.2,
                           agg_mode="token_mean", norm_constant=None):
  """PPO/GRPO clipped surrogate with separate low/high clip ranges, aggregated over valid tokens.

  r_it = exp(logp_new_it - logp_old_it),
  l_it = -min(r_it A_it, clip(r_it, 1 - clip_low, 1 + clip_high) A_it),
  loss = aggregate_loss(l, mask, mode=agg_mode).
  The log-ratio is computed only at valid tokens (masked ones are set to 0 first) and clamped to
  [-LOG_RATIO_BOUND, LOG_RATIO_BOUND] = [-20, 20] before exp, so the value stays finite.

  Source: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347, eq. 7;
  GRPO (Shao et al. 2024, arXiv:2402.03300, eq. 3); decoupled clip_low/clip_high ("clip-higher"):
  Yu et al. 2025, "DAPO", arXiv:2503.14476, sec. 3.1. PhGPO config keys `rl.clip_low`, `rl.clip_high`,
  `rl.agg_mode`.

  Args:
    logp_new: f32[B, T] log pi_theta(token) under the current parameters (carries the gradient).
    logp_old: f32[B, T] log pi_theta_old(token) from the sampling parameters (treated as constant:
      wrap in stop_gradient upstream if it is not already).
    advantages: f32[B] (one per sequence, shared by its tokens) or f32[B, T] (per token).
    mask: bool[B, T] (nonzero = valid token). Masked positions of any input may hold NaN or inf.
    clip_low, clip_high: non-negative floats; the ratio is clipped to [1 - clip_low, 1 + clip_high].
    agg_mode, norm_constant: see `aggregate_loss`.

  Returns:
    (loss f32[], metrics dict of f32[] without gradient):
      clip_fraction: fraction of valid tokens where the clipped term is the active (smaller) one,
        i.e. the token's gradient is zeroed by clipping;
      ratio_mean, ratio_max: mean and max of r over valid tokens (0 when none is valid);
      approx_kl: mean over valid tokens of k3 = (r - 1) - log r, an estimate of
        KL(pi_old || pi_new) (Schulman 2020, "Approximating KL Divergence").

  Raises:
    ValueError: negative clip range, unknown agg_mode, norm_constant <= 0.
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _check_pair(logp_new, logp_old, mask)
  _check_clip(clip_low, clip_high)
  _check_mode(agg_mode)
  logp_new, logp_old = _float(logp_new), _float(logp_old)
  valid = _as_valid(mask, logp_new)
  advantages = _float(advantages)
  if advantages.ndim == 1:
    chex.assert_shape(advantages, (logp_new.shape[0],))
    advantages = jnp.broadcast_to(advantages[:, None], logp_new.shape)
  else:
    chex.assert_equal_shape([advantages, logp_new])
  adv = jnp.where(valid, advantages, 0.0)
  log_ratio = jnp.where(valid, logp_new, 0.0) - jnp.where(valid, logp_old, 0.0)
  log_ratio = jnp.clip(log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  ratio = jnp.exp(log_ratio)
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
  per_token = -jnp.minimum(unclipped, clipped)
  loss = aggregate_loss(per_token, valid, mode=agg_mode, norm_constant=norm_constant)
  ratio_sg, log_ratio_sg = jax.lax.stop_gradient(ratio), jax.lax.stop_gradient(log_ratio)
  metrics = {
      "clip_fraction": masked_mean(jax.lax.stop_gradient(clipped < unclipped), valid),
      "ratio_mean": masked_mean(ratio_sg, valid),
      "ratio_max": _masked_max(ratio_sg, valid),
      "approx_kl": masked_mean(jnp.expm1(log_ratio_sg) - log_ratio_sg, valid),
  }
  return loss, metrics


def gspo_loss(logp_new, logp_old, advantages, mask, *, clip_low=3e-4, clip_high=4e-4):
  """GSPO: clipped surrogate on the length-normalised sequence-level importance ratio.

  s_i = exp( (1/|y_i|) sum_t m_it (logp_new_it - logp_old_it) ),   |y_i| = sum_t m_it,
  loss = -(1/|S|) sum_{i in S} min(s_i A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i),
  S = {i : |y_i| > 0}: the advantage is shared by all tokens of the sequence, clipping acts on whole
  sequences, and sequences weigh equally. The mean log-ratio is clamped to [-20, 20] before exp.

  Source: Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071, sec. 4.1.
  Defaults clip_low = 3e-4, clip_high = 4e-4 and no KL term are ProgAgent's setting (SPEC.md).
  Config keys `gspo.clip_low`, `gspo.clip_high` (ProgAgent).

  Args:
    logp_new: f32[B, T] log pi_theta(token), current parameters (carries the gradient).
    logp_old: f32[B, T] log pi_theta_old(token), sampling parameters (constant).
    advantages: f32[B] one advantage per sequence.
    mask: bool[B, T] (nonzero = valid token). Masked positions may hold NaN or inf.
    clip_low, clip_high: non-negative floats.

  Returns:
    (loss f32[], metrics dict of f32[] without gradient):
      clip_fraction: fraction of sequences (with tokens) whose clipped term is active;
      ratio_mean, ratio_max: mean and max of s_i over sequences with tokens;
      approx_kl: mean over valid tokens of the token-level k3 = (r - 1) - log r.

  Raises:
    ValueError: negative clip range.
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  _check_pair(logp_new, logp_old, mask)
  _check_clip(clip_low, clip_high)
  chex.assert_rank(advantages, 1)
  chex.assert_shape(advantages, (jnp.shape(logp_new)[0],))
  logp_new, logp_old = _float(logp_new), _float(logp_old)
  valid = _as_valid(mask, logp_new)
  tok_log_ratio = jnp.where(valid, logp_new, 0.0) - jnp.where(valid, logp_old, 0.0)
  n_tokens = jnp.sum(valid.astype(logp_new.dtype), axis=-1)
  has_tokens = n_tokens > 0
  seq_log_ratio = jnp.clip(safe_div(jnp.sum(tok_log_ratio, axis=-1), n_tokens),
                           -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  seq_ratio = jnp.exp(seq_log_ratio)
  adv = jnp.where(has_tokens, _float(advantages), 0.0)
  unclipped = seq_ratio * adv
  clipped = jnp.clip(seq_ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
  per_seq = -jnp.minimum(unclipped, clipped)
  loss = masked_mean(per_seq, has_tokens)
  tok_lr = jax.lax.stop_gradient(jnp.clip(tok_log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
  seq_ratio_sg = jax.lax.stop_gradient(seq_ratio)
  metrics = {
      "clip_fraction": masked_mean(jax.lax.stop_gradient(clipped < unclipped), has_tokens),
      "ratio_mean": masked_mean(seq_ratio_sg, has_tokens),
      "ratio_max": _masked_max(seq_ratio_sg, has_tokens),
      "approx_kl": masked_mean(jnp.expm1(tok_lr) - tok_lr, valid),
  }
  return loss, metrics


def kl_k1(logp, logp_ref):
  """k1 KL estimator per token: logp - logp_ref.

  Unbiased for KL(pi || pi_ref) when the tokens are sampled from pi; can be negative per token.
  Source: J. Schulman 2020, "Approximating KL Divergence" (blog note), estimator k1.

  Args:
    logp: f32[...] log pi(token) of the policy being trained.
    logp_ref: f32[...] log pi_ref(token) of the reference policy, same shape.

  Returns:
    f32[...] per-token estimate (nats). Apply the mask with `kl_penalty` or `masked_mean`.

  Raises:
    AssertionError: shapes differ or non-float dtype (at trace time).
  """
  chex.assert_equal_shape([logp, logp_ref])
  chex.assert_type([logp, logp_ref], float)
  return _float(logp) - _float(logp_ref)


def kl_k3(logp, logp_ref):
  """k3 KL estimator per token: exp(d) - d - 1, d = clamp(logp_ref - logp, -20, 20).

  Unbiased for KL(pi || pi_ref) under samples from pi, and non-negative per token; exactly 0 at
  d = 0 (computed as expm1(d) - d). The log-ratio d is clamped to [-LOG_RATIO_BOUND,
  LOG_RATIO_BOUND] = [-20, 20] so that value and gradient stay finite (e.g. for d = 100 the value is
  exp(20) - 21 ~ 4.9e8 and the gradient is 0: beyond the bound the estimator is flat).
  Source: J. Schulman 2020, "Approximating KL Divergence" (blog note), estimator k3; used as the KL
  term of GRPO (Shao et al. 2024, arXiv:2402.03300, eq. 4).

  Args:
    logp: f32[...] log pi(token) of the policy being trained.
    logp_ref: f32[...] log pi_ref(token) of the reference policy, same shape.

  Returns:
    f32[...] per-token estimate (nats), >= 0.

  Raises:
    AssertionError: shapes differ or non-float dtype (at trace time).
  """
  chex.assert_equal_shape([logp, logp_ref])
  chex.assert_type([logp, logp_ref], float)
  d = jnp.clip(_float(logp_ref) - _float(logp), -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  return jnp.expm1(d) - d


def kl_penalty(logp, logp_ref, mask, *, estimator="k3", agg_mode="token_mean", norm_constant=None):
  """Masked, aggregated KL penalty to a reference policy.

  kl = aggregate_loss(k(logp, logp_ref), mask, mode=agg_mode), k = kl_k1 or kl_k3; masked positions
  are replaced by 0 before the estimator, so NaN/inf there affect neither value nor gradient.
  The estimator is an argument (no experiment config sets it); PhGPO config keys `rl.agg_mode` and `rl.kl_coef`
  (the coefficient, applied by the caller).

  Args:
    logp: f32[B, T] log pi(token) of the policy being trained.
    logp_ref: f32[B, T] log pi_ref(token) of the reference policy.
    mask: bool[B, T] (nonzero = valid token).
    estimator: 'k1' or 'k3' (static).
    agg_mode, norm_constant: see `aggregate_loss`.

  Returns:
    f32[] the aggregated KL estimate (nats).

  Raises:
    ValueError: unknown estimator (the message lists the valid ones) or aggregation mode.
    AssertionError: wrong rank, shape or dtype (at trace time).
  """
  if estimator not in KL_ESTIMATORS:
    raise ValueError(f"Unknown KL estimator {estimator!r}; valid names are "
                     f"{', '.join(repr(e) for e in KL_ESTIMATORS)} (argument `estimator`).")
  _check_mode(agg_mode)
  _check_pair(logp, logp_ref, mask)
  valid = _as_valid(mask, logp)
  logp = jnp.where(valid, _float(logp), 0.0)
  logp_ref = jnp.where(valid, _float(logp_ref), 0.0)
  per_token = kl_k1(logp, logp_ref) if estimator == "k1" else kl_k3(logp, logp_ref)
  return aggregate_loss(per_token, valid, mode=agg_mode, norm_constant=norm_constant)


def entropy_from_logits(logits):
  """Entropy of the categorical distribution softmax(logits) over the last axis.

  H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v, z = logits. Entries equal to -inf are
  excluded actions (p_v = 0 contributes 0, never 0 * -inf = NaN, in value or gradient). A row whose
  logits are all -inf (no valid action) has entropy 0 and zero gradient. Computed in float32 at
  least.

  Args:
    logits: f32[..., V] unnormalised log-probabilities; -inf marks an excluded action. NaN and +inf
      are not supported.

  Returns:
    f32[...] entropy in nats, in [0, log V].
  """
  x = _float(logits)
  chex.assert_rank(x, {1, 2, 3, 4, 5, 6})
  valid = x > -jnp.inf
  any_valid = jnp.any(valid, axis=-1, keepdims=True)
  # Rows with no valid entry are replaced by zeros (then zeroed at the end) so nothing is NaN.
  x = jnp.where(any_valid, x, 0.0)
  valid = jnp.where(any_valid, valid, True)
  z = x - jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
  e = jnp.where(valid, jnp.exp(jnp.where(valid, z, 0.0)), 0.0)
  total = jnp.sum(e, axis=-1, keepdims=True)
  p = e / total
  h = jnp.log(total[..., 0]) - jnp.sum(p * jnp.where(valid, z, 0.0), axis=-1)
  return jnp.where(any_valid[..., 0], jnp.maximum(h, 0.0), 0.0)
