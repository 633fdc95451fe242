r"""ProgAgent at the published setting: SFT on teacher trajectories, then GSPO (SPEC.md, ProgAgent).

  python -m experiments.train --config=configs/progagent.py --workdir=runs/progagent \
      --config.model.checkpoint=/path/to/Qwen3-8B --config.sft.teacher_jsonl=teacher_ptc.jsonl

Teacher data comes from `python -m progagent.teacher --base-url URL --model NAME --mode ptc --k 16 --out FILE`
(any OpenAI-compatible endpoint, e.g. a vLLM server). GSPO: 150 steps, 32 tasks x 16 rollouts, lr 1e-6,
temperature 1.0, clip 3e-4 / 4e-4, no KL. Needs a GPU/TPU-sized machine; the CPU variant is
configs/progagent_smoke.py.
"""

import ml_collections

from progagent import train


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  if arg not in (None, ""):
    raise ValueError(f"unknown config variant {arg!r}; this config has none (see configs/progagent_smoke.py)")
  return train.default_config()
