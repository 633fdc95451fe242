"""phgpo.objective against plain float64 NumPy loops, with and without jit."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from phgpo import objective
from phgpo import pheromone as pher_lib

TOL = dict(rtol=1e-5, atol=1e-5)


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  m = x.max()
  return x - m - np.log(np.sum(np.exp(x - m)))


def _np_phgpo_loss(logits, actions, logp_old, adv, pg_mask, sl_mask, ref_logp, *, sl_weight, kl_coef,
                   entropy_coef, clip_low, clip_high, agg_mode):
  """The SPEC's loss, one decision at a time."""
  b, h = actions.shape
  logp = np.zeros((b, h))
  ent = []
  for i in range(b):
    for t in range(h):
      lp = _log_softmax(logits[i * h + t])
      logp[i, t] = lp[max(actions[i, t], 0)]
      if pg_mask[i, t] or sl_mask[i, t]:
        ent.append(-np.sum(np.exp(lp) * lp))
  per_tok = np.zeros((b, h))
  kls = []
  for i in range(b):
    for t in range(h):
      if not pg_mask[i, t]:
        continue
      r = np.exp(np.clip(logp[i, t] - logp_old[i, t], -20, 20))
      per_tok[i, t] = -min(r * adv[i], np.clip(r, 1 - clip_low, 1 + clip_high) * adv[i])
      d = np.clip(ref_logp[i, t] - logp[i, t], -20, 20)
      kls.append(np.expm1(d) - d)
  if agg_mode == "token_mean":
    pg = per_tok[pg_mask].sum() / max(pg_mask.sum(), 1)
  else:  # seq_mean_token_mean
    rows = [per_tok[i][pg_mask[i]].mean() for i in range(b) if pg_mask[i].any()]
    pg = np.mean(rows) if rows else 0.0
  sl_terms = [-logp[i, t] for i in range(b) for t in range(h) if sl_mask[i, t]]
  sl = np.mean(sl_terms) if sl_terms else 0.0
  entropy = np.mean(ent) if ent else 0.0
  kl = np.mean(kls) if kls else 0.0
  loss = (float(sl_mask.any()) * sl_weight * sl + float(pg_mask.any()) * (1 - sl_weight) * pg
          - entropy_coef * entropy + kl_coef * kl)
  return dict(loss=loss, pg_loss=pg, sl_loss=sl, entropy=entropy, kl=kl)


def _gumbel_rows(key, batch, width):
  keys = jax.random.split(key, batch)
  return np.stack([np.asarray(jax.random.gumbel(k, (width,), jnp.float32), np.float64) for k in keys])


def _np_decide(key, logits, tau_rows, tau_arg, template_mask, *, beta, temperature, top_k):
  """The SPEC's decision rule for an empty memory bank (tau(x) = tau_agn), one rollout at a time."""
  b, n = logits.shape
  k = min(top_k, n)
  k_tool, k_tmpl = jax.random.split(key)
  g_tool = _gumbel_rows(k_tool, b, k)
  g_tmpl = _gumbel_rows(k_tmpl, b, tau_arg.shape[1])
  tools, templates, logps = [], [], []
  for i in range(b):
    lp = _log_softmax(logits[i])
    cand = np.argsort(-np.asarray(logits[i], np.float64), kind="stable")[:k]
    score = lp[cand] + (beta * np.log(np.asarray(tau_rows[i], np.float64)[cand]) if beta != 0 else 0.0)
    if temperature > 0:
      score = score + temperature * g_tool[i]
    a = int(cand[np.argmax(score)])
    row = np.asarray(tau_arg[a], np.float64)
    ok = template_mask[a] & (row > 0)
    u = int(np.argmax(np.where(ok, np.log(np.where(ok, row, 1.0)) + g_tmpl[i], -np.inf))) if ok.any() else -1
    tools.append(a)
    templates.append(u)
    logps.append(lp[a])
  return np.array(tools), np.array(templates), np.array(logps)


