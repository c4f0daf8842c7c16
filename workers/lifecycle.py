"""A job's life on a worker: claim, prepare, run through ``ctx``, finish (``docs/architecture.md``,
"Job lifecycle"). The task in :mod:`workers.tasks` only calls :func:`run_job`."""

from __future__ import annotations

import logging
import socket
import threading

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from mlcore.jobs import provenance, runner
from mlcore.jobs.registry import UnknownKind, get_kind
from mlcore.jobs.runner import Outcome
from mlcore.jobs.spec import JobError, ValidationError
from webapp.jobs import storage
from webapp.jobs.models import Job, JobArtifact
from webapp.jobs.resolver import PlatformResolver
from webapp.jobs.services import safe_message
from webapp.library.cache import leases as library_leases
from workers.context import DatabaseContext
from workers.device import task_device
from workers.resume import forget, resume_folder
from workers.scratch import JobScratch

log = logging.getLogger(__name__)


def claim(job_id: str, *, worker: str) -> Job | None:
    """Move the job from QUEUED to RUNNING; ``None`` if another delivery (or a cancel) got there first.

    A duplicate delivery can race us here; the conditional update makes exactly one winner.
    """
    now = timezone.now()
    won = Job.objects.filter(pk=job_id, status=Job.Status.QUEUED).update(
        status=Job.Status.RUNNING, started_at=now, heartbeat_at=now, worker=worker, attempt=F("attempt") + 1
    )
    return Job.objects.select_related("team").get(pk=job_id) if won else None


def finish(job: Job, outcome: Outcome) -> bool:
    """Record the outcome, only if the job is still RUNNING (the reaper may have given up on it).

    ``error`` is what the job page, the API and ``moelab submit`` show, so server paths are cut
    from it here, whatever raised it; ``traceback`` is for staff (the admin) and the log only.
    """
    if outcome.reference:
        # The reference in the user's message finds this entry (and the admin's copy of it).
        log.error("job %s: internal error (reference %s)\n%s", job.pk, outcome.reference, outcome.traceback)
    status = {"succeeded": Job.Status.SUCCEEDED, "failed": Job.Status.FAILED, "cancelled": Job.Status.CANCELLED}
    fields = {
        "status": status[outcome.status],
        "finished_at": timezone.now(),
        "error": safe_message(outcome.error),
        "traceback": outcome.traceback,
    }
    if outcome.status == "succeeded":
        fields["progress"] = 1.0
    done = bool(Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING).update(**fields))
    if outcome.status != "succeeded":
        JobArtifact.objects.filter(job=job, attempt=job.attempt).update(unfinished=True)
    return done


def timed_out(job: Job) -> Outcome:
    limit = get_kind(job.kind).spec.soft_time_limit
    return Outcome(
        "failed",
        error=f"Timed out: the job ran past its time limit ({limit} s). Reduce its size or steps.",
        traceback="SoftTimeLimitExceeded",
    )


def _execute(job: Job, ctx: DatabaseContext) -> Outcome:
    try:
        kind = get_kind(job.kind)
    except UnknownKind as exc:
        return Outcome("failed", error=f"{exc} This worker cannot run it; ask an admin to update the workers.")
    # The library items the job gets stay in the worker's cache until it ends (see library_leases);
    # the unsealed key files the resolver hands out are removed when it ends, however it ends.
    resolver = PlatformResolver(team=job.team_id, workdir=ctx.workdir)
    with storage.local_inputs(job) as files, library_leases(), resolver:
        try:
            params, inputs = runner.prepare(
                kind,
                job.params,
                files,
                resolver=resolver,
                workdir=ctx.workdir,
                memory_limit=settings.WORKER_MEMORY_LIMIT or None,
            )
        except ValidationError as exc:
            return Outcome("failed", error=f"Invalid parameters: {exc}")
        except JobError as exc:
            return Outcome("failed", error=str(exc))
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:  # a resolver or a check that broke: ours to fix, not the user's
            return runner.internal_error(exc, during="while preparing the inputs")
        record = provenance.collect(seed=runner.seed_of(kind, params), device=ctx.device_name, inputs=inputs)
        Job.objects.filter(pk=job.pk).update(provenance=record)
        ctx.resume_dir = resume_folder(
            settings.RESUME_DIR, team=job.team_id, kind=job.kind, params=params, provenance=record
        )
        outcome = runner.execute(kind, params, inputs, ctx, passthrough=(SoftTimeLimitExceeded,))
        if outcome.status != "failed":  # a failure keeps what it finished for the next attempt
            forget(ctx.resume_dir)
        return outcome


def run_job(job_id: str, *, worker: str | None = None) -> str:
    """Claim and run one job; returns the final status, or ``"skipped"`` for a lost claim."""
    worker = worker or socket.gethostname()
    job = claim(job_id, worker=worker)
    if job is None:
        log.info("job %s: not queued any more (duplicate delivery or cancelled); skipping", job_id)
        return "skipped"
    # One locked folder per attempt holds everything the job writes to disk; a sweep removes it
    # if this process is killed before the ``finally`` below (workers/scratch.py). Only a process
    # of its own (a prefork child, whose main thread runs the task) redirects its temporary files.
    scratch = JobScratch.create(job.pk, redirect_tempfiles=threading.current_thread() is threading.main_thread())
    workdir = scratch.workdir
    ctx: DatabaseContext | None = None
    try:
        device = task_device()
        Job.objects.filter(pk=job.pk).update(device=device)
        ctx = DatabaseContext(job, workdir=workdir, device=device)
        ctx.start()
        try:
            outcome = _execute(job, ctx)
        except SoftTimeLimitExceeded:
            ctx.close()
            outcome = timed_out(job)
        finally:
            ctx.stop()
    except Exception as exc:  # the platform itself failed (storage, database): still end the job
        outcome = runner.internal_error(exc, during="in the worker")
    finally:
        if ctx is not None:
            ctx.discard()
        scratch.remove()
    finish(job, outcome)
    log.info("job %s: %s %s", job.pk, outcome.status, outcome.error)
    return outcome.status
