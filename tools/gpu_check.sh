#!/usr/bin/env bash
# One command on a machine with a CUDA GPU (a few minutes): labkit calibrate on the GPU, then the tiny GPT,
# GPT-2 medium, TinyLlama-1.1B and Qwen2-1.5B (datasets/hf_configs) in bf16-mixed, each whole-step peak
# measured beside predicted (with its phase and the caching allocator's reserve) and each step's time
# beside the kernel model's on the datasheet and on the calibration, in one table; then what Mistral-7B's
# first layer saves. Results go to $OUT (default gpu_check_out/) as they are measured. Needs torch,
# transformers and numpy. Without CUDA it runs the CPU-safe part and exits 0 saying so.
# Usage: PYTHONPATH=. bash tools/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
test -x "$PY" || PY=python3
exec "$PY" -m labkit.measure.gpu_check --out "${OUT:-gpu_check_out}" "$@"
