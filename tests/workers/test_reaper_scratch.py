"""What a killed job leaves on a worker's disk is removed: by the reaper, and by each worker as it
starts; never the folder of a job still running (``workers/scratch.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from tests.workers.conftest import submit
from tests.workers.processes import ROOT, wait_for, wait_for_status
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit
from workers.reaper import reap_stale_jobs
from workers.scratch import JobScratch, sweep

pytestmark = pytest.mark.django_db(transaction=True)


def scratch_of(root: Path, job: Job) -> list[Path]:
    return sorted(root.glob(f"moelab-job-{job.pk}-*"))


def job_with_status(team, alice, status: str) -> Job:
    return Job.objects.create(
        team=team, submitted_by=alice, kind="test-exercise", queue="cpu", params={}, status=status
    )


# -- the sweep, without a worker --------------------------------------------------------------------


def test_a_job_scratch_holds_the_jobs_temporary_files_and_goes_when_removed(tmp_root: Path, team, alice) -> None:
    job = job_with_status(team, alice, Job.Status.RUNNING)
    scratch = JobScratch.create(job.pk)
    try:
        assert scratch.root.parent == tmp_root and scratch.workdir.is_dir()
        assert oct(scratch.root.stat().st_mode & 0o777) == "0o700"
        # Whatever the job writes "to /tmp" while it runs lands in its folder.
        with tempfile.NamedTemporaryFile(prefix="moelab-key-", delete=False) as key:
            key.write(b"bits")
        assert Path(key.name).parent == scratch.root
    finally:
        scratch.remove()
    assert not scratch.root.exists() and tempfile.tempdir == str(tmp_root)


def test_the_sweep_removes_the_scratch_and_log_of_jobs_that_ended_or_no_longer_exist(
    tmp_root: Path, team, alice
) -> None:
    failed = job_with_status(team, alice, Job.Status.FAILED)
    (tmp_root / f"moelab-job-{failed.pk}-abc123" / "work").mkdir(parents=True)
    (tmp_root / f"moelab-job-{failed.pk}-abc123" / "keyring.json").write_text("{}")
    (tmp_root / f"moelab-log-{failed.pk}-xyz.txt").write_text("step 0\n")
    gone = "0b3f8c1e-0000-4000-8000-000000000000"
    (tmp_root / f"moelab-job-{gone}-def456").mkdir()
    unrelated = [tmp_root / "moelab-job-not-a-job-id", tmp_root / "moelab-inputs-123", tmp_root / "other"]
    for path in unrelated:
        path.mkdir()

    removed = sweep(tmp_root)

    assert sorted(p.name for p in removed) == sorted(
        [f"moelab-job-{failed.pk}-abc123", f"moelab-log-{failed.pk}-xyz.txt", f"moelab-job-{gone}-def456"]
    )
    assert sorted(tmp_root.iterdir()) == sorted(unrelated)


def test_the_sweep_keeps_the_folder_of_a_running_job_even_when_no_process_holds_it(tmp_root: Path, team, alice) -> None:
    # The moment between creating a folder and locking it: the job was claimed (RUNNING) first.
    running = job_with_status(team, alice, Job.Status.RUNNING)
    folder = tmp_root / f"moelab-job-{running.pk}-abc123"
    folder.mkdir()
    (tmp_root / f"moelab-log-{running.pk}-xyz.txt").write_text("")
    assert sweep(tmp_root) == []
    assert folder.is_dir() and (tmp_root / f"moelab-log-{running.pk}-xyz.txt").exists()


def test_the_sweep_keeps_the_folder_of_a_reaped_job_whose_process_still_runs(tmp_root: Path, team, alice) -> None:
    # The reaper gave up on it (a stale heartbeat), but the process lives and holds its folder's lock.
    job = job_with_status(team, alice, Job.Status.RUNNING)
    scratch = JobScratch.create(job.pk, redirect_tempfiles=False)
    try:
        Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED)
        assert sweep(tmp_root) == [] and scratch.workdir.is_dir()
    finally:
        scratch.remove()


def test_a_process_killed_with_sigkill_releases_its_folder_to_the_sweep(tmp_root: Path, team, alice) -> None:
    job = job_with_status(team, alice, Job.Status.RUNNING)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from workers.scratch import JobScratch; "
            f"s = JobScratch.create({str(job.pk)!r}); print(s.root, flush=True); time.sleep(60)",
        ],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_root)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        folder = Path(holder.stdout.readline().strip())
        Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED)
        assert folder.is_dir() and sweep(tmp_root) == []  # alive: kept
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        holder.stdout.close()
    assert sweep(tmp_root) == [folder] and not folder.exists()


# -- real workers -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_reaper_removes_the_scratch_of_a_job_whose_worker_was_killed_mid_job(
    start_worker, tmp_root: Path, team, alice
) -> None:
    doomed = start_worker("doomed", queues="cpu", TMPDIR=str(tmp_root))
    notes = SimpleUploadedFile("notes.txt", b"uploaded notes", content_type="text/plain")
    job = job_submit(
        team=team,
        user=alice,
        kind="test-exercise",
        raw_params={"steps": 2000, "step_seconds": 0.05},
        files={"notes": [notes]},
    )
    wait_for(lambda: Job.objects.get(pk=job.pk).progress > 0, what="the job to make progress")
    [folder] = scratch_of(tmp_root, job)
    # Everything the job wrote to disk is inside its one folder: the work dir, the upload, the log.
    assert (folder / "work").is_dir()
    assert [p.read_bytes() for p in folder.rglob("notes.txt")] == [b"uploaded notes"]
    assert list(folder.glob(f"moelab-log-{job.pk}-*.txt"))
    assert not list(tmp_root.glob("moelab-inputs-*")) and not list(tmp_root.glob("moelab-log-*"))

    doomed.kill()
    assert folder.is_dir()  # nobody ran the job's finally block
    time.sleep(1.2)
    assert reap_stale_jobs(stale_seconds=1) == [str(job.pk)]

    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.error.startswith("Worker lost")
    # (The pool's own pymp-* folder belongs to the worker's parent, not to a job.)
    assert scratch_of(tmp_root, job) == [] and list(tmp_root.glob("moelab-*")) == []


@pytest.mark.slow
def test_a_worker_that_starts_removes_scratch_left_on_its_host_but_not_a_running_jobs(
    start_worker, tmp_root: Path, team, alice
) -> None:
    killed = job_with_status(team, alice, Job.Status.FAILED)
    left = tmp_root / f"moelab-job-{killed.pk}-abc123"
    (left / "work").mkdir(parents=True)
    (left / "keyring.json").write_text('{"bits": "0101"}')
    running = job_with_status(team, alice, Job.Status.RUNNING)
    Job.objects.filter(pk=running.pk).update(heartbeat_at=timezone.now())
    kept = tmp_root / f"moelab-job-{running.pk}-def456"
    kept.mkdir()

    start_worker("sweeper", queues="cpu", TMPDIR=str(tmp_root))

    wait_for(lambda: not left.exists(), timeout=30, what="the starting worker to sweep its disk")
    assert kept.is_dir()
    # And the worker runs jobs as before, leaving nothing behind.
    after = wait_for_status(submit(team, alice, steps=2), Job.Status.SUCCEEDED, timeout=60)
    assert scratch_of(tmp_root, after) == []
