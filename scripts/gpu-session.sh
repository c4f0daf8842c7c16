#!/usr/bin/env bash
# One call on a lent GPU machine: check and time every kernel, then train side by side, until one
# shared deadline, what 2 CPU cores cannot: Point-MoE's study at its method card's scale (issue 7),
# and on request the zoo's generative models (the MOLM watermark generator, the video DiT).
# What finished, the logs and the kernel table come back through $OUT; an unfinished run keeps its
# resume state under var/ on the machine, so the same command again, while the machine is warm,
# continues it.
#
#   here, once:       bash scripts/gpu-wheels.sh        (the wheels that machine lacks, into .whl/)
#   on the device:    bash scripts/gpu-session.sh --minutes 9.5               (carry [".whl"], timeout_s 600)
#                     bash scripts/gpu-session.sh --minutes 3 --parts pointcloud   (resume, at once)
#   back here:        bash scripts/gpu-unpack.sh FILES_AT
#   on a CPU:         bash scripts/gpu-session.sh --dry-run   (tiny budgets, every command line runs)
#
# Parts: kernels (bench/kernels_gpu.sh, ≤ 4 min, alone on the GPU so its timings mean something),
# pointcloud (the `paper` tier: dense-active / Point-MoE / PPT × 3 seeds, 9 processes, TF32);
# off by default: molm (the MOLM recipe, 16,000 marker steps: 45 minutes on one CPU core, so a GPU
# only saves time) and video (the video DiT recipe; the committed model already passes its goal). The GPU machine has torch, triton, numpy and
# transformers but no Django and no diffusers: nothing here imports webapp/, diffusers travels.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=9.5
parts=kernels,pointcloud
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

started=$(date +%s)
deadline=$(awk -v s="$started" -v m="$minutes" 'BEGIN { printf "%d", s + m * 60 }')
work=var/gpu
out="${OUT:-$work/out}"
mkdir -p "$work" "$out"
log="$out/session.log"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$log"; }
has_part() { [[ ",$parts," == *",$1,"* ]]; }

if [ -n "${PYTHON:-}" ]; then py="$PYTHON"; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
if compgen -G ".whl/*.whl" >/dev/null; then
  # --no-deps: the machine's own torch and friends stay; only what it lacks is added.
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

if [ "$dry_run" = 1 ]; then
  device=cpu
  point_tier=paper-smoke
  point_flags=()
  # The later --wall-minutes wins: the molm stages start, then stop (status 3) within seconds.
  molm_flags=(--steps 2 --batch-size 4 --wall-minutes 0.2)
  video_flags=(--wall-minutes 0)
  base="$work/dry-run"  # nothing of a dry run lands in the project's caches or checkpoints
  rm -rf "$base"
else
  device=cuda
  point_tier=paper
  point_flags=(--tf32)
  # 4× the recipe's marker steps: 0.9997 of the bits of encoded crops (0.955 at 4,000), but only 0.93
  # of generated images' (issue 6's closing note): the markers want sampled latents, not more steps.
  molm_flags=(--steps 16000)
  video_flags=()
  base="$work"  # under var/ (ignored): a second call on the warm machine finds the runs and states
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$log"
fi
export MOELAB_POINTCLOUD_CACHE="$base/pointcloud-cache"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$log"

if has_part kernels; then
  say "kernels: every kernel against its twin, then times"
  flag=()
  [ "$dry_run" = 1 ] && flag=(--dry-run)
  PYTHON="$py" bash bench/kernels_gpu.sh "${flag[@]}" >"$out/kernels.txt" 2>&1 || say "kernels: failed (see kernels.txt)"
  tail -n 3 "$out/kernels.txt" | tee -a "$log"
fi

# The trainers share the GPU until the deadline, less 40 s to pack what they leave.
left=$(awk -v d="$deadline" -v now="$(date +%s)" 'BEGIN { m = (d - now - 40) / 60; printf "%.2f", (m > 0.05 ? m : 0.05) }')
[ "$dry_run" = 1 ] && left=5
say "training for at most $left minutes on $device: $parts"
names=()
pids=()
if has_part pointcloud; then
  "$py" -m bench.pointcloud --tier "$point_tier" --device "$device" --jobs 9 --wall-minutes "$left" \
    "${point_flags[@]}" >"$work/pointcloud.log" 2>&1 &
  names+=(pointcloud)
  pids+=($!)
fi
if has_part molm; then
  "$py" -m mlcore.zoo.molm train --device "$device" --wall-minutes "$left" "${molm_flags[@]}" \
    --workdir "$base/molm/work" --out "$base/molm/molm" >"$work/molm.log" 2>&1 &
  names+=(molm)
  pids+=($!)
fi
if has_part video; then
  OMP_NUM_THREADS=2 "$py" -m mlcore.zoo train video-dit-digits --threads 2 --device "$device" \
    --wall-minutes "$left" "${video_flags[@]}" --workdir "$base/video/work" \
    --out "$base/video/video-dit-digits" >"$work/video.log" 2>&1 &
  names+=(video)
  pids+=($!)
fi
failed=0
for i in "${!pids[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  case "$status" in
    0) say "${names[$i]}: finished" ;;
    3) say "${names[$i]}: out of time, state saved (run again to resume)" ;;  # molm's EXIT_OUT_OF_TIME
    *) say "${names[$i]}: failed with status $status (see its log)"; failed=$((failed + 1)) ;;
  esac
done

pack() {  # pack NAME PATHS...: one archive per part (≤ 16 MiB each comes back), its log included
  local name="$1"
  shift
  local present=()
  for p in "$@"; do [ -e "$p" ] && present+=("$p"); done
  if [ ${#present[@]} -gt 0 ]; then
    tar -czf "$out/$name.tar.gz" "${present[@]}"
    say "packed $name: $(du -h "$out/$name.tar.gz" | cut -f1)"
  fi
}
if has_part pointcloud; then
  # The finished runs are the rows of one compact file beside the state folder (bench/cache.py).
  pack pointcloud "$MOELAB_POINTCLOUD_CACHE.jsonl" "$MOELAB_POINTCLOUD_CACHE/state/logs" \
    "$work/pointcloud.log"
fi
has_part molm && pack molm "$base/molm/molm" "$base/molm/work/train_log.jsonl" "$work/molm.log"
has_part video && pack video "$base/video/video-dit-digits" "$work/video.log"
say "done in $(($(date +%s) - started)) s, $failed part(s) failed"
exit "$failed"
