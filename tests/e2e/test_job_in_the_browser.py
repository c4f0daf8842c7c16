"""The whole path in a browser: log in, submit a job through the form, watch its progress bar
move to done without reloading (on a real Celery worker), open its chart, see a CSV table and a
JSON tree, download an artifact, see the dashboard pause polling in a hidden tab, cancel a running
job, and keep a screenshot of the dashboard."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.webapp.conftest import PASSWORD
from tests.workers.processes import WorkerProcess
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, base: str, user: User) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/t/routing-lab/")


def submit(page: Page, base: str, steps: int, step_seconds: float) -> str:
    page.goto(f"{base}/t/routing-lab/submit/test-exercise/")
    page.fill("#param-steps", str(steps))
    page.fill("#param-step_seconds", str(step_seconds))
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/jobs/*/")
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def watch_progress(page: Page, timeout: float = 60) -> list[float]:
    """Progress values the page shows, sampled until the job is terminal (no reload in between)."""
    seen: list[float] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # One read of both attributes: htmx may swap the fragment between two separate reads.
        value, terminal = page.evaluate(
            """() => {
                const live = document.querySelector("#job-live");
                const bar = live.querySelector("[role=progressbar]");
                return [Number(bar.getAttribute("aria-valuenow") || 0), live.dataset.terminal === "true"];
            }"""
        )
        if not seen or seen[-1] != value:
            seen.append(value)
        if terminal:
            return seen
        page.wait_for_timeout(200)
    raise AssertionError(f"the job page never showed a finished job; progress seen: {seen}")


def test_a_job_submitted_in_the_browser_runs_to_done_live(
    live_server,
    page: Page,
    owner: User,
    make_job: Callable[..., Job],
    start_worker: Callable[..., WorkerProcess],
    screenshots: Path,
) -> None:
    # Earlier jobs for the dashboard (finished before any worker starts, so none is picked up).
    make_job(Job.Status.SUCCEEDED, steps=5)
    make_job(Job.Status.FAILED, steps=4)
    start_worker("browser")
    base = live_server.url
    log_in(page, base, owner)

    job_id = submit(page, base, steps=6, step_seconds=0.6)
    page.evaluate("window.__sameDocument = true")
    progress = watch_progress(page)
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
    assert any(0 < value < 100 for value in progress), progress
    assert progress[-1] == 100
    expect(page.locator("#job-live")).to_have_attribute("data-status", "succeeded")
    expect(page.locator("#job-live .log")).to_contain_text("step 5: loss 0.1667")

    # The chart: drawn by vega-embed once the results panel refreshes, and downloadable as a PNG.
    chart = page.locator("[data-chart-name=loss] [data-chart]")
    expect(chart).to_have_attribute("data-drawn", "done", timeout=20_000)
    expect(chart.locator("svg .mark-line path")).to_have_count(1)
    with page.expect_download() as png:
        page.click("[data-chart-name=loss] a[data-download=png]")
    assert Path(png.value.path()).read_bytes().startswith(b"\x89PNG")

    # An artifact: its CSV table is drawn in the page, and the download is the file itself.
    expect(page.locator("[data-artifact='losses.csv'] table tbody tr")).to_have_count(6)
    with page.expect_download() as csv:
        page.click("[data-artifact='losses.csv'] a[data-download=artifact]")
    assert csv.value.suggested_filename == "losses.csv"
    assert Path(csv.value.path()).read_text().splitlines()[:2] == ["step,loss", "0,1.0"]
    # A JSON artifact is drawn as a tree.
    expect(page.locator("[data-artifact='summary.json'] .json-tree .json-key", has_text="steps:")).to_have_count(1)
    expect(page.locator("[data-artifact='summary.json']")).to_contain_text("steps: 6")
    assert Job.objects.get(pk=job_id).status == Job.Status.SUCCEEDED

    # A long job, live on the dashboard while it runs; then cancelled from its page.
    long_id = submit(page, base, steps=120, step_seconds=0.5)
    expect(page.locator("#job-live")).to_have_attribute("data-status", "running", timeout=30_000)
    page.goto(f"{base}/t/routing-lab/")
    row = page.locator(f"tr[data-job='{long_id}']")
    expect(row).to_have_attribute("data-status", "running")
    first = float(row.locator("[role=progressbar]").get_attribute("aria-valuenow") or 0)
    expect(row.locator("[role=progressbar]")).not_to_have_attribute("aria-valuenow", str(first), timeout=10_000)
    page.screenshot(path=str(screenshots / "dashboard.png"), full_page=True)

    # In a hidden tab the dashboard stops polling; shown again, it asks for the jobs at once.
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if "/t/routing-lab/jobs/" in request.url else None)
    page.evaluate(
        """() => {
            window.__hidden = true;
            Object.defineProperty(document, "hidden", {configurable: true, get: () => window.__hidden});
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    page.wait_for_timeout(1_000)  # a poll already on its way may still land
    polls.clear()
    page.wait_for_timeout(5_000)
    assert polls == [], f"a hidden tab polled: {polls}"
    with page.expect_request(lambda request: "/t/routing-lab/jobs/" in request.url, timeout=1_500):
        page.evaluate('() => { window.__hidden = false; document.dispatchEvent(new Event("visibilitychange")); }')

    page.goto(f"{base}/jobs/{long_id}/")
    page.click("[data-action=cancel]")
    expect(page.locator("#job-live")).to_have_attribute("data-status", "cancelled", timeout=30_000)
    page.screenshot(path=str(screenshots / "job-cancelled.png"), full_page=True)
