#!/usr/bin/env bash
# The opt-in test tier against real SGLang 0.5.23, on this CPU (x86 with AVX-512 and AMX):
#
#   bash scripts/sglang_cpu_tier.sh [DIR]        # DIR: where SGLang's venv lives (default .cache/sglang-cpu)
#
# Builds SGLang's venv once from the CPU recipe (SGLANG_CPU_RECIPE, default ../shared/sglang-cpu: ~15 min and
# ~7 GB the first time), writes DIR/python-fp32 (SGLang's interpreter with AMX hidden, which float32 needs:
# its AMX kernels have no fp32 rmsnorm), then runs with TANDEM_SGLANG_PYTHON pointing at it:
#   - the SGLang API conformance suite against a real SGLang server that tandem launches itself
#     (tests/test_engine_api.py -k sglang: tandem's own launch command, engine.sglang.device = "cpu");
#   - tests/test_sglang_cpu.py: a short training run with engine.backend = "sglang" (two real servers).
# Not part of the README's test command: it needs this CPU, the 7 GB venv and ~15 minutes on 2 cores.
# What only CUDA can show (release/resume memory, the memory saver, MoE routed experts) is in
# scripts/gpu_check.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RECIPE=${SGLANG_CPU_RECIPE:-$ROOT/../shared/sglang-cpu}
DIR=$(mkdir -p "${1:-$ROOT/.cache/sglang-cpu}" && cd "${1:-$ROOT/.cache/sglang-cpu}" && pwd)
if [ ! -x "$DIR/venv/bin/python" ] || [ ! -d "$DIR/noamx" ]; then
  [ -f "$RECIPE/setup.sh" ] || { echo "no SGLang CPU recipe at $RECIPE (set SGLANG_CPU_RECIPE)" >&2; exit 2; }
  bash "$RECIPE/setup.sh" "$DIR"
fi
# Only the noamx hook on SGLang's path: its venv sees nothing of tandem's tree.
printf '#!/bin/sh\nPYTHONPATH="%s/noamx" exec "%s/venv/bin/python" "$@"\n' "$DIR" "$DIR" > "$DIR/python-fp32"
chmod +x "$DIR/python-fp32"
export TANDEM_SGLANG_PYTHON="$DIR/python-fp32"
cd "$ROOT"
PYTHONPATH="$ROOT" OMP_WAIT_POLICY=PASSIVE python -m pytest -q -n 0 -p no:cacheprovider -rs \
  tests/test_engine_api.py -k sglang tests/test_sglang_cpu.py "${@:2}"
