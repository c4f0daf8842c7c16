#!/usr/bin/env bash
# Start Redis and PostgreSQL for the tests when they are not already up (idempotent).
set -euo pipefail

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if ! command -v redis-server >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server
  fi
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis-cli ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if ! command -v pg_ctlcluster >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
  fi
  version="$(ls /etc/postgresql | head -1)"
  # The tests connect as postgres over TCP without a password; a fresh Debian cluster asks for one
  # there. Trust that one role on the loopback addresses only (first match wins in pg_hba.conf).
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  grep -q '^host all postgres 127.0.0.1/32 trust' "$hba" \
    || sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 100); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.2; done
fi
pg_isready -h 127.0.0.1 -p 5432
redis-cli -h 127.0.0.1 -p 6379 ping
