"""The first five minutes of a new user, in a browser with a real worker: the home page's
"Try with a sample" on each registered flagship job leads (through the login page) to the form
filled in with the kind's sample, and submitting it runs to a result page that explains itself:
a summary line at the top and "How to read this" beside the results."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.webapp.conftest import PASSWORD
from tests.workers.processes import WorkerProcess
from webapp.dashboard.home import home_cards

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A flagship's sample must finish in minutes on a CPU (spec.sample's promise). compress-moe's takes
# about 30 CPU-seconds; the ceiling is generous because CI machines are shared.
SAMPLE_SECONDS = 480
# A card that opens a page of its own (watermark: mark or check) has no sample button to click.
FLAGSHIPS = [card.spec.name for card in home_cards()[0] if card.spec is not None and card.spec.sample and not card.page]


def wait_until_finished(page: Page, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, terminal = page.evaluate(
            "() => { const live = document.querySelector('#job-live');"
            " return [live.dataset.status, live.dataset.terminal === 'true']; }"
        )
        if terminal:
            return status
        page.wait_for_timeout(500)
    log = page.locator("#job-live pre.log").inner_text()
    raise AssertionError(f"the sample job did not finish within {timeout:.0f} s; its log ends:\n{log[-2000:]}")


@pytest.mark.parametrize("kind", FLAGSHIPS)
def test_try_with_a_sample_runs_a_flagship_to_a_result_page_that_explains_itself(
    kind: str,
    live_server,
    page: Page,
    owner: User,
    start_worker: Callable[..., WorkerProcess],
    screenshots: Path,
) -> None:
    start_worker("product")
    base = live_server.url
    page.goto(f"{base}/")
    page.locator(f"[data-try='{kind}']").click()
    # A visitor logs in first and lands on the form, not on the dashboard.
    page.wait_for_url(f"**/login/?next=/try/{kind}/")
    page.fill("#id_username", owner.get_username())
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"**/submit/{kind}/?sample=1")
    expect(page.locator("[data-sample-banner]")).to_be_visible()
    page.screenshot(path=str(screenshots / f"product-{kind}-form.png"), full_page=True)

    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(f"{base}/jobs/*/")
    status = wait_until_finished(page, SAMPLE_SECONDS)
    assert status == "succeeded", page.locator("[data-error]").all_inner_texts()
    summary = page.locator("[data-summary]")
    expect(summary).to_be_visible()
    assert len(summary.inner_text().strip()) > 20
    expect(page.locator("[data-how-to-read]")).to_be_visible()
    page.screenshot(path=str(screenshots / f"product-{kind}-result.png"), full_page=True)
