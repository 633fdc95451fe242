"""Each trainer's smoke config in two CPU processes on loopback gives one process's results, written once.

Issue 28, item 1. For a method's smoke config the launcher runs once as one process and once as two
(`--coordinator_address=127.0.0.1:PORT --num_processes=2 --process_id=i`, jax.distributed over gloo, as
tests/multihost_test.py), in separate workdirs. Checked: both processes print the one-process results table
digit for digit (the workdir's path, which the table's first line names, aside); the results JSON and every
training curve (metrics.jsonl less its wall times) are equal; the non-checkpoint files of both workdirs are
the same; and each was written by the primary process only (tests/write_audit_launcher.py records every
file a process opens for writing; Orbax's checkpoints are written collectively and left out). PhGPO: both
processes print the one-process run's pheromone digest after each RL run (bit-identical pheromone and memory
bank). One class per method, so pytest-xdist (--dist loadscope) may run them on different workers; each takes
1.5-2.5 min on 2 loaded cores (ProgAgent CI-sized by flags: 8 SFT epochs, evaluation at v0).
"""

import json
import os
import re
import subprocess
import sys

from absl.testing import absltest

import procs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(REPO, "tests", "write_audit_launcher.py")
TIMEOUT_S = 900




def launch(config: str, workdir: str, num_processes: int, *flags: str) -> list[dict]:
  """Runs the launcher as `num_processes` processes (1: no distributed flags) on one shared `workdir`.

  Returns:
    per process {'rc', 'stdout', 'stderr', 'wrote': set of paths written}.
  """
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_LOCAL_DEVICE_IDS"):
    env.pop(k, None)
  port = procs.free_port()
  audits = [f"{workdir}.audit{i}.json" for i in range(num_processes)]
  dist = lambda i: ([f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={num_processes}",
                     f"--process_id={i}"] if num_processes > 1 else [])
  ps = [subprocess.Popen([sys.executable, LAUNCHER, audits[i], f"--config={config}", f"--workdir={workdir}",
                          "--noprogress", *dist(i), *flags], cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True) for i in range(num_processes)]
  out = []
  try:
    for i, p in enumerate(ps):
      try:
        so, se = p.communicate(timeout=TIMEOUT_S)
      except subprocess.TimeoutExpired:
        for q in ps:
          q.kill()
        so, se = p.communicate()
      wrote = set()
      if os.path.exists(audits[i]):
        with open(audits[i]) as f:
          wrote = set(json.load(f))
      out.append({"rc": p.returncode, "stdout": so, "stderr": se, "wrote": wrote})
  finally:
    for p in ps:
      if p.poll() is None:
        p.kill()
        p.wait()
  assert not any(procs.alive(p.pid) for p in ps)   # no process left behind
  return out


def output_files(workdir: str) -> set[str]:
  """Paths (relative to `workdir`) of every file but Orbax's checkpoints."""
  return {os.path.relpath(os.path.join(r, f), workdir) for r, _, fs in os.walk(workdir) for f in fs
          if "checkpoints" not in os.path.relpath(r, workdir).split(os.sep)}


def curves(workdir: str) -> dict[str, list]:
  """Every metrics.jsonl of `workdir`, less the wall-time columns (time/*)."""
  out = {}
  for f in sorted(output_files(workdir)):
    if f.endswith("metrics.jsonl"):
      with open(os.path.join(workdir, f)) as fh:
        out[f] = [{k: v for k, v in json.loads(l).items() if not k.startswith("time/")} for l in fh if l.strip()]
  return out


def without_wall_times(obj):
  """A results JSON less its provenance, paths and wall times ('code', 'config', 'eval_s', 'train_seconds')."""
  if isinstance(obj, dict):
    return {k: without_wall_times(v) for k, v in obj.items() if k not in ("code", "config", "eval_s", "train_seconds")}
  if isinstance(obj, list):
    return [without_wall_times(v) for v in obj]
  return obj


