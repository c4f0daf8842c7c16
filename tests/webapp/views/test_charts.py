"""Chart downloads: a PNG rendered on the server by vl-convert, the chart's data and its spec."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.models import Job


def test_a_chart_downloads_as_a_png_rendered_on_the_server(
    viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=4)
    response = csrf_client(viewer).get(f"/jobs/{job.id}/charts/loss.png")
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG\r\n\x1a\n") and len(response.content) > 2000
    assert 'filename="loss.png"' in response["Content-Disposition"]


def test_a_chart_downloads_as_its_json_data_and_its_spec(
    viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=4)
    client = csrf_client(viewer)
    data = client.get(f"/jobs/{job.id}/charts/loss.json").json()
    assert data == [{"step": s, "loss": 1 / (s + 1)} for s in range(4)]
    spec = client.get(f"/jobs/{job.id}/charts/loss.vl.json").json()
    assert spec["mark"] == "line" and spec["data"]["values"] == data


def test_an_unknown_chart_is_not_found(
    viewer: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    assert csrf_client(viewer).get(f"/jobs/{job.id}/charts/nope.png").status_code == 404
