"""The point-cloud viewer in a browser: a job (the test kind ``test-pointcloud``, on a real
worker) records a labelled preview PLY; its page draws the cloud with three.js in a WebGL canvas
that is not blank, lists the labels in a legend, and toggles between label and input colours.

Chromium has no GPU here: WebGL runs on SwiftShader, which it only allows when told
(``--enable-unsafe-swiftshader``)."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from PIL import Image
from playwright.sync_api import Page, expect, sync_playwright

from mlcore.pointcloud.render import palette
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.test_job_in_the_browser import log_in, watch_progress
from tests.mlcore.pointcloud.test_io_ply import ply_file, sample_columns
from tests.workers.processes import WorkerProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
KINDS = "tests.jobkinds.exercise,tests.jobkinds.pointcloud_fixture"


@pytest.fixture
def webgl_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Page]:
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (bash scripts/ensure-browser.sh)")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    monkeypatch.setenv("MOELAB_EXTRA_KINDS", KINDS)  # the live server's registry sees the kind too
    args = [a for a in CHROMIUM_ARGS if a != "--disable-gpu"] + [
        "--enable-unsafe-swiftshader",
        "--use-angle=swiftshader",
    ]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        yield page
        context.close()
        browser.close()


def canvas_pixels(page: Page) -> np.ndarray:
    shot = page.locator("[data-artifact='cloud.ply'] canvas").screenshot()
    return np.asarray(Image.open(io.BytesIO(shot)).convert("RGB")).reshape(-1, 3).astype(int)


def near(pixels: np.ndarray, color: np.ndarray, tolerance: int = 3) -> int:
    return int((np.abs(pixels - color).max(axis=1) <= tolerance).sum())


def test_a_labelled_cloud_is_drawn_in_webgl_with_a_legend_and_a_colour_toggle(
    live_server,
    webgl_page: Page,
    owner: User,
    start_worker: Callable[..., WorkerProcess],
    screenshots: Path,
    tmp_path: Path,
) -> None:
    page = webgl_page
    start_worker("pointcloud", MOELAB_EXTRA_KINDS=KINDS)
    base = live_server.url
    log_in(page, base, owner)

    # A lying upload first: the job fails with the reader's message, keeps no files, and the
    # same worker goes on to run the next job.
    liar = ply_file(tmp_path / "liar.ply", sample_columns(10), count=1_000_000)
    page.goto(f"{base}/t/routing-lab/submit/test-pointcloud/")
    page.set_input_files("#param-cloud", str(liar))
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/jobs/*/")
    watch_progress(page, timeout=90)
    expect(page.locator("#job-live")).to_have_attribute("data-status", "failed")
    expect(page.locator("[data-error]")).to_contain_text("liar.ply: the header declares 1,000,000 points")
    expect(page.locator("[data-artifacts] [data-artifact]")).to_have_count(0)

    page.goto(f"{base}/t/routing-lab/submit/test-pointcloud/")
    page.fill("#param-points", "20000")
    page.fill("#param-budget", "8000")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/jobs/*/")
    assert watch_progress(page, timeout=90)[-1] == 100
    expect(page.locator("#job-live")).to_have_attribute("data-status", "succeeded")

    viewer = page.locator("[data-artifact='cloud.ply'] [data-render='application/x-ply']")
    expect(viewer).to_have_attribute("data-rendered", "done", timeout=30_000)
    assert 7_000 <= int(viewer.get_attribute("data-points") or 0) <= 8_000
    expect(viewer).to_have_attribute("data-mode", "labels")

    # Not blank: many pixels differ from the background, and the label colours are there.
    labels_view = canvas_pixels(page)
    background = labels_view[0]
    drawn = int((np.abs(labels_view - background).max(axis=1) > 8).sum())
    assert drawn > 0.02 * len(labels_view), f"only {drawn} of {len(labels_view)} pixels drawn"
    colors = palette(4)
    assert all(near(labels_view, c) > 50 for c in colors), [near(labels_view, c) for c in colors]

    # The legend names every label with its count.
    legend = viewer.locator("[data-legend] [data-label]")
    expect(legend).to_have_count(4)
    assert [t.split()[0] for t in legend.all_inner_texts()] == ["floor", "wall", "table", "lamp"]
    page.screenshot(path=str(screenshots / "pointcloud-labels.png"), full_page=True)

    # The toggle: input colours replace label colours, and back.
    viewer.locator("button[data-mode=input]").click()
    expect(viewer).to_have_attribute("data-mode", "input")
    expect(viewer.locator("button[data-mode=input]")).to_have_attribute("aria-pressed", "true")
    input_view = canvas_pixels(page)
    assert near(input_view, colors[0]) < near(labels_view, colors[0]) / 10
    assert int((np.abs(input_view - labels_view).max(axis=1) > 8).sum()) > drawn / 2
    page.screenshot(path=str(screenshots / "pointcloud-input.png"), full_page=True)
    viewer.locator("button[data-mode=labels]").click()
    expect(viewer).to_have_attribute("data-mode", "labels")
    assert near(canvas_pixels(page), colors[0]) > 50

    # A cloud without labels shows its own colours, with neither toggle nor legend.
    plain = page.locator("[data-artifact='input.ply'] [data-render='application/x-ply']")
    expect(plain).to_have_attribute("data-rendered", "done", timeout=30_000)
    expect(plain).to_have_attribute("data-mode", "input")
    expect(plain.locator("button, [data-legend]")).to_have_count(0)
    shot = np.asarray(Image.open(io.BytesIO(plain.locator("canvas").screenshot())).convert("RGB")).reshape(-1, 3)
    assert int((np.abs(shot.astype(int) - shot[0]).max(axis=1) > 8).sum()) > 0.02 * len(shot)

    # Orbiting redraws the cloud from elsewhere.
    box = page.locator("[data-artifact='cloud.ply'] canvas").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 120, box["y"] + box["height"] / 2 + 30, steps=5)
    page.mouse.up()
    assert int((np.abs(canvas_pixels(page) - labels_view).max(axis=1) > 8).sum()) > drawn / 4

    # The scene's background is the page's surface colour in each theme (the --surface token holds
    # both themes' colours; the viewer resolves it for the theme in force): white, then #171a21.
    assert near(labels_view[:1], np.array([255, 255, 255])) == 1
    page.emulate_media(color_scheme="dark")
    page.reload()
    expect(viewer).to_have_attribute("data-rendered", "done", timeout=30_000)
    assert near(canvas_pixels(page)[:1], np.array([23, 26, 33])) == 1, canvas_pixels(page)[0]
