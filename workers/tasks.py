"""The tasks: an interface, not a place for logic. Anything a task would "know" about a kind
belongs in the kind's module in ``mlcore/jobs/``."""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from webapp.celery import LIBRARY_INGEST, REAP, RUN_JOB, app
from workers import scratch  # noqa: F401  (its worker_ready handler sweeps this host's disk)

log = logging.getLogger(__name__)
_status_beat: Any = None


@app.task(name=RUN_JOB, bind=True, ignore_result=True, acks_late=False)
def run_job(self: Any, job_id: str) -> str:
    from django.conf import settings

    worker = self.request.hostname or None
    if settings.WORKER_FRESH_PROCESS_PER_JOB:
        from workers.forked import run_job_in_fresh_process

        return run_job_in_fresh_process(job_id, worker=worker)
    from workers.lifecycle import run_job as run

    return run(job_id, worker=worker)


@app.task(name=REAP, ignore_result=True)
def reap_stale_jobs() -> list[str]:
    from workers.reaper import reap_stale_jobs as reap
    from workers.reaper import requeue_stale_ingests

    requeued = requeue_stale_ingests()
    if requeued:
        log.warning("asked again to validate %d library item(s): %s", len(requeued), requeued)
    reaped = reap()
    if reaped:
        log.warning("reaped %d job(s) with stale heartbeats: %s", len(reaped), ", ".join(reaped))
    return reaped


@app.task(name=LIBRARY_INGEST, ignore_result=True)
def library_ingest(item_id: int) -> str:
    """Validate an uploaded, promoted or registered library item before jobs may use it."""
    from webapp.library.ingest import ingest_item

    return ingest_item(item_id)


@signals.worker_init.connect
def preload_job_modules(**_: Any) -> None:
    """In the worker's parent, before the pool forks (see workers/preload.py)."""
    from django.conf import settings

    from workers.preload import PreloadError, preload

    try:
        preload(settings.WORKER_PRELOAD_MODULES)
    except PreloadError as exc:
        # Celery logs and swallows a handler's Exception; a worker that would fail every job must not start.
        log.critical("%s", exc)
        raise SystemExit(f"worker not started: {exc}") from None


@signals.worker_ready.connect
def start_status_beat(sender: Any = None, **_: Any) -> None:
    from workers.status import StatusBeat, queues_of

    global _status_beat
    _status_beat = StatusBeat(hostname=sender.hostname, queues=queues_of(sender))
    _status_beat.start()


@signals.worker_shutdown.connect
def stop_status_beat(**_: Any) -> None:
    if _status_beat is not None:
        _status_beat.stop()


@signals.task_failure.connect
def fail_on_hard_time_limit(sender: Any = None, task_id: str = "", exception: Any = None, args: Any = (), **_: Any):
    """The hard limit kills the child, so the task cannot record it: the parent does, here."""
    from billiard.exceptions import TimeLimitExceeded

    if getattr(sender, "name", "") != RUN_JOB or not isinstance(exception, TimeLimitExceeded) or not args:
        return
    from django.utils import timezone

    from webapp.jobs.models import Job

    Job.objects.filter(pk=args[0], status=Job.Status.RUNNING).update(
        status=Job.Status.FAILED,
        finished_at=timezone.now(),
        error="Stopped: the job ran past its hard time limit and was killed. Reduce its size or steps.",
    )
