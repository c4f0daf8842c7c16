#!/usr/bin/env bash
# The test suite against real PostgreSQL, Redis and Celery workers (see scripts/ensure-services.sh).
set -euo pipefail
export DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/moelab}"
export CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/14}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export MOELAB_EXTRA_KINDS="${MOELAB_EXTRA_KINDS:-tests.jobkinds.exercise}"
export TRITON_INTERPRET="${TRITON_INTERPRET:-1}"
export PYTHONHASHSEED=0
mkdir -p test-artifacts
.venv/bin/pytest -p no:cacheprovider --timeout=600 "$@"
