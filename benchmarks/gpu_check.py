"""GPU check of the language-model path: decode speed against the memory-bandwidth floor, and training MFU.

Model: Qwen2.5-1.5B's shape (hidden 1536, 28 layers, 12 query / 2 key-value heads of 128, SwiGLU 8960,
vocabulary 151,936, tied embeddings, q/k/v bias), random weights in bfloat16 (1.54e9 parameters).

Decode: greedy generation (common.lm.sampling.generate) of `--new` tokens after a `--prompt`-token prompt for
each batch size in `--batches`. One decode step must read every weight once plus the KV cache written so far,
so its time is at least
    floor_s = (2 bytes x parameters + KV bytes read) / memory bandwidth
(`--bandwidth-gbs`, default 4800 GB/s, an H200's HBM3e). Printed: tokens/s, seconds per step, the floor, and
floor / measured (1.0 = at the bandwidth limit). The prefill is timed separately (generate with one new token)
and subtracted.

Training: one full-parameter step (value_and_grad of the token-mean cross-entropy + AdamW, bf16 parameters,
float32 optimizer state via optax's mu_dtype) on `--train-batch` x `--train-len` tokens. Model FLOPs per
token = 6 x (parameters without the embedding) + 6 x 151,936 x 1536 (the tied LM head) + 12 x layers x
length x hidden (attention scores and values; causal half not discounted, the PaLM convention); MFU =
model FLOP/s / `--peak-tflops` (default 989, H200 dense bf16).

Run (GPU machine, JAX with CUDA):  bash benchmarks/gpu_check.sh       (under 8 minutes)
     (any machine, to check the script):  python -m benchmarks.gpu_check --tiny
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from common.lm import model as model_lib
from common.lm import sampling
from common.lm.config import ModelConfig

QWEN25_15B = ModelConfig(family="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                         num_heads=12, num_kv_heads=2, head_dim=128, qkv_bias=True, tie_embeddings=True,
                         rope_theta=1e6, max_position_embeddings=32768, dtype="bfloat16", param_dtype="bfloat16",
                         attention_impl="xla", attention_chunk=2048, logits_chunk=2048)
TINY = QWEN25_15B.replace(vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                          num_kv_heads=2, head_dim=16, attention_chunk=64, logits_chunk=64)


def _best(fn, reps):
  fn()
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t)
  return best


def decode(cfg: ModelConfig, params, batch: int, prompt: int, new: int, bandwidth_gbs: float, reps: int) -> dict:
  """Decode tokens/s at one batch size, and the bandwidth floor of one step."""
  ids = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, prompt)), jnp.int32)
  mask = jnp.ones_like(ids)
  greedy = sampling.SamplingConfig(temperature=0.0)

  def gen(n):
    return lambda: jax.block_until_ready(sampling.generate(params, ids, mask, jax.random.key(0), config=cfg,
                                                           max_new_tokens=n, sampling=greedy, stop_tokens=[-1]))
  t_full = _best(gen(new), reps)
  t_prefill = _best(gen(1), reps)
  step_s = max(t_full - t_prefill, 1e-9) / (new - 1)
  weight_bytes = 2 * cfg.num_params()
  kv_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2          # k and v, bf16
  kv_bytes = kv_per_token * batch * (prompt + new)        # the cache arrays are read in full each step
  floor_s = (weight_bytes + kv_bytes) / (bandwidth_gbs * 1e9)
  return {"batch": batch, "prompt": prompt, "new": new, "tokens_per_s": round(batch / step_s, 1),
          "step_ms": round(step_s * 1e3, 3), "floor_ms": round(floor_s * 1e3, 3),
          "floor_over_measured": round(floor_s / step_s, 3), "prefill_s": round(t_prefill, 3)}


def train_mfu(cfg: ModelConfig, params, batch: int, length: int, peak_tflops: float, reps: int) -> dict:
  """Model-FLOPs utilisation of one full fine-tuning step."""
  tx = optax.adamw(1e-5, mu_dtype=jnp.float32)
  opt_state = jax.jit(tx.init)(params)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (batch, length)), jnp.int32)

  @jax.jit
  def step(params, opt_state):
    def loss(p):
      return -jnp.mean(model_lib.token_logprobs(p, tokens, None, config=cfg)[:, 1:])
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  state = [params, opt_state]

  def run():
    p, o, v = step(*state)
    jax.block_until_ready(v)
    state[:] = [p, o]
  t = _best(run, reps)
  embed = cfg.vocab_size * cfg.hidden_size
  n_body = cfg.num_params() - embed
  flops_per_token = 6 * n_body + 6 * embed + 12 * cfg.num_layers * length * cfg.hidden_size
  achieved = flops_per_token * batch * length / t
  return {"batch": batch, "length": length, "step_s": round(t, 3),
          "tokens_per_s": round(batch * length / t, 1), "model_tflops": round(achieved / 1e12, 2),
          "mfu": round(achieved / (peak_tflops * 1e12), 4)}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--tiny", action="store_true", help="a tiny model: checks the script on any machine")
  ap.add_argument("--batches", type=int, nargs="+", default=(1, 16, 64))
  ap.add_argument("--prompt", type=int, default=512)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--train-batch", type=int, default=4)
  ap.add_argument("--train-len", type=int, default=4096)
  ap.add_argument("--bandwidth-gbs", type=float, default=4800.0)
  ap.add_argument("--peak-tflops", type=float, default=989.0)
  ap.add_argument("--reps", type=int, default=3)
  args = ap.parse_args()
  cfg = TINY if args.tiny else QWEN25_15B
  if args.tiny:
    args.batches, args.prompt, args.new, args.train_batch, args.train_len = (1, 4), 32, 16, 2, 128
  t0 = time.perf_counter()
  params = jax.jit(lambda k: model_lib.init_params(k, cfg))(jax.random.key(0))
  out = {"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind),
         "params_billions": round(cfg.num_params() / 1e9, 3), "decode": [], "train": None}
  print(f"{out['device']} ({out['backend']}): {out['params_billions']}B-parameter Qwen2-shaped model, bf16", flush=True)
  for b in args.batches:
    r = decode(cfg, params, b, args.prompt, args.new, args.bandwidth_gbs, args.reps)
    out["decode"].append(r)
    print(f"decode batch {b:3d}: {r['tokens_per_s']:10.1f} tok/s, {r['step_ms']:.3f} ms/step vs bandwidth floor "
          f"{r['floor_ms']:.3f} ms -> {r['floor_over_measured']:.2f} of the limit", flush=True)
  r = train_mfu(cfg, params, args.train_batch, args.train_len, args.peak_tflops, args.reps)
  out["train"] = r
  print(f"train {args.train_batch}x{args.train_len} tokens: {r['step_s']} s/step, {r['tokens_per_s']} tok/s, "
        f"{r['model_tflops']} model TFLOP/s -> MFU {r['mfu']:.1%} of {args.peak_tflops} TFLOP/s", flush=True)
  out["wall_s"] = round(time.perf_counter() - t0, 1)
  print(json.dumps(out, indent=2))


if __name__ == "__main__":
  main()
