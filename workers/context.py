"""The worker's ``ctx``: persists what a job reports to its ``Job`` row and to storage.

Progress, log tail, metrics and charts are written by a pulse thread about once a second (and
once more on close), never on every call, so a kind that reports each of 10,000 steps costs the
database ten thousand times less. Artifacts go to storage as soon as they are recorded, under
the attempt's prefix. Cancellation is read from ``job.cancel_requested`` by the same thread.
"""

from __future__ import annotations

import collections
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from mlcore.jobs.context import Artifact, JobContext, Registration
from mlcore.jobs.spec import JobError
from webapp.jobs import storage
from webapp.jobs.models import Job

log = logging.getLogger(__name__)

TAIL_LINES = 200
#: The full log goes to storage this often while a job runs (and once at the end): object stores
#: cannot append, so each upload rewrites the file.
LOG_UPLOAD_SECONDS = 15.0


class DatabaseContext(JobContext):
    def __init__(self, job: Job, *, workdir: Path, device: str, pulse_seconds: float = 1.0) -> None:
        super().__init__(workdir=workdir, device=device)
        self.job = job
        self.attempt = job.attempt
        self.pulse_seconds = pulse_seconds
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._log_file = Path(tempfile.mkstemp(prefix=f"moelab-log-{job.pk}-", suffix=".txt")[1])
        self._log = self._log_file.open("a", encoding="utf-8")
        self._dirty: set[str] = set()
        self._log_dirty = False
        self._state_lock = threading.Lock()
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the pulse thread: liveness, throttled writes, cancellation --------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._pulse, name=f"job-pulse-{self.job.pk}", daemon=True)
        self._thread.start()

    def _pulse(self) -> None:
        last_upload = time.monotonic()
        try:
            while not self._stop.wait(self.pulse_seconds):
                try:
                    self.flush()
                    if Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists():
                        self._cancel.set()
                    if time.monotonic() - last_upload > LOG_UPLOAD_SECONDS:
                        self.upload_log()
                        last_upload = time.monotonic()
                except Exception:  # a database blip must not kill liveness for good
                    log.exception("job %s: pulse failed", self.job.pk)
                    close_old_connections()
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def flush(self) -> None:
        """One UPDATE with the heartbeat and whatever changed since the last one."""
        fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
        with self._state_lock:
            dirty, self._dirty = self._dirty, set()
            if "progress" in dirty:
                fields["progress"] = self.fraction
                fields["stage"] = self.stage[:200]
            if "metrics" in dirty:
                with self._lock:
                    fields["metrics"] = self.metrics.to_json()
            if "charts" in dirty:
                fields["charts"] = dict(self.charts)
            if "log" in dirty:
                fields["log_tail"] = "\n".join(self.tail)
        # Only while RUNNING: once the reaper or a finish has moved the job on, stop writing and stop.
        if not Job.objects.filter(pk=self.job.pk, status=Job.Status.RUNNING).update(**fields):
            self._cancel.set()

    # -- hooks ---------------------------------------------------------------------------------------
    def _mark(self, what: str) -> None:
        with self._state_lock:
            self._dirty.add(what)

    def _on_progress(self) -> None:
        self._mark("progress")

    def _on_log(self, line: str) -> None:
        with self._state_lock:
            self.tail.append(line)
            self._log.write(line + "\n")
            self._dirty.add("log")
            self._log_dirty = True

    def _on_metrics(self) -> None:
        self._mark("metrics")

    def _on_chart(self, name: str, spec: dict[str, Any]) -> None:
        self._mark("charts")

    def _on_artifact(self, item: Artifact) -> None:
        storage.store_artifact(
            job=self.job, name=item.name, path=item.path, media_type=item.media_type, attempt=self.attempt
        )

    def _on_register(self, item: Registration) -> None:
        from webapp.library.ingest import register_output

        try:
            entry = register_output(job=self.job, kind=item.kind, path=item.path, card=item.card)
        except JobError as exc:  # a refused output is the kind's problem, not a reason to fail the run
            self.log(f"the team library refused {item.path.name}: {exc}")
            return
        if entry.status == entry.Status.READY:
            self.log(f"added {item.path.name} to the team library as {entry.reference} ({item.kind})")
        else:
            self.log(f"the team library refused {item.path.name}: {entry.error}")

    def _on_allowance(self, name: str, wanted: int) -> int:
        """Budgets are the platform's: charged to the job's team and the address it was submitted from."""
        from webapp.portal.budget import take_for_job

        return take_for_job(self.job, name, wanted)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def upload_log(self) -> None:
        with self._state_lock:
            if not self._log_dirty:
                return
            self._log.flush()
            self._log_dirty = False
        storage.write_log(self.job.pk, self._log_file.read_text(encoding="utf-8"))

    def close(self) -> None:
        """Final flush of throttled state and of the full log to storage."""
        self.stop()
        self.flush()
        with self._state_lock:
            self._log_dirty = True  # always leave a log file, even an empty one
        self.upload_log()

    def discard(self) -> None:
        self._log.close()
        self._log_file.unlink(missing_ok=True)
