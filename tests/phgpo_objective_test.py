"""phgpo.objective against plain float64 NumPy loops, with and without jit."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest

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
  @pytest.mark.fast
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

  @pytest.mark.fast
  def test_hyper_parameters_are_keyword_only(self):
    with self.assertRaises(TypeError):
      objective.phgpo_loss(*self._batch(0), 0.5, 0.0, 0.0, 0.2, 0.2)  # pylint: disable=too-many-function-args

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
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
                                    bank_per_edge=4)
    del d
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
    task_sim = rng.uniform(-1, 1, size=(b, 6)).astype(np.float32)   # the bank is empty: no evidence
    key = jax.random.key(7)
    hp = dict(top_k=top_k, kappa=1.0, top_k_similar=4, tau_min=0.1, tau_max=1.0)
    fn = self.variant(lambda k, lg, ph, pv, e, tmk, bt, w, t: objective.decide(
        k, lg, ph, pv, e, tmk, beta=bt, w=w, temperature=t, **hp))
    out = fn(key, logits, pher, prev, task_sim, jnp.asarray(tmask), jnp.float32(beta), jnp.float32(0.5),
             jnp.float32(temperature))
    tools, templates, logp = _np_decide(key, logits, tau[prev], tau_arg, tmask, beta=beta,
                                        temperature=temperature, top_k=top_k)
    np.testing.assert_array_equal(out.tools, tools)
    np.testing.assert_array_equal(out.templates, templates)
    np.testing.assert_allclose(out.logp, logp, **TOL)
    self.assertTrue(np.all(out.has_candidate))
    if temperature > 0:   # the behaviour log-probability of the draw, from the same top-K scores
      for i in range(b):
        cand = np.argsort(-logits[i], kind="stable")[:top_k]
        score = (_log_softmax(logits[i])[cand] + beta * np.log(tau[prev[i]][cand])) / temperature
        want = score - np.log(np.exp(score - score.max()).sum()) - score.max()
        np.testing.assert_allclose(out.logp_behaviour[i], want[list(cand).index(tools[i])], rtol=1e-4, atol=1e-4)
    else:
      np.testing.assert_array_equal(out.logp_behaviour, np.zeros(b))

  def test_first_step_pheromone_off_samples_the_policy_at_start(self):
    # pheromone.first_step = False: at prev = START the draw ignores tau (as beta = 0 would); later steps use it.
    b, n, tm = 6, 9, 3
    rng = np.random.default_rng(8)
    pher, tau, _, tmask = self._pheromone(5, n, tm, 4)
    logits = rng.normal(size=(b, n)).astype(np.float32)
    prev = np.array([n, n, n, 0, 3, 2], np.int32)
    sim = np.zeros((b, 6), np.float32)
    hp = dict(top_k=5, kappa=1.0, top_k_similar=4, tau_min=0.1, tau_max=1.0, w=0.0, temperature=0.0)
    off = objective.decide(jax.random.key(1), logits, pher, prev, sim, jnp.asarray(tmask), beta=5.0,
                           first_step_pheromone=False, **hp)
    on = objective.decide(jax.random.key(1), logits, pher, prev, sim, jnp.asarray(tmask), beta=5.0, **hp)
    plain = objective.decide(jax.random.key(1), logits, pher, prev, sim, jnp.asarray(tmask), beta=0.0, **hp)
    np.testing.assert_array_equal(off.tools[:3], plain.tools[:3])
    np.testing.assert_array_equal(off.tools[3:], on.tools[3:])
    self.assertFalse(np.array_equal(on.tools, plain.tools))

  def test_decide_without_candidates(self):
    n, tm, d = 4, 2, 3
    pher, _, _, tmask = self._pheromone(0, n, tm, d)
    logits = np.full((2, n), -np.inf, np.float32)
    logits[1, 2] = 0.0
    out = objective.decide(jax.random.key(0), logits, pher, np.array([n, n], np.int32),
                           np.ones((2, 5), np.float32), jnp.asarray(tmask), beta=0.7, w=0.5,
                           temperature=0.7, top_k=3, kappa=1.0, top_k_similar=4, tau_min=0.1, tau_max=1.0)
    np.testing.assert_array_equal(out.tools, [-1, 2])
    np.testing.assert_array_equal(out.has_candidate, [False, True])
    self.assertEqual(int(out.templates[0]), -1)

  @pytest.mark.fast
  def test_rank_errors_are_raised(self):
    logits, actions = self._batch(0)[:2]
    with self.assertRaises(AssertionError):
      objective.action_log_probs(logits[None], actions)



def _np_pg(logp, logp_old, adv_bt, pg_mask, *, clip_low, clip_high):
  """token_mean clipped surrogate with a per-decision advantage f64[B, H]."""
  r = np.exp(np.clip(logp - logp_old, -20, 20))
  per_tok = -np.minimum(r * adv_bt, np.clip(r, 1 - clip_low, 1 + clip_high) * adv_bt)
  return per_tok[pg_mask].sum() / max(pg_mask.sum(), 1)


class PhgpoLossOptionsTest(parameterized.TestCase):
  """`sl_labels` (config `rl.sl_steps`) and `is_weight` / `truncated_is_weight` (config `rl.tis_cap`)."""

  HP = dict(sl_weight=0.3, kl_coef=0.1, entropy_coef=1e-2, clip_low=0.2, clip_high=0.28)

  _batch = ObjectiveTest._batch

  @chex.variants(with_jit=True, without_jit=True)
  def test_sl_labels_change_only_the_sl_term(self):
    logits, actions, logp_old, adv, pg_mask, sl_mask, ref_logp = batch = self._batch(11)
    b, h = actions.shape
    n = logits.shape[1]
    labels = ((actions + 2) % n).astype(np.int32)
    sl_all = (pg_mask | sl_mask)  # 'all': every executed step carries the gold label
    fn = self.variant(lambda *a, **k: objective.phgpo_loss(*a, **self.HP, **k))
    base_loss, base = fn(*batch)
    same_loss, same = fn(*batch, sl_labels=jnp.asarray(actions))
    np.testing.assert_array_equal(same_loss, base_loss)  # labels = actions: today's loss exactly
    for k in base:
      np.testing.assert_array_equal(same[k], base[k], err_msg=k)
    loss, aux = fn(logits, actions, logp_old, adv, pg_mask, sl_all, ref_logp, sl_labels=jnp.asarray(labels))
    _, ref_aux = fn(logits, actions, logp_old, adv, pg_mask, sl_all, ref_logp)
    for k in ("pg_loss", "entropy", "kl", "clip_fraction", "ratio_mean", "ratio_max", "approx_kl"):
      np.testing.assert_array_equal(aux[k], ref_aux[k], err_msg=k)
    want_sl = np.mean([-_log_softmax(logits[i * h + t])[labels[i, t]]
                       for i in range(b) for t in range(h) if sl_all[i, t]])
    np.testing.assert_allclose(aux["sl_loss"], want_sl, **TOL)
    np.testing.assert_allclose(loss, ref_aux["loss"] + 0.3 * (want_sl - ref_aux["sl_loss"]), **TOL)

  @chex.variants(with_jit=True, without_jit=True)
  def test_is_weight_of_ones_equals_no_weight(self):
    batch = self._batch(12)
    fn = self.variant(lambda *a, **k: objective.phgpo_loss(*a, **self.HP, **k))
    loss, aux = fn(*batch)
    loss1, aux1 = fn(*batch, is_weight=jnp.ones(batch[1].shape, jnp.float32))
    np.testing.assert_allclose(loss1, loss, rtol=1e-7, atol=0)
    for k in aux:
      np.testing.assert_allclose(aux1[k], aux[k], rtol=1e-7, atol=0, err_msg=k)
    self.assertEqual(float(aux1["is_weight_mean"]), 1.0)
    self.assertNotIn("is_weight_mean", aux)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_is_weight_matches_numpy(self):
    logits, actions, logp_old, adv, pg_mask, sl_mask, ref_logp = batch = self._batch(13)
    b, h = actions.shape
    w = np.random.default_rng(0).uniform(0.0, 2.0, size=(b, h)).astype(np.float32)
    w[~pg_mask] = np.nan  # masked positions may hold anything
    hp = dict(self.HP, sl_weight=0.0, kl_coef=0.0, entropy_coef=0.0)
    loss, aux = self.variant(lambda *a: objective.phgpo_loss(*a[:7], is_weight=a[7], **hp))(*batch, w)
    logp = np.array([[_log_softmax(logits[i * h + t])[max(actions[i, t], 0)] for t in range(h)] for i in range(b)])
    want = _np_pg(logp, logp_old, adv[:, None] * np.where(pg_mask, w, 0.0), pg_mask, clip_low=0.2, clip_high=0.28)
    np.testing.assert_allclose(aux["pg_loss"], want, **TOL)
    np.testing.assert_allclose(loss, want, **TOL)
    np.testing.assert_allclose(aux["is_weight_mean"], w[pg_mask].mean(), **TOL)

  @chex.variants(with_jit=True, without_jit=True)
  def test_is_weight_scales_the_pg_gradient(self):
    # B = 1, H = 2, N = 3, logp_old = logp (ratio 1, inside the clip range), token_mean over both steps:
    #   L = -(1/2) sum_t w_t A r_t,  dL/dlogits_t = -(1/2) w_t A (onehot(a_t) - softmax(logits_t)).
    logits = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], np.float32)
    actions = np.array([[2, 0]], np.int32)
    logp_old = np.array([[_log_softmax(logits[0])[2], _log_softmax(logits[1])[0]]], np.float32)
    adv = np.array([1.5], np.float32)
    pg_mask = np.array([[True, True]])
    none = np.zeros_like(pg_mask)
    w = np.array([[0.25, 2.0]], np.float32)
    hp = dict(sl_weight=0.0, kl_coef=0.0, entropy_coef=0.0, clip_low=0.2, clip_high=0.2)
    grad = self.variant(jax.grad(lambda lg, iw: objective.phgpo_loss(
        lg, actions, logp_old, adv, pg_mask, none, logp_old, is_weight=iw, **hp)[0], argnums=(0, 1)))
    g_logits, g_w = grad(logits, w)
    want = np.zeros((2, 3))
    for t, a in enumerate(actions[0]):
      p = np.exp(_log_softmax(logits[t]))
      want[t] = -0.5 * w[0, t] * adv[0] * (np.eye(3)[a] - p)
    np.testing.assert_allclose(g_logits, want, **TOL)
    np.testing.assert_array_equal(g_w, np.zeros_like(w))  # a constant: no gradient into the weight
    g_ones, _ = grad(logits, np.ones_like(w))
    np.testing.assert_allclose(g_logits, g_ones * w[0][:, None], **TOL)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_truncated_is_weight(self):
    logp_old = np.log(np.array([[0.5, 0.2, 0.3], [1e-30, 0.9, 0.6]], np.float32))
    logp_b = np.log(np.array([[0.25, 0.4, 0.3], [0.5, 1e-30, 0.2]], np.float32))
    fn = self.variant(lambda a, b, c: objective.truncated_is_weight(a, b, cap=c))
    # ratios [[2, 0.5, 1], [2e-30, 9e29, 3]]
    np.testing.assert_allclose(fn(logp_old, logp_b, 1.5), [[1.5, 0.5, 1.0], [2e-30, 1.5, 1.5]], rtol=1e-5)
    np.testing.assert_allclose(fn(logp_old, logp_b, 10.0), [[2.0, 0.5, 1.0], [2e-30, 10.0, 3.0]], rtol=1e-5)
    np.testing.assert_array_equal(fn(logp_old, logp_b, 0.0), np.ones((2, 3)))  # rl.tis_cap = 0: off
    np.testing.assert_array_equal(fn(logp_old, np.full((2, 3), -np.inf, np.float32), 2.0), np.full((2, 3), 2.0))
    self.assertEqual(fn(logp_old, logp_b, 1.5).dtype, jnp.float32)
    g = jax.grad(lambda a: jnp.sum(objective.truncated_is_weight(a, logp_b, cap=10.0)))(logp_old)
    np.testing.assert_array_equal(g, np.zeros_like(logp_old))
    with self.assertRaises(AssertionError):
      objective.truncated_is_weight(logp_old[0], logp_b[0], cap=1.0)

if __name__ == "__main__":
  absltest.main()
