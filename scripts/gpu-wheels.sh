#!/usr/bin/env bash
# Download, here, the wheels scripts/gpu-session.sh needs and the GPU machine lacks (it has torch,
# triton, transformers, huggingface_hub and safetensors, but not diffusers), into .whl/ (ignored by git;
# the device tool carries it). Versions come from requirements.lock so both machines run the same code.
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -i "^$1==" requirements.lock | head -1 | cut -d' ' -f1; }
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "$(pin diffusers)" "$(pin importlib_metadata)"
ls -la .whl
