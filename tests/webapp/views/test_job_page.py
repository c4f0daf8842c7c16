"""The job page: parameters, state, log, metrics, charts from stored specs, artifacts by media
type, provenance, and the traceback for the people it is meant for."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.views.conftest import record_run
from webapp.jobs import services
from webapp.jobs.models import Job, JobArtifact


def page(client: Client, job: Job) -> str:
    response = client.get(f"/jobs/{job.id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_shows_parameters_metrics_log_and_provenance(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=4, seed=11)
    html = page(csrf_client(owner), job)
    assert re.search(r'data-param="steps">4<', html) and re.search(r'data-param="seed">11<', html)
    assert re.search(r'data-metric="final_loss">0.25<', html)
    assert "step 3: loss 0.2500" in html
    assert "cpu-1@testhost" in html and "data-provenance" in html
    assert 'data-terminal="true"' in html and "pill-succeeded" in html


def test_charts_are_embedded_as_json_for_vega_embed_with_png_and_data_links(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=3)
    html = page(csrf_client(owner), job)
    assert 'data-chart="chart-0"' in html
    spec = json.loads(re.search(r'<script id="chart-0" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert spec["mark"] == "line" and len(spec["data"]["values"]) == 3
    assert f'href="/jobs/{job.id}/charts/loss.png"' in html and f'href="/jobs/{job.id}/charts/loss.json"' in html


def test_artifacts_are_rendered_by_media_type_with_sizes_and_download_links(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=3)
    html = page(csrf_client(owner), job)
    assert 'data-render="text/csv"' in html and 'data-render="application/json"' in html
    assert f'href="/jobs/{job.id}/artifacts/losses.csv?download=1"' in html
    size = JobArtifact.objects.get(job=job, name="losses.csv").size
    assert f"{size}\xa0bytes" in html
    assert "from an unfinished run" not in html


def test_artifacts_of_a_failed_run_are_labelled_unfinished(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.FAILED)
    html = page(csrf_client(owner), job)
    assert "from an unfinished run" in html and "Asked to fail at step 2." in html


def test_an_image_artifact_goes_to_the_gallery(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], tmp_path
) -> None:
    from PIL import Image

    from webapp.jobs import storage

    job = make_job(Job.Status.SUCCEEDED)
    path = tmp_path / "sample.png"
    Image.new("RGB", (8, 8), "purple").save(path)
    storage.store_artifact(job=job, name="sample.png", path=path, media_type="image/png", attempt=job.attempt)
    client = csrf_client(owner)
    html = page(client, job)
    assert f'<img src="/jobs/{job.id}/artifacts/sample.png"' in html
    image = client.get(f"/jobs/{job.id}/artifacts/sample.png")
    assert image["Content-Type"] == "image/png" and b"".join(image.streaming_content).startswith(b"\x89PNG")


def test_the_traceback_is_shown_to_no_member_not_even_the_submitter(
    owner: User, member: User, viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.FAILED, by=member)  # staff read it in the admin
    for user in (member, owner, viewer):
        html = page(csrf_client(user), job)
        assert "data-traceback" not in html and "Traceback (most recent call last)" not in html


def test_buttons_follow_the_role_and_the_state(
    owner: User, member: User, viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    running = make_job(Job.Status.RUNNING)
    done = make_job(Job.Status.SUCCEEDED)
    assert 'data-action="cancel"' in page(csrf_client(member), running)
    assert 'data-action="delete"' not in page(csrf_client(owner), running)
    assert 'data-action="delete"' in page(csrf_client(owner), done)
    assert 'data-action="cancel"' not in page(csrf_client(owner), done)
    assert 'data-action="delete"' not in page(csrf_client(member), done)
    viewer_html = page(csrf_client(viewer), running)
    assert 'data-action="cancel"' not in viewer_html and 'data-action="rerun"' not in viewer_html


def test_the_live_fragment_polls_until_the_job_is_terminal(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.RUNNING)
    client = csrf_client(owner)
    running = client.get(f"/jobs/{job.id}/live/")
    assert 'hx-trigger="every 2s' in running.content.decode() and "HX-Trigger" not in running
    record_run(job)
    finished = client.get(f"/jobs/{job.id}/live/")
    assert "hx-trigger" not in finished.content.decode() and 'data-status="succeeded"' in finished.content.decode()
    assert finished["HX-Trigger"] == "job-finished"  # the results panel then fetches its final state


def test_the_results_fragment_answers_no_content_while_nothing_changed(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.RUNNING)
    client = csrf_client(owner)
    first = client.get(f"/jobs/{job.id}/results/").content.decode()
    version = re.search(r"results/\?v=(\w+)", first).group(1)
    assert client.get(f"/jobs/{job.id}/results/", {"v": version}).status_code == 204
    record_run(job)
    changed = client.get(f"/jobs/{job.id}/results/", {"v": version})
    assert changed.status_code == 200 and "data-chart=" in changed.content.decode()
    assert "hx-trigger" not in changed.content.decode()


def test_the_full_log_is_downloadable(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=2)
    response = csrf_client(owner).get(f"/jobs/{job.id}/log.txt")
    assert response["Content-Type"].startswith("text/plain") and "step 1: loss 0.5000" in response.content.decode()


def test_a_rerun_page_says_which_parameters_changed_when_the_kind_changed(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(kind_version=0, params={**job.params, "retired": 1})
    job.refresh_from_db()
    assert services.job_changed_params(job) == ["retired"]
    html = csrf_client(owner).get(f"/jobs/{job.id}/rerun/").content.decode()
    assert "data-changed-params" in html and "<code>retired</code>" in html and "v0 → v1" in html


def test_a_job_whose_kind_was_removed_still_has_a_page(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=2)
    Job.objects.filter(pk=job.pk).update(kind="retired-kind")
    client = csrf_client(owner)
    html = page(client, job)
    assert "retired-kind" in html and re.search(r'data-param="steps">2<', html)
    assert client.get(f"/jobs/{job.id}/rerun/").status_code == 404
