from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webapp.jobs.models import Job, WorkerStatus
from webapp.jobs.selectors import job_for_user, jobs_for_team, status_counts, workers_up

pytestmark = pytest.mark.django_db


def _jobs(team, user, n: int, status: str = Job.Status.QUEUED) -> list[Job]:
    return Job.objects.bulk_create(
        Job(team=team, submitted_by=user, kind="test-exercise", queue="cpu", status=status) for _ in range(n)
    )


def test_it_returns_404_to_an_outsider_and_403_to_a_viewer_who_wants_to_write(team, member, viewer, outsider) -> None:
    job = _jobs(team, member, 1)[0]
    with pytest.raises(Http404):
        job_for_user(outsider, job.id)
    with pytest.raises(Http404):
        job_for_user(member, "not-a-uuid")
    assert job_for_user(viewer, job.id) == job
    with pytest.raises(PermissionDenied):
        job_for_user(viewer, job.id, write=True)
    assert job_for_user(member, str(job.id), write=True) == job


def test_it_counts_jobs_per_status_including_zeros(team, member) -> None:
    _jobs(team, member, 2)
    _jobs(team, member, 3, Job.Status.FAILED)
    counts = status_counts(team)
    assert counts == {"queued": 2, "running": 0, "succeeded": 0, "failed": 3, "cancelled": 0}


def test_it_filters_the_teams_jobs_by_kind_status_and_person(team, owner, member, other_team, outsider) -> None:
    _jobs(team, member, 2)
    _jobs(team, owner, 1, Job.Status.FAILED)
    _jobs(other_team, outsider, 4)
    assert jobs_for_team(team).count() == 3
    assert jobs_for_team(team, status="failed", user=owner).count() == 1
    assert jobs_for_team(team, kind="other-kind").count() == 0


def _dashboard_queries(team) -> int:
    with CaptureQueriesContext(connection) as queries:
        page = list(jobs_for_team(team)[:25])
        # What a dashboard row shows; touching a deferred or related field here would add queries.
        rows = [(job.submitted_by.username, job.status, job.progress, job.stage, job.duration) for job in page]
        assert len(rows) == len(page)
        status_counts(team)
        list(workers_up())
    return len(queries)


def test_the_dashboard_reads_take_the_same_number_of_queries_for_3_and_30_jobs(team, member, owner) -> None:
    _jobs(team, member, 3)
    few = _dashboard_queries(team)
    _jobs(team, owner, 27, Job.Status.RUNNING)
    assert _dashboard_queries(team) == few == 3


def test_it_lists_only_workers_seen_in_the_last_30_seconds() -> None:
    now = timezone.now()
    WorkerStatus.objects.create(hostname="fresh", queues=["cpu"], started_at=now, last_seen=now)
    WorkerStatus.objects.create(hostname="stale", queues=["gpu"], started_at=now, last_seen=now - timedelta(seconds=31))
    assert [w.hostname for w in workers_up()] == ["fresh"]
