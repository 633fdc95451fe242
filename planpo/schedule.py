"""PlanPO's alpha(k): the weight of the response-level advantage A_S, decayed linearly over training.

Source: PlanPO (2026), as summarised in SPEC.md "PlanPO": alpha(k) decays linearly from alpha_init to
alpha_final, 0 <= alpha_final <= alpha(k) <= alpha_init <= 1 ("coarse first, fine later"); published
alpha_init = 0.1, alpha_final = 0.05 (ALFWorld, WebShop) and 0.05 -> 0.025 (ScienceWorld, "reduced to
0.05"); ablations alpha_init in {0.5, 0.2, 0.1, 0.05, 0} and a constant alpha (alpha_final =
alpha_init).
"""
import jax.numpy as jnp


def check_alpha(alpha_init, alpha_final, decay_steps) -> None:
  """Raises ValueError unless 0 <= alpha_final <= alpha_init <= 1 and decay_steps is an int >= 1.

  Config keys `planpo.alpha_init`, `planpo.alpha_final`, `planpo.alpha_decay_steps`.
  """
  if not 0.0 <= float(alpha_final) <= float(alpha_init) <= 1.0:
    raise ValueError(f"PlanPO needs 0 <= alpha_final <= alpha_init <= 1 (config keys "
                     f"`planpo.alpha_init`, `planpo.alpha_final`), got alpha_init={alpha_init!r}, "
                     f"alpha_final={alpha_final!r}.")
  if isinstance(decay_steps, bool) or not isinstance(decay_steps, int) or decay_steps < 1:
    raise ValueError(f"alpha_decay_steps must be an int >= 1 (config key `planpo.alpha_decay_steps`: "
                     f"the number of training steps), got {decay_steps!r}.")


def alpha_schedule(step, *, alpha_init=0.1, alpha_final=0.05, decay_steps):
  """alpha(k) = alpha_init + (alpha_final - alpha_init) * min(k / decay_steps, 1), k >= 0.

  alpha(0) = alpha_init; alpha(decay_steps) = alpha_final and it stays there; a negative k is treated
  as 0. Use decay_steps = the number of training steps (published 150 ALFWorld and WebShop, 200
  ScienceWorld), so the last update (k = decay_steps - 1) uses alpha just above alpha_final.
  Config keys `planpo.alpha_init`, `planpo.alpha_final`, `planpo.alpha_decay_steps`.

  Args:
    step: i32[] or int k, the training step (0-based; may be traced).
    alpha_init, alpha_final: floats with 0 <= alpha_final <= alpha_init <= 1 (concrete).
    decay_steps: Python int >= 1.

  Returns:
    f32[] alpha(k).

  Raises:
    ValueError: the bounds above violated.
  """
  check_alpha(alpha_init, alpha_final, decay_steps)
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / decay_steps, 0.0, 1.0)
  return jnp.float32(alpha_init) + (jnp.float32(alpha_final) - jnp.float32(alpha_init)) * frac
