#!/usr/bin/env bash
# Bundle the browser code (frontend/) into webapp's static files. A fresh machine with only
# Python gets Debian's Node.js and npm first (esbuild needs Node 18 or later, which Debian has).
set -euo pipefail
if [ -f frontend/package.json ]; then
  if ! command -v npm >/dev/null; then
    echo "Installing Node.js and npm from Debian to bundle the frontend (once)."
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq nodejs npm
  fi
  cd frontend
  [ -d node_modules ] || npm ci --no-audit --no-fund
  npm run build
fi
