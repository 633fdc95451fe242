"""Smoke test of benchmarks/env_bench.py (slow: starts 12 worker pools, ScienceWorld JVMs included)."""

import shutil

import pytest
from absl.testing import absltest

from benchmarks import env_bench


@pytest.mark.slow
@absltest.skipUnless(shutil.which("bwrap") and shutil.which("java"), "needs bubblewrap and java")
class EnvBenchTest(absltest.TestCase):

  def test_quick_run_reports_ratios(self):
    res = env_bench.run(quick=True)
    self.assertIn("scienceworld", res["ratios"])
    for w in env_bench.WORKERS:
      r = res["ratios"]["scienceworld"][w]
      self.assertGreater(r["step_latency_sandboxed_over_inprocess"], 0)
      self.assertEqual(res["scienceworld"]["sandboxed"][w]["env_errors"], 0)
      self.assertEqual(res["scienceworld"]["sandboxed"][w]["mean_reward"], 1.0)


if __name__ == "__main__":
  absltest.main()
