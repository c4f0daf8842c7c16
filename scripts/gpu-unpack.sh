#!/usr/bin/env bash
# Put what scripts/gpu-session.sh sent back where the project reads it:
#   bash scripts/gpu-unpack.sh FILES_AT
# molm and video checkpoints go to mlcore/zoo/checkpoints/ (each with its train log and manifest, to be
# reviewed and committed like any retrained zoo model), the point-cloud runs to bench/cache/pointcloud.jsonl
# (then `python -m bench.pointcloud --report`), the kernel table to bench/results/core-gpu.txt.
set -euo pipefail
from="${1:?usage: gpu-unpack.sh FOLDER, the files_at folder of the device tool}"
cd "$(dirname "$0")/.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for archive in "$from"/*.tar.gz; do
  [ -e "$archive" ] || continue
  tar -xzf "$archive" -C "$stage"
  echo "unpacked $(basename "$archive")"
done
copy_checkpoint() {  # copy_checkpoint FOLDER NAME: an exported zoo model → mlcore/zoo/checkpoints/NAME
  if [ -f "$stage/$1/manifest.json" ]; then
    rm -rf "mlcore/zoo/checkpoints/$2"
    cp -r "$stage/$1" "mlcore/zoo/checkpoints/$2"
    echo "checkpoint $2 replaced (review git diff before committing)"
  fi
}
copy_checkpoint var/gpu/molm/molm molm
copy_checkpoint var/gpu/video/video-dit-digits video-dit-digits
if [ -s "$stage/var/gpu/pointcloud-cache.jsonl" ]; then
  # Appended: a key written again takes its last value (bench/cache.py), so the GPU's rows win.
  cat "$stage/var/gpu/pointcloud-cache.jsonl" >> bench/cache/pointcloud.jsonl
  echo "point-cloud runs: $(wc -l < "$stage/var/gpu/pointcloud-cache.jsonl") cached"
fi
if [ -f "$from/kernels.txt" ]; then
  mkdir -p bench/results
  cp "$from/kernels.txt" bench/results/core-gpu.txt
  echo "kernel table: bench/results/core-gpu.txt"
fi
mkdir -p var/gpu
for f in "$from"/session.log "$stage"/var/gpu/*.log; do [ -e "$f" ] && cp "$f" var/gpu/; done
[ -d "$stage/var/gpu/pointcloud-cache/state/logs" ] && cp -r "$stage/var/gpu/pointcloud-cache/state/logs" var/gpu/pointcloud-logs
echo "logs in var/gpu/"
