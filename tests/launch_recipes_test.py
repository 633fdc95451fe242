"""The launch recipes of experiments/launch/ (README, "Launch recipes") are real, checked without Slurm or Kubernetes.

  - Slurm (slurm_train.sbatch): `bash -n`; its dry run (DRY_RUN=1, with a stand-in `scontrol` that splits a comma
    list) for a plain allocation, a heterogeneous one and an outside Ray cluster: the Ray head on the first trainer
    node without CPUs, the other trainer nodes joining without CPUs, the environment nodes with their CPUs, the node
    check, then one trainer step of one task per trainer node whose process id is its SLURM_PROCID; wrong settings
    stop it with one line.
  - Kubernetes (k8s/): the manifests parse as YAML as they are and once render.sh has filled them; the Indexed Job
    (completions = parallelism = the process count, the headless Service its pods' subdomain, the coordinator at
    index 0, JOB_COMPLETION_INDEX as process id) and the RayCluster (a head without CPUs, privileged root workers,
    the Ray version of setup.cfg's pin) agree with each other.
  - Every launcher flag in the recipes is one that experiments/train.py (or experiments/launch/check_nodes.py)
    defines, taken from the modules' own flags, and every --config.<key> override parses on the locked config it is
    given with, as the launcher parses it (the manifests name no config: there, on every configs/*.py).
"""

import configparser
import functools
import os
import pathlib
import re
import shlex
import subprocess

from absl import flags
from absl.testing import absltest
from ml_collections import config_flags
import pytest
import yaml

from experiments import train
from experiments.launch import check_nodes

pytestmark = pytest.mark.fast   # the everyday tier: bash, YAML and flag parsing, no training, no cluster

REPO = pathlib.Path(__file__).resolve().parents[1]
SBATCH = REPO / "experiments" / "launch" / "slurm_train.sbatch"
K8S = REPO / "experiments" / "launch" / "k8s"
RENDER = K8S / "render.sh"

# render.sh's required values (its defaults fill the others).
K8S_VALUES = dict(IMAGE="registry.example/agentic-rl:abc123", REPO_DIR="/app", SHARED_PVC="shared-rwx",
                  CONFIG="configs/planpo_twx.py", WORKDIR="/shared/runs/twx", NUM_TRAINERS="2",
                  GPUS_PER_TRAINER="8", NUM_ENV_NODES="3", ENV_CPUS_PER_NODE="32", ENV_MEMORY="128Gi")


def module_flags(module) -> set[str]:
  """The flags `module` defines (absl registers each under its defining module)."""
  return {f.name for f in flags.FLAGS.get_flags_for_module(module.__name__)}


def invocations(tokens: list[str], module: str) -> list[list[str]]:
  """The arguments after each `-m <module>` in a token list, up to the next shell separator."""
  out = []
  for i in range(len(tokens) - 1):
    if tokens[i] == "-m" and tokens[i + 1] == module:
      args = []
      for t in tokens[i + 2:]:
        if t in (";", "&&", "||", "|", "&"):
          break
        args.append(t)
      out.append(args)
  return out


def flag_values(argv: list[str]) -> dict[str, str]:
  return dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in argv)


@functools.cache
def config_files() -> list[str]:
  """Every configs/*.py that defines get_config."""
  return sorted(f"configs/{p.name}" for p in (REPO / "configs").glob("*.py")
                if not p.name.startswith("_") and "def get_config" in p.read_text())


def parse_overrides(spec: str, overrides: list[str]):
  """The config of `spec` ('configs/x.py[:variant]') with `overrides` applied as experiments/train.py does
  (config_flags on a locked config: an unknown key raises)."""
  path, _, variant = spec.partition(":")
  argv = ["prog", f"--config={REPO / path}" + (f":{variant}" if variant else ""), *overrides]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "config", flag_values=fv, lock_config=True, sys_argv=argv)
  fv(argv)
  return fv.config


