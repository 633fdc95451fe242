r"""ProgAgent smoke run: SFT then GSPO on a tiny random Qwen2 checkpoint, 3 tasks at v0, on CPU in 1-3 minutes.

  python -m experiments.train --config=configs/progagent_smoke.py --workdir=/tmp/progagent_smoke

The checkpoint ('tiny:qwen2') is written once into the cache folder ($AGENTIC_RL_CACHE, else
~/.cache/agentic-rl-jax; config `model.cache_dir`) by common.lm.checkpoints.resolve_checkpoint, with a
tokenizer trained on the three tasks' prompts, tool schemas and oracle programs and a Qwen3-style tool-calling
chat template (no download): prompts, programmatic_tool_call calls and tool results are in that native format
(about 1,000 prompt tokens, hence the 1,536-token context). No teacher endpoint: SFT uses the tasks' PTC oracle
episodes as a stand-in teacher (set --config.sft.teacher_jsonl=FILE for real teacher data from
`python -m progagent.teacher`). SFT here is 80 epochs at lr 1e-2 over the 3 oracle episodes (not the published
3 epochs at 1e-5), enough for the tiny model to nearly memorise the calls (JSON-quoted programs), so that
GSPO's samples (temperature 1) mix passing and failing programs and its groups have non-zero advantages.
PTC programs run in-process (runtime='inprocess': trusted, no sandbox); --config.runtime=sandboxed uses the
sandboxed kernel as the full run does. This run checks the plumbing, not learning.
Full-size defaults (SPEC.md, ProgAgent): progagent.train.default_config().
Devices: one (`mesh.shape` (1, 1, 1), the default); --config.mesh.shape=-1,1,1 shards the updates over every
device (rows of each update padded with masked repeats to a multiple of the device count). `model.remat`,
`optim.master_weights`: as in configs/progagent.py.
"""

import ml_collections

from progagent import train


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  if arg not in (None, "", "smoke"):
    raise ValueError(f"unknown config variant {arg!r}; valid: '' (smoke)")
  c = train.default_config()
  c.tasks = ("retail/pending_over_500", "inventory/electrical_value", "library/morland_copies")
  c.runtime = "inprocess"
  c.env.scales = (0, 1)
  c.env.max_turns = 2
  c.env.max_context_tokens = 1536
  c.env.max_response_tokens = 96
  c.env.max_observation_chars = 400
  c.model.checkpoint = "tiny:qwen2"
  c.model.dtype = "float32"
  c.model.param_dtype = "float32"
  c.lengths.buckets = (1536,)
  c.sft.oracle_scales = (0,)
  c.sft.epochs = 80
  c.sft.batch_size = 3
  c.sft.learning_rate = 1e-2
  c.sft.max_tokens = 1536
  c.gspo.steps = 2
  c.gspo.tasks_per_step = 2
  c.gspo.rollouts_per_task = 3
  c.gspo.minibatches = 2
  c.gspo.learning_rate = 1e-4
  c.gspo.kv_reuse = True            # multi-turn KV reuse in the sampler (common.lm.sampler)
  c.eval.seeds = (1000,)
  c.eval.levels = (0, 1)
  c.eval.samples = 2
  c.eval.k = (1, 2)
  c.stats.resamples = 1000
  c.checkpoint.every = 10
  c.logging.tensorboard = False
  return c
