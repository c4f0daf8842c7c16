"""The watermark flow in a browser: the home page's watermark card opens the watermark page, a
member creates the team's first key right there, and "Mark my images" opens the embed form with
that key already chosen."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.test_job_in_the_browser import log_in
from webapp.accounts.models import Team
from webapp.portal.models import WatermarkKey

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_home_to_first_key_to_an_embed_form_with_the_key_chosen(
    live_server, page: Page, member: User, team: Team, screenshots: Path
) -> None:
    base = live_server.url
    log_in(page, base, member)
    page.goto(f"{base}/welcome/")
    page.locator("[data-open='portal:watermark']").click()
    page.wait_for_url(f"{base}/watermark/")
    expect(page.get_by_role("heading", name="Mark my images")).to_be_visible()
    expect(page.get_by_role("heading", name="Check an image")).to_be_visible()

    page.fill("[data-action=create-first-key] input[name=name]", "our photos")
    page.click("[data-action=create-first-key] button[type=submit]")
    expect(page.locator(".banner-success")).to_contain_text("Created key 'our photos'")
    key = WatermarkKey.objects.get(team=team)
    page.screenshot(path=str(screenshots / "watermark-page-first-key.png"), full_page=True)

    page.locator("[data-action=mark-images]").click()
    page.wait_for_url(f"{base}/t/{team.slug}/submit/watermark-embed/")
    expect(page.locator("select[name=key]")).to_have_value(key.reference)
    page.screenshot(path=str(screenshots / "watermark-embed-form.png"), full_page=True)
