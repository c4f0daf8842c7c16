"""Putting a job on its kind's queue. The task is sent by name, with the job's id only, after the
transaction that saved the row commits, so a worker never looks for a row it cannot see yet."""

from __future__ import annotations

import uuid

from django.db import transaction

from mlcore.jobs.registry import get_kind
from webapp.jobs.models import Job


def enqueue_on_commit(job: Job) -> None:
    from webapp.celery import RUN_JOB, app

    spec = get_kind(job.kind).spec
    task_id = str(uuid.uuid4())
    Job.objects.filter(pk=job.pk).update(celery_task_id=task_id)
    job.celery_task_id = task_id

    def send() -> None:
        app.send_task(
            RUN_JOB,
            args=[str(job.pk)],
            queue=job.queue,
            task_id=task_id,
            soft_time_limit=spec.soft_time_limit,
            time_limit=spec.time_limit,
        )

    transaction.on_commit(send)


def revoke(job: Job) -> None:
    """Drop a queued job's message (best effort: revokes live in the workers' memory; the
    conditional claim is what really stops a cancelled job from running)."""
    from webapp.celery import app

    if job.celery_task_id:
        app.control.revoke(job.celery_task_id)
