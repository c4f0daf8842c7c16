#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright drives it; it never downloads a browser).
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core
fi
