"""One sharded LoRA training step of a Qwen3-shaped model on one long sequence, on 8 (fake CPU) devices.

The model: Qwen3 architecture (QK-norm, GQA, tied embeddings, Qwen3's 151,936-token vocabulary), width 512,
4 layers, 8 query / 4 key-value heads of 64, SwiGLU 1536, random weights; LoRA rank 16 (alpha 32) on every
projection. The step: token-mean next-token cross-entropy of one sequence of `--length` tokens
(common.lm.model.token_logprobs: blocked attention and blocked vocabulary projection), gradients with respect
to the adapters only (common.lm.lora.partition), AdamW on them, on a (data, fsdp, tensor) mesh (default
(1, 1, 8): one sequence cannot be split over rows, so the heads and MLP are split over 'tensor').

Each layer's activations are recomputed in the backward pass (`--remat full`, config `model.remat`): with
tensor parallelism the [T, D] hidden states are replicated on every device, and the 8 fake devices share one
machine's memory. Printed: the compiled temporary memory (per device) of the step with the blocked path and, compiled but not run, with the
dense reference attention (`model.attention_impl` = 'dense', no logit blocks), the step's wall time, the
process's peak resident memory, the loss (log(vocab) ~ 11.93 for a random model) and the adapter gradient norm.

Run:  python -m benchmarks.lm_long_context                      (32,768 tokens; ~10-20 min on 2 CPU cores)
      python -m benchmarks.lm_long_context --length 2048        (seconds)
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from common.lm import lora  # noqa: E402
from common.lm import model as model_lib  # noqa: E402
from common.lm import sharding  # noqa: E402
from common.lm.config import ModelConfig  # noqa: E402

QWEN3_512 = ModelConfig(family="qwen3", vocab_size=151936, hidden_size=512, intermediate_size=1536, num_layers=4,
                        num_heads=8, num_kv_heads=4, head_dim=64, qk_norm=True, tie_embeddings=True,
                        rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=40960,
                        attention_chunk=1024, logits_chunk=1024)


def step_fn(config: ModelConfig, tx: optax.GradientTransformation):
  """(train, frozen, opt_state, tokens i32[B, T]) -> (train, opt_state, loss, grad_norm): one LoRA step."""

  def loss(train, frozen, tokens):
    lp = model_lib.token_logprobs(lora.combine(train, frozen), tokens, None, config=config)
    return -jnp.mean(lp[:, 1:])

  def step(train, frozen, opt_state, tokens):
    value, grads = jax.value_and_grad(loss)(train, frozen, tokens)
    updates, opt_state = tx.update(grads, opt_state, train)
    return optax.apply_updates(train, updates), opt_state, value, optax.tree.norm(grads)
  return step


def run(length: int, mesh_shape=(1, 1, 8), lora_rank: int = 16, layers: int = 4, compare_dense: bool = True,
        remat: str = "full") -> dict:
  """Build, place, compile and run one step; returns the numbers printed by main()."""
  cfg = QWEN3_512.replace(num_layers=layers, remat=remat).with_lora(rank=lora_rank, alpha=2.0 * lora_rank)
  mesh = sharding.make_mesh(mesh_shape)
  abstract = model_lib.abstract_params(cfg)
  shardings = sharding.param_shardings(abstract, mesh)
  params = jax.jit(lambda k: model_lib.init_params(k, cfg), out_shardings=shardings)(jax.random.key(0))
  train, frozen = lora.partition(params, extra=())
  tx = optax.adamw(1e-4)
  train_sh = jax.tree_util.tree_map(lambda x: x.sharding, train)
  opt_state = jax.jit(tx.init)(train)
  tokens = sharding.shard_batch(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, length)).astype(np.int32),
                                mesh)
  step = jax.jit(step_fn(cfg, tx), out_shardings=(train_sh, None, None, None), donate_argnums=(0, 2))
  t0 = time.perf_counter()
  compiled = step.lower(train, frozen, opt_state, tokens).compile()
  out = {"length": length, "mesh": list(mesh_shape), "devices": jax.device_count(), "layers": layers, "remat": remat,
         "params_millions": round(cfg.num_params() / 1e6, 1),
         "trainable": lora.count(params, extra=())[0],
         "compile_s": round(time.perf_counter() - t0, 1),
         "temp_bytes_blocked": int(compiled.memory_analysis().temp_size_in_bytes)}
  if compare_dense:
    dense = cfg.replace(attention_impl="dense", logits_chunk=0)
    c2 = jax.jit(step_fn(dense, tx)).lower(train, frozen, opt_state, tokens).compile()
    out["temp_bytes_dense"] = int(c2.memory_analysis().temp_size_in_bytes)
  t0 = time.perf_counter()
  train, opt_state, loss, gnorm = jax.block_until_ready(compiled(train, frozen, opt_state, tokens))
  out["step_s"] = round(time.perf_counter() - t0, 1)
  out["loss"] = round(float(loss), 4)
  out["adapter_grad_norm"] = float(gnorm)
  out["finite"] = bool(np.isfinite(float(loss)) and np.isfinite(float(gnorm)))
  out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--length", type=int, default=32768, help="tokens in the sequence")
  ap.add_argument("--mesh", type=int, nargs=3, default=(1, 1, 8), help="data fsdp tensor sizes")
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--lora-rank", type=int, default=16)
  ap.add_argument("--remat", default="full", choices=("none", "full", "dots", "dots_no_batch"),
                  help="activation checkpointing per layer (config model.remat)")
  ap.add_argument("--no-dense", action="store_true", help="skip compiling the dense reference")
  args = ap.parse_args()
  res = run(args.length, tuple(args.mesh), args.lora_rank, args.layers, not args.no_dense, args.remat)
  print(json.dumps(res, indent=2))
  gb = 2 ** 30
  line = (f"{res['length']} tokens, Qwen3-shaped width 512 x {res['layers']} layers ({res['params_millions']}M), "
          f"LoRA ({res['trainable']} trainable), remat {res['remat']}, mesh {tuple(res['mesh'])} on {res['devices']} devices: "
          f"step {res['step_s']} s, loss {res['loss']}, compiled temp {res['temp_bytes_blocked'] / gb:.2f} GiB per device")
  if "temp_bytes_dense" in res:
    line += (f" (dense attention would need {res['temp_bytes_dense'] / gb:.1f} GiB per device: "
             f"x{res['temp_bytes_dense'] / max(res['temp_bytes_blocked'], 1):.0f})")
  print(line + f", peak RSS {res['peak_rss_gb']} GiB")


if __name__ == "__main__":
  main()
