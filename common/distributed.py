"""Multi-process (multi-host) start-up through JAX's own distributed runtime, and global batches.

`initialize()` calls `jax.distributed.initialize` once, before anything touches JAX devices, when the run
has more than one process:
  - flags (experiments/train.py: --coordinator_address, --num_processes, --process_id) or keyword arguments;
  - else the environment variables JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES,
    JAX_PROCESS_ID and JAX_LOCAL_DEVICE_IDS (comma-separated ints). jax.distributed itself reads only
    JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS (and JAX_COORDINATOR_PORT / JAX_COORDINATOR_BIND_ADDRESS);
    the process count and id variables are read here;
  - else a cluster that JAX detects by itself (Slurm, Open MPI / ORTE, Kubernetes with the `kubernetes`
    package, Cloud TPU pods): `jax.distributed.initialize()` is called without arguments and JAX's
    cluster detection fills in every value. Nothing here re-implements that detection.
With none of these, or a single process, it does nothing. A second call is a no-op (idempotent).
On CPU, cross-process collectives go through gloo (JAX option jax_cpu_collectives_implementation; 'gloo'
is also JAX 0.10's default, set here explicitly unless the user chose 'mpi').

After initialisation `jax.devices()` lists every process's devices (global) and `jax.local_devices()` this
process's; a (data, fsdp, tensor) mesh from `common.lm.sharding.make_mesh` spans all of them, in process
order, so with the default batch rule each process owns a contiguous block of rows. `global_batch` builds
the global batch arrays from each process's own rows (jax.make_array_from_process_local_data).

What multi-process runs do today: every process runs the same program on the same config. The launcher
leaves config.json to process 0. PlanPO (planpo/train.py) and ProgAgent (progagent/train.py) are
multi-process aware (issue 28): a step's tasks are cut into sampling blocks of whole groups whose keys fold
in the global block index, never the process id; each process runs its contiguous slice of blocks
(`process_slice`) on its own worker pool; `run_sliced` all-gathers the records (`allgather_objects`:
pickled, padded u8 arrays through multihost_utils.process_allgather; variable-length trajectories need no
fixed row shape), so every process holds the same global batch, builds the same host-side state from it,
and, on a mesh laid out over its own devices (the default (1, 1, 1), common.lm.training.mesh_from_config),
runs the jitted advantages and updates on it itself: replicated computation, the same parameters on every
process, results equal to one process's. A mesh that spans the processes (-1, or more devices than one
process holds) is one SPMD program whose batches go through `global_batch`. Only the primary process
(`is_primary()`) writes metrics, TensorBoard, tables, results and pictures (common.metric_writer writes
nothing elsewhere). Orbax checkpoints (common/checkpoint.py) are written collectively by all processes into
one folder, which must be on a file system they all share (the workdir, whose files some processes read
back, too). PhGPO (phgpo/train.py) is too: its sampling blocks are `rl.block_tasks` / `eval.block_tasks` tasks
(phgpo.classifier_rollout.rollout_blocks), and its pheromone and memory bank are updated on every process from
the gathered rollouts.
Source: JAX multi-process guide, https://docs.jax.dev/en/latest/multi_process.html.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from common.lm import sharding as lm_sharding

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
ENV_LOCAL_DEVICE_IDS = "JAX_LOCAL_DEVICE_IDS"

_log = logging.getLogger(__name__)


class ProcessInfo(NamedTuple):
  """Where this process stands: id in [0, num_processes); `distributed` if jax.distributed is running."""
  process_id: int
  num_processes: int
  distributed: bool


_SINGLE = ProcessInfo(0, 1, False)  # returned without starting JAX's backend


def _int(value: Any, flag: str, env: str) -> int | None:
  if value is None or value == "":
    return None
  try:
    return int(value)
  except (TypeError, ValueError):
    raise ValueError(f"--{flag} / {env} must be an integer, got {value!r}.") from None


def _device_ids(value: Any) -> list[int] | None:
  if value is None or value == "":
    return None
  if isinstance(value, int):
    return [value]
  if isinstance(value, str):
    value = value.split(",")
  try:
    return [int(v) for v in value]
  except (TypeError, ValueError):
    raise ValueError(f"local_device_ids / {ENV_LOCAL_DEVICE_IDS} must be comma-separated integers, "
                     f"got {value!r}.") from None


def _detected_cluster() -> Any:
  """The cluster environment class JAX's own auto-detection would use (None: none, or not knowable).

  Asks JAX's cluster classes (a private module; if it moves, auto-detection is simply not attempted and
  the explicit flags or environment variables are needed). Opt-in methods such as mpi4py are skipped, as
  JAX skips them.
  """
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top
    for env in clusters.ClusterEnv._cluster_types:  # pylint: disable=protected-access
      if not env.opt_in_only_method and env.is_env_present():
        return env
  except Exception:  # pylint: disable=broad-except  # detection must never break a single-process run
    return None
  return None


def process_info() -> ProcessInfo:
  """This process's id and the process count (0 and 1 without jax.distributed)."""
  return ProcessInfo(jax.process_index(), jax.process_count(), jax.distributed.is_initialized())


