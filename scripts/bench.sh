#!/usr/bin/env bash
# make bench: every benchmark's quick tier; make bench-NAME [FULL=1]: one study.
# `platform` needs Django, PostgreSQL and Redis, so it runs on a database of its own, migrated first.
set -euo pipefail
tier="$1"; shift
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t names < <(.venv/bin/python -m bench --list)
fi
for name in "${names[@]}"; do
  echo "== bench $name ($tier)"
  if [ "$name" = platform ]; then
    bash scripts/ensure-services.sh >/dev/null
    db="${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/moelab_bench}"
    psql "${db%/*}/postgres" -qtc "SELECT 1 FROM pg_database WHERE datname='${db##*/}'" | grep -q 1 \
      || psql "${db%/*}/postgres" -qc "CREATE DATABASE ${db##*/}"
    DATABASE_URL="$db" CELERY_BROKER_URL="${BENCH_CELERY_BROKER_URL:-redis://127.0.0.1:6379/10}" \
      REDIS_URL="${BENCH_REDIS_URL:-redis://127.0.0.1:6379/9}" MOELAB_EXTRA_KINDS=tests.jobkinds.exercise \
      bash -c '.venv/bin/python manage.py migrate --noinput -v0 && .venv/bin/python -m bench platform --tier "$0"' "$tier"
  else
    .venv/bin/python -m bench "$name" --tier "$tier"
  fi
done
