"""The watermark portal in a browser: an owner creates a key on the team's keys page; anyone,
not logged in, uploads an image marked by a registered key and reads the verdict and the
organisation, answered by a real verify worker, while the page never shows a key or a score."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_job_in_the_browser import log_in
from tests.webapp.portal.conftest import bits_of, extractor_dir, key_with_bits, png_bytes  # noqa: F401
from tests.workers.processes import WorkerProcess
from webapp.accounts.models import Team
from webapp.portal.models import WatermarkKey
from webapp.portal.services import bits_of as sealed_bits_of
from webapp.portal.services import check_images
from webapp.portal.uploads import check_bytes

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_anonymous_visitor_verifies_a_marked_image_and_learns_only_the_organisation(
    live_server,
    page: Page,
    owner: User,
    team: Team,
    extractor_dir: Path,  # noqa: F811
    start_worker: Callable[..., WorkerProcess],
    screenshots: Path,
    tmp_path: Path,
    settings,
) -> None:
    settings.PORTAL_WAIT_SECONDS = 150  # the worker's first check imports torch and loads the extractor
    start_worker("portal", MOELAB_WATERMARK_EXTRACTOR=str(extractor_dir))
    # The worker's first check imports torch and loads the extractor; pay for it before the browser asks.
    check_images([check_bytes(png_bytes(30), "warm-up.png")])
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
