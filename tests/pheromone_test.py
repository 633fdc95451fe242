"""Tests for phgpo/pheromone.py: issue-2 cases, lazy == eager float64 NumPy references, bounds,
O(B*H) update structure, sharding."""

import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import pytest

from phgpo import edges
from phgpo import memory_bank
from phgpo import pheromone as ph
from phgpo import sampling

TOL = dict(rtol=1e-5, atol=1e-5)
LAZY_TOL = dict(rtol=1e-6, atol=0.0)  # lazy f32 vs eager float64: relative error only
HP = dict(rho=0.1, alpha=0.7, tau_min=0.05, tau_max=2.0, arg_rho=0.2, arg_alpha=0.4)


# ------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops over DENSE tables (the eager rule).


NUM_TASKS = 12
KEYS = np.random.default_rng(123).normal(size=(NUM_TASKS, 8)).astype(np.float32)  # the tasks' embeddings


def np_init(state):
  """The reference state: dense float64 tables (every entry evaporated eagerly) and the bank as lists."""
  bank_task, bank_score = np.asarray(state.bank_task), np.asarray(state.bank_score, np.float64)
  bank = {}
  for i, j in np.ndindex(bank_task.shape[:2]):
    bank[(i, j)] = [(int(t), float(q)) for t, q in zip(bank_task[i, j], bank_score[i, j]) if t >= 0]
  return dict(tau=np.asarray(state.tau, np.float64).copy(),
              tau_arg=np.asarray(state.tau_arg, np.float64).copy(), bank=bank, m=bank_task.shape[2])


def np_bank_write(bank, m, cands):
  """The bank rule on lists: cands = [(edge, task, score)] in batch order (one per trajectory and edge)."""
  bank = {e: list(v) for e, v in bank.items()}
  by_edge = {}
  for e, t, q in cands:
    by_edge.setdefault(e, []).append((t, q))
  for e, new in by_edge.items():
    best = {}
    for t, q in new:   # one candidate per task: the best score, ties the earlier row
      if t not in best or q > best[t]:
        best[t] = q
    order = [t for t, _ in new]
    new = sorted(best.items(), key=lambda tq: (-tq[1], order.index(tq[0])))
    merged = new + bank[e]   # new entries first: they win ties, so the oldest leave first
    keep = []
    for k, (t, q) in enumerate(merged):
      if not any(t2 == t and (q2 > q or (q2 == q and k2 < k)) for k2, (t2, q2) in enumerate(merged)):
        keep.append((t, q))
    bank[e] = sorted(keep, key=lambda tq: -tq[1])[:m]   # stable: earlier first among equal scores
  return bank


def np_update(ref, tools, templates, mask, scores, task_ids, *, rho, alpha, tau_min, tau_max,
              arg_rho, arg_alpha, bank_min_score=0.0):
  """Eager rule on every entry: tau <- clip((1 - rho) tau + alpha sum_b q_b 1[(i, j) in b])."""
  tau = ref["tau"] * (1 - rho)
  tau_arg = ref["tau_arg"] * (1 - arg_rho)
  n = tau.shape[1]
  tm = tau_arg.shape[1]
  cands = []
  for b in range(tools.shape[0]):
    seen, seen_arg, prev = set(), set(), n
    for h in range(tools.shape[1]):
      t, u = int(tools[b, h]), int(templates[b, h])
      if mask[b, h] and 0 <= t < n and 0 <= prev <= n and (prev, t) not in seen:
        seen.add((prev, t))
        tau[prev, t] += alpha * float(scores[b])
        if scores[b] >= bank_min_score:
          cands.append(((prev, t), int(task_ids[b]), float(np.float32(scores[b]))))
      # The (tool, template) pair counts whatever the previous tool was (even a -1 step).
      if mask[b, h] and 0 <= t < n and 0 <= u < tm and (t, u) not in seen_arg:
        seen_arg.add((t, u))
        tau_arg[t, u] += arg_alpha * float(scores[b])
      prev = t
  return dict(tau=np.clip(tau, tau_min, tau_max), tau_arg=np.clip(tau_arg, tau_min, tau_max),
              bank=np_bank_write(ref["bank"], ref["m"], cands), m=ref["m"])


def np_rows(tau, bank, prev_tools, task_sim, *, w, kappa, top_k_similar, tau_min, tau_max,
            dep_units="tau_range", sim_threshold=0.0):
  """Fused rows from the dense reference tau and a reference bank (dict edge -> [(task, score)])."""
  tau = np.asarray(tau, np.float64)
  n = tau.shape[1]
  out = np.zeros((len(prev_tools), n))
  for b, prev in enumerate(prev_tools):
    for j in range(n):
      entries = [(float(task_sim[b, t]), k, q) for k, (t, q) in enumerate(bank[(int(prev), j)])]
      entries = [e for e in entries if e[0] > 0 and e[0] >= sim_threshold]
      entries = sorted(entries, key=lambda e: (-e[0], e[1]))[:top_k_similar]
      s_sum = sum(s for s, _, _ in entries)
      q = sum(s * q for s, _, q in entries) / s_sum if s_sum > 0 else 0.0
      conf = s_sum / (s_sum + kappa)
      if dep_units == "tau_range":
        dep = tau_min + q * (tau_max - tau_min)
      else:
        dep = min(max(q, tau_min), tau_max)
      fused = (1 - w * conf) * tau[prev, j] + w * conf * dep
      out[b, j] = min(max(fused, tau_min), tau_max)
  return out


def sim_of(task_ids_or_emb):
  """f32[B, T] similarity to KEYS of tasks given by row (i32[B]) or by embedding (f32[B, D])."""
  x = np.asarray(task_ids_or_emb)
  emb = KEYS[x] if x.ndim == 1 else x
  return memory_bank.bank_similarity(jnp.asarray(KEYS), jnp.asarray(emb, jnp.float32))


