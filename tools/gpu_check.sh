#!/usr/bin/env bash
# One command on a machine with a CUDA GPU (a few minutes): the tiny GPT and TinyLlama-1.1B (from
# datasets/hf_configs) in bf16-mixed, whole-step peak measured beside predicted with the caching
# allocator's reserve, one step's time beside the roofline for this GPU. Without CUDA it runs the
# CPU-safe part and exits 0 saying so. Usage: bash tools/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
test -x "$PY" || PY=python3
exec "$PY" -m labkit.measure.gpu_check "$@"
