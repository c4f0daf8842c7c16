"""Workers started as subprocesses with a prefork pool: time limits, a worker killed mid-job,
torch (so CUDA) loaded only in the pool's children, and GPU workers' fresh process per job."""

from __future__ import annotations

import re
from pathlib import Path

import psutil
import pytest

from mlcore.jobs.registry import get_kind
from tests.workers.conftest import submit
from tests.workers.processes import WorkerProcess, wait_for, wait_for_status
from webapp.celery import RUN_JOB, app
from webapp.jobs.models import Job, WorkerStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_records_a_timeout_when_the_soft_time_limit_passes(start_worker, team, alice) -> None:
    # The cpu queue alone, as docker-compose's worker-cpu: a verify worker's child loads torch as it
    # starts, which on a loaded machine can hold the job back past a limit this short.
    start_worker("limits", queues="cpu")
    params = get_kind("test-exercise").spec.clean({"steps": 1000, "step_seconds": 0.05})
    job = Job.objects.create(team=team, submitted_by=alice, kind="test-exercise", queue="cpu", params=params)
    # The kind's own soft limit is a minute (submission sends it; see the submit tests): this message
    # carries a 3 s one to keep the test short.
    app.send_task(RUN_JOB, args=[str(job.pk)], queue="cpu", soft_time_limit=3, time_limit=20)
    job = wait_for_status(job, Job.Status.FAILED)
    assert job.error.startswith("Timed out: the job ran past its time limit")
    assert 0 < job.progress < 0.5 and job.finished_at is not None


def test_a_worker_killed_mid_job_is_reaped_and_the_next_job_runs_on_a_new_worker(start_worker, team, alice) -> None:
    doomed = start_worker("doomed")
    status = WorkerStatus.objects.get(hostname__startswith="doomed@")
    assert status.queues == ["cpu", "gpu", "verify"] and status.device == "cpu" and status.pid == doomed.process.pid
    job = submit(team, alice, steps=2000, step_seconds=0.05)
    wait_for(lambda: Job.objects.get(pk=job.pk).progress > 0, what="the job to make progress")

    doomed.kill()
    # A new worker with beat embedded (its reaper every second) and a short stale threshold.
    start_worker("rescuer", beat=True, MOELAB_HEARTBEAT_STALE_SECONDS="3", MOELAB_REAPER_INTERVAL_SECONDS="1")
    job = wait_for_status(job, Job.Status.FAILED, timeout=60)
    assert job.error.startswith("Worker lost: doomed@") and "Re-run the job" in job.error
    assert not Job.objects.filter(status=Job.Status.RUNNING).exists()

    after = wait_for_status(submit(team, alice, steps=2), Job.Status.SUCCEEDED, timeout=60)
    assert after.worker.startswith("rescuer@")


def test_one_long_step_is_not_mistaken_for_a_dead_worker(start_worker, team, alice) -> None:
    # The reaper runs every second and gives up on a job after 4 s of silence; the job's one step
    # takes 10 s without a word to ctx. The heartbeat comes from the worker's pulse thread instead.
    start_worker(
        "patient", beat=True, queues="cpu", MOELAB_HEARTBEAT_STALE_SECONDS="4", MOELAB_REAPER_INTERVAL_SECONDS="1"
    )
    job = submit(team, alice, steps=1, step_seconds=10)
    job = wait_for_status(job, Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=90)
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert (job.finished_at - job.started_at).total_seconds() >= 10


def test_it_fails_a_job_killed_at_its_hard_time_limit(start_worker, team, alice) -> None:
    start_worker("hardlimit", queues="cpu")
    params = get_kind("test-exercise").spec.clean({"steps": 1000, "step_seconds": 0.05})
    job = Job.objects.create(team=team, submitted_by=alice, kind="test-exercise", queue="cpu", params=params)
    # No soft limit, so nothing inside the job notices: the pool kills the child at 4 s.
    app.send_task(RUN_JOB, args=[str(job.pk)], queue="cpu", time_limit=4)
    job = wait_for_status(job, Job.Status.FAILED)
    assert job.error.startswith("Stopped: the job ran past its hard time limit")
    assert 0 < job.progress < 0.5


def mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_torch_and_cuda_start_in_the_pool_child_never_in_the_workers_parent(start_worker, team, alice) -> None:
    # No MOELAB_DEVICE: the worker finds its device itself (nvidia-smi in the parent, torch in the task).
    worker = start_worker("devices", MOELAB_DEVICE="")
    status = WorkerStatus.objects.get(hostname__startswith="devices@")
    job = wait_for_status(submit(team, alice, steps=2), Job.Status.SUCCEEDED, timeout=60)
    assert job.device == ("cuda" if status.device.startswith("cuda") else "cpu")

    # The verify queue's child loads torch as it starts (the portal's warm-up); the parent forks
    # children, so a CUDA context there would be unusable in every one of them.
    (child,) = psutil.Process(worker.process.pid).children()
    wait_for(lambda: "libtorch" in mapped_libraries(child.pid), timeout=120, what="the child to load torch")
    parent = mapped_libraries(worker.process.pid)
    assert "libtorch" not in parent and "libcuda" not in parent


# -- GPU workers: a fresh process per job (MOELAB_FRESH_PROCESS_PER_JOB, as docker-compose's worker-gpu) --

GPU_WORKER = {"MOELAB_FRESH_PROCESS_PER_JOB": "true", "MOELAB_WORKER_PRELOAD": "default"}


def send_to_gpu(team, alice, **limits: int) -> Job:
    """A test job on the gpu queue (the test kind's own queue is cpu), sent as submission does."""
    # With limits, a job that would take 50 s; without, one step.
    raw = {"steps": 1000, "step_seconds": 0.05} if limits else {"steps": 1}
    params = get_kind("test-exercise").spec.clean(raw)
    job = Job.objects.create(team=team, submitted_by=alice, kind="test-exercise", queue="gpu", params=params)
    app.send_task(RUN_JOB, args=[str(job.pk)], queue="gpu", **limits)
    return job


def job_processes(worker: WorkerProcess) -> dict[str, int]:
    """Job id → the pid of the process that ran it, from the worker's log."""
    return {job: int(pid) for job, pid in re.findall(r"job (\S+): runs in process (\d+)", worker.log.read_text())}


def test_a_gpu_worker_runs_each_job_in_a_process_of_its_own_forked_from_a_warm_child(start_worker, team, alice) -> None:
    worker = start_worker("fresh", queues="gpu", **GPU_WORKER)
    (pool_child,) = psutil.Process(worker.process.pid).children()
    jobs = [wait_for_status(send_to_gpu(team, alice), Job.Status.SUCCEEDED, timeout=60) for _ in range(2)]

    ran_in = wait_for(lambda: (found := job_processes(worker)).keys() >= {str(j.pk) for j in jobs} and found)
    first, second = (ran_in[str(job.pk)] for job in jobs)
    assert first != second and pool_child.pid not in (first, second)
    # Each exits once its job has ended (the job's row is written first).
    wait_for(lambda: not psutil.pid_exists(first) and not psutil.pid_exists(second), what="the job processes to exit")
    # The pool child stays: no job waits for billiard to start a new one.
    assert [c.pid for c in psutil.Process(worker.process.pid).children()] == [pool_child.pid]

    # torch was imported by the parent before it forked, so a job starts with it loaded; CUDA never was.
    parent = mapped_libraries(worker.process.pid)
    assert "libtorch" in parent and "libcuda" not in parent


def test_a_fresh_job_process_records_its_soft_time_limit_and_dies_at_the_hard_one(start_worker, team, alice) -> None:
    worker = start_worker("limited", queues="gpu", **GPU_WORKER)
    # The soft limit reaches the pool child, which passes it on to the job's process.
    soft = wait_for_status(send_to_gpu(team, alice, soft_time_limit=3, time_limit=30), Job.Status.FAILED)
    assert soft.error.startswith("Timed out: the job ran past its time limit"), soft.error

    # The hard limit kills the pool child; the job's process goes with it instead of running on.
    hard = wait_for_status(send_to_gpu(team, alice, time_limit=4), Job.Status.FAILED)
    assert hard.error.startswith("Stopped: the job ran past its hard time limit"), hard.error
    pid = wait_for(lambda: job_processes(worker).get(str(hard.pk)))
    wait_for(lambda: not psutil.pid_exists(pid), timeout=10, what="the job's process to die with its pool child")