def random_batch(rng, b, h, n, tm, d, p_mask=0.8):
  tools = rng.integers(0, n, size=(b, h)).astype(np.int32)
  templates = rng.integers(-1, tm, size=(b, h)).astype(np.int32)
  lengths = rng.integers(0, h + 1, size=b)
  mask = np.arange(h)[None, :] < lengths[:, None]
  tools[rng.random((b, h)) > 0.95] = -1
  scores = rng.random(b).astype(np.float32)
  del d
  task_ids = rng.integers(0, NUM_TASKS, size=b).astype(np.int32)
  return tools, templates, mask, scores, task_ids


def assert_matches(test, state, ref, *, tau_min, tol=TOL):
  """Effective tables vs the dense reference; bank fields; raw tables within the bounds too."""
  np.testing.assert_allclose(np.asarray(ph.effective_tau(state, tau_min=tau_min), np.float64),
                             ref["tau"], **tol)
  np.testing.assert_allclose(np.asarray(ph.effective_tau_arg(state, tau_min=tau_min), np.float64),
                             ref["tau_arg"], **tol)
  assert_bank(test, state, ref)


def assert_bank(test, state, ref):
  got = np_init(state)["bank"]
  test.assertEqual(set(got), set(ref["bank"]))
  for e, entries in ref["bank"].items():
    test.assertEqual([t for t, _ in got[e]], [t for t, _ in entries], e)
    np.testing.assert_allclose([q for _, q in got[e]], [q for _, q in entries], **TOL)


UPDATE = jax.jit(functools.partial(ph.update_pheromone, **HP))


def init(n=6, tm=3, cap=4, d=8, tau_init=1.0, edge_mask=None):
  """A fresh state; cap is the bank's entries per edge (d is unused: the bank holds task rows)."""
  del d
  return ph.init_pheromone(n, tm, tau_init=tau_init, tau_min=HP["tau_min"], tau_max=HP["tau_max"],
                           bank_per_edge=cap, edge_mask=edge_mask)


class IssueCasesTest(parameterized.TestCase):

  @pytest.mark.fast
  def test_evaporation_reaches_every_edge(self):
    # tau = [1, 1, 1], rho = 0.1, deposit 0.5 on edge 0 -> [1.4, 0.9, 0.9] (dense eager form).
    tau = jnp.ones((1, 3), jnp.float32)
    out = ph.deposit(ph.evaporate(tau, rho=0.1), jnp.array([[0]]), jnp.array([[0]]),
                     jnp.array([[True]]), jnp.array([0.5], jnp.float32), alpha=1.0)
    np.testing.assert_array_equal(out, np.array([[1.4, 0.9, 0.9]], np.float32))

  @chex.variants(with_jit=True, without_jit=True)
  def test_evaporation_case_through_update(self):
    state = ph.init_pheromone(3, 1, tau_init=1.0, tau_min=0.1, tau_max=10.0, bank_per_edge=4)
    upd = self.variant(functools.partial(ph.update_pheromone, rho=0.1, alpha=1.0, tau_min=0.1,
                                         tau_max=10.0, arg_rho=0.1, arg_alpha=1.0))
    new = upd(state, jnp.array([[0]], jnp.int32), jnp.array([[0]], jnp.int32), jnp.array([[True]]),
              jnp.array([0.5], jnp.float32), jnp.array([7], jnp.int32))
    expected = np.full((4, 3), 0.9, np.float32)
    expected[3] = [1.4, 0.9, 0.9]  # row 3 = START
    np.testing.assert_array_equal(ph.effective_tau(new, tau_min=0.1), expected)
    np.testing.assert_array_equal(ph.effective_tau_arg(new, tau_min=0.1),
                                  np.array([[1.4], [0.9], [0.9]], np.float32))
    np.testing.assert_array_equal(ph.arg_rows(new, jnp.array([0, 2]), tau_min=0.1),
                                  np.array([[1.4], [0.9]], np.float32))
    # Lazily stored: only the traversed entries were written; the rest still hold tau_init.
    raw = np.ones((4, 3), np.float32)
    raw[3, 0] = 1.4
    np.testing.assert_array_equal(new.tau, raw)
    stamps = np.zeros((4, 3), np.int32)
    stamps[3, 0] = 1
    np.testing.assert_array_equal(new.tau_step, stamps)
    np.testing.assert_array_equal(new.tau_arg_step, [[1], [0], [0]])
    self.assertEqual(int(new.num_updates), 1)
    np.testing.assert_array_equal(new.rho, np.float32(0.1))
    # The bank of edge (START, 0) holds task 7 with score 0.5; every other slot is empty.
    np.testing.assert_array_equal(new.bank_task[3, 0], [7, -1, -1, -1])
    np.testing.assert_array_equal(new.bank_score[3, 0], [0.5, 0, 0, 0])
    self.assertEqual(int((np.asarray(new.bank_task) >= 0).sum()), 1)

  @pytest.mark.fast
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
    lo, hi = HP["tau_min"], HP["tau_max"]
    effective = jax.jit(lambda s: (ph.effective_tau(s, tau_min=lo),
                                   ph.effective_tau_arg(s, tau_min=lo)))
    for _ in range(20):
      batch = random_batch(rng, 4, 6, n, tm, d)
      state = update(state, *map(jnp.asarray, batch))
      for table in (state.tau, state.tau_arg, *effective(state)):
        self.assertGreaterEqual(float(table.min()), lo)
        self.assertLessEqual(float(table.max()), hi)
      rows = rows_fn(state, jnp.array([0, n, 2]), jnp.asarray(rng.normal(size=(3, d)), jnp.float32))
      self.assertGreaterEqual(float(rows.min()), lo)
      self.assertLessEqual(float(rows.max()), hi)
      self.assertTrue(np.isfinite(np.log(np.asarray(rows))).all())
    # rho = 1 would zero everything without clipping.
    full_evaporation = jax.jit(functools.partial(ph.update_pheromone,
                                                 **dict(HP, rho=1.0, arg_rho=1.0)))
    state = ph.set_rates(state, rho=1.0, arg_rho=1.0, tau_min=lo)
    gone = full_evaporation(state, *map(jnp.asarray, batch))
    self.assertGreaterEqual(float(ph.effective_tau(gone, tau_min=lo).min()), lo)
    self.assertGreaterEqual(float(ph.effective_tau_arg(gone, tau_min=lo).min()), lo)


