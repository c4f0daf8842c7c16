"""Comparing two jobs of one kind in a browser: the pictures and videos each job recorded under one
name appear side by side, one row per name, in the order the jobs were picked, each one drawn (a
decoded image, a video element with its size) and labelled with its job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from PIL import Image
from playwright.sync_api import Page, expect

from mlcore.video.media import write_mp4
from tests.e2e.test_job_in_the_browser import log_in
from webapp.jobs import storage
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def record_media(job: Job, folder: Path, shade: float) -> None:
    """A picture and a short clip, as a kind records them (``ctx.artifact``), different per job."""
    folder.mkdir()
    picture = folder / "sample.png"
    Image.new("RGB", (320, 200), (int(255 * shade), 60, 160)).save(picture)
    clip = np.full((6, 16, 16), shade * 2 - 1, dtype=np.float32)
    video = write_mp4(clip, folder / "clip.mp4")
    for name, path, media_type in (("sample.png", picture, "image/png"), ("clip.mp4", video, "video/mp4")):
        storage.store_artifact(job=job, name=name, path=path, media_type=media_type, attempt=job.attempt)


def boxes(page: Page, row: str, element: str) -> list[dict[str, float]]:
    found = page.locator(f"[data-compare-media] [data-media-row='{row}'] {element}")
    expect(found).to_have_count(2)
    return [found.nth(i).bounding_box() for i in range(2)]


def side_by_side(pair: list[dict[str, float]]) -> bool:
    """Two boxes on one row: tops level, the first wholly left of the second, neither a sliver."""
    left, right = pair
    return (
        abs(left["y"] - right["y"]) <= 1
        and left["x"] + left["width"] <= right["x"]
        and min(left["width"], right["width"]) >= 200
        and min(left["height"], right["height"]) >= 100
    )


def test_two_jobs_pictures_and_videos_appear_side_by_side_on_the_compare_page(
    live_server, page: Page, owner: User, make_job: Callable[..., Job], screenshots: Path, tmp_path: Path
) -> None:
    first = make_job(Job.Status.SUCCEEDED, steps=3)
    second = make_job(Job.Status.SUCCEEDED, steps=5)
    record_media(first, tmp_path / "first", 0.2)
    record_media(second, tmp_path / "second", 0.9)
    base = live_server.url
    log_in(page, base, owner)
    page.goto(f"{base}/jobs/compare/?job={first.id}&job={second.id}")
    expect(page.locator("[data-compare-media] h2")).to_have_text("Media side by side")

    # Both pictures decode, on one row, in the order the jobs were picked, each captioned with its job.
    images = page.locator("[data-media-row='sample.png'] img")
    expect(images).to_have_count(2)
    page.wait_for_function(
        "() => [...document.querySelectorAll(\"[data-media-row='sample.png'] img\")]"
        ".every(img => img.complete && img.naturalWidth === 320)"
    )
    assert side_by_side(boxes(page, "sample.png", "img"))
    figures = page.locator("[data-media-row='sample.png'] figure")
    assert [figures.nth(i).get_attribute("data-media-job") for i in range(2)] == [str(first.id), str(second.id)]
    expect(figures.nth(0).locator("figcaption")).to_have_text(str(first.id)[:8])
    expect(figures.nth(1).locator("figcaption")).to_have_text(str(second.id)[:8])

    # The two clips likewise, each in a video element the page sized.
    assert side_by_side(boxes(page, "clip.mp4", "video"))
    page.screenshot(path=str(screenshots / "compare-media.png"), full_page=True)
