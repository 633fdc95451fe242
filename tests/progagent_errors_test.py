"""Error normalisation (progagent.task_env, config `env.normalize_errors`): a tool result {"ok": false, "error"}
without an error flag is data when off, a failed call (isError; an exception inside a PTC program) when on."""

import json

from absl.testing import absltest
import pytest

from progagent import ptc_env
from progagent import task_env
from progagent.task_env import ProgTaskEnv

TASK = "energy/damaged_meters"   # tagged 'errors': run_diagnostics times out on some meters before answering


def _failing_serial(env: ProgTaskEnv) -> str:
  return env._ctx.q1("SELECT serial FROM meters WHERE comm_fail > 0 ORDER BY serial")["serial"]   # pylint: disable=protected-access


class ErrorNormalisationTest(absltest.TestCase):

  @pytest.mark.fast
  def test_is_error_record(self):
    self.assertTrue(task_env.is_error_record({"ok": False, "error": "timeout; try again"}))
    self.assertTrue(task_env.is_error_record({"serial": "EM-1", "ok": False, "message": "busy"}))
    for r in ({"ok": True, "error": "x"}, {"ok": False}, {"ok": 0, "error": "x"}, {"ok": False, "error": ""},
              [{"ok": False, "error": "x"}], "ok false", None):
      self.assertFalse(task_env.is_error_record(r), r)

  def test_off_returns_the_record_on_makes_it_a_failed_call(self):
    for normalize in (False, True):
      env = ProgTaskEnv(TASK, 0, normalize_errors=normalize)
      try:
        env.reset(seed=0)
        serial = _failing_serial(env)
        r = env.step({"name": "run_diagnostics", "arguments": {"serial": serial}})
        if normalize:
          self.assertEqual(r.status, "failed")
          self.assertTrue(r.observation.startswith("Error: meter did not answer"), r.observation)
          self.assertIn('"ok": false', r.observation)
        else:
          self.assertEqual(r.status, "ok")
          self.assertFalse(json.loads(r.observation)["ok"])
        out = env.call_tool("run_diagnostics", {"serial": serial})   # the PTC proxy's view of the next call
        self.assertIn("isError", out)
        self.assertEqual(env.clone().normalize_errors, normalize)
      finally:
        env.close()

  def test_ptc_program_sees_an_exception_when_on(self):
    code = ("serial = {s!r}\n"
            "try:\n    r = tools['run_diagnostics'](serial=serial)\n    print('DATA', r['ok'])\n"
            "except Exception as e:\n    print('RAISED', type(e).__name__, e)\n")
    for normalize, want in ((False, "DATA False"), (True, "RAISED")):
      env = ptc_env.ProgEnv(mode="ptc", runtime="inprocess", normalize_errors=normalize)
      try:
        env.reset(TASK, seed=0)
        serial = _failing_serial(env._env)   # pylint: disable=protected-access
        r = env.step({"name": "programmatic_tool_call", "arguments": {"code": code.format(s=serial)}})
        self.assertIn(want, r.observation)
      finally:
        env.close()


if __name__ == "__main__":
  absltest.main()