class FlagCheck(absltest.TestCase):

  def assert_launcher_argv(self, argv: list[str], configs: list[str]) -> dict[str, str]:
    """Every flag of `argv` is experiments/train.py's and every --config.<key> override parses on each of
    `configs`; returns the flags' values."""
    defined = module_flags(train)
    self.assertGreaterEqual(defined, {"config", "workdir", "coordinator_address", "num_processes", "process_id"})
    for a in argv:
      self.assertTrue(a.startswith("--"), f"not a flag: {a!r} in {argv}")
      name = a[2:].split("=", 1)[0]
      if not name.startswith("config."):
        self.assertIn(name, defined, f"--{name} is not a flag of experiments/train.py ({sorted(defined)})")
    overrides = [a for a in argv if a.startswith("--config.")]
    self.assertIn("--config.env.backend=ray", overrides)
    for spec in configs:
      try:
        config = parse_overrides(spec, overrides)
      except Exception as e:  # pylint: disable=broad-except
        self.fail(f"{overrides} do not parse on {spec}: {type(e).__name__}: {e}")
      for o in overrides:
        key, value = o[len("--config."):].split("=", 1)
        got = functools.reduce(getattr, key.split("."), config)
        self.assertEqual(str(got).lower(), value.lower(), f"{o} on {spec}")
    return flag_values(argv)

  def assert_check_argv(self, argv: list[str]) -> dict[str, str]:
    defined = module_flags(check_nodes)
    for a in argv:
      self.assertIn(a[2:].split("=", 1)[0], defined, f"{a} is not a flag of experiments/launch/check_nodes.py")
    return flag_values(argv)


def dry_run(env: dict[str, str], tmp: str, with_scontrol: bool = True) -> subprocess.CompletedProcess:
  """The sbatch script with DRY_RUN=1, a stand-in scontrol on PATH (unless not `with_scontrol`) and `env` as the
  job's environment."""
  fake = pathlib.Path(tmp) / ("bin" if with_scontrol else "empty")
  fake.mkdir(exist_ok=True)
  if with_scontrol:
    scontrol = fake / "scontrol"
    scontrol.write_text('#!/usr/bin/env bash\n[ "$1 $2" = "show hostnames" ] && tr "," "\\n" <<< "$3"\n')
    scontrol.chmod(0o755)
  base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  path = os.environ["PATH"] if with_scontrol else ":".join(
      d for d in os.environ["PATH"].split(":") if not os.path.exists(os.path.join(d, "scontrol")))
  base.update(PATH=f"{fake}:{path}", DRY_RUN="1", REPO_DIR=str(REPO),
              PYTHON=str(REPO / ".venv" / "bin" / "python"))
  base.update(env)
  return subprocess.run(["bash", str(SBATCH)], env=base, capture_output=True, text=True, timeout=60, cwd=REPO)


def srun_steps(stdout: str) -> list[tuple[list[str], bool]]:
  """(srun argv, in the background) per '+ srun ...' line."""
  out = []
  for line in stdout.splitlines():
    if line.startswith("+ srun "):
      tokens = shlex.split(line[2:])
      background = tokens[-1] == "&"
      out.append((tokens[1:-1] if background else tokens[1:], background))
  return out


def ray_start(step: list[str]) -> list[str] | None:
  """The `ray start` flags of an srun step, or None."""
  for i, t in enumerate(step):
    if t.endswith("/ray") and step[i + 1:i + 2] == ["start"]:
      return step[i + 2:]
  return None


