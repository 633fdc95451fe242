"""KV cache pool benchmark: multi-turn sampling with a cache budget smaller than the rows, vs reuse off.

  python -m benchmarks.kv_pool_bench            # 16 episodes x 6 turns, a 4-layer width-256 model (a few minutes)
  python -m benchmarks.kv_pool_bench --quick    # 8 episodes x 4 turns, the tiny model (seconds)

One batch of multi-turn episodes through common.lm.sampler.LMSampler (`time_multi_turn`: every episode asks at
every turn, its context growing by the response and an observation), temperature 1, under: reuse off (the
baseline, measured in the same run: every turn re-prefills every whole context), the cache pool with a budget
of 1/4, 1/2 and 3/4 of the rows (`cache_max_bytes`, rows of cache_len = the final context's slots; the
trainers' `gspo.kv_cache_max_gb`), and no budget (every row held). Reported per setting: pool rows, tokens
prefilled, requests re-prefilled for want of a row, cache MiB, wall time (best of `reps`, settings run in
turn so that a change in a shared machine's load hits all alike; compiles excluded), and against reuse off:
prefill_ratio = its tokens prefilled / this setting's, speedup = its seconds / this setting's (above 1: the
setting is faster); same_tokens: the sampled tokens equal reuse off's (the pool never changes the samples).
`run(quick=False) -> dict` returns everything printed.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp

from benchmarks import _cli
from common.lm import sampler as sampler_lib
from common.lm import testing
from common.lm.config import ModelConfig

FULL = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_layers=4, num_heads=4, num_kv_heads=2,
            head_dim=64, rows=16, turns=6, prompt_len=256, obs_len=32, max_new_tokens=16, reps=2)
QUICK = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
             head_dim=16, rows=8, turns=4, prompt_len=64, obs_len=16, max_new_tokens=8, reps=2)
FRACTIONS = (0.25, 0.5, 0.75)


def run(quick: bool = False) -> dict:
  s = QUICK if quick else FULL
  cfg = ModelConfig(family="qwen2", vocab_size=s["vocab_size"], hidden_size=s["hidden_size"],
                    intermediate_size=s["intermediate_size"], num_layers=s["num_layers"], num_heads=s["num_heads"],
                    num_kv_heads=s["num_kv_heads"], head_dim=s["head_dim"], qkv_bias=True, tie_embeddings=True,
                    max_position_embeddings=4096)
  params = jax.tree_util.tree_map(jnp.asarray, testing.random_params(cfg, seed=0, std=0.02))
  rows = s["rows"]
  shape = dict(rows=rows, turns=s["turns"], prompt_len=s["prompt_len"], obs_len=s["obs_len"],
               max_new_tokens=s["max_new_tokens"])
  cache_len = s["prompt_len"] + s["turns"] * (s["max_new_tokens"] + s["obs_len"])
  row = sampler_lib.row_bytes(cfg, cache_len)
  settings = {"reuse_off": dict(kv_reuse=False)}
  for f in FRACTIONS:
    settings[f"pool_{int(f * rows)}_of_{rows}"] = dict(kv_reuse=True, cache_max_bytes=int(f * rows) * row + row // 2)
  settings["no_budget"] = dict(kv_reuse=True, cache_max_bytes=0)
  best: dict[str, dict] = {}
  for rep in range(s["reps"]):
    for name, kw in settings.items():
      r = sampler_lib.time_multi_turn(params, cfg, warmup=rep == 0, temperature=1.0, cache_len=cache_len,
                                      **shape, **kw)
      if name not in best or r["seconds"] < best[name]["seconds"]:
        best[name] = r
  base = best["reuse_off"]
  out = {"model": {k: s[k] for k in ("hidden_size", "num_layers", "num_kv_heads", "head_dim", "vocab_size")},
         **shape, "cache_len": cache_len, "row_mib": round(row / 2 ** 20, 3), "settings": {}}
  for name, r in best.items():
    out["settings"][name] = {
        "pool_rows": r["pool_rows"], "seconds": round(r["seconds"], 3), "prefill_tokens": r["prefill_tokens"],
        "reused_tokens": r["reused_tokens"], "overflow_requests": r["overflow_requests"],
        "cache_mib": round(r["cache_bytes"] / 2 ** 20, 2),
        "prefill_ratio": round(base["prefill_tokens"] / max(r["prefill_tokens"], 1), 3),
        "speedup": round(base["seconds"] / max(r["seconds"], 1e-9), 3),
        "same_tokens": r["digest"] == base["digest"]}
  print(json.dumps(out, indent=1))
  print(f"KV pool, {rows} episodes x {s['turns']} turns (prompt {s['prompt_len']}, +{s['max_new_tokens']} new "
        f"+{s['obs_len']} observation tokens a turn; a row = {cache_len} slots = {out['row_mib']} MiB), "
        "temperature 1, against reuse off in the same run:")
  print("  setting              pool rows   prefilled   re-prefilled reqs   cache MiB   seconds   "
        "prefill ratio   speedup   same tokens")
  for name, r in out["settings"].items():
    print(f"  {name:18s}   {r['pool_rows']:9d}   {r['prefill_tokens']:9d}   {r['overflow_requests']:17d}   "
          f"{r['cache_mib']:9.2f}   {r['seconds']:7.3f}   {r['prefill_ratio']:13.3f}   {r['speedup']:7.3f}   "
          f"{r['same_tokens']}")
  return out


if __name__ == "__main__":
  _cli.main(run, __doc__)
