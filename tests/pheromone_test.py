"""Tests for phgpo/pheromone.py: issue-2 cases, NumPy float64 references, bounds, sharding."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from phgpo import pheromone as ph

TOL = dict(rtol=1e-5, atol=1e-5)
HP = dict(rho=0.1, alpha=0.7, tau_min=0.05, tau_max=2.0, arg_rho=0.2, arg_alpha=0.4)


# ------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops.


def np_update(state, tools, templates, mask, scores, emb, *, rho, alpha, tau_min, tau_max,
              arg_rho, arg_alpha, bank_min_score=0.0):
  tau = np.asarray(state.tau, np.float64) * (1 - rho)
  tau_arg = np.asarray(state.tau_arg, np.float64) * (1 - arg_rho)
  bank_emb = np.asarray(state.bank_emb, np.float64).copy()
  bank_edge = np.asarray(state.bank_edge).copy()
  bank_score = np.asarray(state.bank_score, np.float64).copy()
  bank_valid = np.asarray(state.bank_valid).copy()
  ptr = int(state.bank_ptr)
  cap = bank_edge.shape[0]
  n = tau.shape[1]
  tm = tau_arg.shape[1]
  for b in range(tools.shape[0]):
    seen, seen_arg, prev = set(), set(), n
    for h in range(tools.shape[1]):
      t, u = int(tools[b, h]), int(templates[b, h])
      if mask[b, h] and 0 <= t < n and 0 <= prev <= n:
        if (prev, t) not in seen:
          seen.add((prev, t))
          tau[prev, t] += alpha * scores[b]
          if scores[b] >= bank_min_score:
            e = np.asarray(emb[b], np.float64)
            bank_emb[ptr] = e / max(np.linalg.norm(e), 1e-12)
            bank_edge[ptr] = prev * n + t
            bank_score[ptr] = scores[b]
            bank_valid[ptr] = True
            ptr = (ptr + 1) % cap
        if 0 <= u < tm and (t, u) not in seen_arg:
          seen_arg.add((t, u))
          tau_arg[t, u] += arg_alpha * scores[b]
      prev = t
  return (np.clip(tau, tau_min, tau_max), np.clip(tau_arg, tau_min, tau_max), bank_emb,
          bank_edge, bank_score, bank_valid, ptr)


def np_rows(state, prev_tools, emb, *, w, kappa, top_k_similar, tau_min, tau_max,
            dep_units="tau_range", max_evidence=256):
  tau = np.asarray(state.tau, np.float64)
  n = tau.shape[1]
  bank_emb = np.asarray(state.bank_emb, np.float64)
  out = np.zeros((len(prev_tools), n))
  for b, prev in enumerate(prev_tools):
    e = np.asarray(emb[b], np.float64)
    e = e / max(np.linalg.norm(e), 1e-12)
    evidence = []  # entries of edges leaving prev, most similar first
    for c in range(bank_emb.shape[0]):
      s = float(bank_emb[c] @ e)
      if state.bank_valid[c] and int(state.bank_edge[c]) // n == prev and s > 0:
        evidence.append((-s, c))
    evidence = sorted(evidence)[:max_evidence]
    for j in range(n):
      entries = [(s, c) for s, c in evidence if int(state.bank_edge[c]) % n == j]
      entries = entries[:top_k_similar]
      s_sum = sum(-s for s, _ in entries)
      q = sum(-s * float(state.bank_score[c]) for s, c in entries) / s_sum if s_sum > 0 else 0.0
      conf = s_sum / (s_sum + kappa)
      if dep_units == "tau_range":
        dep = tau_min + q * (tau_max - tau_min)
      else:
        dep = min(max(q, tau_min), tau_max)
      fused = (1 - w * conf) * tau[prev, j] + w * conf * dep
      out[b, j] = min(max(fused, tau_min), tau_max)
  return out


def random_batch(rng, b, h, n, tm, d, p_mask=0.8):
  tools = rng.integers(0, n, size=(b, h)).astype(np.int32)
  templates = rng.integers(-1, tm, size=(b, h)).astype(np.int32)
  lengths = rng.integers(0, h + 1, size=b)
  mask = np.arange(h)[None, :] < lengths[:, None]
  tools[rng.random((b, h)) > 0.95] = -1
  scores = rng.random(b).astype(np.float32)
  emb = rng.normal(size=(b, d)).astype(np.float32)
  return tools, templates, mask, scores, emb


UPDATE = jax.jit(functools.partial(ph.update_pheromone, **HP))


def init(n=6, tm=3, cap=64, d=8, tau_init=1.0):
  return ph.init_pheromone(n, tm, tau_init=tau_init, tau_min=HP["tau_min"], tau_max=HP["tau_max"],
                           bank_capacity=cap, embed_dim=d)


class IssueCasesTest(parameterized.TestCase):

  def test_evaporation_reaches_every_edge(self):
    # tau = [1, 1, 1], rho = 0.1, deposit 0.5 on edge 0 -> [1.4, 0.9, 0.9].
    tau = jnp.ones((1, 3), jnp.float32)
    out = ph.deposit(ph.evaporate(tau, rho=0.1), jnp.array([[0]]), jnp.array([[0]]),
                     jnp.array([[True]]), jnp.array([0.5], jnp.float32), alpha=1.0)
    np.testing.assert_array_equal(out, np.array([[1.4, 0.9, 0.9]], np.float32))

  def test_evaporation_case_through_update(self):
    state = ph.init_pheromone(3, 1, tau_init=1.0, tau_min=0.1, tau_max=10.0, bank_capacity=4,
                              embed_dim=2)
    new = ph.update_pheromone(
        state, jnp.array([[0]], jnp.int32), jnp.array([[0]], jnp.int32), jnp.array([[True]]),
        jnp.array([0.5], jnp.float32), jnp.ones((1, 2)), rho=0.1, alpha=1.0, tau_min=0.1,
        tau_max=10.0, arg_rho=0.1, arg_alpha=1.0)
    expected = np.full((4, 3), 0.9, np.float32)
    expected[3] = [1.4, 0.9, 0.9]  # row 3 = START
    np.testing.assert_array_equal(new.tau, expected)
    np.testing.assert_array_equal(new.tau_arg, np.array([[1.4], [0.9], [0.9]], np.float32))
    np.testing.assert_array_equal(new.bank_valid, [True, False, False, False])
    np.testing.assert_array_equal(new.bank_edge[0], 3 * 3 + 0)
    self.assertEqual(int(new.bank_ptr), 1)

  def test_clipping_bounds_exact(self):
    tau = jnp.array([[0.0, 0.05, 1.0, 2.0, 7.0]], jnp.float32)
    out = ph.clip_pheromone(tau, tau_min=0.05, tau_max=2.0)
    np.testing.assert_array_equal(out, np.array([[0.05, 0.05, 1.0, 2.0, 2.0]], np.float32))

  def test_no_zero_reaches_log_after_any_update(self):
    rng = np.random.default_rng(0)
    n, tm, d = 5, 3, 4
    state = init(n, tm, cap=16, d=d)
    update = jax.jit(functools.partial(ph.update_pheromone, **dict(HP, rho=0.9, alpha=5.0)))
    rows_fn = jax.jit(functools.partial(ph.pheromone_rows, w=1.0, kappa=0.1, top_k_similar=4,
                                        tau_min=HP["tau_min"], tau_max=HP["tau_max"]))
    for _ in range(20):
      batch = random_batch(rng, 4, 6, n, tm, d)
      state = update(state, *map(jnp.asarray, batch))
      for table in (state.tau, state.tau_arg):
        self.assertGreaterEqual(float(table.min()), HP["tau_min"])
        self.assertLessEqual(float(table.max()), HP["tau_max"])
      rows = rows_fn(state, jnp.array([0, n, 2]), jnp.asarray(rng.normal(size=(3, d)), jnp.float32))
      self.assertGreaterEqual(float(rows.min()), HP["tau_min"])
      self.assertLessEqual(float(rows.max()), HP["tau_max"])
      self.assertTrue(np.isfinite(np.log(np.asarray(rows))).all())
    # rho = 1 would zero everything without clipping.
    full_evaporation = jax.jit(functools.partial(ph.update_pheromone,
                                                 **dict(HP, rho=1.0, arg_rho=1.0)))
    self.assertGreaterEqual(float(full_evaporation(state, *map(jnp.asarray, batch)).tau.min()),
                            HP["tau_min"])


class UpdateTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_evaporate_and_deposit_match_numpy(self):
    rng = np.random.default_rng(1)
    tau = rng.random((7, 6)).astype(np.float32) + 0.5
    prev = rng.integers(-1, 8, size=(5, 9)).astype(np.int32)
    nxt = rng.integers(-1, 7, size=(5, 9)).astype(np.int32)
    prev[:, 4:] = prev[:, :5]  # force repeated edges within trajectories
    nxt[:, 4:] = nxt[:, :5]
    mask = rng.random((5, 9)) < 0.8
    scores = rng.random(5).astype(np.float32)
    out = self.variant(lambda *a: ph.deposit(ph.evaporate(a[0], rho=0.3), *a[1:], alpha=0.6))(
        tau, prev, nxt, mask, scores)
    ref = tau.astype(np.float64) * 0.7
    for b in range(5):
      seen = set()
      for h in range(9):
        i, j = prev[b, h], nxt[b, h]
        if mask[b, h] and 0 <= i < 7 and 0 <= j < 6 and (i, j) not in seen:
          seen.add((i, j))
          ref[i, j] += 0.6 * scores[b]
    np.testing.assert_allclose(out, ref, **TOL)

  def test_repeated_edge_deposits_once(self):
    tau = jnp.zeros((3, 2), jnp.float32)
    out = ph.deposit(tau, jnp.array([[0, 0, 0], [0, 1, 1]]), jnp.array([[1, 1, 1], [1, 0, 0]]),
                     jnp.ones((2, 3), bool), jnp.array([0.5, 0.25], jnp.float32), alpha=1.0)
    np.testing.assert_array_equal(out, np.array([[0.0, 0.75], [0.25, 0.0], [0.0, 0.0]], np.float32))

  def test_masked_and_invalid_steps_do_not_deposit(self):
    tau = jnp.zeros((3, 2), jnp.float32)
    out = ph.deposit(tau, jnp.array([[0, -1, 2, 5]]), jnp.array([[1, 0, -1, 0]]),
                     jnp.array([[False, True, True, True]]), jnp.array([1.0], jnp.float32),
                     alpha=1.0)
    np.testing.assert_array_equal(out, np.zeros((3, 2), np.float32))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.0, 0.5)
  def test_update_matches_numpy(self, bank_min_score):
    rng = np.random.default_rng(2)
    n, tm, d = 6, 3, 8
    state = init(n, tm, cap=64, d=d)
    upd = self.variant(functools.partial(ph.update_pheromone, bank_min_score=bank_min_score, **HP))
    for _ in range(3):
      batch = random_batch(rng, 5, 7, n, tm, d)
      ref = np_update(state, *batch, bank_min_score=bank_min_score, **HP)
      state = upd(state, *map(jnp.asarray, batch))
      for got, want in zip(state, ref):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **TOL)

  def test_ring_buffer_wraps_and_keeps_latest(self):
    rng = np.random.default_rng(3)
    n, tm, d = 6, 3, 4
    state = init(n, tm, cap=5, d=d)
    upd = UPDATE
    for _ in range(4):  # far more than 5 entries per update: only the last 5 stay
      batch = random_batch(rng, 4, 6, n, tm, d, p_mask=1.0)
      ref = np_update(state, *batch, **HP)
      state = upd(state, *map(jnp.asarray, batch))
      np.testing.assert_array_equal(state.bank_edge, ref[3])
      np.testing.assert_allclose(state.bank_score, ref[4], **TOL)
      np.testing.assert_allclose(state.bank_emb, ref[2], **TOL)
      self.assertEqual(int(state.bank_ptr), ref[6])

  def test_init_values_and_errors(self):
    mask = np.array([[True, False], [True, True]])
    edge_mask = np.zeros((3, 2), bool)
    edge_mask[2, 0] = True
    s = ph.init_pheromone(2, 2, tau_init=0.5, tau_min=0.1, tau_max=1.0, template_mask=mask,
                          bank_capacity=3, embed_dim=4, edge_mask=edge_mask)
    np.testing.assert_array_equal(s.tau, np.array([[0.1, 0.1], [0.1, 0.1], [0.5, 0.1]], np.float32))
    np.testing.assert_array_equal(s.tau_arg, np.array([[0.5, 0.1], [0.5, 0.5]], np.float32))
    self.assertEqual(s.bank_emb.shape, (3, 4))
    self.assertFalse(s.bank_valid.any())
    kw = dict(tau_init=0.5, tau_min=0.1, tau_max=1.0, bank_capacity=3, embed_dim=4)
    with self.assertRaisesRegex(ValueError, "tau_min must be > 0"):
      ph.init_pheromone(2, 2, **dict(kw, tau_min=0.0))
    with self.assertRaisesRegex(ValueError, "tau_init"):
      ph.init_pheromone(2, 2, **dict(kw, tau_init=2.0))
    with self.assertRaisesRegex(ValueError, "bank_capacity"):
      ph.init_pheromone(2, 2, **dict(kw, bank_capacity=0))
    with self.assertRaisesRegex(ValueError, "template_mask must have shape"):
      ph.init_pheromone(2, 2, template_mask=np.ones((2, 3), bool), **kw)
    with self.assertRaisesRegex(ValueError, "rho must lie in"):
      ph.evaporate(s.tau, rho=1.5)


class RowsTest(parameterized.TestCase):

  def _filled_state(self, rng, n=5, d=6, cap=48):
    state = init(n, 2, cap=cap, d=d)
    # Few distinct edges so that each edge collects several entries.
    tools = rng.integers(0, 2, size=(8, 4)).astype(np.int32)
    batch = (tools, np.zeros_like(tools), np.ones((8, 4), bool), rng.random(8).astype(np.float32),
             rng.normal(size=(8, d)).astype(np.float32))
    return UPDATE(state, *map(jnp.asarray, batch))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((2, "tau_range", 0.3, 256), (64, "score", 1.0, 64),
                            (3, "score", 0.6, 256), (2, "tau_range", 1.0, 5))
  def test_rows_match_numpy(self, top_k_similar, dep_units, w, max_evidence):
    rng = np.random.default_rng(4)
    n, d = 5, 6
    state = self._filled_state(rng, n, d)
    prev = np.array([n, 0, 1, 3, 0], np.int32)
    emb = rng.normal(size=(5, d)).astype(np.float32)
    kw = dict(w=w, kappa=0.7, top_k_similar=top_k_similar, tau_min=HP["tau_min"],
              tau_max=HP["tau_max"], dep_units=dep_units, max_evidence=max_evidence)
    got = self.variant(functools.partial(ph.pheromone_rows, **kw))(state, prev, emb)
    np.testing.assert_allclose(got, np_rows(state, prev, emb, **kw), **TOL)
    self.assertGreater(np.abs(np.asarray(got) - np.asarray(state.tau)[prev]).max(), 1e-3)

  def test_no_evidence_or_zero_weight_gives_task_agnostic_row(self):
    rng = np.random.default_rng(5)
    state = self._filled_state(rng)
    prev = jnp.array([5, 0, 4], jnp.int32)
    emb = jnp.asarray(rng.normal(size=(3, 6)), jnp.float32)
    kw = dict(kappa=1.0, top_k_similar=4, tau_min=HP["tau_min"], tau_max=HP["tau_max"])
    np.testing.assert_array_equal(ph.pheromone_rows(state, prev, emb, w=0.0, **kw), state.tau[prev])
    rows = jax.jit(functools.partial(ph.pheromone_rows, w=1.0, **kw))
    empty = init(5, 2, cap=48, d=6)
    np.testing.assert_array_equal(rows(empty, prev, emb), empty.tau[prev])
    # A zero task embedding has no positive similarity: no task-dependent evidence.
    np.testing.assert_array_equal(rows(state, prev, jnp.zeros((3, 6))), state.tau[prev])

  def test_confidence_formula_exact(self):
    # One entry, identical task (cos = 1): c = 1 / (1 + kappa) = 0.5, qbar = 1,
    # tau_dep = tau_max = 2; tau = 0.5 * 1 + 0.5 * 2 = 1.5 on edge (START, 1).
    state = ph.init_pheromone(3, 1, tau_init=1.0, tau_min=0.5, tau_max=2.0, bank_capacity=4,
                              embed_dim=2)
    state = state._replace(
        bank_emb=state.bank_emb.at[0].set(jnp.array([0.6, 0.8])),
        bank_edge=state.bank_edge.at[0].set(3 * 3 + 1),
        bank_score=state.bank_score.at[0].set(1.0), bank_valid=state.bank_valid.at[0].set(True))
    rows = ph.pheromone_rows(state, jnp.array([3]), jnp.array([[3.0, 4.0]]), w=1.0, kappa=1.0,
                             top_k_similar=8, tau_min=0.5, tau_max=2.0)
    np.testing.assert_allclose(rows, [[1.0, 1.5, 1.0]], **TOL)
    emb = jnp.array([[3.0, 4.0]])
    sim = ph.bank_similarity(state, emb)
    np.testing.assert_allclose(sim, [[1.0, 0.0, 0.0, 0.0]], **TOL)
    again = ph.pheromone_rows(state, jnp.array([3]), emb, w=1.0, kappa=1.0, top_k_similar=8,
                              tau_min=0.5, tau_max=2.0, bank_sim=sim)
    np.testing.assert_array_equal(again, rows)

  def test_bad_options_fail_loudly(self):
    state = init()
    kw = dict(w=0.5, kappa=1.0, top_k_similar=4, tau_min=0.05, tau_max=2.0)
    with self.assertRaisesRegex(ValueError, "dep_units"):
      ph.pheromone_rows(state, jnp.array([0]), jnp.ones((1, 8)), **dict(kw, dep_units="x"))
    with self.assertRaisesRegex(ValueError, "kappa"):
      ph.pheromone_rows(state, jnp.array([0]), jnp.ones((1, 8)), **dict(kw, kappa=0.0))


class ShardingTest(parameterized.TestCase):

  @parameterized.parameters(jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto)
  def test_update_and_rows_sharded_equal_unsharded(self, axis_type):
    if jax.device_count() < 8:
      self.skipTest("needs 8 devices (tests/conftest.py sets XLA_FLAGS)")
    rng = np.random.default_rng(6)
    n, tm, d, b = 7, 3, 8, 16
    state = init(n, tm, cap=96, d=d)
    batch = tuple(map(jnp.asarray, random_batch(rng, b, 5, n, tm, d)))
    prev = jnp.asarray(rng.integers(0, n + 1, size=b), jnp.int32)
    emb = batch[-1]
    upd = jax.jit(functools.partial(ph.update_pheromone, **HP))
    rows = jax.jit(functools.partial(ph.pheromone_rows, w=0.6, kappa=0.5, top_k_similar=3,
                                     tau_min=HP["tau_min"], tau_max=HP["tau_max"]))
    ref_state = upd(state, *batch)
    ref_rows = rows(ref_state, prev, emb)

    mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
      shard = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))
      rep_state = jax.device_put(state, NamedSharding(mesh, P()))
      got_state = upd(rep_state, *map(shard, batch))
      got_rows = rows(got_state, shard(prev), shard(emb))
    for got, want in zip(got_state, ref_state):
      np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **TOL)
    np.testing.assert_allclose(got_rows, ref_rows, **TOL)
    self.assertEqual(got_rows.shape, (b, n))


if __name__ == "__main__":
  absltest.main()
