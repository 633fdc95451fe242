#!/usr/bin/env bash
# GPU check of the language-model path (benchmarks/gpu_check.py): a ~1.5B Qwen2-shaped model's decode tokens/s
# against the memory-bandwidth floor, and a training step's model-FLOPs utilisation. Under 8 minutes.
#
#   bash benchmarks/gpu_check.sh                 # on a machine with an NVIDIA GPU and JAX's CUDA wheels
#   GPU_CHECK_ARGS="--bandwidth-gbs 3350 --peak-tflops 989" bash benchmarks/gpu_check.sh   # an H100 SXM
#
# Needs `pip install -U "jax[cuda12]"` in the environment (the README's setup installs the CPU build only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
"$PY" - <<'PYEOF'
import jax, sys
if jax.default_backend() != "gpu":
  sys.exit(f"gpu_check: JAX's backend is {jax.default_backend()!r}, not 'gpu'; install jax[cuda12] "
           "(pip install -U 'jax[cuda12]') on a machine with an NVIDIA GPU, or run "
           "'python -m benchmarks.gpu_check --tiny' to check the script on CPU.")
PYEOF
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 480 "$PY" -m benchmarks.gpu_check ${GPU_CHECK_ARGS:-}
