"""``moelab submit`` against a live server: the CLI and the API keep to one contract."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.workers.processes import ROOT, WorkerProcess
from webapp.accounts.services import api_token_create
from webapp.jobs.models import Job, JobInput

MOELAB = str(Path(sys.executable).parent / "moelab")


def moelab(*args: str) -> subprocess.CompletedProcess[str]:
    # The repository root on the path, so the test-only kind (tests.jobkinds.exercise) imports.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([MOELAB, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.django_db(transaction=True)
def test_moelab_submit_sends_params_and_files_to_the_api(live_server, member: User, tmp_path: Path) -> None:
    token = api_token_create(user=member, name="cli")[1]
    notes = tmp_path / "notes.txt"
    notes.write_text("a note for the router\n")
    result = moelab(
        "submit", "test-exercise", "--set", "steps=3", "--set", "seed=9", "--input", f"notes={notes}",
        "--server", live_server.url, "--token", token, "--team", "routing-lab", "--no-follow",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = Job.objects.get()
    assert f"submitted job {job.id}" in result.stdout and f"{live_server.url}/jobs/{job.id}/" in result.stdout
    assert job.params["steps"] == 3 and job.params["seed"] == 9 and job.submitted_by == member
    assert JobInput.objects.get(job=job).size == notes.stat().st_size


@pytest.mark.django_db(transaction=True)
def test_moelab_submit_reports_the_apis_field_errors(live_server, member: User) -> None:
    token = api_token_create(user=member, name="cli")[1]
    result = moelab(
        "submit", "test-exercise", "--set", "steps=0", "--server", live_server.url, "--token", token, "--no-follow"
    )
    assert result.returncode != 0 and "HTTP 422" in result.stderr and "Must be at least 1." in result.stderr


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_moelab_submit_follows_the_job_to_the_end_on_a_real_worker(
    live_server, member: User, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("cli")
    token = api_token_create(user=member, name="cli")[1]
    result = moelab("submit", "test-exercise", "--set", "steps=3", "--server", live_server.url, "--token", token)
    assert result.returncode == 0, result.stderr + result.stdout
    job = Job.objects.get()
    assert re.search(rf"job {job.id} succeeded", result.stdout)
    assert job.status == Job.Status.SUCCEEDED and job.metrics["scalars"]["final_loss"] == pytest.approx(1 / 3)


@pytest.mark.django_db(transaction=True)
def test_moelab_submit_stops_following_at_its_timeout_and_leaves_the_job_running(live_server, member: User) -> None:
    # No worker: the job stays queued, as a long job would stay running.
    token = api_token_create(user=member, name="cli")[1]
    result = moelab(
        "submit", "test-exercise", "--set", "steps=3", "--server", live_server.url, "--token", token, "--timeout", "2"
    )
    job = Job.objects.get()
    assert result.returncode == 3, result.stderr
    assert f"stopped following after --timeout 2 s; job {job.id} goes on at {live_server.url}/jobs/{job.id}/" in (
        result.stderr
    )
    assert job.status == Job.Status.QUEUED
