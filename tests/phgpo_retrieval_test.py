"""Tests of phgpo.retrieval against plain float64 NumPy loops."""

import types

import chex
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import pytest

from phgpo import retrieval


def _ref_neighbours(q, keys, qg, kg, k):
  unit = lambda x: x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
  s = unit(q.astype(np.float64)) @ unit(keys.astype(np.float64)).T
  out_i, out_s = [], []
  for b in range(q.shape[0]):
    cand = [j for j in range(keys.shape[0]) if kg[j] != qg[b]]
    cand.sort(key=lambda j: (-s[b, j], j))
    out_i.append(cand[:k])
    out_s.append([s[b, j] for j in cand[:k]])
  return out_i, out_s


def _ref_votes(nb_tools, nb_len, w, step, n, prev=None):
  out = np.zeros((nb_tools.shape[0], n))
  for b in range(nb_tools.shape[0]):
    t = step[b]
    for j in range(nb_tools.shape[1]):
      if t >= nb_len[b, j] or t >= nb_tools.shape[2] or nb_tools[b, j, t] < 0:
        continue
      if prev is not None and t > 0 and nb_tools[b, j, t - 1] != prev[b]:
        continue
      out[b, nb_tools[b, j, t]] += w[b, j]
  return out


class RetrievalTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.keys = rng.normal(size=(12, 6)).astype(np.float32)
    self.q = rng.normal(size=(5, 6)).astype(np.float32)
    self.q[0] = self.keys[3]          # a query equal to a key of its own group: must not be its neighbour
    self.kg = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 9], np.int32)
    self.qg = np.array([3, -1, 8, 0, -1], np.int32)
    self.n = 7
    self.tools = rng.integers(0, self.n, size=(12, 6)).astype(np.int32)
    self.lens = rng.integers(1, 7, size=(12,)).astype(np.int32)
    self.tools[np.arange(6)[None, :] >= self.lens[:, None]] = -1

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_neighbours_match_reference_and_mask_groups(self):
    fn = self.variant(lambda *a: retrieval.nearest_neighbours(*a, k=4))
    idx, sim, valid = fn(jnp.asarray(self.q), jnp.asarray(self.keys), jnp.asarray(self.qg), jnp.asarray(self.kg))
    ref_i, ref_s = _ref_neighbours(self.q, self.keys, self.qg, self.kg, 4)
    np.testing.assert_array_equal(np.asarray(idx), np.array(ref_i))
    np.testing.assert_allclose(np.asarray(sim), np.array(ref_s), rtol=1e-5, atol=1e-5)
    self.assertTrue(np.asarray(valid).all())
    self.assertNotIn(3, np.asarray(idx)[0])
    self.assertFalse(np.isin(np.asarray(idx)[2], [8, 9, 10]).any())

  @pytest.mark.fast
  def test_too_few_keys_outside_the_group_are_invalid(self):
    kg = np.zeros(12, np.int32)
    kg[:2] = 1
    _, sim, valid = retrieval.nearest_neighbours(jnp.asarray(self.q[:1]), jnp.asarray(self.keys),
                                                 jnp.asarray([0], jnp.int32), jnp.asarray(kg), k=3)
    np.testing.assert_array_equal(np.asarray(valid), [[True, True, False]])
    self.assertEqual(float(retrieval.vote_weights(sim, valid)[0, 2]), 0.0)
    with self.assertRaisesRegex(ValueError, "k must lie"):
      retrieval.nearest_neighbours(jnp.asarray(self.q), jnp.asarray(self.keys), jnp.asarray(self.qg),
                                   jnp.asarray(self.kg), k=13)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(False, True)
  @pytest.mark.fast
  def test_position_votes_match_reference(self, agree):
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 12, size=(5, 3))
    nb_tools, nb_len = self.tools[rows], self.lens[rows]
    w = rng.uniform(0, 1, size=(5, 3)).astype(np.float32)
    step = np.array([0, 1, 2, 5, 7], np.int32)
    prev = rng.integers(0, self.n, size=(5,)).astype(np.int32)
    prev[1] = nb_tools[1, 0, 0]
    fn = self.variant(lambda *a: retrieval.position_votes(*a[:4], num_tools=self.n,
                                                          prev_tool=a[4] if agree else None))
    got = fn(jnp.asarray(nb_tools), jnp.asarray(nb_len), jnp.asarray(w), jnp.asarray(step), jnp.asarray(prev))
    ref = _ref_votes(nb_tools, nb_len, w, step, self.n, prev if agree else None)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got)[4], 0.0)     # position 7 >= H: no votes

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_vote_decode(self):
    # Three neighbours; position 0: tool 2 (w .5) vs tool 1 (w .3 + .3) -> 1; position 2: only the first
    # neighbour reaches it -> its tool; position 3: nobody -> -1; horizon 2 cuts the second row.
    nb_tools = np.array([[[2, 4, 5, -1], [1, 4, -1, -1], [1, 3, -1, -1]]] * 2, np.int32)
    nb_len = np.array([[3, 2, 2]] * 2, np.int32)
    w = np.array([[0.5, 0.3, 0.3]] * 2, np.float32)
    fn = self.variant(lambda *a: retrieval.vote_decode(*a, num_tools=6))
    pred, plen = fn(jnp.asarray(nb_tools), jnp.asarray(nb_len), jnp.asarray(w), jnp.asarray([4, 2], jnp.int32))
    np.testing.assert_array_equal(np.asarray(pred), [[1, 4, 5, -1], [1, 4, -1, -1]])
    np.testing.assert_array_equal(np.asarray(plen), [4, 2])

  @pytest.mark.fast
  def test_k1_decode_is_the_nearest_copy(self):
    rows = np.array([[4], [7]])
    pred, plen = retrieval.vote_decode(jnp.asarray(self.tools[rows]), jnp.asarray(self.lens[rows]),
                                       jnp.ones((2, 1), jnp.float32), jnp.asarray(self.lens[rows[:, 0]]),
                                       num_tools=self.n)
    np.testing.assert_array_equal(np.asarray(pred), self.tools[rows[:, 0]])
    np.testing.assert_array_equal(np.asarray(plen), self.lens[rows[:, 0]])

  @pytest.mark.fast
  def test_leakage_groups(self):
    call = lambda n: types.SimpleNamespace(name=n)
    task = lambda d, names: types.SimpleNamespace(domain=d, calls=[call(n) for n in names])
    tasks = [task("A", "xy"), task("A", "xz"), task("A", "xy"), task("B", "xy")]
    np.testing.assert_array_equal(retrieval.leakage_groups(tasks, mode="task"), [0, 1, 2, 3])
    np.testing.assert_array_equal(retrieval.leakage_groups(tasks, mode="chain"), [0, 1, 0, 2])
    with self.assertRaisesRegex(ValueError, "leakage mode"):
      retrieval.leakage_groups(tasks, mode="query")


if __name__ == "__main__":
  absltest.main()
