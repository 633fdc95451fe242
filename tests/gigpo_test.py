"""Tests for common/gigpo.py: episode advantages over turn rows, discounted returns, anchor step groups,
GiGPO advantages, sharding."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import estimators
from common import gigpo
from common.lm import sharding
from reference_loops import random_rows, ref_episode, ref_normalise

RTOL = ATOL = 1e-5


# -------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops (the shared ones in tests/reference_loops.py).


def ref_returns(step_rewards, rollout, turn, mask, gamma):
  out = np.zeros(len(step_rewards))
  for r in range(len(step_rewards)):
    if not mask[r]:
      continue
    total = 0.0
    for s in range(len(step_rewards)):
      if mask[s] and rollout[s] == rollout[r] and turn[s] >= turn[r]:
        total += gamma ** (turn[s] - turn[r]) * float(step_rewards[s])
    out[r] = total
  return out


def ref_gigpo(ep_rewards, step_rewards, group, rollout, turn, anchors, mask, *, gamma=0.95,
              step_weight=1.0, norm="std", stats_over="turns", eps=1e-6, ddof=1):
  episode = ref_episode(ep_rewards, group, rollout, mask, stats_over, norm, eps, ddof)
  returns = ref_returns(step_rewards, rollout, turn, mask, gamma)
  step = np.zeros(len(ep_rewards))
  keys = {(int(group[r]), anchors[r]) for r in range(len(anchors)) if mask[r]}
  for k in keys:
    rows = [r for r in range(len(anchors)) if mask[r] and (int(group[r]), anchors[r]) == k]
    for r, a in zip(rows, ref_normalise([returns[r] for r in rows], norm, eps, ddof)):
      step[r] = a
  return episode + step_weight * step, episode, step, returns


class EpisodeAndReturnsTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(stats_over=("rollouts", "turns"), norm=("std", "none"), ddof=(0, 1))
  @pytest.mark.fast
  def test_episode_matches_numpy_loop(self, stats_over, norm, ddof):
    b = random_rows(0)
    fn = self.variant(functools.partial(
        gigpo.episode_advantages, num_groups=b["num_groups"], num_rollouts=b["num_rollouts"],
        stats_over=stats_over, norm=norm, ddof=ddof))
    got = fn(b["ep"], b["group"], b["rollout"], mask=b["mask"])
    want = ref_episode(b["ep"], b["group"], b["rollout"], b["mask"], stats_over, norm, 1e-6, ddof)
    chex.assert_type(got, jnp.float32)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    self.assertTrue(np.all(np.asarray(got)[~b["mask"]] == 0.0))

  @chex.variants(with_jit=True, without_jit=True)
  def test_episode_over_rollouts_is_grpo_of_the_rollout_rewards(self):
    # Rollout i has reward rewards[i] and i + 1 turns; stats over rollouts ignore the turn counts.
    rewards = np.array([1., 0., 0., 1., 0.3], np.float32)
    rollout = np.repeat(np.arange(5), np.arange(1, 6)).astype(np.int32)
    rows = rewards[rollout]
    fn = self.variant(functools.partial(gigpo.episode_advantages, num_groups=1, num_rollouts=5))
    got = fn(rows, np.zeros_like(rollout), rollout)
    want = estimators.grpo_advantages(rewards, np.zeros(5, np.int32), num_groups=1, ddof=1)
    np.testing.assert_allclose(got, np.asarray(want)[rollout], rtol=1e-6, atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.95, 0.5, 1.0)
  @pytest.mark.fast
  def test_discounted_returns_match_numpy_loop(self, gamma):
    b = random_rows(1)
    fn = self.variant(functools.partial(gigpo.discounted_returns, num_rollouts=b["num_rollouts"],
                                        max_turns=b["max_turns"], gamma=gamma))
    got = fn(b["step"], b["rollout"], b["turn"], mask=b["mask"])
    want = ref_returns(b["step"], b["rollout"], b["turn"], b["mask"], gamma)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_returns_exact_small_case(self):
    # One rollout, turns given out of order: rewards 0, -0.1, 10 at turns 0, 1, 2.
    fn = self.variant(functools.partial(gigpo.discounted_returns, num_rollouts=1, max_turns=4))
    got = fn(np.array([10., 0., -0.1], np.float32), np.zeros(3, np.int32),
             np.array([2, 0, 1], np.int32))
    want = [10.0, 0.95 * (-0.1 + 0.95 * 10.0), -0.1 + 0.95 * 10.0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.fast
class AnchorGroupsTest(parameterized.TestCase):

  def test_same_observation_at_different_turns_shares_one_step_group(self):
    # Rollout 0 reaches "kitchen" at turn 1, rollout 1 at turn 3; both in task 0. Task 1 also sees it.
    group = np.array([0, 0, 0, 0, 0, 0, 1], np.int32)
    rollout = np.array([0, 0, 1, 1, 1, 1, 2], np.int32)
    turn = np.array([0, 1, 0, 1, 2, 3, 0], np.int32)
    anchors = ["hall", "kitchen", "hall", "garden", "shed", "kitchen", "kitchen"]
    ids = gigpo.anchor_step_groups(group, anchors)
    np.testing.assert_array_equal(ids, [0, 1, 0, 2, 3, 1, 4])
    self.assertEqual(ids[1], ids[5])
    self.assertNotEqual(ids[1], ids[6])  # another task's "kitchen" is another group
    # Both rollouts win at their last turn (reward 10): returns at "kitchen" are 10 and 10, at
    # "hall" 9.5 and 0.95^3 * 10.
    step = np.array([0, 10, 0, 0, 0, 10, 10], np.float32)
    ep = np.array([10, 10, 10, 10, 10, 10, 10], np.float32)
    out = gigpo.gigpo_advantages(ep, step, group, rollout, turn, ids, num_groups=2, num_rollouts=3,
                                 max_turns=4, eps=0.0)
    np.testing.assert_allclose(out.returns, [9.5, 10, 0.95 ** 3 * 10, 0.95 ** 2 * 10, 9.5, 10, 10],
                               rtol=1e-6)
    s = 1 / np.sqrt(2)  # two members, sample std: +-1/sqrt(2)
    np.testing.assert_allclose(out.step, [s, 0, -s, 0, 0, 0, 0], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(out.step)[[1, 3, 4, 5, 6]], 0.0)  # equal returns, singletons
    np.testing.assert_array_equal(out.episode, 0.0)  # every rollout won

  def test_anchor_forms_and_mask(self):
    group = np.zeros(5, np.int32)
    ids = gigpo.anchor_step_groups(group, [(1, 2), np.array([1, 2]), [1, 2], 7, "x"],
                                   mask=[True, True, True, True, False])
    np.testing.assert_array_equal(ids, [0, 0, 0, 1, 0])
    with self.assertRaisesRegex(ValueError, "anchors has 2 entries"):
      gigpo.anchor_step_groups(group, ["a", "b"])


@pytest.mark.fast
class GiGPOTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(norm=("std", "none"), stats_over=("turns", "rollouts"))
  def test_matches_numpy_loop(self, norm, stats_over):
    b = random_rows(2)
    sg = gigpo.anchor_step_groups(b["group"], b["anchor"], b["mask"])
    fn = self.variant(functools.partial(
        gigpo.gigpo_advantages, num_groups=b["num_groups"], num_rollouts=b["num_rollouts"],
        max_turns=b["max_turns"], norm=norm, stats_over=stats_over, step_weight=0.7))
    got = fn(b["ep"], b["step"], b["group"], b["rollout"], b["turn"], sg, mask=b["mask"])
    want = ref_gigpo(b["ep"], b["step"], b["group"], b["rollout"], b["turn"], b["anchor"],
                     b["mask"], norm=norm, stats_over=stats_over, step_weight=0.7)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    self.assertTrue(np.all(np.isfinite(got.advantages)))

  def test_published_defaults(self):
    import inspect
    p = inspect.signature(gigpo.gigpo_advantages).parameters
    self.assertEqual((p["gamma"].default, p["step_weight"].default, p["norm"].default,
                      p["stats_over"].default, p["eps"].default, p["ddof"].default),
                     (0.95, 1.0, "std", "turns", 1e-6, 1))

  def test_bad_inputs_raise_clear_errors(self):
    z, i = np.zeros(3, np.float32), np.zeros(3, np.int32)
    kw = dict(num_groups=1, num_rollouts=1, max_turns=2)
    with self.assertRaisesRegex(ValueError, "'std', 'none'"):
      gigpo.gigpo_advantages(z, z, i, i, i, i, norm="mean", **kw)
    with self.assertRaisesRegex(ValueError, "gigpo.stats_over"):
      gigpo.gigpo_advantages(z, z, i, i, i, i, stats_over="steps", **kw)
    with self.assertRaisesRegex(ValueError, r"turn_ids must lie in \[0, 2\)"):
      gigpo.gigpo_advantages(z, z, i, i, np.array([0, 1, 2], np.int32), i, **kw)
    with self.assertRaisesRegex(ValueError, "num_rollouts"):
      gigpo.gigpo_advantages(z, z, i, i, i, i, num_groups=1, num_rollouts=0, max_turns=2)
    with self.assertRaises(AssertionError):
      gigpo.gigpo_advantages(z, z, i, i, i, z, **kw)  # float step-group ids

  def test_no_retrace_for_new_values_of_the_same_shape(self):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(*a):
      return gigpo.gigpo_advantages(*a[:-1], num_groups=4, num_rollouts=16, max_turns=6, mask=a[-1])

    for seed in range(3):
      b = random_rows(seed, pad=0)
      n = len(b["ep"])
      keep = slice(0, 30)  # fixed shape
      if n < 30:
        self.skipTest("batch too small")
      sg = gigpo.anchor_step_groups(b["group"][keep], b["anchor"][keep])
      step(b["ep"][keep], b["step"][keep], b["group"][keep], b["rollout"][keep], b["turn"][keep],
           sg, b["mask"][keep]).advantages.block_until_ready()


class ShardedGiGPOTest(parameterized.TestCase):

  @parameterized.parameters("auto", "explicit")
  def test_sharded_rows_match_unsharded(self, axis_types):
    self.assertGreaterEqual(jax.device_count(), 8, "tests/conftest.py must give 8 CPU devices")
    mesh = sharding.make_mesh((8,), ("data",), axis_types=axis_types)
    b = random_rows(3, pad=0)
    n = (len(b["ep"]) // 8) * 8
    cut = {k: (v[:n] if isinstance(v, (np.ndarray, list)) else v) for k, v in b.items()}
    sg = gigpo.anchor_step_groups(cut["group"], cut["anchor"])
    arrays = {k: cut[k] for k in ("ep", "step", "group", "rollout", "turn", "mask")}
    arrays["sg"] = sg

    @jax.jit
    def fn(a):
      out = gigpo.gigpo_advantages(a["ep"], a["step"], a["group"], a["rollout"], a["turn"], a["sg"],
                                   num_groups=b["num_groups"], num_rollouts=b["num_rollouts"],
                                   max_turns=b["max_turns"], mask=a["mask"])
      rolls = gigpo.episode_advantages(a["ep"], a["group"], a["rollout"], num_groups=b["num_groups"],
                                       num_rollouts=b["num_rollouts"], mask=a["mask"],
                                       stats_over="rollouts")
      return out, rolls

    want = fn(arrays)
    batch = sharding.shard_batch(arrays, mesh)
    self.assertEqual(len(batch["ep"].sharding.device_set), 8)
    with jax.set_mesh(mesh):
      got = fn(batch)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)


if __name__ == "__main__":
  absltest.main()
