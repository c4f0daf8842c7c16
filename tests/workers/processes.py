"""Waiting for jobs, and Celery workers started as subprocesses against the test database.

Reusable by any test that needs a real worker (``tests/e2e`` too): start one with
``WorkerProcess("name", media=..., log=..., extra_env={}, beat=False).wait_ready()`` (all three
queues unless ``queues`` says otherwise), inside a
``django_db(transaction=True)`` test so the worker sees the test's rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.db import connection

from webapp.jobs.models import Job

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).parent / "celery")


def wait_for(predicate: Callable[[], object], *, timeout: float = 30, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last saw {value!r}")


def wait_for_status(job: Job, *statuses: str, timeout: float = 30) -> Job:
    def reached() -> bool:
        job.refresh_from_db()
        return job.status in statuses

    wait_for(reached, timeout=timeout, what=f"job {job.pk} to be {'/'.join(statuses)}")
    return job


def database_url() -> str:
    """The test database (not the one in DATABASE_URL) as a URL a subprocess can use."""
    db = connection.settings_dict
    user = db["USER"] or "postgres"
    auth = f"{user}:{db['PASSWORD']}" if db["PASSWORD"] else user
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class WorkerProcess:
    """``celery -A webapp worker`` in its own session, so SIGKILL takes its pool children too."""

    def __init__(
        self,
        name: str,
        *,
        media: Path,
        log: Path,
        extra_env: dict[str, str],
        beat: bool,
        queues: str = "gpu,cpu,verify",
    ) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "MOELAB_MEDIA_ROOT": str(media),
            "MOELAB_VAR_DIR": str(log.parent / "var"),
            "MOELAB_DEVICE": "cpu",
            **extra_env,
        }
        command = [CELERY, "-A", "webapp", "worker", "-Q", queues, "-c", "1", "-P", "prefork"]
        command += ["-n", f"{name}@%h", "--without-gossip", "--without-mingle", "-l", "info"]
        if beat:
            command += ["-B", "-s", str(log.parent / f"{name}-beat-schedule")]
        self.name = name
        self.log = log
        self._out = log.open("wb")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout: float = 60) -> None:
        from webapp.jobs.models import WorkerStatus

        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"worker {self.name} exited:\n{self.log.read_text()[-3000:]}")
            return WorkerStatus.objects.filter(hostname__startswith=f"{self.name}@").exists()

        wait_for(ready, timeout=timeout, what=f"worker {self.name} to report ready")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()
