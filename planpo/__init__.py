"""PlanPO: GRPO with success-conditioned, length-normalised advantages for multi-turn agents.

The method's maths is re-exported here (as rlax does at its top level):

  import planpo
  alpha = planpo.alpha_schedule(step, alpha_init=0.1, alpha_final=0.05, decay_steps=K)
  adv = planpo.planpo_advantages(rewards, success, lengths, group_ids, rollout_ids, turn_ids,
                                 num_groups=G, num_rollouts=N, max_turns=T, alpha=alpha, mask=mask)
  out = planpo.policy_loss(logp_new, logp_old, logp_ref, adv.advantages[:, None], token_mask)

Each name is the object of its module (`planpo.advantages`, `planpo.schedule`, `planpo.objective`). The
re-exports are lazy (PEP 562 `__getattr__`): `import planpo` imports nothing, so no import cycle can form
through this file.
"""

from common.lazy_exports import lazy_exports

# name -> the module that defines it.
_EXPORTS = {
    # Advantages: episode (A_E) and response (A_S) levels.
    "STEP_GROUPINGS": "planpo.advantages",
    "PlanPOAdvantages": "planpo.advantages",
    "episode_rewards": "planpo.advantages",
    "trajectory_advantages": "planpo.advantages",
    "response_advantages": "planpo.advantages",
    "planpo_advantages": "planpo.advantages",
    # The alpha(k) schedule.
    "alpha_schedule": "planpo.schedule",
    "check_alpha": "planpo.schedule",
    # The objective.
    "RATIOS": "planpo.objective",
    "policy_loss": "planpo.objective",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("planpo", _EXPORTS, globals())
