"""Environment workers on Ray (common/env_pool_ray.py): WorkerPool(..., backend='ray') on a local Ray cluster.

One cluster for the class (ray.cluster_utils.Cluster, every node on 127.0.0.1 and nothing else): a head node
without CPUs, to which this process connects as the driver, and node B, so that every worker runs on a node other
than the driver's; the node-loss test adds node C and removes it mid-run. Kept small: 100 MiB object stores, no
dashboard modules (include_dashboard=False), one logical CPU per worker; health checks every 0.5 s so that a removed
node is declared dead within about a second (Ray's defaults take tens of seconds: only slower). Checked here:
  - TextWorldExpress (sandboxed env processes) and ProgAgent (ProgEnv objects, progagent.rollouts.make_pool with
    config key env.backend 'ray') episodes on remote workers give the trajectories of the local pool;
  - a node removed mid-episode ends its episode with 'env_error' (crash: the Ray actor is gone) and the run
    finishes on the other node, on a replacement worker;
  - a data path a node lacks is named at start, with the fix;
  - the sandbox's attacks (tests/security_contained_test.py: host files, network, fork loop, memory bomb) are
    contained in a Ray-hosted worker as in a local one, and Ray's own head is out of reach from inside;
  - no process is left once the cluster is shut down.

  .venv/bin/python -m pytest -q tests/env_ray_test.py
"""

import dataclasses
import os

# Ray on loopback only: with this switch off, Ray takes 127.0.0.1 as this machine's address (as on macOS), so
# that every node, and ray.init's address, bind and connect there (read when ray is imported; children inherit).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import shutil
import time

import ml_collections
import psutil
from absl.testing import absltest

import procs
import security_contained_test as sct
from common import env_pool
from common import policy_io
from common.chat import ChatTemplate
from common.env_client import EnvSpec
from common.env_pool import WorkerPool
from common.mcp_process import EnvError
from common.rollout import RolloutConfig, RolloutDriver, ScriptedPolicy
from common.trajectory import ByteTokenizer

try:
  import ray
  from ray.cluster_utils import Cluster
  HAVE_RAY = True
except ImportError:
  HAVE_RAY = False
try:
  import textworld_express  # noqa: F401
  HAVE_TWX = shutil.which("java") is not None
except ImportError:
  HAVE_TWX = False
HAVE_BWRAP = shutil.which("bwrap") is not None

MIB = 1024 ** 2
NODE = dict(node_ip_address="127.0.0.1", object_store_memory=100 * MIB)
FAST_FAILURE_DETECTION = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                          "health_check_timeout_ms": 500, "health_check_failure_threshold": 2}
TWX = EnvSpec("common.envs.twx_env:TwxToolEnv", {"game_params": {"coin": "numLocations=3,includeDoors=0,"
                                                                         "numDistractorItems=0"}},
              start_timeout_s=120)
PROGAGENT_TASKS = ("retail/pending_over_500", "library/morland_copies")


def _plain(t):
  """A trajectory as plain data without what depends on timing (seconds, which worker ran it)."""
  d = dataclasses.asdict(t)
  d.pop("worker")
  for turn in d["turns"]:
    turn.pop("env_seconds")
  return d


def _gold_policy(gold):
  """TWX window-mode policy replaying gold[task] (the last action repeated past its end)."""
  return ScriptedPolicy(lambda r: f"<think>turn {r.turn}</think><action>"
                                  f"{gold[r.task_id][min(r.turn, len(gold[r.task_id]) - 1)]}</action>",
                        ByteTokenizer())


def _twx_driver(pool, policy, group_size):
  return RolloutDriver(pool, policy, ByteTokenizer(),
                       config=RolloutConfig(mode="window", group_size=group_size, max_turns=10,
                                            max_context_tokens=20000, max_response_tokens=200))


def _descendants():
  return {p.pid for p in psutil.Process().children(recursive=True) if procs.alive(p)}


def _lose_node(cluster, node):
  """Node `node` goes away as a machine does: its raylet and every process Ray started there die at once.

  Cluster.remove_node alone kills the node's Ray daemons but leaves its worker processes, which go on answering
  the driver directly (actor calls do not pass through the raylet) until the GCS declares the node dead.
  """
  raylet = node.all_processes["raylet"][0].process.pid
  workers = psutil.Process(raylet).children(recursive=True)
  cluster.remove_node(node, allow_graceful=False)
  for p in workers:
    try:
      p.kill()
    except psutil.NoSuchProcess:
      pass


