#!/usr/bin/env bash
# make run: migrate, create the demo user, then one Celery worker (all three queues, beat embedded)
# and the web server, on the embedded defaults (SQLite in WAL mode, a file-system broker) unless
# DATABASE_URL / CELERY_BROKER_URL / REDIS_URL say otherwise. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
HOST="${MOELAB_HOST:-127.0.0.1}"
PORT="${MOELAB_PORT:-8000}"
VAR="${MOELAB_VAR_DIR:-var}"
mkdir -p "$VAR/broker/queue" "$VAR/broker/processed" "$VAR/broker/control" "$VAR/media"

$PY manage.py migrate --noinput -v0
$PY manage.py moelab_demo --url "http://$HOST:$PORT"

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "MoE Lab stopped."
}
trap stop INT TERM EXIT

.venv/bin/celery -A webapp worker -B -Q gpu,cpu,verify -c "${MOELAB_WORKER_CONCURRENCY:-1}" \
  -n "worker@%h" -s "$VAR/celerybeat-schedule" -l "${MOELAB_WORKER_LOGLEVEL:-info}" &
pids+=($!)
$PY manage.py runserver "$HOST:$PORT" --noreload &
pids+=($!)
# Stop both as soon as either exits (e.g. the port is taken).
wait -n "${pids[@]}" || true
