"""Where a job is inside a long stage reaches the people watching it: what a loop reports through
the worker's context is on the job page's live fragment and in the API at the next pulse."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.workers.conftest import media_in_tmp  # noqa: F401  (autouse: files go to a temporary folder)
from webapp.accounts.models import Team
from webapp.accounts.services import api_token_create
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit
from workers.context import DatabaseContext
from workers.lifecycle import claim

pytestmark = pytest.mark.django_db


@pytest.fixture
def calibrating(team: Team, member: User, tmp_path: Path) -> Job:
    """A running job whose calibration loop has reported its fifth batch of sixteen."""
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={})
    running = claim(str(job.pk), worker="test@host")
    ctx = DatabaseContext(running, workdir=tmp_path, device="cpu", pulse_seconds=3600)
    ctx.progress(0.02, "loading the model")
    ctx.span(0.2, 0.6, "calibrating").count(5, 16, "batch")
    ctx.flush()  # what the pulse thread does once a second
    ctx.discard()
    return running


def test_the_live_job_page_says_which_batch_the_job_is_on(
    calibrating: Job, viewer: User, csrf_client: Callable[..., Client]
) -> None:
    html = csrf_client(viewer).get(reverse("jobs:live", args=[calibrating.pk])).content.decode()
    assert re.search(
        r'<span class="stage" data-stage title="calibrating: batch 5 of 16">calibrating: batch 5 of 16<', html
    )
    assert 'data-progress="32.5"' in html and 'aria-valuetext="33%, calibrating: batch 5 of 16"' in html


def test_the_api_answers_the_inner_stage_and_its_fraction(calibrating: Job, viewer: User) -> None:
    token = api_token_create(user=viewer, name="tests")[1]
    body = Client().get(f"/api/v1/jobs/{calibrating.pk}", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert (body["stage"], body["progress"]) == ("calibrating: batch 5 of 16", pytest.approx(0.325))