class LazyTest(parameterized.TestCase):
  """The lazy O(B*H) update equals the eager dense rule (float64 NumPy) after every update."""

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((0.1, 0.2, 1.0), (0.0, 1.0, 1.0), (1.0, 0.0, 0.3))
  def test_lazy_equals_eager_many_updates(self, rho, arg_rho, alpha):
    rng = np.random.default_rng(7)
    n, tm, d = 7, 3, 4
    edge_mask = rng.random((n + 1, n)) < 0.5
    state = init(n, tm, cap=32, d=d, tau_init=1.3, edge_mask=edge_mask)
    hp = dict(HP, rho=rho, arg_rho=arg_rho, alpha=alpha)
    upd = self.variant(functools.partial(ph.update_pheromone, **hp))
    ref = np_init(state)
    num = 6 if "without_jit" in self.id() else 40
    for step in range(num):
      # Few tools per batch: most edges sit untouched for many updates (reaching tau_min),
      # a few are deposited on again and again (reaching tau_max).
      k = 2 if step % 3 else n
      batch = random_batch(rng, 3, 4, k, tm, d)
      ref = np_update(ref, *batch, **hp)
      state = upd(state, *map(jnp.asarray, batch))
      assert_matches(self, state, ref, tau_min=hp["tau_min"], tol=LAZY_TOL)
    self.assertEqual(int(state.num_updates), num)
    if 0 < rho < 1:
      self.assertTrue((ref["tau"] == hp["tau_min"]).any())  # the floor was reached somewhere
      self.assertTrue(((ref["tau"] > hp["tau_min"]) & (ref["tau"] < hp["tau_max"])).any())

  @pytest.mark.fast
  def test_only_traversed_entries_are_written(self):
    rng = np.random.default_rng(8)
    n, tm, d = 6, 3, 4
    state = init(n, tm, cap=5, d=d)
    for step in range(1, 6):
      tools, templates, mask, scores, emb = random_batch(rng, 4, 6, n, tm, d)
      new = UPDATE(state, *map(jnp.asarray, (tools, templates, mask, scores, emb)))
      written, written_arg = set(), set()
      for b in range(4):
        prev = n
        for h in range(6):
          t, u = int(tools[b, h]), int(templates[b, h])
          if mask[b, h] and t >= 0:
            if prev >= 0:   # a step after a no-call step (-1) has no valid edge
              written.add((prev, t))
            if u >= 0:
              written_arg.add((t, u))
          prev = t
      for table, stamps, old, old_stamps, pairs in (
          (new.tau, new.tau_step, state.tau, state.tau_step, written),
          (new.tau_arg, new.tau_arg_step, state.tau_arg, state.tau_arg_step, written_arg)):
        touched = np.zeros(table.shape, bool)
        for i, j in pairs:
          touched[i, j] = True
        np.testing.assert_array_equal(np.asarray(stamps)[touched], step)
        np.testing.assert_array_equal(np.asarray(stamps)[~touched],
                                      np.asarray(old_stamps)[~touched])
        np.testing.assert_array_equal(np.asarray(table)[~touched], np.asarray(old)[~touched])
      state = new

  def test_update_is_sparse_at_top_level_and_copy_free(self):
    # Every op producing a table-sized array is a reshape or an in-place scatter; and with the
    # state donated the compiled update copies no table, alone or fused with reads of the same
    # state (sampling and update in one program).
    n, tm, d = 97, 4, 8
    state = init(n, tm, cap=4, d=d)
    batch = tuple(map(jnp.asarray, random_batch(np.random.default_rng(9), 4, 5, n, tm, d)))
    fn = functools.partial(ph.update_pheromone, **HP)
    big = (n + 1) * n
    for eqn in jax.make_jaxpr(fn)(state, *batch).jaxpr.eqns:
      if any(np.prod(v.aval.shape, dtype=int) >= big for v in eqn.outvars):
        self.assertIn(eqn.primitive.name, {"reshape", "scatter"}, eqn)

    def fused(state, tools, templates, mask, scores, emb):
      sim = memory_bank.bank_similarity(jnp.asarray(KEYS), jnp.asarray(KEYS)[emb])
      rows = ph.pheromone_rows(state, jnp.full((4,), n, jnp.int32), sim, w=0.5, kappa=1.0,
                               top_k_similar=4, tau_min=HP["tau_min"], tau_max=HP["tau_max"])
      first = jnp.argmax(rows, axis=-1).astype(jnp.int32)  # a decision read from the state
      tmpl = jnp.argmax(ph.arg_rows(state, first, tau_min=HP["tau_min"]), axis=-1)
      tools = tools.at[:, 0].set(first)
      templates = templates.at[:, 0].set(tmpl.astype(jnp.int32))
      return fn(state, tools, templates, mask, scores, emb)

    for f in (fn, fused):
      hlo = jax.jit(f, donate_argnums=0).lower(state, *batch).compile().as_text()
      entry = hlo[hlo.index("ENTRY"):]
      entry = entry[:entry.index("\n}")]
      copies = re.findall(r"= \w+\[(\d+(?:,\d+)*)\][^=]*? copy\(", entry)
      sizes = [np.prod([int(s) for s in c.split(",")]) for c in copies]
      self.assertTrue(all(s < n * tm for s in sizes), (f, copies))
      self.assertNotIn(" while(", entry)
      self.assertNotIn(" conditional(", entry)

  def test_rates_are_recorded_and_a_change_fails_loudly(self):
    rng = np.random.default_rng(10)
    n, tm, d = 6, 3, 4
    batch = tuple(map(jnp.asarray, random_batch(rng, 4, 6, n, tm, d)))
    state = UPDATE(init(n, tm, cap=5, d=d), *batch)
    np.testing.assert_array_equal(state.rho, np.float32(HP["rho"]))
    np.testing.assert_array_equal(state.arg_rho, np.float32(HP["arg_rho"]))
    for change in (dict(rho=0.3), dict(arg_rho=0.5)):
      (name, new), = change.items()
      message = f"{name} changed from {HP[name]:g} to {new:g}.*set_rates"
      with self.assertRaisesRegex(ValueError, message):
        ph.update_pheromone(state, *batch, **dict(HP, **change))
      # Under jit it cannot raise: the state is poisoned, and the readers say so.
      bad = jax.jit(functools.partial(ph.update_pheromone, **dict(HP, **change)))(state, *batch)
      self.assertTrue(np.isnan(getattr(bad, name)))
      self.assertTrue(np.isnan(jax.jit(functools.partial(
          ph.effective_tau if name == "rho" else ph.effective_tau_arg,
          tau_min=HP["tau_min"]))(bad)).any())
      with self.assertRaisesRegex(ValueError, f"{name} is NaN.*set_rates"):
        ph.effective_tau(bad, tau_min=HP["tau_min"])
      with self.assertRaisesRegex(ValueError, "is NaN"):
        ph.update_pheromone(bad, *batch, **HP)
      self.assertTrue(np.isnan(getattr(UPDATE(bad, *batch), name)))  # sticky under jit

  def test_set_rates_changes_rates_exactly(self):
    rng = np.random.default_rng(10)
    n, tm, d = 6, 3, 4
    state = init(n, tm, cap=5, d=d)
    ref = np_init(state)
    upd = jax.jit(ph.update_pheromone)  # rates traced
    phases = [(0.1, 0.2, 4), (0.3, 0.2, 3), (0.0, 0.5, 2)]
    for p, (rho, arg_rho, steps) in enumerate(phases):
      hp = dict(HP, rho=rho, arg_rho=arg_rho)
      if p:
        state = ph.set_rates(state, rho=rho, arg_rho=arg_rho, tau_min=HP["tau_min"])
        assert_matches(self, state, ref, tau_min=HP["tau_min"], tol=LAZY_TOL)
        np.testing.assert_array_equal(state.tau_step, int(state.num_updates))
      for _ in range(steps):
        batch = random_batch(rng, 4, 6, 3, tm, d)
        ref = np_update(ref, *batch, **hp)
        before = state
        state = upd(state, *map(jnp.asarray, batch), **hp)
        assert_matches(self, state, ref, tau_min=HP["tau_min"], tol=LAZY_TOL)
        # Constant rate: untouched entries keep their stamps (no dense pass).
        untouched = np.asarray(state.tau_step) <= int(before.num_updates)
        np.testing.assert_array_equal(np.asarray(state.tau_step)[untouched],
                                      np.asarray(before.tau_step)[untouched])
    np.testing.assert_array_equal(state.rho, np.float32(0.0))
    np.testing.assert_array_equal(state.arg_rho, np.float32(0.5))

  def test_update_traces_once(self):
    rng = np.random.default_rng(11)
    n, tm, d = 5, 2, 4

    @jax.jit
    @chex.assert_max_traces(n=1)
    def upd(state, *batch):
      return ph.update_pheromone(state, *batch, **HP)

    state = init(n, tm, cap=8, d=d)
    for _ in range(4):
      state = upd(state, *map(jnp.asarray, random_batch(rng, 2, 3, n, tm, d)))

  def test_arg_rows_feed_sample_templates(self):
    # The cheap path for train.py: rows of the chosen tools only, same draws as the dense table.
    rng = np.random.default_rng(12)
    n, tm, d = 6, 3, 4
    template_mask = rng.random((n, tm)) < 0.7
    state = ph.init_pheromone(n, tm, tau_init=1.0, tau_min=HP["tau_min"], tau_max=HP["tau_max"],
                              template_mask=template_mask, bank_per_edge=5)
    for _ in range(5):
      state = UPDATE(state, *map(jnp.asarray, random_batch(rng, 4, 6, n, tm, d)))
    tools = jnp.array([0, 3, -1, 5, 2, 2, 7], jnp.int32)
    dense = ph.effective_tau_arg(state, tau_min=HP["tau_min"])
    rows = ph.arg_rows(state, tools, tau_min=HP["tau_min"])
    np.testing.assert_array_equal(rows, np.asarray(dense)[np.clip(tools, 0, n - 1)])
    self.assertGreater(np.abs(np.asarray(dense) - np.asarray(state.tau_arg)).max(), 1e-3)
    tmask = jnp.asarray(template_mask)
    valid = (tools >= 0) & (tools < n)
    for seed in range(3):
      key = jax.random.key(seed)
      want = sampling.sample_templates(key, dense, tmask, tools)
      got = sampling.sample_templates(key, rows, edges.take_rows(tmask, tools),
                                      jnp.where(valid, jnp.arange(tools.shape[0]), -1))
      np.testing.assert_array_equal(got, want)

  @pytest.mark.fast
  def test_readers_check_tau_min(self):
    state = init()
    with self.assertRaisesRegex(ValueError, "tau_min must be > 0"):
      ph.effective_tau(state, tau_min=0.0)


class UpdateTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
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

  def test_repeated_edge_deposits_once_through_update(self):
    # Trajectory 0 loops on (0, 0): deposits once; trajectory 1 also crosses (0, 0): both count.
    state = ph.init_pheromone(2, 1, tau_init=1.0, tau_min=0.1, tau_max=10.0, bank_per_edge=8)
    new = ph.update_pheromone(
        state, jnp.array([[0, 0, 0], [1, 0, 0]], jnp.int32), jnp.zeros((2, 3), jnp.int32),
        jnp.ones((2, 3), bool), jnp.array([0.5, 0.25], jnp.float32), jnp.array([0, 1], jnp.int32), rho=0.5,
        alpha=1.0, tau_min=0.1, tau_max=10.0, arg_rho=0.5, arg_alpha=1.0)
    np.testing.assert_allclose(ph.effective_tau(new, tau_min=0.1),
                               [[1.25, 0.5], [0.75, 0.5], [1.0, 0.75]], **TOL)
    np.testing.assert_allclose(ph.effective_tau_arg(new, tau_min=0.1), [[1.25], [0.75]], **TOL)

  @pytest.mark.fast
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
    state = init(n, tm, cap=5, d=d)
    ref = np_init(state)
    upd = self.variant(functools.partial(ph.update_pheromone, bank_min_score=bank_min_score, **HP))
    for _ in range(3):
      batch = random_batch(rng, 5, 7, n, tm, d)
      ref = np_update(ref, *batch, bank_min_score=bank_min_score, **HP)
      state = upd(state, *map(jnp.asarray, batch))
      assert_matches(self, state, ref, tau_min=HP["tau_min"])

  def test_bank_bound_per_edge_over_many_updates(self):
    # Far more traversals than M = 3 entries per edge: every edge keeps its 3 best (task, score) entries,
    # exactly as the list reference says.
    rng = np.random.default_rng(3)
    n, tm, d = 4, 2, 4
    state = init(n, tm, cap=3, d=d)
    ref = np_init(state)
    for _ in range(6):
      batch = random_batch(rng, 8, 5, n, tm, d, p_mask=1.0)
      ref = np_update(ref, *batch, **HP)
      state = UPDATE(state, *map(jnp.asarray, batch))
      assert_bank(self, state, ref)
    self.assertLessEqual(int((np.asarray(state.bank_task) >= 0).sum(-1).max()), 3)
    self.assertEqual(int((np.asarray(state.bank_task) >= 0).sum(-1).max()), 3)

  @pytest.mark.fast
  def test_init_values_and_errors(self):
    mask = np.array([[True, False], [True, True]])
    edge_mask = np.zeros((3, 2), bool)
    edge_mask[2, 0] = True
    s = ph.init_pheromone(2, 2, tau_init=0.5, tau_min=0.1, tau_max=1.0, template_mask=mask,
                          bank_per_edge=3, edge_mask=edge_mask)
    np.testing.assert_array_equal(s.tau, np.array([[0.1, 0.1], [0.1, 0.1], [0.5, 0.1]], np.float32))
    np.testing.assert_array_equal(s.tau_arg, np.array([[0.5, 0.1], [0.5, 0.5]], np.float32))
    np.testing.assert_array_equal(ph.effective_tau(s, tau_min=0.1), s.tau)
    np.testing.assert_array_equal(ph.effective_tau_arg(s, tau_min=0.1), s.tau_arg)
    np.testing.assert_array_equal(s.tau_step, np.zeros((3, 2), np.int32))
    np.testing.assert_array_equal(s.tau_arg_step, np.zeros((2, 2), np.int32))
    self.assertEqual(int(s.num_updates), 0)
    self.assertEqual(s.bank_task.shape, (3, 2, 3))
    self.assertTrue((np.asarray(s.bank_task) == -1).all())
    kw = dict(tau_init=0.5, tau_min=0.1, tau_max=1.0, bank_per_edge=3)
    with self.assertRaisesRegex(ValueError, "tau_min must be > 0"):
      ph.init_pheromone(2, 2, **dict(kw, tau_min=0.0))
    with self.assertRaisesRegex(ValueError, "tau_init"):
      ph.init_pheromone(2, 2, **dict(kw, tau_init=2.0))
    with self.assertRaisesRegex(ValueError, "bank_per_edge"):
      ph.init_pheromone(2, 2, **dict(kw, bank_per_edge=0))
    with self.assertRaisesRegex(ValueError, "template_mask must have shape"):
      ph.init_pheromone(2, 2, template_mask=np.ones((2, 3), bool), **kw)
    with self.assertRaisesRegex(ValueError, "rho must lie in"):
      ph.evaporate(s.tau, rho=1.5)
    batch = (jnp.zeros((1, 1), jnp.int32),) * 2 + (jnp.ones((1, 1), bool), jnp.ones(1),
                                                   jnp.zeros((1,), jnp.int32))
    with self.assertRaisesRegex(ValueError, "arg_rho must lie in"):
      ph.update_pheromone(s, *batch, **dict(HP, arg_rho=-0.1))
    with self.assertRaisesRegex(ValueError, "tau_max"):
      ph.update_pheromone(s, *batch, **dict(HP, tau_max=0.01))


