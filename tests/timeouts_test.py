"""Tests for common/timeouts.py: start-up waits stretched by the load and by $AGENTIC_RL_TIMEOUT_SCALE."""
import os
from unittest import mock

from absl.testing import absltest
import pytest

from common import timeouts

pytestmark = pytest.mark.fast   # the everyday tier: pure functions, no processes


class TimeoutsTest(absltest.TestCase):

  def test_idle_machine_keeps_the_wait(self):
    with mock.patch.object(os, "getloadavg", return_value=(0.3, 0.2, 0.1)), \
         mock.patch.dict(os.environ, {timeouts.ENV_VAR: ""}):
      self.assertEqual(timeouts.scale(), 1.0)
      self.assertEqual(timeouts.scaled(60), 60.0)

  def test_load_stretches_the_wait(self):
    cpus = timeouts._cpus()
    with mock.patch.object(os, "getloadavg", return_value=(3.0 * cpus, 0, 0)), \
         mock.patch.dict(os.environ, {timeouts.ENV_VAR: ""}):
      self.assertAlmostEqual(timeouts.scaled(60), 180.0)
    with mock.patch.object(os, "getloadavg", return_value=(100.0 * cpus, 0, 0)), \
         mock.patch.dict(os.environ, {timeouts.ENV_VAR: "2"}):
      self.assertAlmostEqual(timeouts.scale(), timeouts.MAX_LOAD_SCALE * 2)

  def test_env_var(self):
    with mock.patch.object(os, "getloadavg", return_value=(0.0, 0, 0)):
      with mock.patch.dict(os.environ, {timeouts.ENV_VAR: "2.5"}):
        self.assertAlmostEqual(timeouts.scaled(10), 25.0)
      for bad in ("0", "-1", "fast"):
        with mock.patch.dict(os.environ, {timeouts.ENV_VAR: bad}):
          with self.assertRaisesRegex(ValueError, "AGENTIC_RL_TIMEOUT_SCALE"):
            timeouts.scale()


if __name__ == "__main__":
  absltest.main()
