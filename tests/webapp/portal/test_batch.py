"""Batch verification from the portal: a logged-in member's zip becomes a ``watermark-verify`` job
of their team, searched against every registered key."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.webapp.portal.conftest import png_bytes
from webapp.accounts.models import Team
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db


def _zip() -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for i in range(3):
            zf.writestr(f"{i}.png", png_bytes(i))
    return SimpleUploadedFile("batch.zip", buffer.getvalue())


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_members_zip_becomes_a_verify_job_of_the_team(team: Team, member: User) -> None:
    response = _client(member).post("/verify/batch/", {"team": team.slug, "images": _zip()})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.kind, job.team, job.queue, job.params["keyring"]) == (
        "watermark-verify",
        team,
        "verify",
        "keyring:platform",
    )


def test_a_file_that_is_neither_image_nor_zip_is_refused_with_the_reason(team: Team, member: User) -> None:
    response = _client(member).post(
        "/verify/batch/", {"team": team.slug, "images": SimpleUploadedFile("a.zip", b"not a zip")}, follow=True
    )
    assert "expected png or jpeg or webp or zip" in response.content.decode()
    assert not Job.objects.exists()


def test_a_viewer_cannot_start_a_batch_and_an_outsider_gets_404(team: Team, viewer: User, outsider: User) -> None:
    assert _client(viewer).post("/verify/batch/", {"team": team.slug, "images": _zip()}).status_code == 403
    assert _client(outsider).post("/verify/batch/", {"team": team.slug, "images": _zip()}).status_code == 404
    assert not Job.objects.exists()


def test_batches_need_a_login(team: Team) -> None:
    response = Client().post("/verify/batch/", {"team": team.slug, "images": _zip()})
    assert response.status_code == 302 and "/login" in response["Location"]