class RowsTest(parameterized.TestCase):

  def _filled_state(self, rng, n=5, d=6, cap=6):
    state = init(n, 2, cap=cap, d=d)
    # Few distinct edges so that each edge collects several entries; several updates so that
    # the lazily stored values differ from the effective ones.
    for _ in range(3):
      tools = rng.integers(0, 2, size=(8, 4)).astype(np.int32)
      batch = (tools, np.zeros_like(tools), np.ones((8, 4), bool),
               rng.random(8).astype(np.float32), rng.integers(0, NUM_TASKS, size=8).astype(np.int32))
      state = UPDATE(state, *map(jnp.asarray, batch))
    return state

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((2, "tau_range", 0.3, 0.0), (64, "score", 1.0, 0.2),
                            (3, "score", 0.6, 0.0), (2, "tau_range", 1.0, 0.4))
  @pytest.mark.fast
  def test_rows_match_numpy(self, top_k_similar, dep_units, w, sim_threshold):
    rng = np.random.default_rng(4)
    n, d = 5, 6
    state = self._filled_state(rng, n, d)
    tau = ph.effective_tau(state, tau_min=HP["tau_min"])
    prev = np.array([n, 0, 1, 3, 0], np.int32)
    sim = sim_of(rng.normal(size=(5, 8)).astype(np.float32))
    kw = dict(w=w, kappa=0.7, top_k_similar=top_k_similar, tau_min=HP["tau_min"],
              tau_max=HP["tau_max"], dep_units=dep_units, sim_threshold=sim_threshold)
    got = self.variant(functools.partial(ph.pheromone_rows, **kw))(state, prev, sim)
    np.testing.assert_allclose(got, np_rows(tau, np_init(state)["bank"], prev, np.asarray(sim), **kw), **TOL)
    self.assertGreater(np.abs(np.asarray(got) - np.asarray(tau)[prev]).max(), 1e-3)

  @pytest.mark.fast
  def test_no_evidence_or_zero_weight_gives_task_agnostic_row(self):
    rng = np.random.default_rng(5)
    state = self._filled_state(rng)
    tau = ph.effective_tau(state, tau_min=HP["tau_min"])
    prev = jnp.array([5, 0, 4], jnp.int32)
    sim = sim_of(rng.normal(size=(3, 8)).astype(np.float32))
    kw = dict(kappa=1.0, top_k_similar=4, tau_min=HP["tau_min"], tau_max=HP["tau_max"])
    np.testing.assert_array_equal(ph.pheromone_rows(state, prev, sim, w=0.0, **kw), tau[prev])
    np.testing.assert_array_equal(ph.pheromone_rows(state, prev, None, w=0.0, **kw), tau[prev])
    # The rows are the evaporated values, not the stored ones.
    self.assertGreater(np.abs(np.asarray(tau[prev]) - np.asarray(state.tau[prev])).max(), 1e-3)
    rows = jax.jit(functools.partial(ph.pheromone_rows, w=1.0, **kw))
    empty = init(5, 2, cap=6, d=6)
    np.testing.assert_array_equal(rows(empty, prev, sim), empty.tau[prev])
    # A zero task embedding has no positive similarity: no task-dependent evidence.
    np.testing.assert_array_equal(rows(state, prev, sim_of(np.zeros((3, 8), np.float32))), tau[prev])

  def test_no_entry_above_threshold_uses_task_agnostic_exactly(self):
    # Issue 11 case: every entry is less similar than the threshold, so tau = tau_agn bit for bit,
    # while a lower threshold lets the same entries move the row.
    rng = np.random.default_rng(7)
    state = self._filled_state(rng)
    tau = np.asarray(ph.effective_tau(state, tau_min=HP["tau_min"]))
    prev = jnp.array([5, 0, 1], jnp.int32)
    sim = sim_of(rng.normal(size=(3, 8)).astype(np.float32))
    top = float(np.asarray(sim).max())
    kw = dict(w=1.0, kappa=0.5, top_k_similar=8, tau_min=HP["tau_min"], tau_max=HP["tau_max"])
    above = jax.jit(functools.partial(ph.pheromone_rows, sim_threshold=top + 1e-3, **kw))(state, prev, sim)
    np.testing.assert_array_equal(above, tau[np.asarray(prev)])
    low = ph.pheromone_rows(state, prev, sim, sim_threshold=0.0, **kw)
    self.assertGreater(np.abs(np.asarray(low) - tau[np.asarray(prev)]).max(), 1e-3)

  def test_one_identical_perfect_entry_gives_the_maximum(self):
    # Issue 11 case: one entry, identical task (cos = 1), score 1: c = 1 / (1 + kappa) = 0.5,
    # tau_dep = tau_max = 2; tau = 0.5 * 1 + 0.5 * 2 = 1.5 on edge (START, 1), and no single entry
    # of lower similarity or score gives more.
    state = ph.init_pheromone(3, 1, tau_init=1.0, tau_min=0.5, tau_max=2.0, bank_per_edge=4)
    kw = dict(w=1.0, kappa=1.0, top_k_similar=8, tau_min=0.5, tau_max=2.0, sim_threshold=0.5)
    keys = jnp.array([[0.6, 0.8], [0.8, 0.6], [1.0, 0.0]])
    sim = memory_bank.bank_similarity(keys, jnp.array([[3.0, 4.0]]))     # task 0 is the query itself
    np.testing.assert_allclose(sim, [[1.0, 0.96, 0.6]], **TOL)
    with_entry = lambda task, q: state._replace(bank_task=state.bank_task.at[3, 1, 0].set(task),
                                                bank_score=state.bank_score.at[3, 1, 0].set(q))
    best = ph.pheromone_rows(with_entry(0, 1.0), jnp.array([3]), sim, **kw)
    np.testing.assert_allclose(best, [[1.0, 1.5, 1.0]], **TOL)
    for task, q in ((0, 0.8), (1, 1.0), (2, 1.0), (1, 0.5)):
      other = ph.pheromone_rows(with_entry(task, q), jnp.array([3]), sim, **kw)
      self.assertLess(float(other[0, 1]), float(best[0, 1]))

  def test_lowest_scores_leave_first_and_one_entry_per_task(self):
    # Issue 11 case: M = 3 entries on edge (START, 0). Tasks 0..5 arrive with scores; the bank keeps the
    # three best, best first; a task seen again keeps its better score and is never duplicated.
    state = ph.init_pheromone(2, 1, tau_init=1.0, tau_min=0.1, tau_max=1.0, bank_per_edge=3)
    upd = jax.jit(functools.partial(ph.update_pheromone, rho=0.1, alpha=0.1, tau_min=0.1, tau_max=1.0,
                                    arg_rho=0.1, arg_alpha=0.1))
    one_step = lambda st, tasks, scores: upd(st, jnp.zeros((len(tasks), 1), jnp.int32),
                                             jnp.zeros((len(tasks), 1), jnp.int32), jnp.ones((len(tasks), 1), bool),
                                             jnp.array(scores, jnp.float32), jnp.array(tasks, jnp.int32))
    state = one_step(state, [0, 1, 2], [0.2, 0.9, 0.5])
    np.testing.assert_array_equal(state.bank_task[2, 0], [1, 2, 0])
    state = one_step(state, [3, 4], [0.6, 0.1])              # 0.6 evicts task 0 (0.2); 0.1 never enters
    np.testing.assert_array_equal(state.bank_task[2, 0], [1, 3, 2])
    np.testing.assert_allclose(state.bank_score[2, 0], [0.9, 0.6, 0.5], **TOL)
    state = one_step(state, [2, 2, 1], [0.95, 0.7, 0.3])     # task 2 improves to 0.95; task 1 keeps 0.9
    np.testing.assert_array_equal(state.bank_task[2, 0], [2, 1, 3])
    np.testing.assert_allclose(state.bank_score[2, 0], [0.95, 0.9, 0.6], **TOL)
    state = one_step(state, [5], [0.6])                      # a tie with the oldest 0.6: the newer stays
    np.testing.assert_array_equal(state.bank_task[2, 0], [2, 1, 5])
    self.assertEqual(int((np.asarray(state.bank_task) >= 0).sum()), 3)   # no other edge was touched

  def test_rho_zero_evaporates_nothing(self):
    # Issue 11 case: with rho = 0 every value stays where it was unless a deposit raised it.
    rng = np.random.default_rng(8)
    n, tm = 5, 2
    state = init(n, tm, cap=4, tau_init=0.5)
    before = np.asarray(ph.effective_tau(state, tau_min=HP["tau_min"]))
    before_arg = np.asarray(ph.effective_tau_arg(state, tau_min=HP["tau_min"]))
    upd = jax.jit(functools.partial(ph.update_pheromone, **dict(HP, rho=0.0, arg_rho=0.0)))
    touched = np.zeros((n + 1, n), bool)
    for _ in range(5):
      batch = random_batch(rng, 3, 4, n, tm, 8)
      state = upd(state, *map(jnp.asarray, batch))
      tools, _, mask, scores, _ = batch
      prev = np.concatenate([np.full((3, 1), n), tools[:, :-1]], axis=1)
      ok = mask & (tools >= 0) & (prev >= 0) & (scores[:, None] > 0)
      touched[prev[ok], tools[ok]] = True
    after = np.asarray(ph.effective_tau(state, tau_min=HP["tau_min"]))
    np.testing.assert_array_equal(after[~touched], before[~touched])
    self.assertTrue((after[touched] > before[touched]).all())
    self.assertTrue((np.asarray(ph.effective_tau_arg(state, tau_min=HP["tau_min"])) >= before_arg).all())

  @pytest.mark.fast
  def test_bad_options_fail_loudly(self):
    state = init()
    kw = dict(w=0.5, kappa=1.0, top_k_similar=4, tau_min=0.05, tau_max=2.0)
    sim = jnp.ones((1, NUM_TASKS))
    with self.assertRaisesRegex(ValueError, "dep_units"):
      ph.pheromone_rows(state, jnp.array([0]), sim, **dict(kw, dep_units="x"))
    with self.assertRaisesRegex(ValueError, "kappa"):
      ph.pheromone_rows(state, jnp.array([0]), sim, **dict(kw, kappa=0.0))
    with self.assertRaisesRegex(ValueError, "sim_threshold"):
      ph.pheromone_rows(state, jnp.array([0]), sim, **dict(kw, sim_threshold=1.5))
    with self.assertRaisesRegex(ValueError, "task_sim"):
      ph.pheromone_rows(state, jnp.array([0]), None, **kw)