def is_primary() -> bool:
  """True on process 0: the one process that should write metrics, results and plots."""
  return jax.process_index() == 0


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids: Sequence[int] | str | None = None,
               *, initialization_timeout: int = 300) -> ProcessInfo:
  """Starts JAX's distributed runtime when this run has several processes; otherwise does nothing.

  Each value comes from its argument, else from its environment variable (module docstring). When none
  is given and JAX detects a managed cluster (Slurm, Open MPI, Kubernetes, Cloud TPU), JAX's own detection
  supplies them. Call it first: before anything touches JAX devices (jax.devices, device_put, any jit).

  Args:
    coordinator_address: 'host:port' of process 0's coordinator service (env JAX_COORDINATOR_ADDRESS);
      every process passes the same one. The port must be free on process 0.
    num_processes: number of processes (env JAX_NUM_PROCESSES); 1 = single process, nothing is started.
    process_id: this process's id in [0, num_processes) (env JAX_PROCESS_ID).
    local_device_ids: restricts this process to these local devices (env JAX_LOCAL_DEVICE_IDS); None = all.
    initialization_timeout: seconds to wait for every process to connect.
  Returns:
    ProcessInfo(process_id, num_processes, distributed); (0, 1, False) for a single process, returned
    without starting JAX's backend.
  Raises:
    ValueError: only some of coordinator address, process count and process id are given (and no cluster
      is detected to supply the rest), or process_id is outside [0, num_processes); the message names the
      flags and environment variables to set.
    RuntimeError: JAX's backend was already started by an earlier JAX call in a multi-process run.
  """
  if jax.distributed.is_initialized():
    return process_info()
  coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
  num_processes = _int(num_processes if num_processes is not None else os.environ.get(ENV_NUM_PROCESSES),
                       "num_processes", ENV_NUM_PROCESSES)
  process_id = _int(process_id if process_id is not None else os.environ.get(ENV_PROCESS_ID),
                    "process_id", ENV_PROCESS_ID)
  local_device_ids = _device_ids(local_device_ids if local_device_ids is not None
                                 else os.environ.get(ENV_LOCAL_DEVICE_IDS))
  given = {"--coordinator_address / " + ENV_COORDINATOR: coordinator_address,
           "--num_processes / " + ENV_NUM_PROCESSES: num_processes,
           "--process_id / " + ENV_PROCESS_ID: process_id}
  missing = [name for name, v in given.items() if v is None]
  cluster = _detected_cluster() if missing else None

  if num_processes is not None and num_processes < 1:
    raise ValueError(f"--num_processes / {ENV_NUM_PROCESSES} must be >= 1, got {num_processes}.")
  if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
    raise ValueError(f"--process_id / {ENV_PROCESS_ID} = {process_id} is outside [0, {num_processes}); "
                     "give each process a distinct id 0, 1, ..., num_processes - 1.")
  if num_processes == 1:
    if process_id not in (None, 0):
      raise ValueError(f"--process_id / {ENV_PROCESS_ID} = {process_id} with a single process; use 0.")
    return _SINGLE
  if len(missing) == len(given):
    if cluster is None:
      return _SINGLE  # a plain single-process run
    try:
      if int(cluster.get_process_count()) == 1:
        return _SINGLE  # e.g. a one-task Slurm job
    except Exception:  # pylint: disable=broad-except  # let jax.distributed report it
      pass
  if missing and cluster is None:
    have = [name for name, v in given.items() if v is not None]
    raise ValueError(
        "multi-process start-up needs all three of coordinator address, process count and process id; "
        f"given {', '.join(have)} but not {', '.join(missing)}, and JAX detects no cluster "
        "(Slurm, Open MPI, Kubernetes, Cloud TPU) to supply them. Set the missing flags or environment "
        "variables on every process (the same --coordinator_address=host:port and --num_processes, and "
        "--process_id 0..N-1), or unset the given ones for a single-process run.")

  if jax.config.jax_cpu_collectives_implementation in (None, "gloo"):  # keep an explicit 'mpi'
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, local_device_ids=local_device_ids,
                               initialization_timeout=initialization_timeout)
  except RuntimeError as e:
    raise RuntimeError(
        f"jax.distributed.initialize failed: {e}. common.distributed.initialize must run before any JAX "
        "call that starts the backend (jax.devices, device_put, jit); call it first thing in main.") from e
  # The first cross-process collective sets up the CPU collectives' context (gloo), and every process must
  # reach it within gloo's 30 s; here they all arrive together (initialize returns once all have connected).
  # Later collectives may wait as long as a slice of the work takes.
  sync("common.distributed.initialize")
  info = process_info()
  _log.info("JAX distributed: process %d of %d (%s), %d local / %d global devices", info.process_id,
            info.num_processes, getattr(cluster, "__name__", "flags/environment"), jax.local_device_count(),
            jax.device_count())
  return info


