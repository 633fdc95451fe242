"""Resume after SIGKILL: the launcher killed mid-stage and rerun ends exactly as an uninterrupted run.

Each case runs the README's command (`python -m experiments.train --config=... --workdir=...`) in a subprocess,
watches the workdir, and when a stage has a finished checkpoint AND metrics rows written after it (the
stage itself unfinished), freezes the process (SIGSTOP, so the files checked are the files left) and kills it
with SIGKILL: no cleanup, no final save, possibly mid-way through writing the next checkpoint. The same
command is rerun to completion, and the workdir's results.json and every metrics.jsonl are compared with those
of an uninterrupted run of the same config: the rows written after the last checkpoint must have been dropped
and written again, not duplicated, and training must continue from the restored state bit for bit.

PhGPO smoke config (`configs/phgpo_traject.py:smoke`): killed mid-warm-up (in CI: `runs=('warmup',)`,
environments in-process; about a minute alone), and killed mid-warm-up, mid-GRPO and mid-PhGPO in one run of
the whole job as configured (slow: about 5 minutes). ProgAgent smoke config: killed mid-SFT (slow).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from absl.testing import absltest

REPO = pathlib.Path(__file__).resolve().parents[1]
# Wall-clock ceiling of one launcher run; generous, since a loaded 2-core machine runs several times slower.
RUN_TIMEOUT_S = 1800.0
_POLL_S = 0.005


def _volatile(key: str) -> bool:
  """Keys holding wall-clock times (train_seconds, sft_s, ...), which differ between any two runs."""
  k = key.rsplit("/", 1)[-1]
  return k.endswith("_s") or "seconds" in k or "time" in k or k in ("wall", "elapsed")


def _env():
  env = dict(os.environ)
  env.setdefault("AGENTIC_RL_CACHE", os.path.join(tempfile.gettempdir(), "agentic_rl_test_cache"))
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env


def _launch(workdir: str, config: str, overrides: list[str], log: str) -> subprocess.Popen:
  cmd = [sys.executable, "-m", "experiments.train", f"--config={config}", f"--workdir={workdir}",
         "--noprogress", *overrides]
  with open(log, "ab") as f:
    f.write(("\n$ " + " ".join(cmd) + "\n").encode())
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _tail(log: str, n: int = 4000) -> str:
  with open(log, errors="replace") as f:
    return f.read()[-n:]


def _wait(proc: subprocess.Popen, log: str) -> None:
  try:
    rc = proc.wait(timeout=RUN_TIMEOUT_S)
  except subprocess.TimeoutExpired:
    _kill_group(proc)
    raise AssertionError(f"launcher ran past {RUN_TIMEOUT_S}s:\n{_tail(log)}") from None
  if rc != 0:
    raise AssertionError(f"launcher exited with {rc}:\n{_tail(log)}")


def _kill_group(proc: subprocess.Popen) -> None:
  """SIGKILL to the launcher's own session (it and the sandboxed workers it started)."""
  try:
    os.killpg(proc.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass
  proc.wait()


def finished_steps(stage_dir: str) -> list[int]:
  """Steps of the finished (renamed from their temporary name) Orbax checkpoints of one stage."""
  d = os.path.join(stage_dir, "checkpoints")
  if not os.path.isdir(d):
    return []
  return sorted(int(n) for n in os.listdir(d) if n.isdigit() and os.path.isdir(os.path.join(d, n)))


def metric_steps(stage_dir: str) -> list[int]:
  path = os.path.join(stage_dir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  steps = []
  with open(path) as f:
    for line in f:
      try:
        steps.append(int(json.loads(line)["step"]))
      except (ValueError, KeyError):
        pass  # a line cut by the kill
  return steps


def mid_stage(stage_dir: str, total_steps: int, *, final_artifact: str | None = None) -> str | None:
  """Why `stage_dir` is at a point worth killing at (a checkpoint, rows after it, unfinished), else None."""
  ck = finished_steps(stage_dir)
  if not ck or ck[-1] >= total_steps:
    return None
  if final_artifact and os.path.exists(os.path.join(stage_dir, final_artifact)):
    return None
  after = [s for s in metric_steps(stage_dir) if s > ck[-1]]
  if not after:
    return None
  return f"{stage_dir}: last checkpoint {ck[-1]} of {total_steps}, metrics rows after it at steps {after}"


def kill_when(proc: subprocess.Popen, log: str, stage_dir: str, total_steps: int, **kw) -> str:
  """Polls until `stage_dir` is mid-stage, then SIGKILLs the launcher; returns what was on disk."""
  while True:
    if proc.poll() is not None:
      raise AssertionError(f"the run ended (rc {proc.returncode}) before {stage_dir} was caught mid-stage; "
                           f"checkpoints {finished_steps(stage_dir)}, rows {metric_steps(stage_dir)}:\n"
                           + _tail(log))
    if mid_stage(stage_dir, total_steps, **kw):
      os.killpg(proc.pid, signal.SIGSTOP)  # freeze, then check again: the files now stay as they are
      why = mid_stage(stage_dir, total_steps, **kw)
      if why:
        os.kill(proc.pid, signal.SIGKILL)  # the launcher first, as a crash would
        proc.wait()
        _kill_group(proc)  # then whatever of its session is left (its stopped helpers)
        return why
      os.killpg(proc.pid, signal.SIGCONT)
    time.sleep(_POLL_S)


def _strip_times(obj):
  if isinstance(obj, dict):
    return {k: _strip_times(v) for k, v in obj.items() if not _volatile(k)}
  if isinstance(obj, list):
    return [_strip_times(v) for v in obj]
  return obj


def _rows(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


class _KillResumeTestCase(absltest.TestCase):

  def assert_same_outputs(self, ref: str, run: str, metrics_dirs: list[str], results: str = "results.json",
                          top: str | None = None):
    """The results files (the workdir's `top`, default `results`, and each run's) and each metrics.jsonl
    (wall-clock fields aside) equal between two workdirs."""
    for rel in [top or results] + [os.path.join(d, results) for d in metrics_dirs
                            if os.path.exists(os.path.join(ref, d, results))]:
      with open(os.path.join(ref, rel)) as f:
        want = _strip_times(json.load(f))
      with open(os.path.join(run, rel)) as f:
        got = _strip_times(json.load(f))
      self.assertEqual(got, want, f"{rel} differs after kill and resume")
    for d in metrics_dirs:
      want = _strip_times(_rows(os.path.join(ref, d, "metrics.jsonl")))
      got = _strip_times(_rows(os.path.join(run, d, "metrics.jsonl")))
      steps = [r["step"] for r in got]
      self.assertEqual(steps, sorted(set(steps)), f"{d}/metrics.jsonl: rows duplicated or out of order")
      self.assertEqual(got, want, f"{d}/metrics.jsonl differs after kill and resume")


PHGPO_SMOKE = "configs/phgpo_traject.py:smoke"
WARMUP_STEPS, RL_STEPS = 6, 4  # configs/phgpo_traject.py:smoke


class PhGPOKillResumeTest(_KillResumeTestCase):

  def _check_smoke_sizes(self):
    from configs import phgpo_traject  # pylint: disable=g-import-not-at-top
    c = phgpo_traject.get_config("smoke")
    self.assertEqual((c.warmup.steps, c.rl.steps), (WARMUP_STEPS, RL_STEPS))
    self.assertLess(c.checkpoint.every, WARMUP_STEPS)
    self.assertLess(c.checkpoint.every, RL_STEPS)

  def test_sigkill_mid_warmup(self):
    """In CI: the warm-up run alone, killed after a checkpoint with rows past it, then resumed."""
    self._check_smoke_sizes()
    tmp = self.create_tempdir().full_path
    log = os.path.join(tmp, "log.txt")
    # The warm-up and its evaluation only; environments in-process (the sandbox is not what is tested here,
    # and its worker start-ups would double the time; the slow case below runs the job as configured).
    overrides = ["--config.runs=('warmup',)", "--config.env.sandboxed=False"]
    ref, run = os.path.join(tmp, "ref"), os.path.join(tmp, "run")
    _wait(_launch(ref, PHGPO_SMOKE, overrides, log), log)
    stage = os.path.join(run, "random", "seed_0", "warmup")
    proc = _launch(run, PHGPO_SMOKE, overrides, log)
    why = kill_when(proc, log, stage, WARMUP_STEPS)
    print("killed:", why)
    self.assertFalse(os.path.exists(os.path.join(run, "results_main_warmup.json")), why)
    _wait(_launch(run, PHGPO_SMOKE, overrides, log), log)
    self.assertTrue(os.path.exists(os.path.join(run, "results_main_warmup.json")))
    self.assert_same_outputs(ref, run, ["random/seed_0/warmup"], top="results_main_warmup.json")

  @pytest.mark.slow
  def test_sigkill_mid_each_stage(self):
    """The whole smoke job (warm-up, GRPO, PhGPO), killed once inside each stage."""
    self._check_smoke_sizes()
    tmp = self.create_tempdir().full_path
    log = os.path.join(tmp, "log.txt")
    ref, run = os.path.join(tmp, "ref"), os.path.join(tmp, "run")
    _wait(_launch(ref, PHGPO_SMOKE, [], log), log)
    seed = os.path.join(run, "random", "seed_0")
    for stage, total, final in (("warmup", WARMUP_STEPS, None), ("grpo", RL_STEPS, "results.json"),
                                ("phgpo", RL_STEPS, "results.json")):
      proc = _launch(run, PHGPO_SMOKE, [], log)
      print("killed:", kill_when(proc, log, os.path.join(seed, stage), total, final_artifact=final))
    _wait(_launch(run, PHGPO_SMOKE, [], log), log)
    table = "results_main_nearest-warmup-grpo-phgpo.txt"   # the smoke config's rows: a subset of the main table
    self.assert_same_outputs(ref, run, ["random/seed_0/warmup", "random/seed_0/grpo", "random/seed_0/phgpo"],
                             top=table.replace(".txt", ".json"))
    with open(os.path.join(ref, table)) as f, open(os.path.join(run, table)) as g:
      self.assertEqual(g.read(), f.read())


PROGAGENT_SMOKE = "configs/progagent.py:smoke"


@pytest.mark.slow
class ProgAgentKillResumeTest(_KillResumeTestCase):

  def test_sigkill_mid_sft(self):
    """ProgAgent smoke: killed inside SFT (after a checkpoint, with rows past it), rerun to the end."""
    from configs import progagent as progagent_config  # pylint: disable=g-import-not-at-top
    c = progagent_config.get_config('smoke')
    tmp = self.create_tempdir().full_path
    log = os.path.join(tmp, "log.txt")
    ref, run = os.path.join(tmp, "ref"), os.path.join(tmp, "run")
    _wait(_launch(ref, PROGAGENT_SMOKE, [], log), log)
    sft_steps = max(metric_steps(os.path.join(ref, "sft")))
    self.assertGreater(sft_steps, c.checkpoint.every, "SFT too short to be killed after a checkpoint")
    proc = _launch(run, PROGAGENT_SMOKE, [], log)
    print("killed:", kill_when(proc, log, os.path.join(run, "sft"), sft_steps))
    self.assertFalse(os.path.exists(os.path.join(run, "gspo", "metrics.jsonl")))
    _wait(_launch(run, PROGAGENT_SMOKE, [], log), log)
    self.assert_same_outputs(ref, run, ["sft", "gspo"], results="summary.json")


if __name__ == "__main__":
  absltest.main()
