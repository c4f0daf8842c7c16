"""Browser tests: Debian's Chromium driven by Playwright against a live server, with a real
Celery worker started as a subprocess (``tests/workers/processes.py``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from tests.webapp.conftest import member, owner, team  # noqa: F401  (shared fixtures)
from tests.webapp.views.conftest import fast_passwords, make_job  # noqa: F401
from tests.workers.conftest import empty_broker, media_in_tmp, start_worker  # noqa: F401

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Page]:
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (bash scripts/ensure-browser.sh)")
    # Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a
    # thread with a running loop unless told it is safe, which it is here (one thread, no awaits).
    # Set for these tests only, before the loop starts.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(30_000)
        yield page
        context.close()
        browser.close()


@pytest.fixture
def screenshots() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
