#!/usr/bin/env bash
# One command on a GPU machine: train a ~1B-parameter model for 30 steps in bf16 with cuDNN flash
# attention, FSDP over every local GPU, and print tokens/s and MFU against the GPU's dense bf16
# peak from conf/hardware/*.yaml (target >= 45% on an H100/H200). Details: benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                    # the check (needs an NVIDIA GPU)
#   bash benchmarks/gpu_check.sh --dry-run          # CPU only: resolve the config, train nothing
#   GPU_CHECK_INSTALL=1 bash benchmarks/gpu_check.sh  # pip-install the CUDA build of JAX first
#   bash benchmarks/gpu_check.sh --steps 50 --per-gpu-batch 4 model.remat=true   # other settings
#
# Environment: PYTHON (default python), GPU_CHECK_DRY_RUN=1 (same as --dry-run), GPU_CHECK_STEPS,
# GPU_CHECK_LAYERS, GPU_CHECK_INSTALL=1. Exit 0 = trained and measured, 1 = the run failed,
# 2 = no usable GPU or a bad config (one `error:` line).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python}

dry=${GPU_CHECK_DRY_RUN:-}
for a in "$@"; do [[ $a == --dry-run ]] && dry=1; done

if [[ -z $dry ]]; then
  # Fail fast, before importing anything: no driver or no device means no check.
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "error: gpu_check needs an NVIDIA GPU (nvidia-smi is missing or lists no GPU); use --dry-run to check the config on CPU" >&2
    exit 2
  fi
  if [[ -n ${GPU_CHECK_INSTALL:-} ]]; then
    "$PYTHON" -m pip install -e '.[gpu]' 'jax[cuda12]'
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu_check: nvidia-smi: /'
fi
exec "$PYTHON" benchmarks/gpu_check.py "$@"
