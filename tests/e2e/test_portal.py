"""The watermark portal in a browser: an owner creates a key on the team's keys page; anyone,
not logged in, uploads an image marked by a registered key and reads the verdict and the
organisation, answered by a real verify worker, while the page never shows a key or a score."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_accessibility import AXE, axe_violations
from tests.e2e.test_job_in_the_browser import log_in
from tests.webapp.portal.conftest import bits_of, extractor_dir, flip, key_with_bits, png_bytes  # noqa: F401
from tests.workers.processes import WorkerProcess
from webapp.accounts.models import Team
from webapp.portal.models import WatermarkKey
from webapp.portal.services import bits_of as sealed_bits_of
from webapp.portal.services import check_images
from webapp.portal.uploads import check_bytes

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def verify_worker(
    extractor_dir: Path,  # noqa: F811
    start_worker: Callable[..., WorkerProcess],
    settings,
) -> WorkerProcess:
    """A verify worker that has answered once: its first check imports torch and loads the
    extractor, paid for here before the browser asks."""
    settings.PORTAL_WAIT_SECONDS = 150
    worker = start_worker("portal", MOELAB_WATERMARK_EXTRACTOR=str(extractor_dir))
    check_images([check_bytes(png_bytes(30), "warm-up.png")])
    return worker


def test_an_anonymous_visitor_verifies_a_marked_image_and_learns_only_the_organisation(
    live_server,
    page: Page,
    owner: User,
    team: Team,
    extractor_dir: Path,  # noqa: F811
    verify_worker: WorkerProcess,
    screenshots: Path,
    tmp_path: Path,
) -> None:
    base = live_server.url

    # The owner creates a key on the keys page; its bits never reach the page.
    log_in(page, base, owner)
    page.goto(f"{base}/t/{team.slug}/keys/")
    page.fill("[data-action=create-key] input[name=name]", "launch campaign")
    page.click("[data-action=create-key] button[type=submit]")
    expect(page.locator(".banner-success")).to_contain_text("Created key 'launch campaign'")
    created = WatermarkKey.objects.get(team=team)
    assert sealed_bits_of(created) not in page.content()
    page.context.clear_cookies()

    # An image "marked" by another registered key of the team (its bits are what the extractor reads).
    image = tmp_path / "photo.png"
    image.write_bytes(png_bytes(31))
    bits = bits_of(extractor_dir, image.read_bytes())
    key_with_bits(team, bits, name="spring campaign")

    page.goto(f"{base}/verify/")
    expect(page.locator("a.button", has_text="Log in")).to_be_visible()  # anonymous
    page.set_input_files("#id_image", str(image))
    page.click("[data-portal-form] button[type=submit]", timeout=60_000)
    result = page.locator("[data-portal-result]")
    expect(result).to_have_attribute("data-verdict", "detected")
    expect(result.locator("[data-field=organisation]")).to_have_text("Routing Lab")
    expect(result.locator("[data-field=confidence]")).to_have_count(0)  # no score for the public
    content = page.content()
    for secret in (bits, "spring campaign", "p-value", "Bits matched"):
        assert secret not in content
    page.screenshot(path=str(screenshots / "portal-verdict.png"), full_page=True)


def pill_colours(page: Page) -> tuple[str, str]:
    """The verdict pill's text colour and the colour of the page's "queued" grey (the neutral one)."""
    return page.evaluate(
        """() => {
            const pill = document.querySelector("[data-portal-result] [data-field=verdict]");
            const probe = document.createElement("span");
            probe.style.color = "var(--queued)";
            document.body.appendChild(probe);
            const neutral = getComputedStyle(probe).color;
            probe.remove();
            return [getComputedStyle(pill).color, neutral];
        }"""
    )


def test_an_unmarked_image_shows_its_thumbnail_and_a_neutral_not_detected_clean_for_axe(
    live_server,
    page: Page,
    team: Team,
    extractor_dir: Path,  # noqa: F811
    verify_worker: WorkerProcess,
    screenshots: Path,
    tmp_path: Path,
) -> None:
    if not AXE.is_file():
        pytest.skip("axe-core is not installed: cd frontend && npm ci")
    # A registered key far from what the extractor reads in the image: chance agreement only.
    image = tmp_path / "holiday.png"
    image.write_bytes(png_bytes(32, size=200))
    key_with_bits(team, flip(bits_of(extractor_dir, image.read_bytes()), 48), name="far away")

    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server.url}/verify/")
    page.set_input_files("#id_image", str(image))
    page.click("[data-portal-form] button[type=submit]", timeout=60_000)
    result = page.locator("[data-portal-result]")
    expect(result).to_have_attribute("data-verdict", "not detected")
    # The thumbnail is drawn (a data: URL the page's Content-Security-Policy allows), small.
    thumbnail = result.locator("img[data-field=thumbnail]")
    expect(thumbnail).to_be_visible()
    assert thumbnail.evaluate("img => img.complete && img.naturalWidth") == 200
    box = thumbnail.bounding_box()
    assert box is not None and box["width"] <= 130 and box["height"] <= 130
    failures = []
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        colour, neutral = pill_colours(page)
        assert colour == neutral, f"[{scheme}] 'not detected' is painted {colour}, not the neutral {neutral}"
        page.screenshot(path=str(screenshots / f"portal-not-detected-{scheme}.png"), full_page=True)
        failures += [f"portal-not-detected [{scheme}] {line}" for line in axe_violations(page)]
    assert not failures, "\n".join(failures)