def global_batch(local_batch: Any, mesh: Mesh, rules: Any = None) -> Any:
  """Global batch arrays from this process's rows: every leaf's leading dimension sharded like a batch.

  Each process passes its own rows, in process order: with the mesh over jax.devices() (the
  `common.lm.sharding.make_mesh` default) and n processes of r local rows each, process p's rows become
  global rows [p r, (p + 1) r). Rows are laid out over the axes of the 'batch' rule (default data, fsdp),
  every other dimension replicated; 0-d leaves are replicated and must be equal on every process. When
  the batch axes do not span processes (e.g. mesh (1, 1, 8) over two processes), every process holds
  all rows and must pass the same ones.
  Single process: the same as `common.lm.sharding.shard_batch`.

  Args:
    local_batch: pytree of host arrays [r, ...] (NumPy or array-likes), this process's rows.
    mesh: the global mesh.
    rules: logical-axis rules (None = the defaults of common/lm/sharding.py).
  Returns:
    The same pytree of global jax.Arrays [n r, ...] ([r, ...] when the batch axes do not span processes).
  Raises:
    ValueError naming the leaf's shape when its local rows do not divide over this process's row blocks.
  """
  axes = lm_sharding.batch_sharding(mesh, rules, ndim=1).spec[0] or ()
  axes = (axes,) if isinstance(axes, str) else tuple(axes)
  me = jax.process_index()
  positions = np.argwhere(np.vectorize(lambda d: d.process_index == me, otypes=[bool])(mesh.devices))
  axis_ids = [mesh.axis_names.index(a) for a in axes]
  n_local = len({tuple(int(p[i]) for i in axis_ids) for p in positions})  # row blocks this process holds

  def put(x):
    x = np.asarray(x)
    if x.ndim == 0:
      return jax.make_array_from_process_local_data(NamedSharding(mesh, P()), x)
    if x.shape[0] % n_local:
      raise ValueError(f"batch leaf of local shape {x.shape}: {x.shape[0]} rows do not divide over the {n_local} "
                       f"row blocks this process holds (mesh axes {axes}); make the local batch a multiple.")
    sharding = lm_sharding.batch_sharding(mesh, rules, ndim=x.ndim)
    return jax.make_array_from_process_local_data(sharding, x)  # global shape inferred by JAX

  return jax.tree_util.tree_map(put, local_batch)


def process_slice(num_units: int) -> range:
  """This process's contiguous slice of `num_units` work units (rollout blocks, task groups), in process order.

  Process p of n gets units [p b + min(p, e), ...) with b, e = divmod(num_units, n): the first e processes one
  unit more (np.array_split's layout); a process may get none. Single process: range(num_units).
  """
  p, n = jax.process_index(), jax.process_count()
  base, extra = divmod(int(num_units), n)
  start = p * base + min(p, extra)
  return range(start, start + base + (1 if p < extra else 0))


def allgather_objects(obj: Any) -> list[Any]:
  """Every process's `obj`, in process order: [obj of process 0, obj of process 1, ...] on every process.

  The records are pickled on their own process, padded to the longest pickle (the byte counts are gathered
  first: u8 arrays of fixed shape [n, max bytes], jax.experimental.multihost_utils.process_allgather) and
  unpickled everywhere, so every process ends with the same Python objects (rollout trajectories, episode
  records): the host-side state built from them is the same on every process. This is the collective every
  process must reach (a process that skips it blocks the others). Single process: [obj], no copy.
  Pickle: only records that this program's own processes produced are unpickled.
  """
  if jax.process_count() == 1:
    return [obj]
  import pickle  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.asarray([data.size], np.int64))).reshape(-1)
  buf = np.zeros(int(sizes.max()), np.uint8)
  buf[:data.size] = data
  got = np.asarray(multihost_utils.process_allgather(buf))
  return [pickle.loads(got[i, :int(sizes[i])].tobytes()) for i in range(len(sizes))]


def sync(name: str) -> None:
  """A barrier of every process (multihost_utils.sync_global_devices); nothing for a single process."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def run_sliced(num_units: int, run_unit) -> list[Any]:
  """The records of every work unit, in global unit order, each unit run on one process only.

  Process p runs `run_unit(u)` (a list of picklable records, e.g. the trajectories of one sampling block of
  whole groups on its own worker pool) for u in `process_slice(num_units)`; the lists are all-gathered
  (`allgather_objects`) and concatenated, so every process returns the list one process would. `run_unit` must
  depend only on u (sample keys fold in u, never the process id). Collective: every process calls it.
  """
  local = [rec for u in process_slice(num_units) for rec in run_unit(u)]
  return [rec for part in allgather_objects(local) for rec in part]
