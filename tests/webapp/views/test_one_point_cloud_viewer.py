"""A result page draws a scene in 3D once: a job that records its cloud twice (pointcloud-segment's
full labelled cloud beside the preview meant for the viewer) shows the viewer once, for the preview,
and says of the full file that its preview shows it and how to open it. Different clouds of a job
without a preview (a labelled cloud and the input) are each drawn."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs import storage
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db

PLY = b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n"


def cloud(job: Job, name: str, folder: Path, points: int) -> None:
    path = folder / name
    path.write_bytes(PLY.replace(b"vertex 1", f"vertex {points}".encode()) + b"0 0 0\n" * points)
    storage.store_artifact(job=job, name=name, path=path, media_type="application/x-ply", attempt=job.attempt)


def viewers(html: str) -> list[str]:
    """The names of the files the page draws in the 3D viewer."""
    return re.findall(r'data-render="application/x-ply"[^>]*data-name="([^"]+)"', html)


def test_a_job_with_a_cloud_and_its_preview_shows_one_viewer_for_the_preview(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    cloud(job, "labelled.ply", tmp_path, 50)
    cloud(job, "preview.ply", tmp_path, 50)
    html = csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()
    assert viewers(html) == ["preview.ply"] and 'id="viewer-previewply"' in html
    labelled = html.split('data-artifact="labelled.ply"', 1)[1].split('class="artifact"', 1)[0]
    assert "data-not-drawn" in labelled and 'href="#viewer-previewply">preview.ply</a>' in labelled
    assert f'href="/jobs/{job.id}/artifacts/labelled.ply?download=1"' in labelled


def test_different_clouds_of_a_job_without_a_preview_are_each_drawn(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    cloud(job, "cloud.ply", tmp_path, 80)
    cloud(job, "input.ply", tmp_path, 20)
    html = csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()
    assert viewers(html) == ["cloud.ply", "input.ply"] and "data-not-drawn" not in html


def test_a_single_cloud_is_drawn(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    cloud(job, "cloud.ply", tmp_path, 10)
    html = csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()
    assert viewers(html) == ["cloud.ply"] and "data-not-drawn" not in html
