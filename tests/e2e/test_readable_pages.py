"""Pages a researcher reads at a glance, in Chromium: the dashboard shows every column at 1440 px and
turns into cards on a phone, the header stays at most 64 px tall at 390 px, job pages never scroll
sideways, Compare helps (enabled for two jobs of one kind, an only-differences switch, a refusal that
keeps the page), waiting says where the job stands, forms speak plainly with visible focus rings,
and the home page's cards line up and show no escaped quotes."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_accessibility import settle
from tests.e2e.test_job_in_the_browser import log_in
from webapp.accounts.models import Team
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1440, "height": 900}


def _luminance(rgb: tuple[float, ...]) -> float:
    def channel(c: float) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    parse = lambda text: tuple(float(x) for x in re.findall(r"[\d.]+", text)[:3])  # noqa: E731
    la, lb = sorted((_luminance(parse(a)), _luminance(parse(b))), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_the_dashboard_shows_every_column_at_1440_and_cards_on_a_phone_under_a_short_header(
    live_server, page: Page, owner: User, team: Team, make_job: Callable[..., Job]
) -> None:
    for _ in range(3):
        make_job(Job.Status.SUCCEEDED, steps=3)
    page.set_viewport_size(LAPTOP)
    log_in(page, live_server.url, owner)
    table = page.locator("[data-jobs-table]")
    expect(table).to_be_visible()
    headers = table.locator("thead th")
    assert "KEY RESULT" in [h.upper() for h in headers.all_inner_texts()]
    last = headers.last.bounding_box()
    assert last is not None and last["x"] + last["width"] <= LAPTOP["width"] - 16, "the Duration column is cut off"
    assert page.evaluate("document.documentElement.scrollWidth") <= LAPTOP["width"]

    page.set_viewport_size(PHONE)
    page.reload()
    assert page.evaluate("document.querySelector('.topbar').getBoundingClientRect().height") <= 64
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("getComputedStyle(document.querySelector('[data-jobs-table] tbody tr')).display") == "grid"
    # The links are one tap away behind Menu.
    page.get_by_role("button", name="Menu").click()
    expect(page.locator("#main-nav").get_by_role("link", name="Library")).to_be_visible()


def test_a_job_page_never_scrolls_sideways_on_a_phone_and_opens_with_its_metrics(
    live_server, page: Page, owner: User, make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=5)
    page.set_viewport_size(PHONE)
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/jobs/{job.id}/")
    settle(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("document.querySelector('.topbar').getBoundingClientRect().height") <= 64
    expect(page.locator("[data-metrics]")).to_be_visible()


def test_compare_is_enabled_for_two_jobs_of_one_kind_and_can_hide_what_agrees(
    live_server, page: Page, owner: User, make_job: Callable[..., Job]
) -> None:
    first = make_job(Job.Status.SUCCEEDED, steps=3)
    second = make_job(Job.Status.SUCCEEDED, steps=4)
    page.set_viewport_size(LAPTOP)
    log_in(page, live_server.url, owner)
    button = page.locator("[data-compare-button]")
    expect(button).to_be_disabled()
    page.locator(f"#pick-{first.id}").check()
    expect(button).to_be_disabled()
    page.locator(f"#pick-{second.id}").check()
    expect(button).to_be_enabled()
    button.click()
    page.wait_for_url("**/jobs/compare/**")
    settle(page)
    same = page.locator("#compare-table tr[data-same]")
    assert same.count() > 0
    expect(same.first).to_be_visible()
    page.locator("[data-only-differences]").check()
    expect(same.first).to_be_hidden()
    expect(page.locator("#compare-table tr[data-differs]").first).to_be_visible()
    # Scalars-only kinds still get charts: one bar per job for each declared metric (none for the
    # test kind), and every series overlaid.
    assert page.locator("[data-chart][data-drawn=done]").count() >= 1


def test_a_refused_comparison_keeps_the_page_and_claims_no_comparison(
    live_server, page: Page, owner: User, make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=3)
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/jobs/compare/?job={job.id}")
    expect(page.locator(".topbar")).to_be_visible()
    expect(page.locator("[data-compare-error]")).to_contain_text("Pick two or more jobs")
    expect(page.locator(".page-header")).not_to_contain_text("differences highlighted")
    expect(page.get_by_role("link", name="Back to the jobs table")).to_be_visible()


def test_waiting_shows_the_queue_position_and_a_stop_request_until_the_job_stops(
    live_server, page: Page, owner: User, make_job: Callable[..., Job]
) -> None:
    make_job(Job.Status.SUCCEEDED, steps=2)  # a past run to estimate from
    queued = make_job(Job.Status.QUEUED, steps=3)
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/jobs/{queued.id}/")
    expect(page.locator("[data-queue-position]")).to_contain_text("Position 1 in the cpu queue")
    expect(page.locator("[data-queue-position]")).to_contain_text("runs of this kind took about")
    running = make_job(Job.Status.RUNNING, steps=3)
    Job.objects.filter(pk=running.pk).update(cancel_requested=True)
    page.goto(f"{live_server.url}/jobs/{running.id}/")
    expect(page.locator("[data-stopping]")).to_contain_text("between steps")
    Job.objects.filter(pk=running.pk).update(status=Job.Status.CANCELLED)
    # The live fragment polls every 2 s: the banner leaves with the job's stop.
    expect(page.locator("[data-stopping]")).to_have_count(0, timeout=10_000)


def test_forms_name_methods_in_plain_words_and_focus_rings_stand_out(
    live_server, page: Page, owner: User, team: Team
) -> None:
    log_in(page, live_server.url, owner)
    page.goto(f"{live_server.url}/t/{team.slug}/submit/compress-moe/")
    expect(page.locator("[data-param=model]")).to_contain_text(
        "a Mixture-of-Experts language model (Hugging Face format)"
    )
    assert "accepts hf-moe-lm" not in page.content()
    expect(page.locator("[data-param=methods] [data-option-note]").first).to_be_visible()
    expect(page.locator("main")).to_contain_text("time limit 3 h 5 min")
    for selector in ("#param-samples", "[data-param=methods] input[type=checkbox]"):
        page.locator(selector).first.focus()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")  # keyboard focus, so :focus-visible applies
        ring, width, background = page.evaluate(
            """(sel) => { const el = document.querySelector(sel); const s = getComputedStyle(el);
                const behind = getComputedStyle(el.closest('.card') || document.body).backgroundColor;
                return [s.outlineColor, s.outlineWidth, behind]; }""",
            selector,
        )
        assert width != "0px", f"{selector} shows no focus ring"
        assert contrast(ring, background) >= 3, f"{selector}: focus ring {ring} on {background}"


def test_the_home_page_cards_tell_what_their_button_opens_line_up_and_show_no_escapes(live_server, page: Page) -> None:
    page.set_viewport_size(LAPTOP)
    page.goto(f"{live_server.url}/")
    text = page.locator("main").inner_text()
    assert '\\"' not in text
    point_cloud = page.locator("[data-kind=pointcloud-segment]")
    expect(point_cloud).to_contain_text("Label every point")
    expect(page.locator("[data-kind=video-generate]")).to_contain_text("Sample short clips")
    bottoms = {
        round(box["y"] + box["height"])
        for box in (b.bounding_box() for b in page.locator(".home-section").first.locator("[data-try]").all())
        if box is not None
    }
    tops = {round(c.bounding_box()["y"]) for c in page.locator(".home-section").first.locator(".kind-card").all()}
    # Cards in one row share their top; their buttons share their bottom line.
    assert len(bottoms) <= len(tops), f"buttons at {sorted(bottoms)} for card rows at {sorted(tops)}"
