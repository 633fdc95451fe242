"""One sharded LoRA training step of a tiny Qwen3-shaped model, for tests/multihost_test.py.

Run as a script, it is one process of a multi-process run on localhost:

  python tests/multihost_worker.py --coordinator_address=127.0.0.1:PORT --num_processes=2 --process_id=P \
      --out=/tmp/p.npz

Each process calls common.distributed.initialize, builds a (data=2, fsdp=2, tensor=2) mesh over the global
devices, feeds its own rows of the global batch (`global_batch`), runs `train_step` once, gathers the
updated parameters and the loss to every process and writes them to --out (.npz). Imported, `run` does
the same step in the calling process over whatever devices it has (the single-process reference).
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":  # the repository root, so that `common` imports when run as a script
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

MESH_SHAPE = (2, 2, 2)
GLOBAL_ROWS, SEQ = 8, 8


def model_config():
  from common.lm.config import ModelConfig  # pylint: disable=g-import-not-at-top
  return ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True).with_lora(
                         rank=4, alpha=8.0, targets=("q_proj", "v_proj", "up_proj"))


def host_params():
  """Host (NumPy) base weights plus adapters; lora_b is made non-zero so every adapter gets a gradient."""
  import jax  # pylint: disable=g-import-not-at-top
  from common.lm import lora, testing  # pylint: disable=g-import-not-at-top
  config = model_config()
  base = testing.random_params(config.replace(lora_rank=0, lora_alpha=0.0, lora_targets=()), seed=0)
  params = jax.tree.map(np.asarray, lora.add_adapters(jax.random.key(1), base, config))
  rng = np.random.default_rng(2)
  return jax.tree_util.tree_map_with_path(
      lambda p, x: (x + 0.05 * rng.standard_normal(x.shape)).astype(x.dtype)
      if str(getattr(p[-1], "key", "")) == "lora_b" else x, params)


def host_batch():
  """The global batch: tokens i32[8, 8] and mask i32[8, 8] (the last rows padded at the end)."""
  rng = np.random.default_rng(3)
  tokens = rng.integers(0, 64, size=(GLOBAL_ROWS, SEQ)).astype(np.int32)
  lengths = np.array([8, 8, 7, 6, 8, 5, 8, 4])
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
  return {"tokens": tokens * mask, "mask": mask}


def run(local_batch, mesh):
  """One adamw step on the LoRA adapters.

  Returns:
    (loss, updated params, global batch) as host values, the same on every process.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from common import distributed  # pylint: disable=g-import-not-at-top
  from common.lm import lora, sharding  # pylint: disable=g-import-not-at-top
  from common.lm import model as model_lib  # pylint: disable=g-import-not-at-top

  config = model_config()
  host = host_params()
  shardings = sharding.param_shardings(host, mesh)
  params = jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, lambda idx: x[idx]),
                        host, shardings)
  tx = lora.adapter_optimizer(optax.adamw(1e-2, weight_decay=0.1), params)
  # Eager init: zeros_like keeps each parameter's sharding; the step counters (made on the local default
  # device) are replicated over the mesh. (sharding.init_opt_state does not take a multi_transform's
  # masked state.)
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

  def on_mesh(x):
    if isinstance(x.sharding, jax.sharding.NamedSharding) and x.sharding.mesh == mesh:
      return x
    v = np.asarray(x)
    return jax.make_array_from_callback(v.shape, replicated, lambda idx: v[idx])
  opt_state = jax.tree.map(on_mesh, tx.init(params))
  batch = distributed.global_batch(local_batch, mesh)

  def loss_fn(p, b):
    lp = model_lib.token_logprobs(p, b["tokens"], b["mask"], config=config)
    m = b["mask"][:, 1:].astype(jnp.float32)
    return -jnp.sum(lp[:, 1:] * m) / jnp.sum(m)  # token-mean cross-entropy

  @jax.jit
  def step(p, s, b):
    loss, grads = jax.value_and_grad(loss_fn)(p, b)
    updates, s = tx.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss

  new_params, _, loss = step(params, opt_state, batch)
  gathered = multihost_utils.process_allgather({"loss": loss, "params": new_params, "batch": batch}, tiled=True)
  return (float(np.asarray(gathered["loss"])), jax.tree.map(np.asarray, gathered["params"]),
          jax.tree.map(np.asarray, gathered["batch"]))


def checkpoint_round_trip(host_params_, mesh, directory):
  """Saves the parameters sharded on `mesh` (all processes, one folder), restores them onto a (1, 2, 4)
  mesh of the same devices; returns the restored values gathered to host."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from common import checkpoint  # pylint: disable=g-import-not-at-top
  from common.lm import sharding  # pylint: disable=g-import-not-at-top
  params = jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, lambda idx: x[idx]),
                        host_params_, sharding.param_shardings(host_params_, mesh))
  ck = checkpoint.Checkpointer(directory)
  ck.save(1, {"params": params})
  other = sharding.make_mesh((1, 2, 4))
  target = {"params": jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), host_params_)}
  shardings = {"params": sharding.param_shardings(host_params_, other)}
  restored = ck.restore(1, target, shardings=shardings)
  ck.close()
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(shardings)):
    assert got.sharding == want, (got.sharding, want)
  return jax.tree.map(np.asarray, multihost_utils.process_allgather(restored["params"], tiled=True))


def flat(params) -> dict[str, np.ndarray]:
  import jax  # pylint: disable=g-import-not-at-top
  return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
          for path, x in jax.tree_util.tree_flatten_with_path(params)[0]}


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--coordinator_address", required=True)
  parser.add_argument("--num_processes", type=int, required=True)
  parser.add_argument("--process_id", type=int, required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--checkpoint_dir", default=None, help="shared folder: save, then restore on another mesh")
  args = parser.parse_args()
  from common import distributed  # pylint: disable=g-import-not-at-top
  info = distributed.initialize(args.coordinator_address, args.num_processes, args.process_id,
                                initialization_timeout=120)
  import jax  # pylint: disable=g-import-not-at-top
  from common.lm import sharding  # pylint: disable=g-import-not-at-top
  assert info.distributed and info.process_id == args.process_id, info
  assert distributed.initialize(args.coordinator_address, args.num_processes, args.process_id) == info
  rows = GLOBAL_ROWS // args.num_processes
  local = {k: v[rows * args.process_id: rows * (args.process_id + 1)] for k, v in host_batch().items()}
  mesh = sharding.make_mesh(MESH_SHAPE)
  loss, params, batch = run(local, mesh)
  extra = {}
  if args.checkpoint_dir:
    extra = {"restored/" + k: v for k, v in flat(checkpoint_round_trip(params, mesh, args.checkpoint_dir)).items()}
  np.savez(args.out, loss=np.asarray(loss), tokens=batch["tokens"], mask=batch["mask"],
           process_count=np.asarray(jax.process_count()),
           device_count=np.asarray(jax.device_count()),
           local_device_count=np.asarray(jax.local_device_count()),
           collectives=np.asarray(str(jax.config.jax_cpu_collectives_implementation)),
           **{"params/" + k: v for k, v in flat(params).items()}, **extra)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
