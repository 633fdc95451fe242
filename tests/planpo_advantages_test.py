"""Tests for planpo/advantages.py, planpo/schedule.py and planpo/objective.py."""
import functools
import inspect

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
import pytest

from common import estimators
from common import gigpo
from common import losses
from common.lm import sharding
from planpo import advantages as planpo_adv
from planpo import objective
from planpo import schedule
from reference_loops import random_rows, ref_episode, ref_normalise, ref_turns

RTOL = ATOL = 1e-5


# -------------------------------------------------------------------------------------------------
# float64 NumPy references, written as plain loops (the shared ones in tests/reference_loops.py).


def ref_planpo(rewards, success, lengths, group, rollout, turn, mask, *, alpha, step_grouping="turn",
               stats_over="rollouts", norm="std", eps=1e-6, ddof=1, conditional=True):
  n = len(rewards)
  turns = ref_turns(rollout, mask)
  ok = [bool(success[r]) if conditional else True for r in range(n)]
  if conditional:
    r_e = [float(rewards[r]) / turns[rollout[r]] if mask[r] and ok[r] else 0.0 for r in range(n)]
  else:
    r_e = [1.0 / turns[rollout[r]] if mask[r] else 0.0 for r in range(n)]
  a_e = ref_episode(np.array(r_e), group, rollout, mask, stats_over, norm, eps, ddof)
  if not conditional:
    a_e = a_e + ref_episode(np.where(mask, rewards, 0.0), group, rollout, mask, stats_over, norm,
                            eps, ddof)
  member = [bool(mask[r]) and lengths[r] > 0 for r in range(n)]
  if step_grouping == "success":
    member = [member[r] and ok[r] for r in range(n)]
  key = [(int(group[r]), int(turn[r])) if step_grouping == "turn" else int(group[r])
         for r in range(n)]
  r_s = [0.0] * n
  for r in range(n):
    if member[r] and ok[r]:
      r_s[r] = (float(rewards[r]) if conditional else 1.0) / float(lengths[r])
  a_s = np.zeros(n)
  for k in {key[r] for r in range(n) if member[r]}:
    rows = [r for r in range(n) if member[r] and key[r] == k]
    for r, a in zip(rows, ref_normalise([r_s[r] for r in rows], norm, eps, ddof)):
      a_s[r] = a
  return a_e + alpha * a_s, a_e, a_s


def rows_of(turns, success, lengths=None, reward=1.0, group=None):
  """Rows of rollouts with the given turn counts and success flags (rollout i = i-th entry)."""
  rollout = np.repeat(np.arange(len(turns)), turns).astype(np.int32)
  turn = np.concatenate([np.arange(t) for t in turns]).astype(np.int32)
  succ = np.asarray(success, bool)[rollout]
  rewards = np.where(succ, reward, 0.0).astype(np.float32)
  if lengths is None:
    lengths = np.full(len(rollout), 10, np.int32)
  group = np.zeros(len(rollout), np.int32) if group is None else np.asarray(group, np.int32)[rollout]
  return dict(rewards=rewards, success=succ, lengths=np.asarray(lengths, np.int32), group=group,
              rollout=rollout, turn=turn, num_rollouts=len(turns), max_turns=int(max(turns)))


def response_rows(rewards, success, lengths, group, rollout, turn, *, num_groups, num_rollouts,
                  max_turns, **kw):
  del rollout, num_rollouts
  return planpo_adv.response_advantages(rewards, success, lengths, group, turn,
                                        num_groups=num_groups, max_turns=max_turns, **kw)


def call(fn, b, **kw):
  return call_v(lambda f: f, fn, b, **kw)


def call_v(variant, fn, b, **kw):
  """fn on the rows of `b`, its static arguments bound, through a chex variant."""
  f = variant(functools.partial(fn, num_groups=int(b["group"].max()) + 1,
                                num_rollouts=b["num_rollouts"], max_turns=b["max_turns"], **kw))
  return f(b["rewards"], b["success"], b["lengths"], b["group"], b["rollout"], b["turn"])