class HotEdgesTest(absltest.TestCase):
  """dependent_pheromone's hot_edges: ranking only each row's edges with the most evidence gives the same
  numbers as ranking every edge, and a bound below what the bank needs is loud (NaN), never another selection."""

  N, M, K, T = 40, 12, 3, 30

  def _bank(self, seed):
    rng = np.random.default_rng(seed)
    n, m = self.N, self.M
    task = np.full((n + 1, n, m), -1, np.int32)
    for i in range(n + 1):
      heavy = 7 if i == n else int(rng.integers(0, 3))
      for r, j in enumerate(rng.choice(n, size=heavy + 3, replace=False)):
        size = int(rng.integers(self.K + 1, m + 1)) if r < heavy else int(rng.integers(1, self.K + 1))
        task[i, j, :size] = rng.choice(self.T, size=size, replace=False)
    st = type("Bank", (), {})()
    st.bank_task = jnp.asarray(task)
    st.bank_score = jnp.asarray(-np.sort(-np.round(rng.random((n + 1, n, m)), 1), axis=-1), jnp.float32)
    return st, rng

  @pytest.mark.fast
  def test_counts_and_bucket(self):
    st, _ = self._bank(0)
    counts = np.asarray(memory_bank.hot_edge_counts(st.bank_task, self.K))
    want = ((np.asarray(st.bank_task) >= 0).sum(-1) > self.K).sum(-1)
    np.testing.assert_array_equal(counts, want)
    self.assertEqual(counts[self.N], 7)
    self.assertEqual([memory_bank.hot_edge_bucket(c, 381) for c in (0, 3, 4, 5, 25, 200, 300)], [4, 4, 4, 8, 32, 256, None])
    self.assertIsNone(memory_bank.hot_edge_bucket(5, 8))

  @pytest.mark.fast
  def test_ranking_hot_edges_equals_ranking_every_edge(self):
    kw = dict(kappa=0.7, top_k_similar=self.K, sim_threshold=0.2, tau_min=0.05, tau_max=2.0,
              dep_units="tau_range")
    for seed in range(3):
      st, rng = self._bank(seed)
      counts = np.asarray(memory_bank.hot_edge_counts(st.bank_task, self.K))
      sim = jnp.asarray(np.round(rng.random((9, self.T)), 1), jnp.float32)   # ties among similarities
      for prev in (rng.integers(0, self.N, size=9), np.full(9, self.N), np.r_[rng.integers(0, self.N, 8), self.N]):
        bound = memory_bank.hot_edge_bucket(int(counts[prev].max()), self.N)
        self.assertIsNotNone(bound)
        p = jnp.asarray(prev, jnp.int32)
        got = jax.jit(lambda p, x: memory_bank.dependent_pheromone(st, p, x, hot_edges=bound, **kw))(p, sim)
        want = jax.jit(lambda p, x: memory_bank.dependent_pheromone(st, p, x, **kw))(p, sim)
        for a, b in zip(got, want):
          np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  @pytest.mark.fast
  def test_a_bound_below_the_bank_is_nan(self):
    st, rng = self._bank(1)
    sim = jnp.asarray(np.ones((2, self.T)), jnp.float32)
    prev = jnp.asarray([self.N, 0], jnp.int32)   # START has 7 edges over K, so a bound of 4 is too small
    conf, _ = memory_bank.dependent_pheromone(st, prev, sim, kappa=1.0, top_k_similar=self.K, sim_threshold=0.0,
                                              tau_min=0.05, tau_max=2.0, dep_units="tau_range", hot_edges=4)
    conf = np.asarray(conf)
    self.assertTrue(np.isnan(conf[0]).all())
    self.assertFalse(np.isnan(conf[1]).any())


