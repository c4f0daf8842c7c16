"""Errors safe to show: a job's failure reaches its page, the API and ``moelab submit`` as a
sentence (a user's error as written, an internal error as a reference id), never as a traceback
or a server path; staff find the traceback in the admin and the worker's log by that reference."""

from __future__ import annotations

import io
import json
import logging
import re
import struct
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.base import ContentFile
from django.test import Client
from django.urls import reverse

from mlcore.jobs import JobError, cli
from mlcore.uploads import safetensors_header
from tests.workers.conftest import submit
from tests.workers.processes import wait_for_status
from webapp.accounts.services import api_token_create
from webapp.jobs.models import Job, JobInput
from webapp.jobs.services import job_submit
from workers.lifecycle import run_job

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True)]

REFERENCE = re.compile(
    r"^Internal error \(reference ([0-9a-f]{8})\): the job failed on our side; the staff have the details\.$"
)
CHECKOUT = str(Path(__file__).resolve().parents[2])
#: What must never reach a user: a traceback, the kind's code, and folders of the server.
LEAKS = ("Traceback", "exercise.py", "crash at step", CHECKOUT, tempfile.gettempdir() + "/", sys.prefix)


def assert_safe(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text, f"{leak!r} leaked into: {text[:500]}"


@pytest.fixture
def crashed(team, alice, caplog) -> Job:
    """A job whose kind raised an unexpected exception, run by the worker's own code in-process."""
    job = submit(team, alice, steps=3, outcome="crash", fail_at=1)
    with caplog.at_level(logging.ERROR, logger="workers.lifecycle"):
        assert run_job(str(job.pk), worker="test-worker") == "failed"
    job.refresh_from_db()
    return job


def reference_of(job: Job) -> str:
    match = REFERENCE.match(job.error)
    assert match, job.error
    return match.group(1)


def test_an_internal_error_is_stored_as_a_reference_with_the_traceback_for_staff(crashed: Job, caplog) -> None:
    reference = reference_of(crashed)
    assert crashed.traceback.startswith(f"Reference {reference}\nTraceback (most recent call last):")
    assert "tests/jobkinds/exercise.py" in crashed.traceback and "crash at step 1" in crashed.traceback
    # The worker's log holds the same reference with the traceback, so staff find one from the other.
    logged = [r.getMessage() for r in caplog.get_records("setup") if reference in r.getMessage()]
    assert len(logged) == 1 and "RuntimeError: crash at step 1" in logged[0]


def test_the_job_page_shows_the_reference_and_no_traceback_even_to_its_submitting_owner(
    crashed: Job, alice: User
) -> None:
    client = Client()
    client.force_login(alice)  # the submitter and an owner of the team
    for name in ("jobs:detail", "jobs:live"):
        page = client.get(reverse(name, args=[crashed.pk])).content.decode()
        assert f"Internal error (reference {reference_of(crashed)})" in page
        assert "data-traceback" not in page
        assert_safe(page)


def test_the_api_answers_the_reference_and_no_traceback(crashed: Job, alice: User) -> None:
    token = api_token_create(user=alice, name="tests")[1]
    response = Client().get(f"/api/v1/jobs/{crashed.pk}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response.json()["error"] == crashed.error
    assert "traceback" not in response.json()
    assert_safe(response.content.decode())


def test_staff_read_the_traceback_in_the_admin_and_find_the_job_by_its_reference(crashed: Job) -> None:
    staff = User.objects.create_superuser("staff", "staff@example.com", "a-long-test-password-1")
    client = Client()
    client.force_login(staff)
    page = client.get(reverse("admin:jobs_job_change", args=[crashed.pk])).content.decode()
    assert "Traceback (most recent call last)" in page and "crash at step 1" in page
    found = client.get(reverse("admin:jobs_job_changelist"), {"q": reference_of(crashed)}).content.decode()
    assert str(crashed.pk) in found
    other = client.get(reverse("admin:jobs_job_changelist"), {"q": "0badc0de"}).content.decode()
    assert str(crashed.pk) not in other


def test_a_platform_failure_in_the_worker_shows_a_reference_and_no_path(team, alice, caplog) -> None:
    """An input whose stored file has gone: the worker's own error names a media path."""
    notes = ContentFile(b"a note\n", name="notes.txt")
    job = job_submit(team=team, user=alice, kind="test-exercise", raw_params={}, files={"notes": [notes]})
    stored = JobInput.objects.get(job=job)
    stored.file.storage.delete(stored.file.name)
    with caplog.at_level(logging.ERROR, logger="workers.lifecycle"):
        assert run_job(str(job.pk), worker="test-worker") == "failed"
    job.refresh_from_db()
    reference = reference_of(job)
    assert job.traceback.startswith(f"Reference {reference} in the worker\n") and "FileNotFoundError" in job.traceback
    assert any(reference in r.getMessage() for r in caplog.records)


def test_the_worker_refuses_an_upload_the_web_did_not_check_with_the_librarys_sentence(
    team, alice, tmp_path: Path
) -> None:
    """A checkpoint stored without the web's checks (an older web, a direct write) still meets them
    in ``runner.prepare`` on the worker, with the same sentence and no traceback."""
    implausible = struct.pack("<Q", 2**41) + b'{"weight": {"dtype": "F32"}}'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("config.json", json.dumps({"model_type": "qwen3_moe"}))
        zf.writestr("model.safetensors", implausible)
    job = job_submit(team=team, user=alice, kind="compress-moe", raw_params={})
    item = JobInput(job=job, param="checkpoint", original_name="my-model.zip", size=len(buffer.getvalue()))
    item.file.save("my-model.zip", ContentFile(buffer.getvalue()), save=True)
    assert run_job(str(job.pk), worker="test-worker") == "failed"
    job.refresh_from_db()
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(implausible)
    with pytest.raises(JobError) as library:  # the team library's check of the same file
        safetensors_header(weights)
    assert (job.error, job.traceback) == (f"Checkpoint (my-model.zip): {library.value}", "")


@pytest.mark.slow
def test_moelab_submit_follows_a_crashed_job_to_its_reference(live_server, celery_worker, team, alice, capsys) -> None:
    token = api_token_create(user=alice, name="cli")[1]
    args = ["submit", "test-exercise", "--set", "steps=3", "--set", "outcome=crash", "--set", "fail_at=1"]
    status = cli.main([*args, "--server", live_server.url, "--token", token, "--team", team.slug])
    out = capsys.readouterr()
    job = wait_for_status(Job.objects.get(), Job.Status.FAILED)
    assert status == 1
    assert f"moelab: job {job.pk} failed: Internal error (reference {reference_of(job)})" in out.out
    assert_safe(out.out + out.err)