def _sandbox_leftovers(pids):
  """Sandbox folders and env logs of the worker processes `pids` (common.sandbox_guard's agentrl-*-<pid>-*)."""
  import glob
  import tempfile
  return [p for pid in pids for p in glob.glob(os.path.join(tempfile.gettempdir(), f"agentrl-*-{pid}-*"))]


@absltest.skipUnless(HAVE_RAY, "needs Ray: pip install -e '.[ray]'")
@absltest.skipUnless(HAVE_BWRAP, "bubblewrap missing: apt-get install -y bubblewrap")
class RayPoolTest(sct._Sandboxes):   # the host secret and listeners of the attack checks

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    sct.setUpModule()   # the attack environment's folder
    cls.before = _descendants()
    cls._attack = cls.cluster = None
    try:
      cls.cluster = Cluster(initialize_head=True, head_node_args=dict(
          num_cpus=0, include_dashboard=False, _system_config=FAST_FAILURE_DETECTION, **NODE))
      cls.node_b = cls.cluster.add_node(num_cpus=4, **NODE)
      ray.init(address=cls.cluster.address, include_dashboard=False, logging_level="WARNING")
    except BaseException:
      cls.tearDownClass()   # not run by unittest when setUpClass fails
      raise

  @classmethod
  def tearDownClass(cls):
    try:
      if cls._attack is not None:
        cls._attack.close()
      ray.shutdown()
      if cls.cluster is not None:
        cls.cluster.shutdown()
      sct.tearDownModule()
    finally:
      super().tearDownClass()
    deadline = time.monotonic() + 30
    while _descendants() - cls.before and time.monotonic() < deadline:
      time.sleep(0.2)
    left = [procs.cmdline(psutil.Process(p))[:120] for p in _descendants() - cls.before]
    assert not left, f"processes left behind: {left}"

  def assertOnNodeB(self, pool):
    self.assertEqual({w.node_id for w in pool.workers}, {self.node_b.node_id})

  # ---- same trajectories as the local pool ------------------------------------------------------------

  @absltest.skipUnless(HAVE_TWX, "needs java and textworld-express")
  def test_twx_episodes_on_remote_workers_equal_local_ones(self):
    tasks = ["coin/3", "coin/7"]
    with WorkerPool(TWX, 2, step_timeout_s=60) as local:
      gold = {t: local.workers[0].query("gold_actions", task_id=t) for t in tasks}
      want = _twx_driver(local, _gold_policy(gold), 2).run(tasks)
    with WorkerPool(TWX, 2, step_timeout_s=60, backend="ray") as pool:
      self.assertOnNodeB(pool)
      self.assertNotEqual(pool.workers[0].node_id, ray.get_runtime_context().get_node_id())   # not the driver's
      self.assertIn("cgroup", pool.workers[0].limits)   # a sandboxed process on that node
      got = _twx_driver(pool, _gold_policy(gold), 2).run(tasks)
    self.assertEqual([(t.termination, t.success) for t in got], [("done", True)] * 4)
    self.assertEqual([_plain(t) for t in got], [_plain(t) for t in want])

  def test_progagent_episodes_on_remote_workers_equal_local_ones(self):
    from configs import progagent as progagent_config
    from progagent import harness, rollouts
    from progagent.task_env import ProgTaskEnv
    c = progagent_config.get_config("smoke")
    c.env.max_context_tokens, c.env.max_response_tokens = 200_000, 20_000   # byte tokens
    c.gspo.rollouts_per_task = 2
    chat = ChatTemplate(ByteTokenizer())
    replies = {}
    for task in PROGAGENT_TASKS:
      env = ProgTaskEnv(task, 0)
      replies[task] = [m for m in harness.run_oracle(env, c.mode, seed=c.env.seed).messages
                       if m["role"] == "assistant"]
      env.close()

    def oracle(requests):   # the oracle's reply k at turn k (the last one repeated)
      return [policy_io.PolicyOutput(
          chat.assistant_ids(replies[r.task_id][min(r.turn, len(replies[r.task_id]) - 1)])) for r in requests]

    def run(config):
      pool = rollouts.make_pool(config, 2)
      try:
        if config.env.backend == "ray":
          self.assertOnNodeB(pool)
        return rollouts.run_rollouts(pool, oracle, chat, list(PROGAGENT_TASKS), config=config, seed=0)
      finally:
        pool.close()

    want = run(c)
    c.env.backend, c.env.ray_address = "ray", self.cluster.address
    got = run(c)
    self.assertEqual([(t.termination, t.reward) for t in got], [("done", 1.0)] * 4)
    self.assertEqual([_plain(t) for t in got], [_plain(t) for t in want])

  def test_backend_config_keys(self):
    env = ml_collections.ConfigDict({"backend": "local", "ray_address": ""})
    self.assertEqual(env_pool.backend_options(env), {})
    env.backend, env.ray_address = "ray", "10.0.0.1:6379"
    self.assertEqual(env_pool.backend_options(env), {"backend": "ray", "address": "10.0.0.1:6379"})
    self.assertEqual(env_pool.backend_options(ml_collections.ConfigDict({})), {})   # configs saved before the key
    env.backend = "slurm"
    with self.assertRaisesRegex(ValueError, "env.backend"):
      env_pool.backend_options(env)
    with self.assertRaisesRegex(ValueError, "backend must be one of"):
      WorkerPool(TWX, 1, backend="slurm")

  # ---- node loss, start checks ------------------------------------------------------------------------

  @absltest.skipUnless(HAVE_TWX, "needs java and textworld-express")
  def test_node_lost_mid_episode_ends_it_with_env_error_and_the_run_finishes(self):
    node_c = self.cluster.add_node(num_cpus=1, **NODE)
    tasks = ["coin/3", "coin/7", "coin/8", "coin/18"]
    pool = WorkerPool(TWX, 2, step_timeout_s=60, backend="ray")   # SPREAD (the default): one worker a node
    try:
      on_c = [i for i, w in enumerate(pool.workers) if w.node_id == node_c.node_id]
      self.assertNotEmpty(on_c, "Ray placed no worker on node C")
      lost_actors = [pool.workers[i].actor_pid for i in on_c]
      gold = {t: pool.workers[0].query("gold_actions", task_id=t) for t in tasks}
      lost = set()
      replay = _gold_policy(gold)

      def policy(requests):
        # The first time an episode on node C has taken a step, the node goes: the episodes running there now.
        for r in requests:
          w = driver.worker_for(r.episode)
          if not lost and r.turn == 1 and w is not None and w.node_id == node_c.node_id:
            lost.update(e for e in range(len(tasks))
                        if getattr(driver.worker_for(e), "node_id", None) == node_c.node_id)
            _lose_node(self.cluster, node_c)
        return replay(requests)

      driver = _twx_driver(pool, policy, 1)
      trajs = driver.run(tasks)
      self.assertNotEmpty(lost)
      for e in lost:
        t = trajs[e]
        self.assertEqual((t.termination, t.reward), ("env_error", 0.0), t.task_id)
        self.assertTrue(t.error.startswith("crash:"), t.error)
        self.assertIn("Ray actor", t.error)
        self.assertEqual(t.turns[-1].status, "env_error")
        self.assertGreaterEqual(len(t.turns), 2)   # mid-episode: a step was answered before
      others = [t for t in trajs if t.episode not in lost]
      self.assertEqual([(t.termination, t.success) for t in others], [("done", True)] * (len(tasks) - len(lost)))
      self.assertEqual(driver.stats["terminations"]["env_error"], len(lost))
      self.assertGreaterEqual(pool.restarts, len(lost))
      self.assertTrue(pool.wait_until_whole(120))
      self.assertOnNodeB(pool)   # the replacements run on the node that is left
    finally:
      pool.close()
    deadline = time.monotonic() + 60   # the lost workers' sandboxes are cleaned up by their reapers
    while _sandbox_leftovers(lost_actors) and time.monotonic() < deadline:
      time.sleep(0.2)
    self.assertEqual(_sandbox_leftovers(lost_actors), [])

  def test_pool_larger_than_the_cluster_is_refused_at_once(self):
    """Node B has 4 CPUs: 5 one-CPU workers would wait for Ray until the start timeout; refused before any
    actor starts, naming the counts and the config key."""
    t0 = time.monotonic()
    with self.assertRaisesRegex(ValueError, r"needs 5 CPUs.*has 4.*--config\.env\.workers=4"):
      WorkerPool(TWX, 5, backend="ray", address=self.cluster.address)
    self.assertLess(time.monotonic() - t0, 60)

  def test_no_cluster_at_the_address_fails_fast(self):
    """A wrong address: one error naming it and how to start a head (Ray alone retries for minutes)."""
    import subprocess
    import sys
    port = procs.free_port()
    code = f"from common import env_pool_ray; env_pool_ray.connect('127.0.0.1:{port}')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    self.assertNotEqual(p.returncode, 0)
    self.assertIn(f"no Ray cluster at 127.0.0.1:{port}", p.stderr)
    self.assertIn(f"ray start --head --port={port}", p.stderr)

  def test_missing_data_path_is_named_at_start(self):
    missing = "/nonexistent-agentrl-data/webshop"
    spec = TWX._replace(ro_paths=(missing,))
    with self.assertRaises(EnvError) as cm:
      WorkerPool(spec, 1, backend="ray")
    e = cm.exception
    self.assertEqual(e.reason, "start")
    self.assertIn(f"{missing} (EnvSpec.ro_paths) does not exist on Ray node", e.detail)
    self.assertIn("at the same path", e.detail)   # the fix
    with self.assertRaisesRegex(EnvError, "the pool's node_paths"):
      WorkerPool.local(dict, 1, backend="ray", node_paths=(missing,))

  # ---- the sandbox's attacks, from a Ray-hosted worker -------------------------------------------------

  @classmethod
  def attack_worker(cls):
    if cls._attack is None:
      cls._attack = WorkerPool(sct.attack_spec(), 1, step_timeout_s=30, backend="ray")
      cls._attack.workers[0].reset("ray")
    return cls._attack.workers[0]

  def run_json(self, code, worker=None):
    r = (worker or self.attack_worker()).step({"name": "run", "arguments": {"code": code}})
    self.assertEqual(r.status, "ok", r.observation)
    return sct._last_json(r.observation)

  def test_attack_host_files_not_readable(self):
    self.check_host_files(self.run_json(sct.host_files_program(self.secret)))
    # nor Ray's session folder (its sockets, logs and the cluster's address)
    res = self.run_json("import json, os\nprint(json.dumps([os.path.exists(p) for p in "
                        "('/tmp/ray', '/tmp/ray/ray_current_cluster', '/dev/shm/plasma')]))")
    self.assertEqual(res, [False, False, False])

  def test_attack_network_off(self):
    self.check_network(self.run_json(sct.network_program(*self.listeners.targets(), self.listeners.abstract,
                                                         self.listeners.unix_path)))
    host, port = self.cluster.address.rsplit(":", 1)   # the Ray head (GCS) this worker's node talks to
    res = self.run_json(f"import json, socket\ntry:\n"
                        f"  socket.create_connection(({host!r}, {port}), timeout=2).close()\n"
                        "  print(json.dumps('CONNECTED'))\n"
                        "except OSError as e:\n  print(json.dumps(type(e).__name__))")
    self.assertNotEqual(res, "CONNECTED")

  def test_attack_fork_loop_stops_at_pids_max(self):
    res = self.run_json(sct.FORK_LOOP)
    self.assertIsNotNone(res["errno"], res)   # refused (EAGAIN) before 1000
    self.assertLess(res["children"], sct.sb.SandboxConfig().pids_max)
    self.assertEqual(self.run_json("print(2 + 2)"), 4)   # the episode goes on

  def test_attack_memory_bomb_killed_recorded_and_replaced(self):
    with WorkerPool(sct.attack_spec(), 1, sandbox=sct.SMALL_MEMORY, step_timeout_s=30, backend="ray") as pool:
      w = pool.workers[0]
      w.reset("bomb")
      with self.assertRaises(EnvError) as cm:
        w.step({"name": "run", "arguments": {"code": sct._ENV_ATTACKS["memory"]}})
      self.assertEqual(cm.exception.reason, "crash")
      if "cgroup" in w.limits:
        self.assertIn("memory limit", cm.exception.detail)
      self.assertFalse(w.alive)
      pool.start_replacement(0)
      self.assertTrue(pool.wait_until_whole(120))
      self.assertOnNodeB(pool)
      pool.workers[0].reset("after")
      self.assertEqual(self.run_json("print(sum(range(10)))", pool.workers[0]), 45)


if __name__ == "__main__":
  absltest.main()
