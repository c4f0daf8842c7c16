#!/usr/bin/env bash
# make bench: every benchmark's quick tier; make bench-NAME [FULL=1]: one study.
set -euo pipefail
tier="$1"; shift
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t names < <(.venv/bin/python -m mlcore.bench --list)
fi
for name in "${names[@]}"; do
  echo "== bench $name ($tier)"
  .venv/bin/python -m mlcore.bench "$name" --tier "$tier"
done