class SlurmTest(FlagCheck):

  def test_scripts_parse(self):
    for script in (SBATCH, RENDER):
      p = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
      self.assertEqual(p.returncode, 0, f"{script}: {p.stderr}")

  def test_plain_allocation(self):
    p = dry_run(dict(SLURM_JOB_NODELIST="n1,n2,n3,n4", SLURM_JOB_CPUS_PER_NODE="16(x4)", NUM_TRAINER_NODES="2",
                     CONFIG="configs/planpo_twx.py:smoke", WORKDIR="/shared/runs/w",
                     EXTRA_ARGS="--config.env.sandboxed=true"), self.create_tempdir().full_path)
    self.assertEqual(p.returncode, 0, p.stderr)
    steps = srun_steps(p.stdout)
    self.assertLen(steps, 6, p.stdout)   # head, trainer n2 joins, 2 env nodes, node check, trainers
    rays = [(s, ray_start(s)) for s, bg in steps if ray_start(s) is not None]
    self.assertTrue(all(bg for s, bg in steps[:4]), p.stdout)
    head = [(s, r) for s, r in rays if "--head" in r]
    self.assertLen(head, 1)
    self.assertIn("n1", head[0][0][head[0][0].index("-w") + 1])
    self.assertEqual(steps[0][0], head[0][0], "the head starts first")
    self.assertContainsSubset(["--num-cpus=0", "--num-gpus=0", "--port=6379", "--block"], head[0][1])
    joins = {s[s.index("-w") + 1]: r for s, r in rays if "--head" not in r}
    self.assertEqual(sorted(joins), ["n2", "n3", "n4"])
    for host, r in joins.items():
      self.assertIn("--address=n1:6379", r)
      self.assertIn("--num-cpus=0" if host == "n2" else "--num-cpus=16", r)
    for s, _ in steps[:4]:
      self.assertIn("--overlap", s)   # the Ray steps share their nodes with the trainer step
    # The node check, then the trainers.
    check, _ = steps[4]
    (check_argv,) = invocations(check, "experiments.launch.check_nodes")
    cf = self.assert_check_argv(check_argv)
    self.assertEqual((cf["ray_address"], cf["min_nodes"]), ("n1:6379", "2"))
    trainer, bg = steps[5]
    self.assertFalse(bg)
    self.assertContainsSubset(["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"], trainer)
    self.assertEqual(trainer[trainer.index("-w") + 1], "n1,n2")
    (argv,) = invocations(trainer, "experiments.train")
    f = self.assert_launcher_argv(argv, ["configs/planpo_twx.py:smoke"])
    self.assertEqual((f["config"], f["workdir"], f["coordinator_address"], f["num_processes"]),
                     ("configs/planpo_twx.py:smoke", "/shared/runs/w", "n1:1234", "2"))
    self.assertEqual(f["config.env.ray_address"], "n1:6379")
    self.assertNotIn("process_id", f)   # each task adds its own, below
    # Each task runs `bash -c SCRIPT trainer ARGV...`: the process id is the task's SLURM_PROCID.
    i = trainer.index("bash")
    script, argv0 = trainer[i + 2], trainer[i + 3]
    self.assertEqual(argv0, "trainer")
    task = subprocess.run(["bash", "-c", script, argv0, "echo", *trainer[i + 4:]], capture_output=True, text=True,
                          env=dict(os.environ, SLURM_PROCID="1"), timeout=30)
    self.assertEqual(task.stdout.split()[-1], "--process_id=1")
    self.assertIn("--workdir=/shared/runs/w", task.stdout.split())

  def test_heterogeneous_allocation(self):
    p = dry_run(dict(SLURM_HET_SIZE="2", SLURM_JOB_NODELIST="g1,g2,c1,c2,c3", SLURM_JOB_NODELIST_HET_GROUP_0="g1,g2",
                     SLURM_JOB_NODELIST_HET_GROUP_1="c1,c2,c3", SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0="8(x2)",
                     SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1="32(x3)", CONFIG="configs/progagent.py:smoke",
                     WORKDIR="/shared/runs/p"), self.create_tempdir().full_path)
    self.assertEqual(p.returncode, 0, p.stderr)
    steps = srun_steps(p.stdout)
    for s, _ in steps:
      host = s[s.index("-w") + 1]
      group = "--het-group=1" if host.startswith("c") else "--het-group=0"
      self.assertIn(group, s, s)
      r = ray_start(s)
      if r is not None and host.startswith("c"):
        self.assertContainsSubset(["--num-cpus=32", "--address=g1:6379", "--cpus-per-task=32"], r + s)
    trainer, _ = steps[-1]
    self.assertEqual(trainer[trainer.index("-w") + 1], "g1,g2")
    (argv,) = invocations(trainer, "experiments.train")
    f = self.assert_launcher_argv(argv, ["configs/progagent.py:smoke"])
    self.assertEqual(f["num_processes"], "2")

  def test_outside_ray_cluster(self):
    p = dry_run(dict(SLURM_JOB_NODELIST="n1,n2", SLURM_JOB_CPUS_PER_NODE="8(x2)", NUM_TRAINER_NODES="2",
                     RAY_HEAD="10.0.0.5:6379", HEAD_ADDR="10.1.0.1", CONFIG="configs/planpo_household.py",
                     WORKDIR="/shared/runs/h"), self.create_tempdir().full_path)
    self.assertEqual(p.returncode, 0, p.stderr)
    steps = srun_steps(p.stdout)
    rays = [ray_start(s) for s, _ in steps if ray_start(s) is not None]
    self.assertLen(rays, 2)   # both trainer nodes join; no head here
    for r in rays:
      self.assertNotIn("--head", r)
      self.assertContainsSubset(["--address=10.0.0.5:6379", "--num-cpus=0"], r)
    (argv,) = invocations(steps[-1][0], "experiments.train")
    f = self.assert_launcher_argv(argv, ["configs/planpo_household.py"])
    self.assertEqual((f["config.env.ray_address"], f["coordinator_address"]), ("10.0.0.5:6379", "10.1.0.1:1234"))

  def test_wrong_settings_are_one_line(self):
    tmp = self.create_tempdir().full_path
    base = dict(SLURM_JOB_NODELIST="n1,n2", SLURM_JOB_CPUS_PER_NODE="8(x2)", CONFIG="configs/planpo_twx.py",
                WORKDIR="/shared/w")
    for change, msg in ((dict(CONFIG=""), "set CONFIG"), (dict(NUM_TRAINER_NODES="3"), "the allocation has 2 nodes"),
                        (dict(NUM_TRAINER_NODES="2"), "no environment node"),
                        (dict(NUM_TRAINER_NODES="abc"), "NUM_TRAINER_NODES=abc: a whole number"),
                        (dict(SLURM_JOB_NODELIST=""), "SLURM_JOB_NODELIST is not set")):
      p = dry_run({**base, **change}, tmp)
      self.assertNotEqual(p.returncode, 0, change)
      self.assertIn(msg, p.stderr)
      self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)   # one line, no follow-on error
      self.assertNotIn("+ srun", p.stdout)
    p = dry_run(base, tmp, with_scontrol=False)
    self.assertEqual(p.returncode, 2)
    self.assertIn("scontrol not found", p.stderr)