class TwoProcessesEqualOne(absltest.TestCase):
  """The comparison (`check`); the method classes below hold the tests."""

  def check(self, config: str, table_start: str, results: str, *flags: str, table_end: str = "") -> None:
    """Runs `config` in one and in two processes; the checks of the module docstring.

    table_start: the line prefix where the printed results table begins; table_end: where it ends ('' = the
    end of the output); results: the results JSON's name.
    """
    root = self.create_tempdir().full_path
    one_dir, two_dir = os.path.join(root, "one"), os.path.join(root, "two")
    one = launch(config, one_dir, 1, *flags)
    two = launch(config, two_dir, 2, *flags)
    names = ["one process"] + [f"process {i} of 2" for i in range(2)]
    failed = [f"--- {n}: rc {r['rc']}\n{r['stderr'][-4000:]}" for n, r in zip(names, one + two) if r["rc"] != 0]
    self.assertEqual(failed, [], "\n".join(failed))   # every failing process's stderr (a peer's may say why)

    def table(r, workdir):
      text = r["stdout"].replace(workdir, "WORKDIR")
      start = text.find(table_start)
      self.assertGreaterEqual(start, 0, f"no results table in:\n{text[-3000:]}")
      end = text.find(table_end, start) if table_end else -1
      return text[start:end] if end >= 0 else text[start:]

    want = table(one[0], one_dir)
    for i, r in enumerate(two):
      self.assertEqual(table(r, two_dir), want, f"process {i}'s table")
    # TensorBoard event files are named by their creation time and host
    names = lambda d: {re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", f) for f in output_files(d)}
    self.assertEqual(names(two_dir), names(one_dir))
    with open(os.path.join(one_dir, results)) as a, open(os.path.join(two_dir, results)) as b:
      ra, rb = json.load(a), json.load(b)
    self.assertEqual(json.dumps(without_wall_times(rb), sort_keys=True),
                     json.dumps(without_wall_times(ra), sort_keys=True))
    self.assertEqual(curves(two_dir), curves(one_dir))
    # exactly one process (the primary) wrote each output file
    mine = lambda r: {p for p in r["wrote"] if p.startswith(two_dir + os.sep)
                      and "checkpoints" not in os.path.relpath(p, two_dir).split(os.sep)}
    self.assertEqual(mine(two[1]), set(), "the non-primary process wrote files")
    written = {os.path.relpath(p, two_dir) for p in mine(two[0])}
    # a file counts as written when it, or a folder renamed into place above it (policy/), was
    covered = lambda f: any(os.path.join(*f.split(os.sep)[:i]) in written for i in range(1, f.count(os.sep) + 2))
    self.assertEqual(sorted(f for f in output_files(two_dir) if not covered(f)), [])
    return one, two, one_dir, two_dir


class PlanPOTest(TwoProcessesEqualOne):

  def test_planpo(self):
    self.check("configs/planpo_twx.py:smoke", "== held-out split", "results_main.json")


class PhGPOTest(TwoProcessesEqualOne):

  def test_phgpo(self):
    # Sampling blocks of 2 tasks (RL) and 12 (evaluation) so that both processes roll out: the one-process run
    # uses the same blocks, and the keys fold in the block index only.
    one, two, _, _ = self.check("configs/phgpo_traject.py:smoke", "main table, random split",
                                "results_main_nearest-warmup-grpo-phgpo.json", "--config.rl.block_tasks=2",
                                "--config.eval.block_tasks=12", table_end="\ntotal ")
    digest = lambda r: re.findall(r"seed 0 (\w+): pheromone sha256 (\w+) \(process (\d) of (\d)\)", r["stdout"])
    want = [(run, d) for run, d, _, _ in digest(one[0])]
    self.assertEqual([run for run, _ in want], ["grpo", "phgpo"])
    for i, r in enumerate(two):   # the pheromone arrays are bit-identical on both processes and equal one's
      self.assertEqual(digest(r), [(run, d, str(i), "2") for run, d in want])


class ProgAgentTest(TwoProcessesEqualOne):

  def test_progagent(self):
    # CI-sized: 8 SFT epochs (not 80: this checks that the processes agree, not that the model learns) and the
    # evaluation at v0 only
    self.check("configs/progagent.py:smoke", "harness  level", "eval/results.json", "--config.sft.epochs=8",
               "--config.eval.levels=0")


if __name__ == "__main__":
  absltest.main()
