"""A fresh process per job, forked from the warm pool child (``WORKER_FRESH_PROCESS_PER_JOB``).

GPU workers want nothing of one job to outlive it: its CUDA context, the caching allocator's
memory, tensors a kind leaked, memory glibc kept (docker-compose.yml lets it keep what a job
frees). billiard's ``--max-tasks-per-child 1`` gives that, but its parent hands the next job to
the child that is about to exit and finds it again only on a 5 s timer, and each new child
imports torch again: seconds before every job starts (``bench/results/platform.md``).

Here the pool child stays (warm: torch and the kinds were imported by the worker's parent,
``workers/preload.py``, and it never touches CUDA) and forks one process per job, which runs the
job and exits. The pool child waits for it and passes Celery's signals on:

- the soft time limit (SIGUSR1 from billiard) is forwarded, and the job records its timeout itself;
- the hard time limit kills the pool child, and the job's process dies with it (PR_SET_PDEATHSIG),
  so it never keeps a GPU busy for a job already marked failed;
- a job process that dies by itself (the out-of-memory killer, a crash in native code) fails its
  job at once with a message, instead of waiting for the reaper.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading

from celery.exceptions import SoftTimeLimitExceeded
from django.db import connections
from django.utils import timezone

log = logging.getLogger(__name__)

#: billiard's soft-time-limit signal (``billiard.pool.SIG_SOFT_TIMEOUT``).
SOFT_LIMIT_SIGNAL = signal.SIGUSR1
_PR_SET_PDEATHSIG = 1
#: Exit status of a job process whose job ran to an end (whatever the job's own outcome).
_FINISHED = 0
_STATUS_BYTES = 64


def run_job_in_fresh_process(job_id: str, *, worker: str | None) -> str:
    """Run ``workers.lifecycle.run_job`` in a process forked for this job; its final status."""
    if threading.active_count() > 1:
        # Only a prefork pool child is single-threaded; a fork from a threaded process (a solo or
        # threads pool) would copy locks other threads hold. Run here instead, and say so.
        log.warning("job %s: runs in the worker's own process (a fresh process needs a prefork pool)", job_id)
        from workers.lifecycle import run_job

        return run_job(job_id, worker=worker)
    # The job's process must not share this process's database sockets: close them here (their
    # owner), so the fork inherits none and each side opens its own.
    connections.close_all()
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the job's process: never returns into the pool's loop
        os.close(read_end)
        _run_and_exit(job_id, worker=worker, parent=parent, status_fd=write_end)
    os.close(write_end)
    try:
        exit_status = _wait(pid)
        status = os.read(read_end, _STATUS_BYTES).decode(errors="replace")
    finally:
        os.close(read_end)
    if os.WIFEXITED(exit_status) and os.WEXITSTATUS(exit_status) == _FINISHED and status:
        return status
    reason = _describe(exit_status)
    log.error("job %s: its process (pid %d) %s", job_id, pid, reason)
    _fail_if_running(job_id, worker=worker, reason=reason)
    return "failed"


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except SoftTimeLimitExceeded:
            # Raised by billiard's handler in this process: the job's process has the same handler
            # (inherited), so it stops where it is and records the timeout as a job does.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, SOFT_LIMIT_SIGNAL)


def _run_and_exit(job_id: str, *, worker: str | None, parent: int, status_fd: int) -> None:
    code = 1
    try:
        _die_with(parent)
        from workers.lifecycle import run_job

        log.info("job %s: runs in process %d", job_id, os.getpid())
        status = run_job(job_id, worker=worker)
        os.write(status_fd, status.encode()[:_STATUS_BYTES])
        code = _FINISHED
    except BaseException:  # anything at all: report it, then leave without unwinding into billiard
        log.exception("job %s: its process failed outside the job", job_id)
    finally:
        with contextlib.suppress(Exception):
            connections.close_all()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        logging.shutdown()
        os._exit(code)


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when the pool child that forked it dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died between the fork and the prctl
        os._exit(1)


def _describe(exit_status: int) -> str:
    if os.WIFSIGNALED(exit_status):
        number = os.WTERMSIG(exit_status)
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
        hint = " (the system may have run out of memory)" if number == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {os.WEXITSTATUS(exit_status)} before the job finished"


def _fail_if_running(job_id: str, *, worker: str | None, reason: str) -> None:
    from webapp.jobs.models import Job

    try:
        Job.objects.filter(pk=job_id, status=Job.Status.RUNNING).update(
            status=Job.Status.FAILED,
            finished_at=timezone.now(),
            error=f"Worker lost: the job's process on {worker or 'its worker'} {reason}. Re-run the job.",
        )
    finally:
        connections.close_all()
