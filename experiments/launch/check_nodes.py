r"""Checks a Ray cluster before a long run: can every node with CPUs host sandboxed environment workers?

  python -m experiments.launch.check_nodes --ray_address=HEAD:6379 --min_nodes=4 [--paths=/shared/data,...]

Run it on a node of the cluster (a Ray driver needs a Ray node on its own host: a trainer node, or the head). It
waits up to --wait_s for --min_nodes live nodes with CPUs, then runs one Ray task pinned to each of them that
reports what common.env_pool_ray.check_node finds missing there (bubblewrap, each of --paths) and starts one
sandbox (common.sandbox, the defaults the environment workers use) running a program that must print the sandbox
uid (65534) and exit 0. One line per node: host, address, the Ray worker's uid, the limits in force ('cgroup v2
...', 'cgroup v1 ...', or 'ulimit -v ...': address space only, no process or CPU limit) and ok or what failed.
Exits 1 naming every node that failed (with --require_cgroup, also a node with only 'ulimit -v'). The Slurm recipe
runs it before the trainers start, the Kubernetes one in every trainer pod; README, "Launch recipes".
"""

from __future__ import annotations

import os
import sys
import time
from typing import Sequence

from absl import app
from absl import flags

_ADDRESS = flags.DEFINE_string("ray_address", "auto", "The Ray cluster: HOST:PORT of its head, or 'auto' (one "
                               "started on this machine).")
_MIN_NODES = flags.DEFINE_integer("min_nodes", 1, "Wait for this many live nodes with CPUs (environment nodes).")
_WAIT_S = flags.DEFINE_float("wait_s", 300.0, "Seconds to wait for them.")
_PATHS = flags.DEFINE_list("paths", [], "Paths every environment node must have (data sets, env.ro_paths, the "
                           "household cache), comma-separated.")
_REQUIRE_CGROUP = flags.DEFINE_bool("require_cgroup", False, "Fail a node whose sandbox has no cgroup limits "
                                    "(address space only, through ulimit -v).")
_TIMEOUT_S = 300.0   # for one node's probe (a sandbox start takes about a second)


def probe(paths: Sequence[str]) -> dict:
  """On the node it runs on: what it lacks to host environment workers, and one sandboxed program's start.

  Returns:
    {'host', 'uid' (of this Ray worker), 'limits' (Sandbox.limits, '' if none started), 'problems': [str]}.
  """
  import socket  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  from common import env_pool_ray, sandbox  # pylint: disable=g-import-not-at-top
  out = {"host": socket.gethostname(), "uid": os.geteuid(), "limits": "",
         "problems": env_pool_ray.check_node([(p, "--paths") for p in paths], need_bwrap=True)}
  try:
    box = sandbox.Sandbox(sandbox.SandboxConfig())
  except Exception as e:  # pylint: disable=broad-except
    out["problems"].append(f"no sandbox starts: {type(e).__name__}: {e}")
    return out
  try:
    out["limits"] = box.limits
    p = subprocess.run(box.command([sys.executable, "-c", "import os; print(os.getuid())"]),
                       capture_output=True, text=True, timeout=120, start_new_session=True)
    if p.returncode != 0 or p.stdout.strip() != str(box.config.uid):
      out["problems"].append(f"a sandboxed program exited {p.returncode} printing {p.stdout.strip()[:80]!r} "
                             f"(uid {box.config.uid} expected): {p.stderr.strip()[-600:]}")
  except Exception as e:  # pylint: disable=broad-except
    out["problems"].append(f"a sandboxed program failed: {type(e).__name__}: {e}")
  finally:
    box.close()
  return out


def cpu_nodes(ray) -> list[dict]:
  """The live nodes of the cluster with at least one CPU (those that can host environment workers)."""
  return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]


def check(address: str, *, min_nodes: int, wait_s: float, paths: Sequence[str] = (),
          require_cgroup: bool = False) -> list[str]:
  """Probes every node with CPUs of the cluster at `address` (module docstring); prints one line per node.

  Returns:
    The failures, one sentence per node (empty: every node can host sandboxed environment workers).
  """
  from common import env_pool_ray  # pylint: disable=g-import-not-at-top
  env_pool_ray.connect(address)
  import ray  # pylint: disable=g-import-not-at-top
  from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top
  deadline = time.time() + wait_s
  nodes = cpu_nodes(ray)
  while len(nodes) < min_nodes and time.time() < deadline:
    time.sleep(2)
    nodes = cpu_nodes(ray)
  if len(nodes) < min_nodes:
    return [f"Ray cluster {address}: {len(nodes)} of {min_nodes} nodes with CPUs after {wait_s:g} s "
            "(`ray status` lists the nodes; a node that never joined names why in its `ray start` output)"]
  task = ray.remote(num_cpus=1, max_retries=0)(probe)
  refs = [(n, task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
           .remote(list(paths))) for n in nodes]
  failures = []
  for n, ref in refs:
    where = f"{n.get('NodeManagerHostname', '?')} ({n.get('NodeManagerAddress', '?')})"
    try:
      r = ray.get(ref, timeout=_TIMEOUT_S)
    except Exception as e:  # pylint: disable=broad-except  # e.g. the project does not import on that node
      r = {"host": n.get("NodeManagerHostname", "?"), "uid": "?", "limits": "",
           "problems": [f"the probe did not run: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"]}
    problems = list(r["problems"])
    if require_cgroup and r["limits"] and not r["limits"].startswith("cgroup"):
      problems.append(f"no cgroup limits ({r['limits']}; --require_cgroup)")
    print(f"{where:40s} uid {r['uid']!s:5s} {r['limits'] or '-'}: {'ok' if not problems else 'FAILED'}", flush=True)
    failures += [f"{where}: {p}" for p in problems]
  return failures


def main(argv):
  del argv
  failures = check(_ADDRESS.value, min_nodes=_MIN_NODES.value, wait_s=_WAIT_S.value, paths=_PATHS.value,
                   require_cgroup=_REQUIRE_CGROUP.value)
  if failures:
    sys.exit("FATAL the Ray cluster cannot host sandboxed environment workers (README, 'Launch recipes'):\n  "
             + "\n  ".join(failures))
  print("every node can host sandboxed environment workers")


if __name__ == "__main__":
  app.run(main)
