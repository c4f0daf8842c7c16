"""The team dashboard: counters, filters, pagination, and live polling that stops when every job
on screen is terminal."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.platform import fill
from webapp.accounts.models import Membership, Role, Team
from webapp.dashboard.views import PAGE_SIZE
from webapp.jobs.models import Job

URL = "/t/routing-lab/"


def rows(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr data-job="([0-9a-f-]+)" data-status="(\w+)">', html)


def test_it_lists_the_teams_jobs_newest_first_with_counters(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    done = make_job(Job.Status.SUCCEEDED)
    running = make_job(Job.Status.RUNNING)
    queued = make_job(Job.Status.QUEUED)
    html = csrf_client(owner).get(URL).content.decode()
    assert rows(html) == [(str(queued.id), "queued"), (str(running.id), "running"), (str(done.id), "succeeded")]
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)<', html))
    assert counts == {"queued": "1", "running": "1", "succeeded": "1", "failed": "0"}
    assert 'aria-valuenow="40.0"' in html and "step 2 of 5" in html  # the running job's bar and stage


def test_it_filters_by_kind_status_and_person(
    owner: User, member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    mine = make_job(Job.Status.SUCCEEDED)
    theirs = make_job(Job.Status.QUEUED, by=member)
    client = csrf_client(owner)
    assert rows(client.get(URL, {"person": "mario"}).content.decode()) == [(str(theirs.id), "queued")]
    assert rows(client.get(URL, {"status": "succeeded"}).content.decode()) == [(str(mine.id), "succeeded")]
    assert len(rows(client.get(URL, {"kind": "test-exercise"}).content.decode())) == 2
    empty = client.get(URL, {"status": "failed"}).content.decode()
    assert rows(empty) == [] and "No jobs match these filters" in empty


def test_it_pages_through_many_jobs(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    jobs = [make_job(Job.Status.QUEUED) for _ in range(PAGE_SIZE + 2)]
    client = csrf_client(owner)
    first = client.get(URL).content.decode()
    second = client.get(URL, {"page": 2}).content.decode()
    assert len(rows(first)) == PAGE_SIZE and len(rows(second)) == 2
    assert {job for job, _ in rows(second)} == {str(job.id) for job in jobs[:2]}
    assert "Older →" in first and "← Newer" in second


def test_the_fragment_polls_while_a_job_on_screen_can_change(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    make_job(Job.Status.SUCCEEDED)
    make_job(Job.Status.RUNNING)
    html = csrf_client(owner).get("/t/routing-lab/jobs/").content.decode()
    assert 'hx-trigger="every 2s' in html


def test_the_fragment_stops_polling_when_every_job_on_screen_is_terminal(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    make_job(Job.Status.SUCCEEDED)
    make_job(Job.Status.FAILED)
    make_job(Job.Status.QUEUED)
    client = csrf_client(owner)
    assert "hx-trigger" not in client.get("/t/routing-lab/jobs/", {"status": "succeeded"}).content.decode()
    assert "hx-trigger" in client.get("/t/routing-lab/jobs/").content.decode()


def test_the_number_of_queries_does_not_grow_with_the_number_of_jobs(
    owner: User, member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    client = csrf_client(owner)
    make_job(Job.Status.SUCCEEDED)
    client.get(URL)  # warm the session and the kind registry
    with CaptureQueriesContext(connection) as few:
        client.get(URL)
    for index in range(PAGE_SIZE + 5):
        make_job(Job.Status.QUEUED, by=member if index % 2 else owner)
    with CaptureQueriesContext(connection) as many:
        client.get(URL)
    assert len(many) == len(few)


def test_a_team_with_10000_jobs_takes_as_many_queries_as_one_with_100(
    team: Team, owner: User, csrf_client: Callable[..., Client]
) -> None:
    large = Team.objects.create(name="Large Lab", slug="large-lab")
    Membership.objects.create(team=large, user=owner, role=Role.OWNER)
    fill(team, owner, 100, series_points=2)
    fill(large, owner, 10_000, series_points=2)
    client = csrf_client(owner)
    queries = {}
    for slug in ("routing-lab", "large-lab"):
        client.get(f"/t/{slug}/")  # the session remembers the team on the first visit
        with CaptureQueriesContext(connection) as captured:
            html = client.get(f"/t/{slug}/").content.decode()
        queries[slug] = len(captured)
        assert len(rows(html)) == PAGE_SIZE
    assert queries["routing-lab"] == queries["large-lab"]
    assert "1–25 of 10000" in html and 'data-count="succeeded">5000<' in html


def test_worker_health_lists_the_workers_that_are_up(owner: User, csrf_client: Callable[..., Client]) -> None:
    from django.utils import timezone

    from webapp.jobs.models import WorkerStatus

    now = timezone.now()
    WorkerStatus.objects.create(
        hostname="gpu-1@box", queues=["gpu"], device="cuda (H100)", started_at=now, last_seen=now
    )
    old = now - timezone.timedelta(minutes=10)
    WorkerStatus.objects.create(hostname="cpu-9@gone", queues=["cpu"], device="cpu", started_at=old, last_seen=old)
    html = csrf_client(owner).get("/t/routing-lab/workers/").content.decode()
    assert 'data-worker="gpu-1@box"' in html and "cuda (H100)" in html
    assert "cpu-9@gone" not in html


def test_home_sends_people_to_their_team_and_shows_visitors_the_welcome_page(
    owner: User, csrf_client: Callable[..., Client]
) -> None:
    assert csrf_client(owner).get("/")["Location"] == URL
    visitor = csrf_client(None).get("/")
    assert visitor.status_code == 200 and b"Try with a sample" in visitor.content


def test_viewers_are_not_offered_a_new_job_link(viewer: User, member: User, csrf_client: Callable[..., Client]) -> None:
    assert "/t/routing-lab/submit/" not in csrf_client(viewer).get(URL).content.decode()
    assert 'href="/t/routing-lab/submit/"' in csrf_client(member).get(URL).content.decode()