class ObjectiveTest(parameterized.TestCase):

  def _batch(self, seed, b=3, h=4, n=7):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(b * h, n)).astype(np.float32) * 2
    actions = rng.integers(0, n, size=(b, h)).astype(np.int32)
    actions[0, -1] = -1
    pg_mask = rng.random((b, h)) < 0.6
    sl_mask = ~pg_mask & (rng.random((b, h)) < 0.7)
    pg_mask[0, -1] = sl_mask[0, -1] = False
    logp_old = (rng.normal(size=(b, h)) * 0.3 - 2).astype(np.float32)
    ref_logp = (rng.normal(size=(b, h)) * 0.3 - 2).astype(np.float32)
    adv = rng.normal(size=(b,)).astype(np.float32)
    return logits, actions, logp_old, adv, pg_mask, sl_mask, ref_logp

  @chex.variants(with_jit=True, without_jit=True)
  def test_action_log_probs(self):
    logits, actions = self._batch(0)[:2]
    out = self.variant(objective.action_log_probs)(logits, actions)
    b, h = actions.shape
    ref = np.array([[_log_softmax(logits[i * h + t])[max(actions[i, t], 0)] for t in range(h)]
                    for i in range(b)])
    np.testing.assert_allclose(out, ref, **TOL)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(agg_mode=("token_mean", "seq_mean_token_mean"), sl_weight=(0.0, 0.3, 1.0),
                         kl_coef=(0.0, 0.1))
  def test_phgpo_loss_matches_numpy(self, agg_mode, sl_weight, kl_coef):
    batch = self._batch(1)
    hp = dict(entropy_coef=1e-2, clip_low=0.2, clip_high=0.28, agg_mode=agg_mode)
    fn = self.variant(lambda *a: objective.phgpo_loss(*a[:7], sl_weight=a[7], kl_coef=a[8], **hp))
    loss, aux = fn(*batch, jnp.float32(sl_weight), jnp.float32(kl_coef))
    ref = _np_phgpo_loss(*batch, sl_weight=sl_weight, kl_coef=kl_coef, **hp)
    np.testing.assert_allclose(loss, ref["loss"], **TOL)
    for k, v in ref.items():
      np.testing.assert_allclose(aux[k], v, err_msg=k, **TOL)
    self.assertContainsSubset({"clip_fraction", "ratio_mean", "ratio_max", "approx_kl"}, set(aux))

  @chex.variants(with_jit=True, without_jit=True)
  def test_phgpo_loss_drops_empty_terms(self):
    # No teacher-forced decision: the loss is the PG part only, whatever lambda is (and vice versa).
    logits, actions, logp_old, adv, pg_mask, _, ref_logp = self._batch(2)
    none = np.zeros_like(pg_mask)
    fn = self.variant(functools.partial(objective.phgpo_loss, sl_weight=0.4, kl_coef=0.0, entropy_coef=0.0,
                                        clip_low=0.2, clip_high=0.2))
    loss, aux = fn(logits, actions, logp_old, adv, pg_mask, none, ref_logp)
    np.testing.assert_allclose(loss, 0.6 * aux["pg_loss"], **TOL)
    loss, aux = fn(logits, actions, logp_old, adv, none, pg_mask, ref_logp)
    np.testing.assert_allclose(loss, 0.4 * aux["sl_loss"], **TOL)

  def test_hyper_parameters_are_keyword_only(self):
    with self.assertRaises(TypeError):
      objective.phgpo_loss(*self._batch(0), 0.5, 0.0, 0.0, 0.2, 0.2)  # pylint: disable=too-many-function-args

  @chex.variants(with_jit=True, without_jit=True)
  def test_warmup_loss(self):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(6,)).astype(np.int32)
    labels[1] = int(np.argmax(logits[1]))
    mask = np.array([True, True, False, True, True, False])
    loss, aux = self.variant(objective.warmup_loss)(logits, labels, mask)
    ref = np.mean([-_log_softmax(logits[i])[labels[i]] for i in range(6) if mask[i]])
    acc = np.mean([np.argmax(logits[i]) == labels[i] for i in range(6) if mask[i]])
    np.testing.assert_allclose(loss, ref, **TOL)
    np.testing.assert_allclose(aux["accuracy"], acc, **TOL)

  def _pheromone(self, seed, n, tm, d):
    rng = np.random.default_rng(seed)
    tmask = rng.random((n, tm)) < 0.7
    tmask[:, 0] = True
    tmask[n - 1] = False  # a tool without templates
    state = pher_lib.init_pheromone(n, tm, tau_init=0.5, tau_min=0.1, tau_max=1.0, template_mask=tmask,
                                    bank_capacity=8, embed_dim=d)
    tau = rng.uniform(0.1, 1.0, size=(n + 1, n)).astype(np.float32)
    tau_arg = rng.uniform(0.1, 1.0, size=(n, tm)).astype(np.float32)
    return state._replace(tau=jnp.asarray(tau), tau_arg=jnp.asarray(tau_arg)), tau, tau_arg, tmask

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(temperature=(0.0, 0.7, 2.0), beta=(0.0, 0.7), top_k=(3, 20))
  def test_decide_matches_numpy(self, temperature, beta, top_k):
    b, n, tm, d = 5, 9, 3, 4
    rng = np.random.default_rng(4)
    pher, tau, tau_arg, tmask = self._pheromone(5, n, tm, d)
    logits = (rng.normal(size=(b, n)) * 2).astype(np.float32)
    prev = np.array([n, 0, 3, n - 1, 2], np.int32)  # START = n
    task_emb = rng.normal(size=(b, d)).astype(np.float32)
    key = jax.random.key(7)
    hp = dict(top_k=top_k, kappa=1.0, top_k_similar=4, tau_min=0.1, tau_max=1.0)
    fn = self.variant(lambda k, lg, ph, pv, e, tmk, bt, w, t: objective.decide(
        k, lg, ph, pv, e, tmk, beta=bt, w=w, temperature=t, **hp))
    out = fn(key, logits, pher, prev, task_emb, jnp.asarray(tmask), jnp.float32(beta), jnp.float32(0.5),
             jnp.float32(temperature))
    tools, templates, logp = _np_decide(key, logits, tau[prev], tau_arg, tmask, beta=beta,
                                        temperature=temperature, top_k=top_k)
    np.testing.assert_array_equal(out.tools, tools)
    np.testing.assert_array_equal(out.templates, templates)
    np.testing.assert_allclose(out.logp, logp, **TOL)
    self.assertTrue(np.all(out.has_candidate))

  def test_decide_without_candidates(self):
    n, tm, d = 4, 2, 3
    pher, _, _, tmask = self._pheromone(0, n, tm, d)
    logits = np.full((2, n), -np.inf, np.float32)
    logits[1, 2] = 0.0
    out = objective.decide(jax.random.key(0), logits, pher, np.array([n, n], np.int32),
                           np.ones((2, d), np.float32), jnp.asarray(tmask), beta=0.7, w=0.5,
                           temperature=0.7, top_k=3, kappa=1.0, top_k_similar=4, tau_min=0.1, tau_max=1.0)
    np.testing.assert_array_equal(out.tools, [-1, 2])
    np.testing.assert_array_equal(out.has_candidate, [False, True])
    self.assertEqual(int(out.templates[0]), -1)

  def test_rank_errors_are_raised(self):
    logits, actions = self._batch(0)[:2]
    with self.assertRaises(AssertionError):
      objective.action_log_probs(logits[None], actions)


if __name__ == "__main__":
  absltest.main()