SWITCHES = dict(step_grouping=("turn", "success"), stats_over=("rollouts", "turns"),
                norm=("std", "none"))


class PlanPOAdvantagesTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(conditional=(True, False), **SWITCHES)
  @pytest.mark.fast
  def test_matches_numpy_loop(self, step_grouping, stats_over, norm, conditional):
    ddof = 1 if conditional else 0  # both stds (tests/gigpo_test.py covers ddof more)
    b = random_rows(4)
    rewards = np.where(b["win"], b["ep"], 0.0).astype(np.float32)
    rewards[~b["mask"]] = np.nan  # masked rows may hold NaN
    kw = dict(step_grouping=step_grouping, stats_over=stats_over, norm=norm, ddof=ddof,
              conditional=conditional)
    fn = self.variant(functools.partial(
        planpo_adv.planpo_advantages, num_groups=b["num_groups"], num_rollouts=b["num_rollouts"],
        max_turns=b["max_turns"], alpha=0.1, **kw))
    got = fn(rewards, b["win"], b["length"], b["group"], b["rollout"], b["turn"], mask=b["mask"])
    want = ref_planpo(np.nan_to_num(rewards), b["win"], b["length"], b["group"], b["rollout"],
                      b["turn"], b["mask"], alpha=0.1, **kw)
    for g, w in zip(got, want):
      chex.assert_type(g, jnp.float32)
      np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
      self.assertTrue(np.all(np.asarray(g)[~b["mask"]] == 0.0))

  # --- Cases that must hold (issue 10), exact values. ---

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(**SWITCHES)
  def test_correct_long_trajectory_never_below_wrong_short_one(self, step_grouping, stats_over,
                                                               norm):
    # Lengths 100 and 500 succeed, a length-100 rollout fails; response lengths vary (20..59 tokens).
    lengths = 20 + (np.arange(700) * 7) % 40
    b = rows_of([100, 500, 100], [True, True, False], lengths=lengths)
    fn = (functools.partial(call_v, self.variant, planpo_adv.planpo_advantages, alpha=0.1,
                                        step_grouping=step_grouping, stats_over=stats_over,
                                        norm=norm))
    out = fn(b)
    fail = b["rollout"] == 2
    for a in (out.episode, out.advantages):
      a = np.asarray(a)
      self.assertGreater(a[~fail].min(), a[fail].max())
    e = np.asarray(out.episode)
    self.assertGreater(e[b["rollout"] == 0][0], e[b["rollout"] == 1][0])

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters("rollouts", "turns")
  def test_one_success_gives_grpo_advantage(self, stats_over):
    b = rows_of([3, 7, 2, 5, 4, 6, 1, 2], [False, False, True, False, False, False, False, False],
                reward=10.0)
    fn = (functools.partial(call_v, self.variant, planpo_adv.planpo_advantages, alpha=0.1, eps=0.0,
                                        stats_over=stats_over))
    got = np.asarray(fn(b).episode)
    if stats_over == "rollouts":
      per_rollout = np.array([0, 0, 10, 0, 0, 0, 0, 0], np.float32)
      want = np.asarray(estimators.grpo_advantages(per_rollout, np.zeros(8, np.int32), num_groups=1,
                                                   eps=0.0, ddof=1))[b["rollout"]]
    else:
      want = estimators.grpo_advantages(b["rewards"], b["group"], num_groups=1, eps=0.0, ddof=1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(**SWITCHES)
  def test_five_turn_success_beats_ten_turn_success(self, step_grouping, stats_over, norm):
    b = rows_of([5, 10, 3, 8, 12, 4, 6, 9], [True, True] + [False] * 6)
    fn = (functools.partial(call_v, self.variant, planpo_adv.planpo_advantages, alpha=0.1,
                                        step_grouping=step_grouping, stats_over=stats_over,
                                        norm=norm))
    e = np.asarray(fn(b).episode)
    first = [e[b["rollout"] == i][0] for i in range(8)]
    self.assertGreater(first[0], first[1])
    self.assertGreater(first[1], max(first[2:]))

  @chex.variants(with_jit=True, without_jit=True)
  def test_success_reading_fewer_than_two_or_equal_lengths_give_zero(self):
    fn = (functools.partial(call_v, self.variant, response_rows,
                                        step_grouping="success"))
    # One successful response (a 1-turn success), failures with varied lengths.
    b = rows_of([1, 3, 2], [True, False, False], lengths=[10, 5, 20, 40, 7, 9])
    np.testing.assert_array_equal(fn(b), np.zeros(6, np.float32))
    # Two successful rollouts, every response 17 tokens: all equal.
    b = rows_of([2, 3, 2], [True, True, False], lengths=[17, 17, 17, 17, 17, 3, 90])
    np.testing.assert_array_equal(fn(b), np.zeros(7, np.float32))
    # Failures always get 0 in this reading; successes do not when lengths differ.
    b = rows_of([2, 3], [True, False], lengths=[10, 30, 5, 6, 7])
    got = np.asarray(fn(b))
    np.testing.assert_array_equal(got[2:], 0.0)
    self.assertGreater(got[0], 0.0)
    self.assertLess(got[1], 0.0)

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_turn_reading_turn_group_without_success_gives_zero(self):
    # The success has 2 turns; failures run 4 turns: turn groups 2 and 3 hold only failures.
    b = rows_of([2, 4, 4], [True, False, False], lengths=[10, 20, 5, 6, 7, 8, 9, 11, 12, 13])
    fn = (functools.partial(call_v, self.variant, response_rows,
                                        step_grouping="turn"))
    got = np.asarray(fn(b))
    late = b["turn"] >= 2
    np.testing.assert_array_equal(got[late], 0.0)
    early = ~late
    succ = b["success"]
    # At turns 0 and 1 the success is above both failures (R_S = 0 for failures).
    for t in (0, 1):
      at = b["turn"] == t
      self.assertGreater(got[at & succ].min(), got[at & ~succ].max())
    self.assertTrue(np.all(got[early] != 0.0))

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(conditional=(True,), **SWITCHES)
  def test_all_fail_group_is_zero_everywhere(self, step_grouping, stats_over, norm, conditional):
    # Task 0: all four rollouts fail; task 1 has successes (its values must not leak into task 0).
    b = rows_of([3, 1, 4, 2, 2, 5, 3], [False] * 4 + [True, True, False],
                lengths=np.arange(1, 21), group=[0, 0, 0, 0, 1, 1, 1])
    fn = (functools.partial(call_v, self.variant, planpo_adv.planpo_advantages, alpha=0.1,
                                        step_grouping=step_grouping, stats_over=stats_over,
                                        norm=norm, conditional=conditional))
    out = fn(b)
    task0 = b["group"] == 0
    for a in out:
      np.testing.assert_array_equal(np.asarray(a)[task0], 0.0)
    self.assertTrue(np.any(np.asarray(out.advantages)[~task0] != 0.0))

  @chex.variants(with_jit=True, without_jit=True)
  @pytest.mark.fast
  def test_zero_length_response_is_in_no_group(self):
    b = rows_of([2, 2], [True, True], lengths=[0, 10, 20, 10])
    fn = (functools.partial(call_v, self.variant, response_rows,
                                        step_grouping="success"))
    got = np.asarray(fn(b))
    self.assertEqual(got[0], 0.0)
    want = ref_normalise([1 / 10, 1 / 20, 1 / 10], "std", 1e-6, 1)
    np.testing.assert_allclose(got[1:], want, rtol=1e-6)

  @pytest.mark.fast
  def test_alpha_weights_the_step_advantage(self):
    b = rows_of([2, 3, 2], [True, True, False], lengths=[3, 9, 4, 5, 6, 7, 8])
    out0 = call(planpo_adv.planpo_advantages, b, alpha=0.0)
    out1 = call(planpo_adv.planpo_advantages, b, alpha=jnp.float32(0.25))
    np.testing.assert_array_equal(out0.advantages, out0.episode)
    np.testing.assert_allclose(out1.advantages, out1.episode + 0.25 * out1.step, rtol=1e-6)

  @pytest.mark.fast
  def test_defaults_are_documented(self):
    p = inspect.signature(planpo_adv.planpo_advantages).parameters
    self.assertEqual((p["step_grouping"].default, p["stats_over"].default, p["norm"].default,
                      p["eps"].default, p["ddof"].default, p["conditional"].default),
                     ("turn", "rollouts", "std", 1e-6, 1, True))
    doc = planpo_adv.__doc__
    for key in ("planpo.step_grouping", "planpo.stats_over", "planpo.norm", "planpo.eps",
                "planpo.ddof", "planpo.conditional"):
      self.assertIn(key, doc)

  @pytest.mark.fast
  def test_bad_inputs_raise_clear_errors(self):
    b = rows_of([2, 1], [True, False])
    with self.assertRaisesRegex(ValueError, "'turn', 'success'.*planpo.step_grouping"):
      call(planpo_adv.planpo_advantages, b, alpha=0.1, step_grouping="response")
    with self.assertRaisesRegex(ValueError, "planpo.stats_over"):
      call(planpo_adv.planpo_advantages, b, alpha=0.1, stats_over="rows")
    with self.assertRaisesRegex(ValueError, "planpo.norm"):
      call(planpo_adv.planpo_advantages, b, alpha=0.1, norm="mad")
    bad = dict(b, rollout=np.array([0, 0, 5], np.int32))
    with self.assertRaisesRegex(ValueError, r"rollout_ids must lie in \[0, 2\)"):
      call(planpo_adv.planpo_advantages, bad, alpha=0.1)
    with self.assertRaises(AssertionError):  # lengths of the wrong shape
      call(planpo_adv.planpo_advantages, dict(b, lengths=np.ones(2, np.int32)), alpha=0.1)

  @pytest.mark.fast
  def test_no_retrace_for_new_values_of_the_same_shape(self):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(r, s, l, g, i, t, m, alpha):
      return planpo_adv.planpo_advantages(r, s, l, g, i, t, num_groups=4, num_rollouts=16,
                                          max_turns=6, alpha=alpha, mask=m)

    for seed in range(3):
      b = random_rows(seed, pad=0)
      k = slice(0, 30)
      step(np.where(b["win"], b["ep"], 0.0)[k].astype(np.float32), b["win"][k], b["length"][k],
           b["group"][k], b["rollout"][k], b["turn"][k], b["mask"][k],
           jnp.float32(0.1 - 0.01 * seed)).advantages.block_until_ready()


class PenaltyRuleTest(parameterized.TestCase):
  """The invalid-action penalty and turn cost enter every method's return by one rule (issue 25, item 3)."""

  def _group(self):
    # One task, 3 rollouts, 3 turns each: rollouts 0 and 1 win, rollout 2 fails. Turn 1 of rollout 0 is an
    # empty invalid reply (1 token: the end-of-turn id); the other replies have 12-20 tokens.
    b = rows_of([3, 3, 3], [True, True, False], lengths=[14, 1, 12, 16, 18, 20, 13, 15, 17], reward=10.0)
    invalid = np.zeros(9, bool)
    invalid[1] = True
    return b, invalid, np.where(invalid, 0.1, 0.0).astype(np.float32)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.product(step_grouping=("turn", "success"), conditional=(True, False))
  @pytest.mark.fast
  def test_empty_invalid_reply_never_gets_the_top_step_advantage(self, step_grouping, conditional):
    b, invalid, pen = self._group()
    fn = self.variant(functools.partial(planpo_adv.planpo_advantages, num_groups=1, num_rollouts=3, max_turns=3,
                                        alpha=0.1, step_grouping=step_grouping, conditional=conditional))
    args = (b["rewards"], b["success"], b["lengths"], b["group"], b["rollout"], b["turn"])
    before = np.asarray(fn(*args).step)
    after = np.asarray(fn(*args, invalid=invalid, penalties=pen).step)
    # Without the rule (the paper's equations) the 1-token reply has the largest R / L of its group.
    if conditional:
      self.assertEqual(int(np.argmax(before)), 1)
    # With it, the invalid reply is the lowest of its group: turn 1 (rows 1, 4, 7) or the successes' responses.
    group = [1, 4, 7] if step_grouping == "turn" else [0, 1, 2, 3, 4, 5]
    self.assertEqual(min(group, key=lambda r: after[r]), 1)
    self.assertLess(after[1], min(after[r] for r in group if r != 1))

  @pytest.mark.fast
  def test_returns_subtract_the_rollouts_penalties(self):
    b, invalid, pen = self._group()
    pen = pen + np.float32(0.5)   # a turn cost of 0.5 on every row besides the invalid reply's 0.1
    ret = planpo_adv.return_penalties(b["rewards"], pen, b["rollout"], num_rollouts=3)
    np.testing.assert_allclose(ret, np.repeat([10 - 1.6, 10 - 1.5, -1.5], 3), rtol=1e-6)
    r_e = planpo_adv.episode_rewards(b["rewards"], b["success"], b["rollout"], num_rollouts=3, penalties=pen)
    np.testing.assert_allclose(r_e, np.repeat([(10 - 1.6) / 3, (10 - 1.5) / 3, -1.5 / 3], 3), rtol=1e-6)
    # no penalties: the paper's R_E exactly
    np.testing.assert_array_equal(
        planpo_adv.episode_rewards(b["rewards"], b["success"], b["rollout"], num_rollouts=3),
        planpo_adv.episode_rewards(b["rewards"], b["success"], b["rollout"], num_rollouts=3,
                                   penalties=np.zeros(9, np.float32)))

  @pytest.mark.fast
  def test_every_method_gets_the_same_returns(self):
    # planpo.train.compute_advantages: GRPO's and GiGPO's episode returns are R - P, PlanPO's R_E holds -P too.
    from planpo import train as planpo_train  # pylint: disable=g-import-not-at-top
    from configs import planpo_twx  # pylint: disable=g-import-not-at-top
    b, invalid, pen = self._group()
    rows = dict(group_ids=b["group"], rollout_ids=b["rollout"], turn=b["turn"], episode_rewards=b["rewards"],
                success=b["success"], policy_tokens=b["lengths"], env_rewards=np.zeros(9, np.float32),
                penalties=pen, invalid=invalid, step_group_ids=b["turn"], valid=np.ones(9, bool))
    config = planpo_twx.get_config()
    grpo = planpo_train.compute_advantages("grpo", rows, config=config, num_groups=1, num_rollouts=3, step=0)
    a = np.asarray(grpo["advantages"])
    ret = np.array([10 - 0.1, 10.0, 0.0])
    want = (ret - ret.mean()) / (ret.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(a, np.repeat(want, 3), rtol=1e-5)
    gigpo_out = planpo_train.compute_advantages("gigpo", rows, config=config, num_groups=1, num_rollouts=3, step=0)
    c = config.gigpo
    np.testing.assert_allclose(gigpo_out["episode"], gigpo.episode_advantages(
        np.repeat(ret, 3).astype(np.float32), b["group"], b["rollout"], num_groups=1, num_rollouts=3,
        stats_over=c.stats_over, norm=c.norm, eps=c.eps, ddof=c.ddof), rtol=1e-5)
    config.rl.turn_penalty = 1.0
    grpo = planpo_train.compute_advantages("grpo", rows, config=config, num_groups=1, num_rollouts=3, step=0)
    ret = ret - 3.0
    np.testing.assert_allclose(grpo["advantages"], np.repeat((ret - ret.mean()) / (ret.std(ddof=1) + 1e-6), 3),
                               rtol=1e-5)


class ShardedPlanPOTest(parameterized.TestCase):

  @parameterized.parameters("auto", "explicit")
  def test_sharded_rows_match_unsharded(self, axis_types):
    self.assertGreaterEqual(jax.device_count(), 8, "tests/conftest.py must give 8 CPU devices")
    mesh = sharding.make_mesh((8,), ("data",), axis_types=axis_types)
    b = random_rows(5, pad=3)
    n = (len(b["ep"]) // 8) * 8
    a = {"r": np.where(b["win"], b["ep"], 0.0).astype(np.float32), "s": b["win"],
         "l": b["length"], "g": b["group"], "i": b["rollout"], "t": b["turn"], "m": b["mask"]}
    a = {k: v[:n] for k, v in a.items()}

    @jax.jit
    def fn(x):
      return {sg + "/" + so: planpo_adv.planpo_advantages(
          x["r"], x["s"], x["l"], x["g"], x["i"], x["t"], num_groups=b["num_groups"],
          num_rollouts=b["num_rollouts"], max_turns=b["max_turns"], alpha=0.1, mask=x["m"],
          step_grouping=sg, stats_over=so)
              for sg in ("turn", "success") for so in ("rollouts", "turns")}

    want = fn(a)
    batch = sharding.shard_batch(a, mesh)
    self.assertEqual(len(batch["r"].sharding.device_set), 8)
    with jax.set_mesh(mesh):
      got = fn(batch)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.fast
class AlphaScheduleTest(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters((0.1, 0.05, 150), (0.05, 0.025, 200))
  def test_linear_decay(self, alpha_init, alpha_final, steps):
    fn = self.variant(functools.partial(schedule.alpha_schedule, alpha_init=alpha_init,
                                        alpha_final=alpha_final, decay_steps=steps))
    for k, want in ((0, alpha_init), (steps // 2, (alpha_init + alpha_final) / 2),
                    (steps, alpha_final), (3 * steps, alpha_final), (-5, alpha_init)):
      np.testing.assert_allclose(fn(jnp.int32(k)), want, rtol=1e-6)
    np.testing.assert_allclose(fn(jnp.int32(1)), alpha_init - (alpha_init - alpha_final) / steps,
                               rtol=1e-6)

  def test_constant_and_zero_alpha(self):
    self.assertEqual(float(schedule.alpha_schedule(40, alpha_init=0.1, alpha_final=0.1,
                                                   decay_steps=150)), np.float32(0.1))
    self.assertEqual(float(schedule.alpha_schedule(40, alpha_init=0.0, alpha_final=0.0,
                                                   decay_steps=150)), 0.0)

  def test_bad_bounds(self):
    with self.assertRaisesRegex(ValueError, "alpha_final <= alpha_init"):
      schedule.alpha_schedule(0, alpha_init=0.05, alpha_final=0.1, decay_steps=10)
    with self.assertRaisesRegex(ValueError, "alpha_final <= alpha_init <= 1"):
      schedule.alpha_schedule(0, alpha_init=1.5, alpha_final=0.1, decay_steps=10)
    with self.assertRaisesRegex(ValueError, "alpha_decay_steps"):
      schedule.alpha_schedule(0, decay_steps=0)


def ref_loss(logp_new, logp_old, logp_ref, adv, mask, clip, kl_coef):
  """Token-mean clipped surrogate + kl_coef * token-mean k3, float64 loops."""
  pg, kl, n = 0.0, 0.0, 0
  for b in range(logp_new.shape[0]):
    for t in range(logp_new.shape[1]):
      if not mask[b, t]:
        continue
      r = np.exp(float(logp_new[b, t]) - float(logp_old[b, t]))
      pg += -min(r * adv[b], np.clip(r, 1 - clip, 1 + clip) * adv[b])
      d = float(logp_ref[b, t]) - float(logp_new[b, t])
      kl += np.exp(d) - d - 1
      n += 1
  return pg / n + kl_coef * kl / n


@pytest.mark.fast
class ObjectiveTest(parameterized.TestCase):

  def _batch(self, seed=0):
    rng = np.random.default_rng(seed)
    shape = (6, 9)
    logp_old = rng.normal(-2.0, 0.5, shape).astype(np.float32)
    logp_new = (logp_old + rng.normal(0, 0.3, shape)).astype(np.float32)
    logp_ref = (logp_old + rng.normal(0, 0.2, shape)).astype(np.float32)
    adv = rng.normal(size=6).astype(np.float32)
    mask = rng.random(shape) < 0.7
    mask[3] = False  # an all-padding row
    return logp_new, logp_old, logp_ref, adv, mask

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.parameters(0.01, 1e-3, 0.0)
  def test_matches_numpy_loop(self, kl_coef):
    logp_new, logp_old, logp_ref, adv, mask = self._batch()
    fn = self.variant(functools.partial(objective.policy_loss, kl_coef=kl_coef))
    loss, metrics = fn(logp_new, logp_old, logp_ref, adv, mask)
    np.testing.assert_allclose(loss, ref_loss(logp_new, logp_old, logp_ref, adv, mask, 0.2, kl_coef),
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(metrics["pg_loss"] + kl_coef * metrics["kl"], loss, rtol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_response_ratio_is_gspo(self):
    logp_new, logp_old, logp_ref, adv, mask = self._batch(1)
    fn = self.variant(functools.partial(objective.policy_loss, ratio="response", kl_coef=1e-3,
                                        agg_mode="seq_mean_token_mean"))
    loss, _ = fn(logp_new, logp_old, logp_ref, adv, mask)
    pg, _ = losses.gspo_loss(logp_new, logp_old, adv, mask, clip_low=0.2, clip_high=0.2)
    kl = losses.kl_penalty(logp_new, logp_ref, mask, agg_mode="seq_mean_token_mean")
    np.testing.assert_allclose(loss, pg + 1e-3 * kl, rtol=1e-6)

  def test_gradient_ignores_nan_in_padding(self):
    logp_new, logp_old, logp_ref, adv, mask = self._batch(2)
    dirty = logp_new.copy()
    dirty[~mask] = np.nan
    grad = jax.jit(jax.grad(lambda x: objective.policy_loss(x, logp_old, logp_ref, adv, mask)[0]))
    g_clean, g_dirty = grad(logp_new), grad(dirty)
    np.testing.assert_array_equal(g_clean, g_dirty)
    np.testing.assert_array_equal(np.asarray(g_dirty)[~mask], 0.0)

  def test_no_reference_policy(self):
    logp_new, logp_old, _, adv, mask = self._batch()
    loss, metrics = objective.policy_loss(logp_new, logp_old, None, adv, mask, kl_coef=0.0)
    pg, _ = losses.clipped_surrogate_loss(logp_new, logp_old, adv, mask)
    self.assertEqual(float(loss), float(pg))
    self.assertEqual(float(metrics["kl"]), 0.0)
    with self.assertRaisesRegex(ValueError, "planpo.kl_coef"):
      objective.policy_loss(logp_new, logp_old, None, adv, mask)
    with self.assertRaisesRegex(ValueError, "'token', 'response'"):
      objective.policy_loss(logp_new, logp_old, None, adv, mask, kl_coef=0.0, ratio="seq")

  def test_published_defaults(self):
    p = inspect.signature(objective.policy_loss).parameters
    self.assertEqual((p["clip_low"].default, p["clip_high"].default, p["kl_coef"].default,
                      p["kl_estimator"].default, p["agg_mode"].default, p["ratio"].default),
                     (0.2, 0.2, 0.01, "k3", "token_mean", "token"))


if __name__ == "__main__":
  absltest.main()
