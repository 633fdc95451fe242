"""The Ray backend of common.env_pool: each environment worker hosted by a Ray actor on a node of a cluster.

  pool = WorkerPool(EnvSpec('common.envs.twx_env:TwxToolEnv', {...}), 8, backend='ray', address='HEAD:6379')
  pool = WorkerPool.local(factory, 8, backend='ray', address='auto')   # each ToolEnv object built in an actor

Each worker is one Ray actor (`EnvHostActor`, a threaded actor: the W calls of its episode slots overlap) that
builds on its node exactly the worker a local pool builds here (common.env_pool.make_local_worker): a
sandboxed environment process (common.env_client.EnvClient: bubblewrap and cgroups *on that node*), or the
ToolEnv object of `env_factory` (common.env_client.InProcessEnv; e.g. ProgAgent's ProgEnv, whose programs run
in its sandboxed kernel on that node). The driver holds a `RayWorker`, with the future API of EnvClient
(submit_reset, submit_step, the batch calls where the hosted worker has them, query, slot, kill, close, alive).

Failures are the local pool's (common.env_client module doc), with the same reasons:
  'start'   the actor could not be placed or could not start its worker within the start timeout, a path the
            node needs does not exist there (check_node), or the project is not importable on the node;
  'crash'   the environment process died, or the actor, its worker process or its node is gone (Ray's
            RayActorError / ActorDiedError / ActorUnavailableError / NodeDiedError / WorkerCrashedError /
            ObjectLostError / OwnerDiedError); the worker is then dead (`alive` False) and common.rollout ends
            the episode with 'env_error' and starts a replacement, which Ray places on a live node;
  'timeout' as locally: the hosted EnvClient kills its process; the driver's own deadline covers a silent node;
  'env_exception', 'protocol'  as locally.
EnvError never crosses the Ray boundary as an exception: the actor returns ('err', reason, detail, exit_code) and
the driver side raises it again (`_decode`), so that the reason and exit code survive.

Ray is an optional extra (`pip install -e '.[ray]'`); this module imports it only when a Ray pool is made.
Nodes: every node that hosts workers needs the project (the same commit) installed in the Python that
`ray start` runs with (the actor unpickles common.* from there, and the sandbox mounts that tree), bubblewrap
with user namespaces (hosts, VMs or privileged pods; README, "Environment workers on Ray"), and every data
path of the environment (`EnvSpec.ro_paths`, `SandboxConfig.ro_paths`, the pool's `node_paths`) at the same
path: checked when each worker starts (`check_node`), with an error naming the path and the fix.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shutil
import socket
from typing import Any, Callable, Sequence

from common import timeouts
from common.env_client import EnvSlot, refused_call
from common.envs.base import StepResult
from common.mcp_process import EnvError

_log = logging.getLogger(__name__)

INSTALL_HINT = "pip install -e '.[ray]'"
# Actor options every worker gets unless the pool's `ray_options` say otherwise: one CPU (a sandbox's default
# cpu.max is one core), workers spread over the nodes, enough threads for many episode slots at once, and no
# restart by Ray (a dead worker is replaced by the pool, like a local one).
DEFAULT_ACTOR_OPTIONS = {"num_cpus": 1, "scheduling_strategy": "SPREAD", "max_concurrency": 64,
                         "max_restarts": 0}
# Seconds, on top of the worker's own start timeout, that Ray may take to place and start the actor process.
PLACEMENT_SLACK_S = 60.0
# Seconds a TCP connect to the head's address may take before connect() says nothing listens there.
CONNECT_CHECK_S = 5.0
# Seconds allowed for the small control calls (alive, a kill before the actor is killed).
CONTROL_TIMEOUT_S = 10.0
_NODE_HINT = ("every Ray node that hosts environment workers needs the project (the same commit) installed in the "
              f"Python that `ray start` runs ({INSTALL_HINT}); README, 'Environment workers on Ray'")


def _ray():
  """The `ray` module, or ImportError naming the extra that installs it."""
  try:
    import ray
  except ImportError as e:
    raise ImportError(f"backend='ray' needs Ray, which is not installed: {INSTALL_HINT}") from e
  return ray


def connect(address: str | None) -> None:
  """Connects this process to a Ray cluster, once; a process already connected (ray.init) stays as it is.

  Args:
    address: the head node's 'HOST:PORT' (what `ray start --head` prints), 'auto' (a cluster started on this
      machine), or ''/None: Ray's default (the RAY_ADDRESS variable, else a new Ray instance on this machine).
  Raises:
    ImportError: Ray is not installed (names the extra).
    ConnectionError: nothing listens at a 'HOST:PORT' `address` (checked with a TCP connect of at most
      CONNECT_CHECK_S first: Ray itself would retry for minutes), naming the address and how to start a head;
      or (Ray's) no cluster answers there.
  """
  ray = _ray()
  if ray.is_initialized():
    return
  host, sep, port = str(address or "").rpartition(":")
  if sep and host and "://" not in str(address):
    try:
      with socket.create_connection((host, int(port)), timeout=CONNECT_CHECK_S):
        pass
    except (OSError, ValueError) as e:
      raise ConnectionError(
          f"no Ray cluster at {address} ({type(e).__name__}: {e}): start its head there with `ray start --head "
          f"--port={port} --num-cpus=0`, or set the address it printed (config key env.ray_address)") from None
  ray.init(address=address or None, include_dashboard=False, logging_level=logging.WARNING)


def check_capacity(num_workers: int, actor_options: dict | None = None) -> None:
  """Refuses a pool whose actors need more CPUs than the connected cluster has (Ray would wait for them, and the
  pool would fail only after its start timeout with 'start').

  Args:
    num_workers: the pool's workers, one actor each.
    actor_options: the pool's Ray actor options over DEFAULT_ACTOR_OPTIONS (their num_cpus counts).
  Raises:
    ValueError: naming the CPUs needed and present, and the two fixes (more nodes, or fewer workers: config key
      env.workers). A cluster that grows on demand (Ray's autoscaler) is counted as it is now.
  """
  ray = _ray()
  per = float({**DEFAULT_ACTOR_OPTIONS, **(actor_options or {})}.get("num_cpus", 1) or 0)
  have = float(ray.cluster_resources().get("CPU", 0.0))
  need = per * int(num_workers)
  if need > have:
    fit = int(have // per) if per else num_workers
    raise ValueError(
        f"the environment pool needs {need:g} CPUs on the Ray cluster ({num_workers} workers x {per:g}), and the "
        f"cluster has {have:g}: add environment nodes (`ray start --address=HEAD:PORT --num-cpus=N` on each) or run "
        f"fewer workers: --config.env.workers={max(fit, 1)} (config key env.workers)")


def check_node(paths: Sequence[tuple[str, str]], *, need_bwrap: bool) -> list[str]:
  """What this node lacks to host the worker, one sentence per problem naming the path and the fix.

  Args:
    paths: (path, where it comes from), e.g. ('/data/webshop', 'EnvSpec.ro_paths'): host paths the worker
      reads; each must exist on this node (the sandbox would silently leave out a missing read-only path).
    need_bwrap: the worker runs sandboxed processes here (bubblewrap must be installed).
  Returns:
    A list of str, empty when the node has everything.
  """
  node = f"{socket.gethostname()} ({_node_ip()})"
  out = []
  for path, where in paths:
    if not os.path.exists(path):
      out.append(f"{path} ({where}) does not exist on Ray node {node}: put it there at the same path (a shared "
                 "file system, or a copy), or keep the workers off that node (the pool's ray_options, e.g. "
                 "resources={'env_data': 1} on the nodes that have it)")
  if need_bwrap and shutil.which("bwrap") is None:
    out.append(f"bubblewrap is not installed on Ray node {node}: apt-get install -y bubblewrap (environment "
               "nodes must be hosts, VMs or privileged pods: it needs user namespaces)")
  return out


def _node_ip() -> str:
  try:
    import ray
    return ray.util.get_node_ip_address()
  except Exception:  # pylint: disable=broad-except
    return "?"


# ---- what crosses the Ray boundary --------------------------------------------------------------------------


def _encode(x: Any) -> Any:
  """An actor's answer: ('ok', value) with EnvError items of a batch as ('__env_error__', ...) tuples."""
  if isinstance(x, list):
    x = [_err_tuple(v) if isinstance(v, EnvError) else v for v in x]
  return ("ok", x)


def _err_tuple(e: EnvError) -> tuple:
  return ("__env_error__", e.reason, e.detail, e.exit_code)


def _decode(res: tuple) -> Any:
  """The value of an actor's answer; raises its EnvError."""
  if res[0] == "err":
    _, reason, detail, code = res
    raise EnvError(reason, detail, exit_code=code)
  value = res[1]
  if isinstance(value, list):
    value = [EnvError(v[1], v[2], exit_code=v[3]) if isinstance(v, tuple) and v[:1] == ("__env_error__",) else v
             for v in value]
  return value


class EnvHostActor:
  """The actor body (made a Ray actor class by `actor_class`): holds one local worker on its node.

  `start` builds it; `call` runs one of its methods (CALLS) and answers ('ok', value) or ('err', reason, detail,
  exit_code); nothing raised inside reaches Ray as an exception.
  """

  CALLS = ("reset", "step", "step_batch", "reset_batch", "query", "alive", "server_pid", "kill", "close")

  def __init__(self):
    self.worker = None

  def start(self, maker: Callable[[], Any], paths: Sequence[tuple[str, str]], need_bwrap: bool) -> tuple:
    """Checks the node (check_node), then builds the worker; answers ('ok', facts) or ('err', 'start', ...)."""
    problems = check_node(paths, need_bwrap=need_bwrap)
    if problems:
      return ("err", "start", "; ".join(problems), None)
    try:
      self.worker = maker()
    except EnvError as e:
      note = ("; bubblewrap needs user namespaces: environment nodes must be hosts, VMs or privileged pods"
              if need_bwrap else "")
      return ("err", e.reason, e.detail + note, e.exit_code)
    except Exception as e:  # pylint: disable=broad-except  (the env's constructor: any error is a failed start)
      return ("err", "start", f"{type(e).__name__}: {e}", None)
    import ray
    w = self.worker
    return ("ok", {"pid": w.pid, "limits": w.limits, "tools": w.tools(),
                   "batch": hasattr(w, "submit_step_batch") and hasattr(w, "submit_reset_batch"),
                   "node_id": ray.get_runtime_context().get_node_id(), "node_ip": _node_ip(),
                   "hostname": socket.gethostname(), "actor_pid": os.getpid()})

  def call(self, name: str, args: tuple, kwargs: dict) -> tuple:
    if name not in self.CALLS:
      return ("err", "protocol", f"unknown call {name!r}", None)
    w = self.worker
    if w is None:
      return ("err", "crash", "worker is closed", None)
    try:
      if name == "reset":   # with the tools the env offers now (a ToolEnv's tools may depend on its task)
        return _encode((w.reset(*args, **kwargs), w.tools()))
      if name in ("step_batch", "reset_batch"):
        return _encode(getattr(w, f"submit_{name}")(*args, **kwargs).result())
      if name == "alive":
        return _encode(bool(w.alive))
      if name == "server_pid":
        f = getattr(w, "server_pid", None)
        return _encode(None if f is None else f())
      if name in ("kill", "close"):
        getattr(w, name)(*args, **kwargs)
        return _encode(None)
      return _encode(getattr(w, name)(*args, **kwargs))
    except EnvError as e:
      return ("err", e.reason, e.detail, e.exit_code)
    except Exception as e:  # pylint: disable=broad-except  (as the driver reads a non-EnvError failure)
      return ("err", "protocol", f"{type(e).__name__}: {e}", None)


_ACTOR_CLASS = None


def actor_class():
  """EnvHostActor as a Ray actor class (made once, on first use)."""
  global _ACTOR_CLASS
  if _ACTOR_CLASS is None:
    _ACTOR_CLASS = _ray().remote(EnvHostActor)
  return _ACTOR_CLASS


def _lost(e: BaseException) -> bool:
  """Whether e says the actor, its process or its node is gone (Ray's failure types)."""
  import ray.exceptions as rx
  kinds = tuple(getattr(rx, n) for n in ("RayActorError", "ActorUnavailableError", "NodeDiedError",
                                         "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
                                         "RaySystemError", "LocalRayletDiedError") if hasattr(rx, n))
  return isinstance(e, kinds)


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0] if text else ''}"


