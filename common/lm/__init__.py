"""The language-model policy: a Flax decoder for Qwen2/Qwen2.5, Qwen3 and Llama-3.x checkpoints.

Modules:
  config      ModelConfig (from config.json via transformers' config classes), CheckpointError.
  model       the decoder (flax.linen, layers scanned); forward / hidden_states / token_logprobs /
              decode_step over a plain parameter pytree.
  loading     Hugging Face safetensors (single or sharded + index) <-> parameter pytree, loaded straight
              into the target sharding; tokenizer + chat template; export to a Hugging Face directory.
  sampling    batched KV-cache generation (temperature / top-k / top-p, per-row stops and limits, left
              padding, chunked prefill), generation into a persistent per-row cache (generate_cached: multi-turn
              KV reuse) and the matching teacher-forced log-probs (completion_logprobs).
  sampler     LMSampler, the rollout driver's policy: episodes' KV caches kept across turns in a pool within a
              byte budget (the rest re-prefilled), continuous batching; samples independent of the layout
              (sample_keys 'request', the default; 'call': the stream from before the pool).
  lora        LoRA adapters: add, adapter-only optimizer, partition/combine, merge for export.
  tool_head   one logit per tool from the last hidden state.
  sharding    (data, fsdp, tensor) mesh, logical-axis rules, parameter / optimizer / batch shardings.
  tool_policy LMToolPolicy, PhGPO's language-model policy (config policy.kind = 'lm').
  testing     make_tiny_checkpoint: tiny random checkpoints written without torch.

Typical use:

  from common.lm import loading, sampling, sharding, lora
  mesh = sharding.make_mesh((-1, 1, 1))                       # config mesh.shape
  cfg, params, tok = loading.load_pretrained(ckpt_dir, mesh=mesh, dtype="bfloat16",
                                             param_dtype="bfloat16")
  cfg = cfg.with_lora(rank=64, alpha=128)                     # config lora.*
  params = sharding.shard_params(lora.add_adapters(key, params, cfg), mesh)
  ids, mask = sampling.left_pad([tok.apply_chat_template(msgs, add_generation_prompt=True)])
  out = sampling.generate(params, ids, mask, key, config=cfg, max_new_tokens=256,
                          sampling=sampling.SamplingConfig(temperature=0.7))
  logp = sampling.completion_logprobs(params, ids, mask, out.tokens, out.mask, config=cfg, temperature=0.7)
  tx = lora.adapter_optimizer(optax.adamw(1e-5), params)      # only adapters train
  loading.export_pretrained(params, cfg, out_dir, tokenizer=tok)   # adapters merged
"""

from common.lm.config import CheckpointError, ModelConfig, from_hf_config, load_config
from common.lm.loading import export_pretrained, load_params, load_pretrained, load_tokenizer
from common.lm.model import forward, hidden_states, init_params, token_logprobs
from common.lm.sampling import SampleOutput, SamplingConfig, completion_logprobs, generate, left_pad
