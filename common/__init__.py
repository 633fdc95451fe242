"""What the methods share: the grouped maths, the language-model policy, environments and the agent loop.

The maths is re-exported here (as rlax does at its top level), so a notebook can write

  import common
  adv = common.compute_advantages("grpo", rewards, group_ids, num_groups=G, mask=mask)
  loss, stats = common.clipped_surrogate_loss(logp_new, logp_old, adv[:, None], token_mask)

Each name is the object of its module (`common.estimators`, `common.losses`, `common.metrics`,
`common.gigpo`, `common.rows`). The re-exports are lazy (PEP 562 `__getattr__`): `import common` imports
nothing, so environment processes (`python -m common.env_server`) and the sandbox never load JAX through
this file, and no import cycle can form through it.

Layers inside common/ (setup.cfg, [importlinter:contract:common-layers]): the agent loop (`rollout`,
`windowed`) > environments and processes > `lm/` > the maths; the policy request / response types
(`policy_io`) sit below both `lm/` and the agent loop.
"""

from common.lazy_exports import lazy_exports

# name -> the module that defines it.
_EXPORTS = {
    # Grouped advantage estimators (GRPO, Dr.GRPO, RLOO).
    "ESTIMATORS": "common.estimators",
    "compute_advantages": "common.estimators",
    "group_stats": "common.estimators",
    "grpo_advantages": "common.estimators",
    "drgrpo_advantages": "common.estimators",
    "rloo_advantages": "common.estimators",
    # Per-turn-row advantages (GiGPO).
    "GiGPOAdvantages": "common.gigpo",
    "anchor_step_groups": "common.gigpo",
    "discounted_returns": "common.gigpo",
    "episode_advantages": "common.gigpo",
    "gigpo_advantages": "common.gigpo",
    "rollout_table": "common.gigpo",
    # Losses: masked means, aggregation, clipped surrogate, GSPO, KL estimators, entropy.
    "AGG_MODES": "common.losses",
    "KL_ESTIMATORS": "common.losses",
    "aggregate_loss": "common.losses",
    "clipped_surrogate_loss": "common.losses",
    "entropy_from_logits": "common.losses",
    "gspo_loss": "common.losses",
    "kl_k1": "common.losses",
    "kl_k3": "common.losses",
    "kl_penalty": "common.losses",
    "masked_mean": "common.losses",
    # Evaluation metrics.
    "pass_at_k": "common.metrics",
    "pass_at_k_jnp": "common.metrics",
    # Per-row primitives.
    "safe_div": "common.rows",
    "segment_sum": "common.rows",
    "segment_min": "common.rows",
    "check_rows": "common.rows",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("common", _EXPORTS, globals())