def render(values: dict[str, str], *files: str) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in K8S_VALUES}
  env.update(values)
  return subprocess.run(["bash", str(RENDER), *files], env=env, capture_output=True, text=True, timeout=30)


def container_script(container: dict) -> list[list[str]]:
  """The shell lines of a `bash -c` container (continuations joined), each split into tokens."""
  assert container["command"] == ["bash", "-c"], container["command"]
  text = container["args"][0].replace("\\\n", " ")
  return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


class KubernetesTest(FlagCheck):

  def docs(self, values=None) -> dict[str, dict]:
    p = render(values or K8S_VALUES)
    self.assertEqual(p.returncode, 0, p.stderr)
    code = "\n".join(l for l in p.stdout.splitlines() if not l.lstrip().startswith("#"))
    self.assertEqual(re.findall(r"\$\{\w+\}", code), [], "placeholders left after render.sh")
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    return {d["kind"]: d for d in docs}

  def test_manifests_parse_before_rendering(self):
    for f in sorted(K8S.glob("*.yaml")):
      self.assertTrue([d for d in yaml.safe_load_all(f.read_text()) if d], f)

  def test_render_names_a_missing_value(self):
    values = dict(K8S_VALUES)
    del values["IMAGE"]
    p = render(values)
    self.assertEqual(p.returncode, 1)
    self.assertIn("set IMAGE", p.stderr)

  def test_indexed_job_and_service(self):
    docs = self.docs()
    self.assertEqual(sorted(docs), ["Job", "RayCluster", "Service"])
    job, svc = docs["Job"], docs["Service"]
    name = job["metadata"]["name"]
    self.assertEqual(svc["metadata"]["name"], name)
    self.assertEqual(svc["spec"]["clusterIP"], "None")
    self.assertEqual(svc["spec"]["selector"], {"job-name": name})
    spec = job["spec"]
    self.assertEqual(spec["completionMode"], "Indexed")
    self.assertEqual((spec["completions"], spec["parallelism"]), (2, 2))
    self.assertEqual(spec["template"]["spec"]["subdomain"], name)
    (container,) = spec["template"]["spec"]["containers"]
    self.assertEqual(container["image"], K8S_VALUES["IMAGE"])
    self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], 8)
    lines = container_script(container)
    tokens = [t for line in lines for t in line + [";"]]
    (argv,) = invocations(tokens, "experiments.train")
    f = self.assert_launcher_argv(argv, config_files())
    port = svc["spec"]["ports"][0]["port"]
    self.assertEqual(f["coordinator_address"], f"{name}-0.{name}:{port}")
    self.assertEqual(f["num_processes"], str(spec["completions"]))
    self.assertEqual(f["process_id"], "$JOB_COMPLETION_INDEX")
    self.assertEqual((f["config"], f["workdir"]), (K8S_VALUES["CONFIG"], K8S_VALUES["WORKDIR"]))
    ray_head = f"{docs['RayCluster']['metadata']['name']}-head-svc:6379"   # KubeRay's head Service
    self.assertEqual(f["config.env.ray_address"], ray_head)
    (check_argv,) = invocations(tokens, "experiments.launch.check_nodes")
    cf = self.assert_check_argv(check_argv)
    self.assertEqual(cf["ray_address"], ray_head)
    self.assertEqual(cf["min_nodes"], str(docs["RayCluster"]["spec"]["workerGroupSpecs"][0]["replicas"]))
    (start,) = [l for l in lines if l[:2] == ["ray", "start"]]
    self.assertContainsSubset([f"--address={ray_head}", "--num-cpus=0", "--num-gpus=0"], start)
    order = [i for i, l in enumerate(lines) if l[:2] == ["ray", "start"] or "-m" in l]
    self.assertEqual([lines[i][lines[i].index("-m") + 1] if "-m" in lines[i] else "ray" for i in order],
                     ["ray", "experiments.launch.check_nodes", "experiments.train"])

  def test_extra_args_reach_the_launcher(self):
    docs = self.docs(dict(K8S_VALUES, CONFIG="configs/planpo_twx.py:smoke", EXTRA_ARGS="--config.env.sandboxed=true"))
    (container,) = docs["Job"]["spec"]["template"]["spec"]["containers"]
    tokens = [t for line in container_script(container) for t in line + [";"]]
    (argv,) = invocations(tokens, "experiments.train")
    self.assertEqual(argv[-1], "--config.env.sandboxed=true")
    self.assert_launcher_argv(argv, ["configs/planpo_twx.py:smoke"])

  def test_ray_cluster(self):
    docs = self.docs()
    rc = docs["RayCluster"]
    self.assertEqual(rc["apiVersion"], "ray.io/v1")
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    (pin,) = [l.strip() for l in cfg.get("options.extras_require", "ray").splitlines() if l.strip().startswith("ray")]
    self.assertEqual(f"ray=={rc['spec']['rayVersion']}", pin)
    self.assertEqual(rc["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"], "0")
    (group,) = rc["spec"]["workerGroupSpecs"]
    n = int(K8S_VALUES["NUM_ENV_NODES"])
    self.assertEqual((group["replicas"], group["minReplicas"], group["maxReplicas"]), (n, n, n))
    self.assertEqual(group["rayStartParams"]["num-cpus"], K8S_VALUES["ENV_CPUS_PER_NODE"])
    (worker,) = group["template"]["spec"]["containers"]
    self.assertEqual(worker["securityContext"], {"privileged": True, "runAsUser": 0})
    self.assertEqual(worker["resources"]["limits"]["cpu"], K8S_VALUES["ENV_CPUS_PER_NODE"])
    # Every pod mounts the shared volume at the same path (workdir, data paths).
    pods = [rc["spec"]["headGroupSpec"]["template"]["spec"], group["template"]["spec"],
            docs["Job"]["spec"]["template"]["spec"]]
    for pod in pods:
      self.assertEqual(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], K8S_VALUES["SHARED_PVC"])
      self.assertEqual(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/shared")
      self.assertEqual(pod["containers"][0]["workingDir"], K8S_VALUES["REPO_DIR"])


class ReadmeTest(absltest.TestCase):

  def test_section_names_files_that_exist(self):
    text = (REPO / "README.md").read_text()
    self.assertTrue("### Launch recipes" in text, "README.md has no '### Launch recipes' section")
    section = text.split("### Launch recipes", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"experiments/launch/[\w./-]+\w", section))
    for path in named:
      self.assertTrue((REPO / path).exists(), f"README names {path}, which does not exist")
    launch = REPO / "experiments" / "launch"
    for f in sorted(launch.rglob("*")):
      if f.is_file() and f.name != "__init__.py" and "__pycache__" not in f.parts:
        name = f.stem if f.suffix == ".py" else f.name   # check_nodes: named as a module
        self.assertIn(name, section, f"README's 'Launch recipes' does not mention {f.relative_to(REPO)}")

if __name__ == "__main__":
  absltest.main()
