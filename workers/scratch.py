"""A job's scratch on a worker's disk, and the sweep that removes what killed jobs left behind.

Each attempt gets one folder, ``<tmp>/moelab-job-<job id>-<random>/``: the kind's ``ctx.workdir``
is ``work/`` inside it, and while the job runs the process's temporary directory points into it,
so everything else the job writes "to /tmp" lands there too — its uploads, its log file, unsealed
key files, zipped artifacts, a library's own temporary files. A job that ends removes the folder;
a job whose worker was killed with SIGKILL (OOM killer, hard time limit, ``docker kill``) cannot,
and a sweep does it instead.

The sweep runs in the reaper (beat, on one worker) and in every worker's parent process, at start
and then every ``SCRATCH_SWEEP_SECONDS``, because a folder lives on the host that made it: the
reaper on one host cannot reach another host's disk, and a pool child killed by the OOM killer is
replaced without the worker restarting. It removes a folder only when both hold:

- no live process holds the folder's lock. The running job keeps an exclusive ``flock`` on the
  folder for as long as it lives and the kernel drops it when the process dies, however it dies,
  so a job that the reaper gave up on but that is still running on this host keeps its files;
- the database says the job is not RUNNING (or no longer exists), which also covers the moment
  between creating the folder and taking its lock (the job was claimed before either).

Log files at the top of the temporary directory (``moelab-log-<job id>-*.txt``, from workers that
wrote logs beside the folder) follow the same database rule and the lock of their job's folder.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import signals

from webapp.scratch import try_lock

log = logging.getLogger(__name__)

PREFIX = "moelab-job-"
#: ``moelab-job-<uuid>-<random>`` folders and ``moelab-log-<uuid>-<random>.txt`` files.
_ENTRY = re.compile(r"^moelab-(?P<what>job|log)-(?P<job>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-")


@dataclass
class JobScratch:
    """One attempt's scratch folder, locked and made the process's temporary directory until ``remove``."""

    root: Path
    _fd: int
    _previous_tempdir: str | None = field(default=None)

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @classmethod
    def create(cls, job_id: object, *, redirect_tempfiles: bool = True) -> JobScratch:
        # mkdtemp makes the folder 0700: keys and uploads inside are readable by this user only.
        root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{job_id}-"))
        fd = try_lock(root)
        if fd is None:  # pragma: no cover - nobody else knows the random name yet
            raise RuntimeError(f"scratch folder {root.name} is locked by another process")
        (root / "work").mkdir()
        scratch = cls(root=root, _fd=fd)
        if redirect_tempfiles:
            # Process-wide: workers run one job per process (prefork pool), so nothing else in this
            # process writes temporary files meanwhile; ``remove`` puts the previous value back.
            scratch._previous_tempdir = tempfile.tempdir
            tempfile.tempdir = str(root)
        return scratch

    def remove(self) -> None:
        if tempfile.tempdir == str(self.root):
            tempfile.tempdir = self._previous_tempdir
        # Remove before unlocking, so a sweep never sees the folder unlocked while we still use it.
        shutil.rmtree(self.root, ignore_errors=True)
        os.close(self._fd)


def _candidates(directory: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        match = _ENTRY.match(entry.name)
        if match is None:
            continue
        if match["what"] == "job" and not entry.is_dir(follow_symlinks=False):
            continue
        if match["what"] == "log" and not entry.is_file(follow_symlinks=False):
            continue
        found.setdefault(match["job"], []).append(Path(entry.path))
    return found


def _running(job_ids: list[str]) -> set[str]:
    from webapp.jobs.models import Job

    ids = [uuid.UUID(job_id) for job_id in job_ids]
    rows = Job.objects.filter(pk__in=ids, status=Job.Status.RUNNING).values_list("pk", flat=True)
    return {str(pk) for pk in rows}


def sweep(directory: Path | None = None) -> list[Path]:
    """Remove the scratch of jobs that are not RUNNING and whose process is gone; returns what went."""
    directory = Path(directory or tempfile.gettempdir())
    found = _candidates(directory)
    if not found:
        return []
    running = _running(list(found))
    removed: list[Path] = []
    for job_id, paths in found.items():
        if job_id in running:
            continue
        folders = [p for p in paths if p.name.startswith(PREFIX)]
        locks: list[int] = []
        try:
            for folder in folders:
                try:
                    fd = try_lock(folder)
                except FileNotFoundError:  # its own process removed it meanwhile
                    continue
                if fd is None:
                    break  # a live process still works in it (e.g. a reaped job that is not dead yet)
                locks.append(fd)
            else:
                for path in paths:
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
                    if not path.exists():
                        removed.append(path)
        finally:
            for fd in locks:
                os.close(fd)
    return removed


def sweep_logged(directory: Path | None = None) -> list[Path]:
    """``sweep``, logging what it removed; never raises (a failed sweep is retried by the next one)."""
    try:
        removed = sweep(directory)
    except Exception:
        log.exception("scratch sweep failed")
        return []
    if removed:
        log.warning(
            "removed %d scratch folder(s) and file(s) of jobs that are no longer running: %s",
            len(removed),
            ", ".join(p.name for p in removed),
        )
    return removed


class ScratchSweeper:
    """A daemon thread in the worker's parent process: sweep now, then every ``interval`` seconds."""

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scratch-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from django.conf import settings
        from django.db import connection

        from webapp.scratch import sweep_logged as sweep_web_logged
        from workers.resume import sweep_resume

        try:
            while True:
                sweep_logged()
                sweep_web_logged()  # under ``make run`` the web server shares this host's disk
                try:
                    sweep_resume(settings.RESUME_DIR, days=settings.RESUME_DAYS)
                except OSError:
                    log.exception("resume sweep failed")
                if self._stop.wait(self.interval):
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


_sweeper: ScratchSweeper | None = None


@signals.worker_ready.connect
def start_scratch_sweeper(**_: Any) -> None:
    """Each worker host cleans its own disk: the reaper runs on one worker only."""
    from django.conf import settings

    global _sweeper
    if _sweeper is None and settings.SCRATCH_SWEEP_SECONDS > 0:
        _sweeper = ScratchSweeper(interval=settings.SCRATCH_SWEEP_SECONDS)
        _sweeper.start()


@signals.worker_shutdown.connect
def stop_scratch_sweeper(**_: Any) -> None:
    global _sweeper
    if _sweeper is not None:
        _sweeper.stop()
        _sweeper = None
