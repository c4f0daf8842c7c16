"""Every page through axe-core (from npm, frontend/node_modules) in light and dark mode: zero
serious or critical violations. A screenshot of each page in each mode lands in test-artifacts/.
Also: the keyboard reaches every action (skip link, theme toggle), the theme choice is remembered,
every chart has a data-table alternative, and pages fit half a laptop screen (700 px)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_job_in_the_browser import log_in
from webapp.accounts.models import Team
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "frontend" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


def axe_violations(page: Page) -> list[str]:
    """Serious and critical axe-core violations on the current page, one line each."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: the pages' CSP refuses an injected inline <script>.
        page.evaluate(AXE.read_text())
    results = page.evaluate(
        """async () => {
            const r = await axe.run(document, {resultTypes: ["violations"]});
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                           nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
        }"""
    )
    return [f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}" for v in results if v["impact"] in BLOCKING]


def settle(page: Page) -> None:
    """Wait until charts are drawn (axe must see the final page, not a half-drawn one)."""
    page.wait_for_load_state("load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-chart]')].every(e => ['done', 'failed'].includes(e.dataset.drawn))"
    )


def check_page(page: Page, url: str, name: str, screenshots: Path, failures: list[str]) -> None:
    page.emulate_media(color_scheme="light")
    page.goto(url)
    for scheme in ("light", "dark"):
        # Switching the system scheme restyles the page in place (and theme.js redraws the charts).
        page.emulate_media(color_scheme=scheme)
        settle(page)
        page.screenshot(path=str(screenshots / f"page-{name}-{scheme}.png"), full_page=True)
        failures += [f"{name} [{scheme}] {line}" for line in axe_violations(page)]


@pytest.fixture
def axe_available() -> None:
    if not AXE.is_file():
        pytest.skip("axe-core is not installed: cd frontend && npm ci")


def test_every_page_has_no_serious_accessibility_violations_in_light_and_dark(
    live_server,
    page: Page,
    owner: User,
    team: Team,
    make_job: Callable[..., Job],
    screenshots: Path,
    axe_available: None,
) -> None:
    base = live_server.url
    done = make_job(Job.Status.SUCCEEDED, steps=5)
    failed = make_job(Job.Status.FAILED, steps=4)
    failures: list[str] = []
    # Visitors' pages.
    for name, path in [
        ("home", "/"),
        ("login", "/login/"),
        ("signup", "/signup/"),
        ("guides", "/docs/"),
        ("guide-compress-moe", "/docs/kinds/compress-moe/"),
        ("api-reference", "/docs/api/"),
        ("deployment", "/docs/deployment/"),
        ("bench-compress", "/docs/bench/compress/"),
        ("not-found", "/docs/no-such-page/"),
    ]:
        check_page(page, base + path, name, screenshots, failures)
    # Team pages.
    log_in(page, base, owner)
    slug = team.slug
    for name, path in [
        ("dashboard", f"/t/{slug}/"),
        ("new-job", f"/t/{slug}/submit/"),
        ("submit-sample", f"/t/{slug}/submit/compress-moe/?sample=1"),
        ("job-succeeded", f"/jobs/{done.id}/"),
        ("job-failed", f"/jobs/{failed.id}/"),
        ("rerun", f"/jobs/{done.id}/rerun/"),
        ("compare", f"/jobs/compare/?job={done.id}&job={failed.id}"),
        ("library", f"/t/{slug}/library/"),
        ("library-add", f"/t/{slug}/library/add/"),
        ("team", f"/t/{slug}/team/"),
        ("tokens", "/account/tokens/"),
        ("new-team", "/teams/new/"),
        ("samples", "/welcome/"),
    ]:
        check_page(page, base + path, name, screenshots, failures)
    # The submit form with every error showing.
    page.emulate_media(color_scheme="light")
    page.goto(f"{base}/t/{slug}/submit/compress-moe/")
    page.fill("#param-samples", "0")
    page.click("main button[type=submit]")
    expect(page.locator("[data-form-errors]")).to_be_visible()
    page.screenshot(path=str(screenshots / "page-submit-errors-light.png"), full_page=True)
    failures += [f"submit-errors {line}" for line in axe_violations(page)]
    assert not failures, "\n".join(failures)


def test_the_keyboard_reaches_the_content_and_the_theme_toggle_and_the_choice_is_remembered(
    live_server, page: Page
) -> None:
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server.url}/")
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    toggle = page.locator("[data-theme-toggle]")
    toggle.focus()
    page.keyboard.press("Enter")  # system → light
    page.keyboard.press("Enter")  # light → dark
    expect(toggle).to_contain_text("Theme: dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background == "rgb(15, 17, 22)"
    # "Try with a sample" is a link the keyboard reaches and follows (to the login page, for a visitor).
    page.locator("[data-try='compress-moe']").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/login/?next=/try/compress-moe/")


def test_every_chart_has_a_data_table_alternative(
    live_server, page: Page, owner: User, make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=5)
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/jobs/{job.id}/")
    settle(page)
    charts = page.locator("[data-chart]").count()
    assert charts > 0
    toggles = page.locator("[data-chart-table-toggle]")
    expect(toggles).to_have_count(charts)
    toggles.first.focus()
    page.keyboard.press("Enter")
    expect(toggles.first).to_have_attribute("aria-expanded", "true")
    table = page.locator(".chart-table table").first
    expect(table).to_be_visible()
    assert table.locator("tbody tr").count() == 5  # one row per step the job recorded
    assert page.locator("[data-chart]").first.get_attribute("aria-label").startswith("Chart:")


def test_pages_fit_half_a_laptop_screen(live_server, page: Page, owner: User, make_job, screenshots: Path) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=5)
    page.set_viewport_size({"width": 700, "height": 900})
    page.goto(f"{live_server.url}/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 700
    page.screenshot(path=str(screenshots / "page-home-700px.png"), full_page=True)
    log_in(page, live_server.url, owner)
    for path in (f"/jobs/{job.id}/", "/docs/kinds/compress-moe/"):
        page.goto(live_server.url + path)
        settle(page)
        assert page.evaluate("document.documentElement.scrollWidth") <= 700, path
    page.screenshot(path=str(screenshots / "page-job-700px.png"), full_page=True)
