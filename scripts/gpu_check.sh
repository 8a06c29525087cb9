#!/usr/bin/env bash
# One-GPU check of tandem's GPU backends, in under 8 minutes:
# Megatron trainer (TP=1, megatron.core DDP + distributed optimizer + bf16) for 3 steps,
# export through tandem.weights.publish_weights, reload an SGLang engine (or the embedded engine on
# CUDA when sglang is not importable) via /update_weights_from_disk, compare logprobs.
#
#   bash scripts/gpu_check.sh                 # on the GPU box (uses GPU 0 of CUDA_VISIBLE_DEVICES)
#   TANDEM_SGLANG_PYTHON=.venv-sglang/bin/python bash scripts/gpu_check.sh   # SGLang in its own venv
#   bash scripts/gpu_check.sh --conformance   # + the engine API conformance tests against that SGLang
#   bash scripts/gpu_check.sh --allow-cpu     # rehearsal of the same flow on a CPU box
#   bash scripts/gpu_check.sh --moe           # a tiny Qwen3-MoE: megatron-core's MoE layers, + routing agreement
#   bash scripts/gpu_check.sh --memory [--out DIR]   # instead: peak memory of the Megatron trainer per memory
#                                             # feature against tandem.lab.plan (scripts/gpu_memory.py; --allow-cpu too)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS=ignore
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || true
fi
python -c "import torch, megatron.core; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), '| megatron-core', megatron.core.__version__)"
if [ "${1:-}" = "--memory" ]; then
  shift
  exec timeout --signal=TERM --kill-after=20 540 python scripts/gpu_memory.py "$@"
fi
exec timeout --signal=TERM --kill-after=20 480 python scripts/gpu_check.py "$@"
