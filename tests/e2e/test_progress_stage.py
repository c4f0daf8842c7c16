"""Progress inside a long stage, in a browser: the job page says where in the stage a running job is,
in full, at desktop and phone widths (the stage text wraps on the job page's large bar instead of
being cut to an ellipsis)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_job_in_the_browser import log_in
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STAGE = "evaluating mone at ratio 0.25 without novices: shakespeare perplexity, window 12 of 32"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_running_jobs_page_shows_where_inside_its_stage_it_is_in_full(
    live_server, page: Page, owner: User, make_job: Callable[..., Job], width: int, height: int
) -> None:
    job = make_job(Job.Status.RUNNING)
    Job.objects.filter(pk=job.pk).update(progress=0.62, stage=STAGE)
    page.set_viewport_size({"width": width, "height": height})
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/jobs/{job.id}/")
    stage = page.locator(".progress-lg [data-stage]").first
    expect(stage).to_have_text(STAGE)
    # Every character shown: the element is not cut short, and it stays inside the viewport.
    clipped = stage.evaluate("el => el.scrollWidth > el.clientWidth + 1")
    box = stage.bounding_box()
    assert not clipped and box is not None and box["x"] + box["width"] <= width
    expect(page.locator(".progress-lg[role=progressbar]").first).to_have_attribute(
        "aria-valuenow", re.compile(r"^62(\.0+)?$")
    )
