"""Comparing jobs of one kind: parameters and scalar metrics side by side, differences marked,
and each series overlaid on one chart."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.models import Job


def test_it_highlights_what_differs_and_overlays_the_series(
    viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    a = make_job(Job.Status.SUCCEEDED, steps=3, seed=5)
    b = make_job(Job.Status.SUCCEEDED, steps=5, seed=5)
    response = csrf_client(viewer).get("/jobs/compare/", {"job": [a.id, b.id]})
    html = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'data-row="steps" data-differs>', html)
    assert re.search(r'data-row="final_loss" data-differs>', html)
    assert re.search(r'data-row="seed" data-same>', html)  # equal in both: not highlighted
    spec = json.loads(re.search(r'<script id="series-0" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert spec["encoding"]["color"]["field"] == "job"
    assert {row["job"] for row in spec["data"]["values"]} == {str(a.id)[:8], str(b.id)[:8]}
    assert len(spec["data"]["values"]) == 3 + 5


def test_it_needs_two_jobs(viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    response = csrf_client(viewer).get("/jobs/compare/", {"job": [job.id]})
    assert response.status_code == 400 and "Pick two or more jobs" in response.content.decode()


def test_an_outsiders_job_in_the_list_is_not_found(
    viewer: User, outsider: User, other_team, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    from webapp.jobs import services

    mine = make_job(Job.Status.SUCCEEDED)
    theirs = services.job_submit(team=other_team, user=outsider, kind="test-exercise", raw_params={})
    assert csrf_client(viewer).get("/jobs/compare/", {"job": [mine.id, theirs.id]}).status_code == 404


def test_it_puts_each_jobs_media_side_by_side_from_its_latest_attempt(
    viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], tmp_path
) -> None:
    from webapp.jobs import storage

    a = make_job(Job.Status.SUCCEEDED)
    b = make_job(Job.Status.SUCCEEDED)
    image = tmp_path / "sample.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    for job in (a, b):
        storage.store_artifact(job=job, name="sample.png", path=image, media_type="image/png", attempt=job.attempt)
    # b ran again: its first attempt's picture is not what its page shows any more.
    storage.store_artifact(job=b, name="old.png", path=image, media_type="image/png", attempt=b.attempt)
    Job.objects.filter(pk=b.pk).update(attempt=b.attempt + 1)
    b.refresh_from_db()
    storage.store_artifact(job=b, name="sample.png", path=image, media_type="image/png", attempt=b.attempt)
    html = csrf_client(viewer).get("/jobs/compare/", {"job": [a.id, b.id]}).content.decode()
    row = html.split('data-media-row="sample.png"', 1)[1].split("data-media-row", 1)[0]
    assert re.findall(r'data-media-job="([^"]+)"', row) == [str(a.id), str(b.id)]
    assert f'src="/jobs/{a.id}/artifacts/sample.png"' in row and f'src="/jobs/{b.id}/artifacts/sample.png"' in row
    assert 'data-media-row="old.png"' not in html
