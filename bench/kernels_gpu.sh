#!/usr/bin/env bash
# Every kernel against its twin in bf16, then a table of times, TFLOP/s and % of the measured matmul
# peak against torch references. Needs only torch, triton and numpy; finishes in well under 4 minutes.
#   bash bench/kernels_gpu.sh             on a CUDA machine
#   bash bench/kernels_gpu.sh --dry-run   tiny fp32 shapes on the CPU, Triton interpreted (tests the script)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
for arg in "$@"; do
  # Triton picks the interpreter when its kernels are defined, so this must be set before Python starts.
  if [ "$arg" = "--dry-run" ]; then export TRITON_INTERPRET=1; fi
done
exec timeout 230 "$py" -m bench.kernels_gpu "$@"
