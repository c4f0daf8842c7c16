"""The library in a browser: upload a small Hugging Face MoE checkpoint (chunked, validated by a
real worker), pick it in a job form, run the job, and follow the lineage links from its result to
the item it made and back to the job."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, Route, expect

from tests.e2e.test_job_in_the_browser import log_in
from tests.webapp.library.conftest import KINDS, library_dirs, library_kinds, tiny_moe, zip_folder  # noqa: F401
from tests.workers.processes import WorkerProcess
from webapp.library.models import ChunkedUpload, LibraryItem

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_uploaded_model_is_picked_in_a_job_form_and_its_lineage_followed(
    live_server,
    page: Page,
    owner: User,
    tiny_moe: Path,  # noqa: F811
    library_dirs: Path,  # noqa: F811
    start_worker: Callable[..., WorkerProcess],
    screenshots: Path,
) -> None:
    archive = library_dirs / "tiny-mixtral.zip"
    archive.write_bytes(zip_folder(tiny_moe, "tiny-mixtral/"))
    start_worker("library", MOELAB_EXTRA_KINDS=KINDS, MOELAB_LIBRARY_CACHE=str(library_dirs / "worker-cache"))
    base = live_server.url
    log_in(page, base, owner)

    # Upload: the page sends the file in chunks, then a worker validates it and writes the card.
    page.click("nav >> text=Library")
    page.click("[data-action=add-item]")
    page.fill("#upload-name", "tiny mixtral")
    page.select_option("#upload-kind", "hf-moe-lm")
    page.set_input_files("#upload-file", str(archive))
    # Small chunks, and the connection drops on the second one: the page asks where the server
    # stands and resumes from there.
    page.eval_on_selector("form[data-library-upload]", "form => { form.dataset.chunkBytes = 65536; }")
    sent: list[str] = []
    dropped: list[str] = []

    def flaky(route: Route) -> None:
        offset = route.request.url.rsplit("offset=", 1)[1]
        sent.append(offset)
        if offset == "65536" and not dropped:
            dropped.append(offset)
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/chunk?offset=*", flaky)
    # The progress bar's values, kept in sessionStorage because the page moves on when it is done.
    page.eval_on_selector(
        "[data-upload-progress] [role=progressbar]",
        """bar => new MutationObserver(() => {
            const seen = JSON.parse(sessionStorage.getItem("progress") || "[]");
            sessionStorage.setItem("progress", JSON.stringify([...seen, Number(bar.getAttribute("aria-valuenow"))]));
        }).observe(bar, {attributes: true, attributeFilter: ["aria-valuenow"]})""",
    )
    page.click("form[data-library-upload] button[type=submit]")
    page.wait_for_url(re.compile(r".*/library/\d+/$"))
    assert sent == ["0", "65536", "65536", "131072"], sent
    progress = page.evaluate("JSON.parse(sessionStorage.getItem('progress') || '[]')")
    assert progress == sorted(progress) and progress[0] < 50 and progress[-1] == 100, progress
    expect(page.locator("[data-card-field=experts_per_layer]")).to_have_text("8", timeout=60_000)
    expect(page.locator("[data-card-field=architecture]")).to_have_text("Mixtral")
    item = LibraryItem.objects.get(name="tiny mixtral")
    assert item.is_ready and item.size == archive.stat().st_size
    page.screenshot(path=str(screenshots / "library-item.png"), full_page=True)

    # Pick it in a job form: the model picker lists it, and the job runs on it.
    page.goto(f"{base}/t/routing-lab/submit/test-library-consumer/")
    page.select_option("#param-model", item.reference)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/jobs/*/")
    job_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    expect(page.locator("#job-live")).to_have_attribute("data-status", "succeeded", timeout=60_000)

    # Lineage from the result: the item the job made, which names the job that made it.
    made = page.locator("[data-job-lineage] [data-made-item]")
    expect(made).to_have_text("summary of the inputs", timeout=20_000)
    expect(page.locator("[data-job-lineage] [data-used-item]")).to_have_text("tiny mixtral")
    made.click()
    page.wait_for_url(re.compile(r".*/library/\d+/$"))
    expect(page.locator("[data-made-by]")).to_have_attribute("href", f"/jobs/{job_id}/")
    page.click("[data-made-by]")
    page.wait_for_url(f"{base}/jobs/{job_id}/")

    # And the model's page lists the job among its users.
    page.goto(f"{base}/library/{item.pk}/")
    expect(page.locator(f"[data-used-by] a[href='/jobs/{job_id}/']")).to_have_count(1)
    page.screenshot(path=str(screenshots / "library-lineage.png"), full_page=True)
    page.click("nav >> text=Library")
    expect(page.locator(f"tr[data-item='{item.pk}']")).to_have_attribute("data-status", "ready")
    expect(page.locator("tr[data-builtin=moe-lm-tiny]")).to_have_count(1)
    page.screenshot(path=str(screenshots / "library.png"), full_page=True)


def test_several_loose_files_go_up_as_one_archive_and_become_one_item(
    live_server,
    page: Page,
    owner: User,
    library_dirs: Path,  # noqa: F811
    start_worker: Callable[..., WorkerProcess],
) -> None:
    files = [library_dirs / "plays.txt", library_dirs / "poems.txt"]
    files[0].write_text("to be\nor not to be\n")
    files[1].write_text("shall I compare thee\n\nto a summer's day\n")
    start_worker("library", MOELAB_EXTRA_KINDS=KINDS, MOELAB_LIBRARY_CACHE=str(library_dirs / "worker-cache"))
    base = live_server.url
    log_in(page, base, owner)
    page.goto(f"{base}/t/routing-lab/library/add/")
    page.fill("#upload-name", "two texts")
    page.select_option("#upload-kind", "text")
    page.set_input_files("#upload-file", [str(f) for f in files])
    page.click("form[data-library-upload] button[type=submit]")
    page.wait_for_url(re.compile(r".*/library/\d+/$"))
    # The browser packed them as a tar; the worker unpacked and counted both files' lines.
    expect(page.locator("[data-card-field=records]")).to_have_text("4", timeout=60_000)
    expect(page.locator("[data-card-field=sources]")).to_contain_text("plays.txt")
    expect(page.locator("[data-card-field=sources]")).to_contain_text("poems.txt")
    assert LibraryItem.objects.get(name="two texts").format == "tar"


def test_an_upload_cut_off_for_good_resumes_after_a_reload_where_the_server_stands(
    live_server,
    page: Page,
    owner: User,
    library_dirs: Path,  # noqa: F811
) -> None:
    corpus = library_dirs / "big.txt"
    corpus.write_bytes(b"".join(f"line {i}: tokens pick experts\n".encode() for i in range(6000)))
    base = live_server.url
    log_in(page, base, owner)

    def choose() -> None:
        page.goto(f"{base}/t/routing-lab/library/add/")
        page.fill("#upload-name", "big corpus")
        page.select_option("#upload-kind", "text")
        page.set_input_files("#upload-file", str(corpus))
        page.eval_on_selector("form[data-library-upload]", "form => { form.dataset.chunkBytes = 65536; }")

    # The first chunk arrives, then the network is gone: the page gives up after its retries.
    choose()
    page.route(
        "**/chunk?offset=*", lambda route: route.continue_() if "offset=0" in route.request.url else route.abort()
    )
    page.click("form[data-library-upload] button[type=submit]")
    expect(page.locator("[data-upload-error]")).to_contain_text("it resumes where it stopped", timeout=60_000)
    assert ChunkedUpload.objects.get().received == 65536
    page.unroute("**/chunk?offset=*")

    # Back later (a new page): the same file chosen again goes on from the server's offset.
    sent: list[str] = []
    page.route("**/chunk?offset=*", lambda route: (sent.append(route.request.url.rsplit("=", 1)[1]), route.continue_()))
    choose()
    page.click("form[data-library-upload] button[type=submit]")
    page.wait_for_url(re.compile(r".*/library/\d+/$"))
    assert sent[0] == "65536", sent
    item = LibraryItem.objects.get(name="big corpus")
    assert item.sha256 == hashlib.sha256(corpus.read_bytes()).hexdigest() and item.size == corpus.stat().st_size
    assert not ChunkedUpload.objects.exists()
