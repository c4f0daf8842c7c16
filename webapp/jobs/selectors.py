"""Reads for jobs. ``job_for_user`` is the one place that decides who may see a job: outsiders
get 404 (never a 403 that would confirm the job exists); a viewer asking to write gets 403."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404
from django.utils import timezone

from mlcore.jobs.registry import all_kinds
from webapp.accounts.models import Membership, Team
from webapp.jobs.models import Job, JobArtifact, WorkerStatus

#: Large fields the dashboard list never shows; deferred so 10,000 rows stay cheap.
LIST_DEFERRED = ("metrics", "charts", "log_tail", "provenance", "traceback", "params")


def jobs_for_team(
    team: Team, *, kind: str | None = None, status: str | None = None, user: AbstractBaseUser | int | None = None
) -> QuerySet[Job]:
    jobs = Job.objects.filter(team=team).select_related("submitted_by").defer(*LIST_DEFERRED)
    if kind:
        jobs = jobs.filter(kind=kind)
    if status:
        jobs = jobs.filter(status=status)
    if user is not None:
        jobs = jobs.filter(submitted_by=user)
    return jobs.order_by("-created_at")


def _parse_id(job_id: uuid.UUID | str) -> uuid.UUID:
    try:
        return job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
    except ValueError:
        raise Http404("No such job.") from None


def job_for_user(user: AbstractBaseUser | AnonymousUser, job_id: uuid.UUID | str, *, write: bool = False) -> Job:
    if not user.is_authenticated:
        raise Http404("No such job.")
    job = Job.objects.select_related("team", "submitted_by").filter(pk=_parse_id(job_id)).first()
    membership = None if job is None else Membership.objects.filter(team=job.team, user=user).first()
    if job is None or membership is None:
        raise Http404("No such job.")
    if write and not membership.can_write:
        raise PermissionDenied("Viewers cannot change jobs.")
    return job


def artifacts_of(job: Job) -> QuerySet[JobArtifact]:
    """The artifacts of the job's latest attempt (earlier attempts' files stay in storage)."""
    return JobArtifact.objects.filter(job=job, attempt=job.attempt).order_by("created_at", "id")


def artifact_for_user(user: AbstractBaseUser | AnonymousUser, job_id: uuid.UUID | str, name: str) -> JobArtifact:
    job = job_for_user(user, job_id)
    artifact = JobArtifact.objects.filter(job=job, name=name).order_by("-attempt").first()
    if artifact is None:
        raise Http404("No such artifact.")
    return artifact


def status_counts(team: Team) -> dict[str, int]:
    """Jobs per status, every status present (zero when none), in one query."""
    counts = dict.fromkeys(Job.Status.values, 0)
    # COUNT(*), not COUNT(id): PostgreSQL can then answer from the (team, status) index alone,
    # which keeps a 10,000-job team's dashboard about as fast as a small team's.
    for row in Job.objects.filter(team=team).order_by().values("status").annotate(n=Count("*")):
        counts[row["status"]] = row["n"]
    return counts


def workers_up() -> QuerySet[WorkerStatus]:
    cutoff = timezone.now() - timedelta(seconds=settings.WORKER_UP_SECONDS)
    return WorkerStatus.objects.filter(last_seen__gte=cutoff).order_by("hostname")


def kind_choices() -> list[tuple[str, str]]:
    return [(kind.name, kind.spec.title) for kind in all_kinds()]


#: How many past runs of a kind an estimate looks at (recent ones: code and machines change).
ESTIMATE_RUNS = 20


def queue_position(job: Job) -> int | None:
    """1 for the next job a worker of the job's queue takes, 2 for the one after, …; None once it
    has started. Counts every team's jobs (the workers are shared) without showing any of them."""
    if job.status != Job.Status.QUEUED:
        return None
    ahead = Job.objects.filter(queue=job.queue, status=Job.Status.QUEUED, created_at__lt=job.created_at).count()
    return ahead + 1


def typical_duration(kind: str) -> tuple[timedelta, int] | None:
    """The median wall-clock time of the kind's last finished runs, and how many it is taken over."""
    rows = list(
        Job.objects.filter(kind=kind, status=Job.Status.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:ESTIMATE_RUNS]
    )
    if not rows:
        return None
    durations = sorted(finished - started for started, finished in rows)
    middle = len(durations) // 2
    median = durations[middle] if len(durations) % 2 else (durations[middle - 1] + durations[middle]) / 2
    return median, len(durations)


def scalars_of(jobs: list[Job]) -> dict[str, dict[str, object]]:
    """Each finished job's scalar metrics by job id, in one query that leaves the (possibly long)
    series and charts in the database: the jobs table defers ``metrics``."""
    # The status is tested in the query, so a page costs one query whatever its jobs' states.
    ids = [job.pk for job in jobs]
    if not ids:
        return {}
    rows = Job.objects.filter(pk__in=ids, status=Job.Status.SUCCEEDED).values_list("pk", "metrics__scalars")
    return {str(pk): scalars for pk, scalars in rows if isinstance(scalars, dict)}
