"""PhGPO: pheromone-guided GRPO for long-horizon tool planning (arXiv:2602.13691).

The method's maths is re-exported here (as rlax does at its top level):

  import phgpo
  state = phgpo.init_pheromone(num_tools, num_templates, tau_init=..., ...)
  state = phgpo.update_pheromone(state, tools, templates, mask, scores, task_ids, rho=..., ...)   # ACO rule
  log_prior = jnp.log(phgpo.pheromone_rows(state, prev_tools, ...))
  sampled = phgpo.sample_tools_with_logp(key, logits, log_prior, top_k=20, beta=...)
  out = phgpo.phgpo_loss(logits, actions, logp_old, advantages, pg_mask, sl_mask, ref_logp, ...)

Each name is the object of its module (`phgpo.pheromone`, `phgpo.pheromone_rule`, `phgpo.memory_bank`,
`phgpo.sampling`, `phgpo.objective`, `phgpo.curriculum`). The re-exports are lazy (PEP 562 `__getattr__`):
`import phgpo` imports nothing, so no import cycle can form through this file.
"""

from common.lazy_exports import lazy_exports

# name -> the module that defines it.
_EXPORTS = {
    # The pheromone state and its update (task-agnostic table, arguments, fused rows).
    "PheromoneState": "phgpo.pheromone",
    "init_pheromone": "phgpo.pheromone",
    "tau_from_counts": "phgpo.pheromone",
    "update_pheromone": "phgpo.pheromone",
    "pheromone_rows": "phgpo.pheromone",
    "effective_tau": "phgpo.pheromone",
    "effective_tau_arg": "phgpo.pheromone",
    "arg_rows": "phgpo.pheromone",
    "set_rates": "phgpo.pheromone",
    # The ACO rule (eager forms).
    "evaporate": "phgpo.pheromone_rule",
    "deposit": "phgpo.pheromone_rule",
    "clip_pheromone": "phgpo.pheromone_rule",
    # The task-dependent memory bank.
    "bank_similarity": "phgpo.memory_bank",
    "dependent_pheromone": "phgpo.memory_bank",
    "empty_bank": "phgpo.memory_bank",
    # Pheromone-guided sampling.
    "NO_CANDIDATE": "phgpo.sampling",
    "sample_tools": "phgpo.sampling",
    "sample_tools_with_logp": "phgpo.sampling",
    "sample_templates": "phgpo.sampling",
    # The objective.
    "Decision": "phgpo.objective",
    "action_log_probs": "phgpo.objective",
    "decide": "phgpo.objective",
    "phgpo_loss": "phgpo.objective",
    "truncated_is_weight": "phgpo.objective",
    "warmup_loss": "phgpo.objective",
    # The three-stage curriculum.
    "StageValues": "phgpo.curriculum",
    "stage_values": "phgpo.curriculum",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("phgpo", _EXPORTS, globals())
