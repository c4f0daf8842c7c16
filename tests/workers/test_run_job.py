"""A real worker (a thread running the project's Celery app against Redis) runs the test kind."""

from __future__ import annotations

import pytest

from tests.workers.conftest import submit
from tests.workers.processes import wait_for, wait_for_status
from webapp.jobs.models import Job
from webapp.jobs.services import job_cancel
from webapp.jobs.storage import read_log

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_runs_a_job_to_success_through_every_ctx_channel(celery_worker, team, alice) -> None:
    job = wait_for_status(submit(team, alice, steps=5, seed=7), Job.Status.SUCCEEDED)
    assert job.progress == 1.0 and job.stage == "step 5 of 5"
    assert job.attempt == 1 and job.started_at <= job.finished_at and job.worker and job.device == "cpu"
    assert job.metrics["scalars"] == {"final_loss": 0.2, "seed": 7.0}
    assert [step for step, _ in job.metrics["series"]["loss"]] == [0, 1, 2, 3, 4]
    assert len(job.charts["loss"]["data"]["values"]) == 5
    assert job.log_tail.splitlines()[0] == "step 0: loss 1.0000"
    assert "step 4: loss 0.2000" in read_log(job)
    assert job.provenance["seed"] == 7 and job.provenance["device"] == "cpu" and job.provenance["packages"]
    artifacts = {a.name: a for a in job.artifacts.all()}
    assert set(artifacts) == {"losses.csv", "summary.json"}
    assert artifacts["losses.csv"].media_type == "text/csv" and not artifacts["losses.csv"].unfinished
    assert artifacts["losses.csv"].file.name.startswith(f"artifacts/{job.pk}/1/")
    with artifacts["losses.csv"].file.open("rb") as f:
        assert f.read().decode().splitlines()[:2] == ["step,loss", "0,1.0"]


def test_it_fails_with_the_users_error(celery_worker, team, alice) -> None:
    job = wait_for_status(submit(team, alice, steps=3, outcome="user-error", fail_at=1), Job.Status.FAILED)
    assert job.error == "Asked to fail at step 1."
    assert job.progress == pytest.approx(1 / 3)


def test_it_reports_a_crash_as_an_internal_error_with_a_reference_and_keeps_the_traceback(
    celery_worker, team, alice
) -> None:
    job = wait_for_status(submit(team, alice, steps=3, outcome="crash", fail_at=2), Job.Status.FAILED)
    assert job.error.startswith("Internal error (reference ") and "crash" not in job.error
    assert "Traceback" in job.traceback and "tests/jobkinds/exercise.py" in job.traceback


def test_it_cancels_a_running_job(celery_worker, team, alice) -> None:
    job = submit(team, alice, steps=500, step_seconds=0.02)
    wait_for(lambda: Job.objects.get(pk=job.pk).progress > 0, what="the job to make progress")
    job_cancel(job=job, user=alice)
    job = wait_for_status(job, Job.Status.CANCELLED)
    assert 0 < job.progress < 1 and "cancelled at step" in job.log_tail


def test_it_cancels_a_queued_job_so_that_no_worker_runs_it(celery_worker, team, alice) -> None:
    busy = submit(team, alice, steps=500, step_seconds=0.02)
    wait_for_status(busy, Job.Status.RUNNING)
    waiting = job_cancel(job=submit(team, alice, steps=1), user=alice)
    assert waiting.status == Job.Status.CANCELLED
    job_cancel(job=busy, user=alice)
    wait_for_status(busy, Job.Status.CANCELLED)
    after = wait_for_status(submit(team, alice, steps=1), Job.Status.SUCCEEDED)  # the worker moved past it
    waiting.refresh_from_db()
    assert waiting.started_at is None and waiting.attempt == 0 and after.attempt == 1


def test_a_duplicate_delivery_exits_without_touching_the_job(celery_worker, celery_app, team, alice) -> None:
    from webapp.celery import RUN_JOB

    job = wait_for_status(submit(team, alice, steps=2), Job.Status.SUCCEEDED)
    finished_at = job.finished_at
    celery_app.send_task(RUN_JOB, args=[str(job.pk)], queue="cpu")
    probe = wait_for_status(submit(team, alice, steps=1), Job.Status.SUCCEEDED)  # queued behind the duplicate
    job.refresh_from_db()
    assert probe.attempt == 1
    assert (job.status, job.attempt, job.finished_at) == (Job.Status.SUCCEEDED, 1, finished_at)
    assert job.artifacts.count() == 2
