"""Jobs in every state for the page tests.

A finished job is made the way a worker makes one, minus the queue: submitted through
``job_submit`` (the spec validates it), run by the test kind's real ``run`` with an in-memory
``ctx``, and its outputs recorded on the row and in storage with the platform's own helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from mlcore.jobs import InMemoryContext, provenance
from mlcore.jobs.registry import get_kind
from tests.workers.conftest import media_in_tmp  # noqa: F401  (autouse: files go to a temporary folder)
from webapp.accounts.models import Team
from webapp.jobs import services, storage
from webapp.jobs.models import Job

MakeJob = Callable[..., Job]


def record_run(job: Job, *, status: str = Job.Status.SUCCEEDED, error: str = "", traceback: str = "") -> Job:
    """Run the job's kind in-process and store what it reported, as the worker's context would."""
    kind = get_kind(job.kind)
    ctx = InMemoryContext()
    kind.run(dict(job.params), {}, ctx)
    now = timezone.now()
    job.status = status
    job.progress = ctx.fraction
    job.stage = ctx.stage
    job.started_at = now - timezone.timedelta(seconds=3)
    job.finished_at = now
    job.worker = "cpu-1@testhost"
    job.device = "cpu"
    job.attempt = 1
    job.metrics = ctx.metrics.to_json()
    job.charts = ctx.charts
    job.log_tail = "\n".join(ctx.lines[-200:])
    job.error = error
    job.traceback = traceback
    job.provenance = provenance.collect(seed=job.params.get("seed"), device="cpu", inputs={})
    job.save()
    for item in ctx.artifacts.values():
        artifact = storage.store_artifact(
            job=job, name=item.name, path=item.path, media_type=item.media_type, attempt=1
        )
        if status != Job.Status.SUCCEEDED:
            artifact.unfinished = True
            artifact.save(update_fields=["unfinished"])
    return job


@pytest.fixture
def make_job(team: Team, owner: User) -> MakeJob:
    """``make_job(status=..., by=user, **params)``: a ``test-exercise`` job in that state."""

    def make(status: str = Job.Status.SUCCEEDED, *, by: User | None = None, **params: Any) -> Job:
        job = services.job_submit(team=team, user=by or owner, kind="test-exercise", raw_params=params)
        if status == Job.Status.RUNNING:
            Job.objects.filter(pk=job.pk).update(
                status=status, progress=0.4, stage="step 2 of 5", started_at=timezone.now(), attempt=1
            )
            job.refresh_from_db()
        elif status in (Job.Status.SUCCEEDED, Job.Status.FAILED, Job.Status.CANCELLED):
            error = "" if status == Job.Status.SUCCEEDED else "Asked to fail at step 2."
            tb = 'Traceback (most recent call last):\n  File "exercise.py"\nJobError' if error else ""
            record_run(job, status=status, error=error, traceback=tb)
        return job

    return make


@pytest.fixture
def tiny_upload(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("remember the router\n")
    return path


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    """The default hasher takes ~0.5 s per user by design; tests make five users each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
