"""One pool of W environment workers: sandboxed environment processes, or ToolEnv objects in this process.

  pool = WorkerPool(EnvSpec('common.envs.scienceworld_env:ScienceWorldToolEnv'), num_workers=4)
  pool = WorkerPool.local(lambda: MyToolEnv(...), num_workers=4)   # envs living in the trainer's process
  ...                                  # workers[i].submit_reset / submit_step / slot(k) (common.env_client)
  pool.close()                         # no process left behind

Every worker has the same future API (common.env_client.EnvClient for a process, InProcessEnv for a
local object: each local worker runs its calls on its own thread, so W steps overlap).

A dead or hung worker is replaced in the background (`start_replacement`, `poll_replacement`); the rollout
driver (common.rollout) and PhGPO's classifier rollouts (phgpo/classifier_rollout.py) both run on this pool.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any, Callable

from common import timeouts
from common.env_client import EnvClient, EnvSpec, InProcessEnv
from common.mcp_process import LoopThread
from common.sandbox import SandboxConfig

_log = logging.getLogger(__name__)




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
  Workers start in parallel; the constructor waits for all of them and raises EnvError('start')
  (or the factory's exception) if any cannot start (the others are closed first).
  """

  def __init__(self, spec: EnvSpec | None, num_workers: int, *, sandbox: SandboxConfig = SandboxConfig(),
               in_process: bool = False, step_timeout_s: float = 60.0,
               env_factory: Callable[[], Any] | None = None):
    if num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if (spec is None) == (env_factory is None):
      raise ValueError("give exactly one of spec (environment processes) and env_factory (local envs)")
    self.env_factory = env_factory
    in_process = in_process or env_factory is not None
    self.spec = spec
    self.sandbox = sandbox
    self.in_process = in_process
    self.step_timeout_s = step_timeout_s
    self.loop = None if in_process else LoopThread("env-pool-loop")
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
  def local(cls, factory: Callable[[], Any], num_workers: int, *, step_timeout_s: float = 600.0) -> "WorkerPool":
    """A pool of W ToolEnv objects built by `factory()` in this process (e.g. ProgAgent's PTC env),
    each behind common.env_client.InProcessEnv (submit_reset / submit_step futures, own thread)."""
    return cls(None, num_workers, step_timeout_s=step_timeout_s, env_factory=factory)

  def __len__(self) -> int:
    return len(self.workers)

  def _make(self):
    if self.env_factory is not None:
      return InProcessEnv.from_env(self.env_factory())
    if self.in_process:
      return InProcessEnv(self.spec)
    return EnvClient(self.spec, sandbox=self.sandbox, loop=self.loop,
                     step_timeout_s=self.step_timeout_s)

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
