"""One pool of W environment workers: sandboxed environment processes, or ToolEnv objects in this process.

  pool = WorkerPool(EnvSpec('common.envs.scienceworld_env:ScienceWorldToolEnv'), num_workers=4)
  pool = WorkerPool.local(lambda: MyToolEnv(...), num_workers=4)   # envs living in the trainer's process
  pool = WorkerPool(spec, 4, backend='ray', address='HEAD:6379')   # the same workers, on Ray nodes
  ...                                  # workers[i].submit_reset / submit_step / slot(k) (common.env_client)
  pool.close()                         # no process left behind

Every worker has the same future API (common.env_client.EnvClient for a process, InProcessEnv for a
local object: each local worker runs its calls on its own thread, so W steps overlap; with backend 'ray',
common.env_pool_ray.RayWorker: the same worker built by a Ray actor on a node of a cluster).

A dead or hung worker is replaced in the background (`start_replacement`, `poll_replacement`); the rollout
driver (common.rollout) and PhGPO's classifier rollouts (phgpo/classifier_rollout.py) both run on this pool.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from typing import Any, Callable, Sequence

from common import timeouts
from common.env_client import EnvClient, EnvSpec, InProcessEnv
from common.mcp_process import LoopThread
from common.sandbox import SandboxConfig

_log = logging.getLogger(__name__)

BACKENDS = ("local", "ray")
# The trainers' config keys of the backend (backend_options): where the environments run, not what they compute,
# so a workdir may resume with other values (each trainer's RESUME_FREE holds them).
BACKEND_KEYS = ("env.backend", "env.ray_address")


def make_local_worker(spec: EnvSpec | None, sandbox: SandboxConfig, in_process: bool, step_timeout_s: float,
                      env_factory: Callable[[], Any] | None, loop: LoopThread | None = None):
  """One worker built in this process: InProcessEnv of env_factory() or of spec, or an EnvClient (sandboxed
  process of spec) on `loop` (None: its own). What a Ray actor runs on its node for backend 'ray'.

  Raises:
    EnvError('start'), or the factory's exception.
  """
  if env_factory is not None:
    return InProcessEnv.from_env(env_factory())
  if in_process:
    return InProcessEnv(spec)
  return EnvClient(spec, sandbox=sandbox, loop=loop, step_timeout_s=step_timeout_s)


def backend_options(env_config) -> dict:
  """WorkerPool keyword arguments of a trainer's `env` config node: config key `env.backend` ('local' |
  'ray'; absent: 'local') and `env.ray_address` (the Ray head's 'HOST:PORT', 'auto', or '': Ray's default).

  Raises:
    ValueError: `env.backend` is neither 'local' nor 'ray' (names the key).
  """
  backend = str(env_config.get("backend", "local") or "local")
  if backend not in BACKENDS:
    raise ValueError(f"config `env.backend` must be one of {BACKENDS}, got {backend!r}")
  if backend == "local":
    return {}
  return {"backend": backend, "address": str(env_config.get("ray_address", "") or "")}


class WorkerPool:
  """W environment workers, each a sandboxed process (or in-process: benchmarks, `WorkerPool.local`).

  Args:
    spec: EnvSpec of the environment (None with env_factory).
    num_workers: W.
    sandbox: SandboxConfig for every worker.
    in_process: build the environment in this process instead (no isolation; benchmarks only).
    step_timeout_s: default per-call timeout of each worker.
    env_factory: () -> ToolEnv: each worker is a local object from it (see `local`); no isolation, and a
      hung local call cannot be interrupted (a timeout only abandons it and closes the env).
    backend: 'local' (this machine) or 'ray': each worker is built as above by a Ray actor on a node of the
      cluster at `address` (common.env_pool_ray; the sandbox then runs on that node, env_factory is pickled
      there). Needs the extra `pip install -e '.[ray]'`.
    address: backend 'ray': the head's 'HOST:PORT', 'auto', or None / '' (Ray's default: $RAY_ADDRESS, else a
      new local Ray instance); ignored when this process is already connected (ray.init).
    ray_options: backend 'ray': Ray actor options over common.env_pool_ray.DEFAULT_ACTOR_OPTIONS (num_cpus,
      resources, scheduling_strategy, ...).
    node_paths: backend 'ray': more host paths every node hosting a worker must have (checked at each
      worker's start, beside spec.ro_paths and sandbox.ro_paths).
  Workers start in parallel; the constructor waits for all of them and raises EnvError('start')
  (or the factory's exception) if any cannot start (the others are closed first). A Ray worker whose actor
  or node is lost fails its calls with EnvError('crash'), like a local process that died.
  Raises:
    ValueError: num_workers < 1, both or neither of spec and env_factory, an unknown backend, a Ray cluster
      with fewer CPUs than the workers' actors need (common.env_pool_ray.check_capacity; checked before any
      actor starts).
    ConnectionError: backend 'ray' and nothing listens at `address` (common.env_pool_ray.connect).
    ImportError: backend 'ray' without Ray installed.
  """

  def __init__(self, spec: EnvSpec | None, num_workers: int, *, sandbox: SandboxConfig = SandboxConfig(),
               in_process: bool = False, step_timeout_s: float = 60.0,
               env_factory: Callable[[], Any] | None = None, backend: str = "local", address: str | None = None,
               ray_options: dict | None = None, node_paths: Sequence[str] = ()):
    if num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if (spec is None) == (env_factory is None):
      raise ValueError("give exactly one of spec (environment processes) and env_factory (local envs)")
    if backend not in BACKENDS:
      raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    self.env_factory = env_factory
    in_process = in_process or env_factory is not None
    self.spec = spec
    self.sandbox = sandbox
    self.in_process = in_process
    self.step_timeout_s = step_timeout_s
    self.backend = backend
    self.ray_options = dict(ray_options or {})
    self.node_paths = tuple(node_paths)
    if backend == "ray":
      from common import env_pool_ray
      env_pool_ray.connect(address)
      env_pool_ray.check_capacity(num_workers, self.ray_options)
    self.loop = None if in_process or backend == "ray" else LoopThread("env-pool-loop")
    self._starter = concurrent.futures.ThreadPoolExecutor(max(2, num_workers), "env-start")
    self.workers: list[Any] = [None] * num_workers
    self._starting: dict[int, concurrent.futures.Future] = {}
    self.restarts = 0
    self.closed = False
    futs = [self._starter.submit(self._make) for _ in range(num_workers)]
    errors = []
    for i, f in enumerate(futs):
      try:
        self.workers[i] = f.result()
      except Exception as e:
        errors.append(e)
    if errors:
      self.close()
      raise errors[0]

  @classmethod
  def local(cls, factory: Callable[[], Any], num_workers: int, *, step_timeout_s: float = 600.0,
            **backend: Any) -> "WorkerPool":
    """A pool of W ToolEnv objects built by `factory()` in this process (e.g. ProgAgent's PTC env),
    each behind common.env_client.InProcessEnv (submit_reset / submit_step futures, own thread).
    `backend` (backend='ray', address, ray_options, node_paths): each object is built in a Ray actor instead."""
    return cls(None, num_workers, step_timeout_s=step_timeout_s, env_factory=factory, **backend)

  def __len__(self) -> int:
    return len(self.workers)

  def _make(self):
    if self.backend == "ray":
      return self._make_ray()
    return make_local_worker(self.spec, self.sandbox, self.in_process, self.step_timeout_s, self.env_factory,
                             self.loop)

  def _make_ray(self):
    """One worker in a Ray actor (common.env_pool_ray.start_worker), with the paths its node must have."""
    from common import env_pool_ray
    sandboxed = self.env_factory is None and not self.in_process and self.sandbox.enabled
    paths = []
    if self.spec is not None:
      paths += [(p, "EnvSpec.ro_paths") for p in self.spec.ro_paths]
    if sandboxed:
      paths += [(p, "SandboxConfig.ro_paths") for p in self.sandbox.ro_paths]
    paths += [(p, "the pool's node_paths") for p in self.node_paths]
    maker = functools.partial(make_local_worker, self.spec, self.sandbox, self.in_process, self.step_timeout_s,
                              self.env_factory)
    start = self.spec.start_timeout_s if self.spec is not None else 120.0
    return env_pool_ray.start_worker(maker, paths=paths, need_bwrap=sandboxed, start_timeout_s=start,
                                     step_timeout_s=self.step_timeout_s, actor_options=self.ray_options)

  def start_replacement(self, i: int) -> concurrent.futures.Future:
    """Kills worker i (if any) and starts a new one in the background; returns its future."""
    old = self.workers[i]
    self.workers[i] = None
    if old is not None:
      try:
        old.kill()
      except Exception:
        _log.exception("killing worker %d failed", i)
    self.restarts += 1
    fut = self._starter.submit(self._make)
    self._starting[i] = fut
    return fut

  def poll_replacement(self, i: int) -> str:
    """'ready' (installed), 'starting', or 'failed' (error in the future; slot stays empty)."""
    fut = self._starting.get(i)
    if fut is None:
      return "ready" if self.workers[i] is not None else "failed"
    if not fut.done():
      return "starting"
    del self._starting[i]
    if fut.exception() is not None:
      _log.warning("replacement of worker %d failed: %s", i, fut.exception())
      return "failed"
    self.workers[i] = fut.result()
    return "ready"

  def wait_any_replacement(self, timeout: float | None = None) -> None:
    if self._starting:
      concurrent.futures.wait(list(self._starting.values()), timeout=timeout,
                              return_when=concurrent.futures.FIRST_COMPLETED)

  def wait_until_whole(self, timeout_s: float = 120.0) -> bool:
    """Waits for pending replacements (timeout_s on an idle machine, times common.timeouts.scale())."""
    deadline = time.monotonic() + timeouts.scaled(timeout_s)
    while self._starting and time.monotonic() < deadline:
      self.wait_any_replacement(timeout=max(0.0, deadline - time.monotonic()))
      for i in list(self._starting):
        self.poll_replacement(i)
    return self.is_whole()

  def is_whole(self) -> bool:
    """All W workers exist and are alive."""
    return all(w is not None and w.alive for w in self.workers) and not self._starting

  def close(self) -> None:
    """Closes every worker (killing what does not exit) and waits for pending starts. Idempotent."""
    if self.closed:
      return
    self.closed = True
    for i, fut in list(self._starting.items()):
      try:
        w = fut.result(timeout=300)
        w.kill()
      except Exception:
        pass
    self._starting.clear()
    closers = [self._starter.submit(w.close) for w in self.workers if w is not None]
    concurrent.futures.wait(closers, timeout=60)
    for w in self.workers:
      if w is not None and getattr(w, "alive", False):
        w.kill()
    self.workers = [None] * len(self.workers)
    self._starter.shutdown(wait=True)
    if self.loop is not None:
      self.loop.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