def start_worker(maker: Callable[[], Any], *, paths: Sequence[tuple[str, str]] = (), need_bwrap: bool = False,
                 start_timeout_s: float = 120.0, step_timeout_s: float | None = 60.0,
                 actor_options: dict | None = None) -> "RayWorker":
  """One worker in a new actor: placed by Ray, its node checked, `maker()` run there.

  Args:
    maker: a picklable () -> local worker (common.env_pool.make_local_worker bound to the pool's settings).
    paths: (path, where from) the node must have (check_node).
    need_bwrap: the worker starts sandboxed processes on its node.
    start_timeout_s: the worker's own start allowance on an idle machine (EnvSpec.start_timeout_s); Ray may take
      PLACEMENT_SLACK_S more to place the actor; both stretched by common.timeouts.scaled.
    step_timeout_s: the hosted worker's default per-call timeout (the synchronous calls wait 30 s more).
    actor_options: Ray actor options over DEFAULT_ACTOR_OPTIONS (num_cpus, resources, scheduling_strategy...).
  Returns:
    RayWorker (RayBatchWorker when the hosted worker has the batch calls).
  Raises:
    EnvError('start'): not placed or not started in time, a path missing on the node, the project not
      importable there, or the worker's own start failure (its detail kept).
  """
  ray = _ray()
  opts = {**DEFAULT_ACTOR_OPTIONS, **(actor_options or {})}
  actor = actor_class().options(**opts).remote()
  wait = timeouts.scaled(start_timeout_s) + timeouts.scaled(PLACEMENT_SLACK_S)
  try:
    res = ray.get(actor.start.remote(maker, list(paths), bool(need_bwrap)), timeout=wait)
  except Exception as e:  # pylint: disable=broad-except
    _kill_actor(actor)
    if isinstance(e, ray.exceptions.GetTimeoutError):
      raise EnvError("start", f"no Ray node placed and started the worker within {wait:.0f} s (actor options "
                     f"{_plain(opts)}; `ray status` lists the nodes and their free resources)") from None
    text = str(e)
    hint = f"; {_NODE_HINT}" if "No module named" in text or "ModuleNotFoundError" in text else ""
    raise EnvError("start", f"the Ray actor did not start: {_first_line(e)}{hint}") from None
  if res[0] != "ok":
    _kill_actor(actor)
    _decode(res)
  cls = RayBatchWorker if res[1]["batch"] else RayWorker
  return cls(actor, res[1], step_timeout_s=step_timeout_s)


