#!/usr/bin/env bash
# make run: migrate, create the demo user, then two Celery workers and the web server, on the
# embedded defaults (SQLite in WAL mode, a file-system broker) unless DATABASE_URL /
# CELERY_BROKER_URL / REDIS_URL say otherwise. Ctrl-C stops all three.
#  - the job worker: queues gpu and cpu, beat (the reaper) embedded, at a lower CPU priority;
#  - the verify worker: the portal's checks (and watermark-verify jobs), a process of its own whose
#    children keep the watermark extractor loaded, so a check is answered while a job fills every core.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
CELERY=.venv/bin/celery
HOST="${MOELAB_HOST:-127.0.0.1}"
PORT="${MOELAB_PORT:-8000}"
VAR="${MOELAB_VAR_DIR:-var}"
LOGLEVEL="${MOELAB_WORKER_LOGLEVEL:-info}"
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

# Jobs at nice 10: the scheduler then gives the verify worker and the web server about nine parts
# of a busy core in ten, so a job may use every core and a portal check still takes milliseconds.
# No gossip or mingle: the workers share nothing but the queues, and over the file-system broker
# each would be more files to poll.
nice -n "${MOELAB_JOB_NICE:-10}" $CELERY -A webapp worker -B -Q gpu,cpu -c "${MOELAB_WORKER_CONCURRENCY:-1}" \
  -n "worker@%h" -s "$VAR/celerybeat-schedule" --without-gossip --without-mingle -l "$LOGLEVEL" &
pids+=($!)
# Two children: a watermark-verify job occupies one, portal checks still find the other. Each loads
# the extractor as it starts (workers/verify.py) and keeps it.
$CELERY -A webapp worker -Q verify -c "${MOELAB_VERIFY_CONCURRENCY:-2}" -P prefork \
  -n "verify@%h" --without-gossip --without-mingle -l "$LOGLEVEL" &
pids+=($!)
$PY manage.py runserver "$HOST:$PORT" --noreload &
pids+=($!)
# Stop all as soon as one exits (e.g. the port is taken).
wait -n "${pids[@]}" || true
