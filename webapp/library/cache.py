"""The worker's local copy of library items: a folder per sha256, bounded in bytes, least recently
used first out. Django-free, so it is tested (and could be reused) without a database.

Items are immutable, so an entry never goes stale: a hit is a hit. A ``.complete`` marker makes an
interrupted fill start again; its mtime is the entry's last use. A lock file serialises workers
on one host, so two fills of one item never race and eviction never removes a folder mid-fill.

Inside :func:`leases` (the worker wraps each job in it), every entry handed out is also held with
a shared ``flock`` on its ``.lease`` file until the job ends, and eviction skips entries it cannot
lock exclusively: a sibling worker process filling the cache never deletes a model or dataset a
running job still reads. The cache may then exceed its bound until those jobs end.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import IO

_COMPLETE = ".complete"
_SIZE = ".size"
_DATA = "data"
_LEASE = ".lease"

#: The lease handles of the job running in this context; ``None`` outside :func:`leases`.
_held: ContextVar[list[IO[bytes]] | None] = ContextVar("library_cache_leases", default=None)


@contextmanager
def leases() -> Iterator[None]:
    """Hold every entry handed out in this block against eviction until the block ends."""
    held: list[IO[bytes]] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
        for handle in held:
            handle.close()  # closing the file releases its flock


def _take_lease(entry: Path) -> None:
    held = _held.get()
    if held is not None:
        handle = (entry / _LEASE).open("ab")
        fcntl.flock(handle, fcntl.LOCK_SH)
        held.append(handle)


def _remove_unless_leased(entry: Path) -> bool:
    """Delete ``entry`` unless a job holds it; flock conflicts between open files, even in one process."""
    with (entry / _LEASE).open("ab") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(entry, ignore_errors=True)
        return True


def _mark_used(marker: Path) -> None:
    # Explicit nanoseconds: a plain touch takes the kernel's coarse clock, which can tie two uses.
    now = time.time_ns()
    os.utime(marker, ns=(now, now))


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


class LibraryCache:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def get(self, key: str, fill: Callable[[Path], Path | None]) -> Path:
        """The cached folder for ``key``; on a miss ``fill(folder)`` writes it (and may return a
        subfolder to hand out instead), then older entries are evicted down to ``max_bytes``."""
        if not key.isalnum():
            raise ValueError(f"cache keys are sha256 hex digests, not {key!r}")
        entry = self.root / key
        with self._locked():
            if (entry / _COMPLETE).exists():
                _mark_used(entry / _COMPLETE)
                _take_lease(entry)
                return self._data(entry)
            shutil.rmtree(entry, ignore_errors=True)
            (entry / _DATA).mkdir(parents=True)
            try:
                handed = fill(entry / _DATA)
            except BaseException:
                shutil.rmtree(entry, ignore_errors=True)
                raise
            relative = Path(handed).relative_to(entry / _DATA).as_posix() if handed else "."
            (entry / _SIZE).write_text(f"{folder_bytes(entry / _DATA)}\n{relative}\n")
            (entry / _COMPLETE).touch()
            _mark_used(entry / _COMPLETE)
            _take_lease(entry)
            self._evict(keep=key)
            return self._data(entry)

    def _data(self, entry: Path) -> Path:
        relative = (entry / _SIZE).read_text().splitlines()[1]
        return entry / _DATA / relative if relative != "." else entry / _DATA

    def entries(self) -> list[tuple[str, int, float]]:
        """``(key, bytes, last used)`` of every complete entry, least recently used first."""
        found = []
        for entry in self.root.iterdir() if self.root.is_dir() else []:
            marker = entry / _COMPLETE
            if marker.exists():
                size = int((entry / _SIZE).read_text().splitlines()[0])
                found.append((entry.name, size, marker.stat().st_mtime_ns))
        return sorted(found, key=lambda e: e[2])

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def _evict(self, *, keep: str) -> None:
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for key, size, _ in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue  # the item a job is about to use stays, even when it alone exceeds the cap
            if _remove_unless_leased(self.root / key):
                total -= size
