"""Tests for phgpo/curriculum.py: linear ramps, end values, validation."""

from absl.testing import absltest
import pytest

from phgpo import curriculum

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes

KW = dict(curriculum_steps=10, lambda_start=0.5, p_tf_start=0.4, horizon_start=3, max_steps=13,
          beta_max=0.7, w_max=0.5)


class CurriculumTest(absltest.TestCase):

  def test_start_middle_end(self):
    s0 = curriculum.stage_values(0, **KW)
    self.assertEqual(s0, curriculum.StageValues(2, 0.5, 0.4, 0.0, 0.0, 3))
    s5 = curriculum.stage_values(5, **KW)
    self.assertEqual(s5.stage, 2)
    self.assertAlmostEqual(s5.sl_weight, 0.25)
    self.assertAlmostEqual(s5.p_tf, 0.2)
    self.assertAlmostEqual(s5.beta, 0.35)
    self.assertAlmostEqual(s5.w, 0.25)
    self.assertEqual(s5.horizon, 8)
    self.assertEqual(curriculum.stage_values(10, **KW), curriculum.StageValues(3, 0.0, 0.0, 0.7, 0.5, 13))
    self.assertEqual(curriculum.stage_values(99, **KW).stage, 3)

  def test_no_curriculum_is_stage_three(self):
    kw = dict(KW, curriculum_steps=0)
    self.assertEqual(curriculum.stage_values(0, **kw), curriculum.StageValues(3, 0.0, 0.0, 0.7, 0.5, 13))

  def test_negative_step_raises(self):
    with self.assertRaisesRegex(ValueError, "must be >= 0"):
      curriculum.stage_values(-1, **KW)



def _today(step, *, curriculum_steps, lambda_start, p_tf_start, horizon_start, max_steps, beta_max, w_max):
  """The schedule before the floors and beta_start_fraction existed, verbatim."""
  if curriculum_steps == 0 or step >= curriculum_steps:
    return curriculum.StageValues(3, 0.0, 0.0, float(beta_max), float(w_max), int(max_steps))
  u = step / curriculum_steps
  horizon = int(round(horizon_start + u * (max_steps - horizon_start)))
  return curriculum.StageValues(2, lambda_start * (1 - u), p_tf_start * (1 - u), beta_max * u, w_max * u,
                                max(1, min(horizon, max_steps)))


AUTHORS = dict(lambda_floor=0.3, p_tf_floor=0.05, beta_start_fraction=1.0)


class FloorsAndBetaStartTest(absltest.TestCase):

  def test_defaults_equal_todays_schedule_exactly(self):
    for kw in (KW, dict(KW, curriculum_steps=7, lambda_start=0.9, p_tf_start=0.3, beta_max=0.8),
               dict(KW, curriculum_steps=0)):
      for step in range(14):
        want = _today(step, **kw)
        self.assertEqual(curriculum.stage_values(step, **kw), want)  # exact, field by field
        self.assertEqual(curriculum.stage_values(step, lambda_floor=0.0, p_tf_floor=0.0,
                                                 beta_start_fraction=0.0, **kw), want)

  def test_authors_choice(self):
    # lambda = max(0.3, 0.5 (1 - u)), p_tf = max(0.05, 0.4 (1 - u)), beta and w at their maxima throughout.
    self.assertEqual(curriculum.stage_values(0, **KW, **AUTHORS), curriculum.StageValues(2, 0.5, 0.4, 0.7, 0.5, 3))
    s5 = curriculum.stage_values(5, **KW, **AUTHORS)  # u = 0.5: annealed lambda 0.25 < floor 0.3
    self.assertEqual((s5.stage, s5.sl_weight, s5.beta, s5.w, s5.horizon), (2, 0.3, 0.7, 0.5, 8))
    self.assertAlmostEqual(s5.p_tf, 0.2, places=12)
    s9 = curriculum.stage_values(9, **KW, **AUTHORS)  # u = 0.9: annealed p_tf 0.04 < floor 0.05
    self.assertEqual((s9.stage, s9.sl_weight, s9.p_tf, s9.beta, s9.w), (2, 0.3, 0.05, 0.7, 0.5))
    stage3 = curriculum.StageValues(3, 0.3, 0.05, 0.7, 0.5, 13)
    self.assertEqual(curriculum.stage_values(10, **KW, **AUTHORS), stage3)
    self.assertEqual(curriculum.stage_values(50, **KW, **AUTHORS), stage3)
    self.assertEqual(curriculum.stage_values(0, **dict(KW, curriculum_steps=0), **AUTHORS), stage3)

  def test_floor_below_the_annealed_value_changes_nothing_in_stage_two(self):
    s2 = curriculum.stage_values(2, **KW, lambda_floor=0.1, p_tf_floor=0.01)  # u = 0.2: 0.4 and 0.32
    self.assertAlmostEqual(s2.sl_weight, 0.4, places=12)
    self.assertAlmostEqual(s2.p_tf, 0.32, places=12)
    self.assertEqual(curriculum.stage_values(10, **KW, lambda_floor=0.1, p_tf_floor=0.01)[1:3], (0.1, 0.01))

  def test_beta_start_fraction_half(self):
    # beta = 0.7 (0.5 + 0.5 u), w = 0.5 (0.5 + 0.5 u).
    for step, beta, w in ((0, 0.35, 0.25), (5, 0.525, 0.375), (9, 0.665, 0.475), (10, 0.7, 0.5)):
      sv = curriculum.stage_values(step, **KW, beta_start_fraction=0.5)
      self.assertAlmostEqual(sv.beta, beta, places=12, msg=step)
      self.assertAlmostEqual(sv.w, w, places=12, msg=step)
      self.assertAlmostEqual(sv.sl_weight, _today(step, **KW).sl_weight, places=12)  # lambda untouched

  def test_out_of_range_options_raise_naming_the_config_key(self):
    for name, key in (("lambda_floor", "curriculum.lambda_floor"), ("p_tf_floor", "curriculum.p_tf_floor"),
                      ("beta_start_fraction", "curriculum.beta_start_fraction")):
      for bad in (-0.1, 1.5, float("nan")):
        with self.assertRaisesRegex(ValueError, key.replace(".", r"\.")):
          curriculum.stage_values(3, **KW, **{name: bad})
      curriculum.stage_values(3, **KW, **{name: 1.0})  # the bounds are allowed
      curriculum.stage_values(3, **KW, **{name: 0.0})

if __name__ == "__main__":
  absltest.main()
