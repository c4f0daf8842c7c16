"""The web processes' temporary folders, and the sweep that removes what a killed process left.

A submission spools the user's uploads into a folder of its own and unpacks archives there to check
them; a process that ends normally removes it. A gunicorn worker killed mid-request (its timeout is
a SIGKILL, so is the OOM killer's) cannot, and its folder would keep a user's files on the host's disk
for as long as the disk lives. Django's own spool of a large upload (``FILE_UPLOAD_TEMP_DIR``) stays
behind the same way.

So each folder is created by :func:`scratch_folder` under :data:`PREFIX` and holds an exclusive
``flock`` for its life (the kernel drops it when the process dies, however it dies), and
:func:`sweep` removes the folders nobody holds. It runs as each web process starts (``webapp.wsgi``:
gunicorn replaces a killed worker by a new one, which sweeps) and in every job worker's periodic
sweep (one host runs both under ``make run``). A folder younger than :data:`MIN_AGE_S` is left
alone, so the instant between ``mkdtemp`` and ``flock`` is never mistaken for an orphan. Files in
``FILE_UPLOAD_TEMP_DIR`` carry no lock (Django opens them); they go once older than
:data:`UPLOAD_AGE_S`, far beyond any request's life (removing a file still open would not disturb
its reader anyway: on POSIX, an unlinked file lives until closed).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "moelab-web-"
#: Younger folders are left alone: their process may not have taken its lock yet.
MIN_AGE_S = 60.0
#: Django's upload spool files older than this belong to no live request.
UPLOAD_AGE_S = 6 * 3600.0


def try_lock(path: Path) -> int | None:
    """An exclusive, non-blocking ``flock``; ``None`` while another process holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


@contextmanager
def scratch_folder(purpose: str) -> Iterator[Path]:
    """A private (0700) temporary folder, locked while in use and removed after."""
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{purpose}-"))
    fd = try_lock(root)
    try:
        yield root
    finally:
        # Remove before unlocking, so a sweep never finds the folder unlocked while it is in use.
        shutil.rmtree(root, ignore_errors=True)
        if fd is not None:
            os.close(fd)


def _old(path: Path, age_s: float, now: float) -> bool:
    try:
        return now - path.stat().st_mtime >= age_s
    except FileNotFoundError:
        return False


def sweep(directory: Path | None = None, *, uploads: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove unlocked scratch folders in ``directory`` (the temporary directory) and old upload
    spool files in ``uploads``; returns what went."""
    now = time.time() if now is None else now
    directory = Path(directory or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = [Path(e.path) for e in os.scandir(directory) if e.name.startswith(PREFIX) and e.is_dir()]
    except FileNotFoundError:
        entries = []
    for folder in entries:
        if not _old(folder, MIN_AGE_S, now):
            continue
        try:
            fd = try_lock(folder)
        except FileNotFoundError:  # its own process removed it meanwhile
            continue
        if fd is None:
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
        if not folder.exists():
            removed.append(folder)
    if uploads is not None and uploads.is_dir():
        for entry in os.scandir(uploads):
            path = Path(entry.path)
            if entry.is_file(follow_symlinks=False) and _old(path, UPLOAD_AGE_S, now):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def sweep_logged() -> list[Path]:
    """:func:`sweep` over this host's temporary directory and Django's upload spool; never raises."""
    from django.conf import settings

    spool = getattr(settings, "FILE_UPLOAD_TEMP_DIR", None)
    try:
        removed = sweep(uploads=Path(spool) if spool else None)
    except OSError:
        log.exception("web scratch sweep failed")
        return []
    if removed:
        log.warning("removed %d temporary folder(s) and file(s) left by killed web processes", len(removed))
    return removed