def _plain(opts: dict) -> dict:
  return {k: (v if isinstance(v, (str, int, float, bool, dict, type(None))) else type(v).__name__)
          for k, v in opts.items()}


def _kill_actor(actor) -> None:
  try:
    _ray().kill(actor, no_restart=True)
  except Exception:  # pylint: disable=broad-except  (already gone)
    pass


def _resolved(value: Any) -> concurrent.futures.Future:
  f = concurrent.futures.Future()
  f.set_result(value)
  return f


class RayWorker:
  """The driver's handle on one Ray-hosted worker: EnvClient's API (futures, slots, kill, close, alive).

  Attributes:
    pid: host pid of the hosted worker's process on its node (bubblewrap for EnvClient; the actor's own
      process for an in-actor ToolEnv): a pid of *that* node.
    limits: the hosted worker's sandbox limits (str).
    node_id, node_ip, hostname: where Ray placed it; actor_pid: the actor's process on that node.
  A call to an actor that is gone fails with EnvError('crash') and marks the worker dead (`alive` False).
  """

  def __init__(self, actor, facts: dict, *, step_timeout_s: float | None = 60.0):
    self._actor = actor
    self.step_timeout_s = step_timeout_s
    self.pid = facts["pid"]
    self.limits = facts["limits"]
    self.node_id = facts["node_id"]
    self.node_ip = facts["node_ip"]
    self.hostname = facts["hostname"]
    self.actor_pid = facts["actor_pid"]
    self._tools = [dict(t) for t in facts["tools"]]
    self.closed = False
    self.gone: str | None = None   # why the actor is known to be gone

  # --- API (common.env_client.EnvClient's) --------------------------------------------------------------

  @property
  def alive(self) -> bool:
    """Not closed, the actor reachable and its worker alive (one round trip, at most CONTROL_TIMEOUT_S)."""
    if self.closed or self.gone is not None:
      return False
    try:
      return bool(self._submit("alive").result(CONTROL_TIMEOUT_S))
    except Exception:  # pylint: disable=broad-except  (gone, or silent: not alive either way)
      return False

  def tools(self) -> list[dict]:
    """The environment's tools as of its last reset (or its start): read with each reset, in the same call."""
    return [dict(t) for t in self._tools]

  def submit_reset(self, task_id: str, seed: int = 0, *, timeout_s: float | None = None, slot: int = 0):
    """Future -> first observation (str), or EnvError."""
    inner = self._submit("reset", task_id, seed, timeout_s=timeout_s, slot=slot)
    out = concurrent.futures.Future()

    def done(f):
      if out.done():
        return
      try:
        obs, tools = f.result()
      except BaseException as e:  # pylint: disable=broad-except
        _set(out, exc=e)
        return
      self._tools = [dict(t) for t in tools]
      _set(out, value=obs)
    inner.add_done_callback(done)
    return out

  def submit_step(self, call: dict, *, timeout_s: float | None = None, slot: int = 0):
    """Future -> StepResult, or EnvError; a call that cannot be sent (refused_call) is answered here."""
    refused = refused_call(call)
    if refused is not None:
      return _resolved(refused)
    return self._submit("step", dict(call) if isinstance(call, dict) else call, timeout_s=timeout_s, slot=slot)

  def reset(self, task_id: str, seed: int = 0, *, timeout_s: float | None = None, slot: int = 0) -> str:
    return self._wait(self.submit_reset(task_id, seed, timeout_s=timeout_s, slot=slot), timeout_s)

  def step(self, call: dict, *, timeout_s: float | None = None, slot: int = 0) -> StepResult:
    return self._wait(self.submit_step(call, timeout_s=timeout_s, slot=slot), timeout_s)

  def query(self, method: str, *, timeout_s: float | None = None, **kwargs) -> Any:
    return self._wait(self._submit("query", method, timeout_s=timeout_s, **kwargs), timeout_s)

  def slot(self, k: int) -> EnvSlot:
    return EnvSlot(self, k)

  def server_pid(self) -> int | None:
    """Pid of the environment server inside the sandbox, on the worker's node (None if not sandboxed)."""
    return self._wait(self._submit("server_pid"), CONTROL_TIMEOUT_S)

  def kill(self) -> None:
    """Kills the worker's processes on its node (when the actor still answers), then the actor."""
    if self.closed:
      return
    self.closed = True
    if self.gone is None:
      try:
        self._submit("kill").result(CONTROL_TIMEOUT_S)
      except Exception:  # pylint: disable=broad-except
        pass
    _kill_actor(self._actor)

  def close(self, grace_s: float = 5.0) -> None:
    """Closes the worker on its node (killing what does not exit within grace_s), then ends the actor."""
    if self.closed:
      return
    if self.gone is None:
      try:
        self._submit("close", grace_s).result(grace_s + 30.0)
      except Exception:  # pylint: disable=broad-except
        pass
    self.closed = True
    _kill_actor(self._actor)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # --- internals ----------------------------------------------------------------------------------------------

  def _submit(self, name: str, *args, **kwargs) -> concurrent.futures.Future:
    """Future of the actor's answer to `name`: its value, or EnvError (a Ray failure as 'crash' / 'protocol')."""
    out = concurrent.futures.Future()
    if self.closed or self.gone is not None:
      out.set_exception(EnvError("crash", self.gone or "worker is closed"))
      return out
    try:
      inner = self._actor.call.remote(name, args, kwargs).future()
    except Exception as e:  # pylint: disable=broad-except
      out.set_exception(self._as_env_error(e))
      return out

    def done(f):
      try:
        value = _decode(f.result())
      except BaseException as e:  # pylint: disable=broad-except
        _set(out, exc=self._as_env_error(e))
        return
      _set(out, value=value)
    inner.add_done_callback(done)
    return out

  def _as_env_error(self, e: BaseException) -> EnvError:
    if isinstance(e, EnvError):
      return e
    if _lost(e):
      self.gone = (f"the Ray actor hosting this worker on node {self.node_ip} ({self.hostname}) is gone: "
                   f"{_first_line(e)}")
      return EnvError("crash", self.gone)
    return EnvError("protocol", _first_line(e))

  def _wait(self, fut, timeout_s):
    """The synchronous calls: the worker enforces timeout_s; a silent actor or node gets 30 s more."""
    t = self.step_timeout_s if timeout_s is None else timeout_s
    try:
      return fut.result(None if t is None else t + 30.0)
    except concurrent.futures.TimeoutError:
      fut.cancel()
      self.kill()
      raise EnvError("timeout", f"no answer within {t} s from the Ray worker on node {self.node_ip}") from None


class RayBatchWorker(RayWorker):
  """A RayWorker whose hosted worker has the batch calls (EnvClient): one round trip per batch."""

  def submit_step_batch(self, items, *, timeout_s: float | None = None):
    """Future -> list of StepResult or EnvError, one per (slot, call) (EnvClient.submit_step_batch)."""
    return self._submit("step_batch", [(s, dict(c) if isinstance(c, dict) else c) for s, c in items],
                        timeout_s=timeout_s)

  def submit_reset_batch(self, items, *, timeout_s: float | None = None):
    """Future -> list of first observations (str) or EnvError, one per (slot, task_id, seed)."""
    return self._submit("reset_batch", list(items), timeout_s=timeout_s)


def _set(fut: concurrent.futures.Future, *, value: Any = None, exc: BaseException | None = None) -> None:
  """Resolves fut unless it was cancelled meanwhile (the driver cancels a future past its deadline)."""
  try:
    if exc is not None:
      fut.set_exception(exc)
    else:
      fut.set_result(value)
  except concurrent.futures.InvalidStateError:
    pass
