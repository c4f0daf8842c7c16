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
