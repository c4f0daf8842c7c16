#!/usr/bin/env bash
# Bundle the browser code (frontend/) into webapp's static files.
set -euo pipefail
if [ -f frontend/package.json ]; then
  cd frontend
  [ -d node_modules ] || npm ci --no-audit --no-fund
  npm run build
fi
