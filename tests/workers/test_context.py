"""The worker's ctx writes through to the job row at most once a pulse, and keeps artifacts of an
unfinished run, labelled as such."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mlcore.jobs.runner import Outcome
from tests.webapp.conftest import make_user
from webapp.accounts.models import Team
from webapp.jobs.models import Job
from workers.context import DatabaseContext
from workers.lifecycle import claim, finish

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running_job() -> Job:
    team = Team.objects.create(name="Ctx Lab", slug="ctx-lab")
    job = Job.objects.create(team=team, submitted_by=make_user("cleo"), kind="test-exercise", queue="cpu")
    return claim(str(job.pk), worker="test@host")


def test_it_writes_nothing_between_pulses_and_everything_on_flush(running_job: Job, tmp_path) -> None:
    ctx = DatabaseContext(running_job, workdir=tmp_path, device="cpu", pulse_seconds=3600)
    with CaptureQueriesContext(connection) as queries:
        for step in range(1000):
            ctx.progress((step + 1) / 1000, f"step {step}")
            ctx.metric("loss", 1 / (step + 1), step=step)
            ctx.log(f"line {step}")
    assert len(queries) == 0
    with CaptureQueriesContext(connection) as queries:
        ctx.flush()
    assert len(queries) == 1
    job = Job.objects.get(pk=running_job.pk)
    assert (job.progress, job.stage) == (1.0, "step 999")
    assert len(job.metrics["series"]["loss"]) == 1000
    assert job.log_tail.splitlines() == [f"line {i}" for i in range(800, 1000)]
    ctx.discard()


def test_it_sees_cancellation_through_the_pulse_thread(running_job: Job, tmp_path) -> None:
    ctx = DatabaseContext(running_job, workdir=tmp_path, device="cpu", pulse_seconds=0.05)
    ctx.start()
    try:
        assert not ctx.cancelled()
        Job.objects.filter(pk=running_job.pk).update(cancel_requested=True)
        for _ in range(100):
            if ctx.cancelled():
                break
            time.sleep(0.05)
        assert ctx.cancelled()
    finally:
        ctx.stop()
        ctx.discard()


def test_it_keeps_the_artifacts_of_a_failed_run_marked_unfinished(running_job: Job, tmp_path) -> None:
    ctx = DatabaseContext(running_job, workdir=tmp_path, device="cpu", pulse_seconds=3600)
    (tmp_path / "sample.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "weights.bin").write_bytes(b"w" * 10)
    ctx.artifact("sample.png", tmp_path / "sample.png")
    ctx.artifact("checkpoint", tmp_path / "checkpoint")
    assert finish(running_job, Outcome("failed", error="Asked to fail."))
    artifacts = {a.name: a for a in running_job.artifacts.all()}
    assert all(a.unfinished for a in artifacts.values())
    assert artifacts["sample.png"].media_type == "image/png"
    assert artifacts["checkpoint"].media_type == "application/zip"
    assert artifacts["checkpoint"].file.name.endswith("checkpoint.zip")
    ctx.discard()


def test_it_does_not_overwrite_a_job_the_reaper_already_failed(running_job: Job) -> None:
    from workers.reaper import reap_stale_jobs

    Job.objects.filter(pk=running_job.pk).update(heartbeat_at=running_job.heartbeat_at.replace(year=2000))
    assert reap_stale_jobs(stale_seconds=60) == [str(running_job.pk)]
    assert not finish(running_job, Outcome("succeeded"))
    assert Job.objects.get(pk=running_job.pk).status == Job.Status.FAILED


def test_it_uploads_the_full_log_while_the_job_runs(running_job: Job, tmp_path) -> None:
    from webapp.jobs.storage import read_log

    ctx = DatabaseContext(running_job, workdir=tmp_path, device="cpu", pulse_seconds=3600)
    for step in range(300):
        ctx.log(f"line {step}")
    ctx.upload_log()
    assert read_log(running_job).splitlines() == [f"line {i}" for i in range(300)]
    ctx.discard()
