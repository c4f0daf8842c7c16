"""The reaper: nothing stays RUNNING forever. A job whose heartbeat went stale (its worker was
killed, lost power or ran out of memory) is marked FAILED with a reason the user can act on."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from webapp.jobs.models import Job, JobArtifact


def reap_stale_jobs(*, stale_seconds: int | None = None) -> list[str]:
    """Fail RUNNING jobs without a heartbeat for ``stale_seconds``; returns their ids."""
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
    return reaped
