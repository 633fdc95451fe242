"""Tests for phgpo/curriculum.py: linear ramps, end values, validation."""

from absl.testing import absltest

from phgpo import curriculum

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


if __name__ == "__main__":
  absltest.main()
