"""One compact cache file per study: ``bench/cache/NAME.jsonl``.

Each line is one finished configuration, ``{"key": ..., "value": ...}``: the key is the name the
configuration was cached under when every row was a file of its own (its path under the study's
old cache folder, without ``.json``), so the keys that name a configuration — config stamps, the
zoo models' fingerprints — are unchanged. A new result is appended as one line, so an interrupted
run keeps what it finished and several processes (``--jobs``, split studies) can share one file: a
single ``write`` of a line opened for appending is not interleaved with another on a local disk.
A key written twice takes its last value (how :meth:`Store.put` replaces a row and
:meth:`Store.delete` removes one). Text, not gzip: a rerun's new rows read as added lines in a diff.

Large binary state (checkpoints, resumable training state) is no row: it stays in the study's
gitignored folder next to this file (``bench/cache/NAME/``).

``python -m bench.cache convert [NAME ...]`` folds a study's loose ``*.json`` files into its file
(and deletes them); ``python -m bench.cache keys NAME`` lists the keys.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent / "cache"


class Store:
    """The finished configurations of one study, read from and appended to one JSON-lines file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._rows: dict[str, Any] = {}
        self._seen: tuple[int, int] | None = None  # (size, mtime) of the file when last read

    @classmethod
    def named(cls, name: str) -> Store:
        """``bench/cache/NAME.jsonl``."""
        return cls(ROOT / f"{name}.jsonl")

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def _load(self) -> dict[str, Any]:
        # Reread when another process has appended since: the --jobs runs write while the parent waits.
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._rows, self._seen = {}, None
            return self._rows
        seen = (stat.st_size, stat.st_mtime_ns)
        if seen != self._seen:
            rows: dict[str, Any] = {}
            for line in self.path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed run: that configuration is simply not finished
                if entry.get("deleted"):
                    rows.pop(entry["key"], None)
                else:
                    rows[entry["key"]] = entry["value"]
            self._rows, self._seen = rows, seen
        return self._rows

    def __contains__(self, key: str) -> bool:
        return key in self._load()

    def get(self, key: str) -> Any | None:
        """The cached value of ``key`` (a fresh copy: callers may change it), or None."""
        rows = self._load()
        return json.loads(json.dumps(rows[key])) if key in rows else None

    def keys(self, pattern: str = "*") -> list[str]:
        """The cached keys matching a shell-style ``pattern``, in the order first written."""
        return [key for key in self._load() if fnmatch.fnmatchcase(key, pattern)]

    def _append(self, entry: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, default=float) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # After a line cut short by a killed run, start a new one rather than extend the broken one.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def put(self, key: str, value: Any) -> Any:
        """Record ``value`` under ``key`` (appended; a later put replaces an earlier one)."""
        self._append({"key": key, "value": value})
        return value

    def delete(self, key: str) -> None:
        if key in self._load():
            self._append({"key": key, "deleted": True})

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value of ``key``, computed (and recorded) when it is not cached yet."""
        found = self.get(key)
        return found if found is not None else self.put(key, compute())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


def convert(folder: Path, store: Store | None = None) -> int:
    """Fold every ``*.json`` under ``folder`` into ``folder``'s store (``folder.jsonl`` beside it),
    keyed by its path under ``folder`` without the suffix, then delete the loose files. Files inside
    a checkpoint folder (one holding safetensors weights: e.g. a trained judge) stay where they are.
    Returns the number of rows written."""
    store = store or Store(folder.with_suffix(".jsonl"))
    written = 0
    for path in sorted(folder.rglob("*.json")):
        if any(path.parent.glob("*.safetensors")) or "state" in path.relative_to(folder).parts:
            continue
        store.put(path.relative_to(folder).with_suffix("").as_posix(), json.loads(path.read_text()))
        path.unlink()
        written += 1
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(sub.iterdir()):
            sub.rmdir()
    return written


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.cache")
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="fold a study's loose JSON rows into bench/cache/NAME.jsonl")
    conv.add_argument("names", nargs="*", help="study cache folders under bench/cache (default: every one)")
    keys = sub.add_parser("keys", help="list a study's cached keys")
    keys.add_argument("name")
    keys.add_argument("--pattern", default="*")
    args = parser.parse_args(argv)
    if args.command == "keys":
        print("\n".join(Store.named(args.name).keys(args.pattern)))
        return 0
    names = args.names or sorted(p.name for p in ROOT.iterdir() if p.is_dir())
    for name in names:
        if not (ROOT / name).is_dir():
            print(f"no cache folder bench/cache/{name}", file=sys.stderr)
            return 2
        print(f"{name}: {convert(ROOT / name)} rows into bench/cache/{name}.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