class ShardingTest(parameterized.TestCase):

  @parameterized.parameters(jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto)
  def test_update_and_rows_sharded_equal_unsharded(self, axis_type):
    if jax.device_count() < 8:
      self.skipTest("needs 8 devices (tests/conftest.py sets XLA_FLAGS)")
    rng = np.random.default_rng(6)
    n, tm, d, b = 7, 3, 8, 16
    upd = UPDATE
    state = upd(init(n, tm, cap=6, d=d), *map(jnp.asarray, random_batch(rng, b, 5, n, tm, d)))
    batch = tuple(map(jnp.asarray, random_batch(rng, b, 5, n, tm, d)))
    prev = jnp.asarray(rng.integers(0, n + 1, size=b), jnp.int32)
    tools = jnp.asarray(rng.integers(-1, n, size=b), jnp.int32)
    emb = sim_of(batch[-1])   # the rows read task similarities, sharded along B like the rest
    rows = jax.jit(functools.partial(ph.pheromone_rows, w=0.6, kappa=0.5, top_k_similar=3,
                                     tau_min=HP["tau_min"], tau_max=HP["tau_max"]))
    args = jax.jit(functools.partial(ph.arg_rows, tau_min=HP["tau_min"]))
    template_mask = jnp.asarray(rng.random((n, tm)) < 0.7)

    @jax.jit
    def templates(state, key, tools):  # the call phgpo/objective.py's `decide` makes
      row_of = jnp.where(tools >= 0, jnp.arange(tools.shape[0], dtype=jnp.int32), -1)
      return sampling.sample_templates(key, ph.arg_rows(state, tools, tau_min=HP["tau_min"]),
                                       edges.take_rows(template_mask, tools), row_of)

    key = jax.random.key(3)
    ref_state = upd(state, *batch)
    ref_rows = rows(ref_state, prev, emb)
    ref_args = args(ref_state, tools)
    ref_tmpl = templates(ref_state, key, tools)
    np.testing.assert_array_equal(ref_tmpl, sampling.sample_templates(
        key, ph.effective_tau_arg(ref_state, tau_min=HP["tau_min"]), template_mask, tools))

    mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
      shard = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))
      rep_state = jax.device_put(state, NamedSharding(mesh, P()))
      got_state = upd(rep_state, *map(shard, batch))
      got_rows = rows(got_state, shard(prev), shard(emb))
      got_args = args(got_state, shard(tools))
      got_tmpl = templates(got_state, key, shard(tools))
    for got, want in zip(got_state, ref_state):
      np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **TOL)
    np.testing.assert_allclose(got_rows, ref_rows, **TOL)
    np.testing.assert_allclose(got_args, ref_args, **TOL)
    np.testing.assert_array_equal(got_tmpl, ref_tmpl)
    self.assertEqual(got_rows.shape, (b, n))
    self.assertEqual(got_args.shape, (b, tm))


if __name__ == "__main__":
  absltest.main()
