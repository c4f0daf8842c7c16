"""The reaper: nothing stays RUNNING forever. A job whose heartbeat went stale (its worker was
killed, lost power or ran out of memory) is marked FAILED with a reason the user can act on, the
scratch that killed jobs left on this host's disk is removed (``workers/scratch.py``; every worker
also sweeps its own host), and a library item whose validation message was lost is sent to the
workers again."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from webapp.jobs.models import Job, JobArtifact
from workers.scratch import sweep_logged


def reap_stale_jobs(*, stale_seconds: int | None = None) -> list[str]:
    """Fail RUNNING jobs without a heartbeat for ``stale_seconds`` and sweep this host's scratch of
    jobs no longer running; returns the ids of the jobs failed."""
    stale_seconds = stale_seconds or settings.HEARTBEAT_STALE_SECONDS
    now = timezone.now()
    cutoff = now - timedelta(seconds=stale_seconds)
    reaped = []
    for job_id, worker in Job.objects.filter(status=Job.Status.RUNNING, heartbeat_at__lt=cutoff).values_list(
        "pk", "worker"
    ):
        # Conditional, like the claim: a heartbeat that lands meanwhile keeps the job alive.
        if Job.objects.filter(pk=job_id, status=Job.Status.RUNNING, heartbeat_at__lt=cutoff).update(
            status=Job.Status.FAILED,
            finished_at=now,
            error=(
                f"Worker lost: {worker or 'the worker'} sent no heartbeat for over {stale_seconds} s "
                "(it was stopped, crashed or ran out of memory). Re-run the job."
            ),
        ):
            JobArtifact.objects.filter(job_id=job_id).update(unfinished=True)
            reaped.append(str(job_id))
    # After the reaping, so the jobs just failed count as no longer running. A reaped job whose
    # process still lives on this host keeps its folder (it holds the folder's lock) until it ends.
    sweep_logged()
    return reaped


def requeue_stale_ingests(*, retry_seconds: int | None = None) -> list[int]:
    """Ask again for the validation of items pending since before ``retry_seconds`` ago.

    Validation is idempotent (a delivery that finds the item done skips it), so a second message
    is harmless; without one, an item whose message was lost would stay "Validating" for good.
    """
    from webapp.library.models import LibraryItem
    from webapp.library.services import enqueue_ingest

    retry_seconds = retry_seconds or settings.LIBRARY_INGEST_RETRY_SECONDS
    cutoff = timezone.now() - timedelta(seconds=retry_seconds)
    # Never sent at all (the process died between commit and send) counts as lost too.
    lost = Q(ingest_sent_at__lt=cutoff) | Q(ingest_sent_at__isnull=True, created_at__lt=cutoff)
    stale = LibraryItem.objects.filter(lost, status=LibraryItem.Status.PENDING)
    items = list(stale)
    for item in items:
        enqueue_ingest(item)
    return [item.pk for item in items]
