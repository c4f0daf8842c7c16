"""Real workers for the queue tests: a worker thread from ``celery.contrib.pytest`` on the
project's own app, and workers started as subprocesses (``celery -A webapp worker``) for what
needs a real prefork pool: time limits, and being killed with SIGKILL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.contrib.auth.models import User

from tests.webapp.conftest import make_user
from tests.workers.processes import WorkerProcess
from webapp.accounts.models import Membership, Role, Team
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit


@pytest.fixture(autouse=True)
def media_in_tmp(settings, tmp_path) -> Path:
    media = tmp_path / "media"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": media}},
    }
    return media


@pytest.fixture(autouse=True)
def empty_broker() -> Iterator[None]:
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        pytest.skip("the queue tests need CELERY_BROKER_URL=redis://... (scripts/test.sh sets it)")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    yield
    client.flushdb()


@pytest.fixture
def alice() -> User:
    return make_user("alice")


@pytest.fixture
def team(alice: User) -> Team:
    team = Team.objects.create(name="Queue Lab", slug="queue-lab")
    Membership.objects.create(team=team, user=alice, role=Role.OWNER)
    return team


def submit(team: Team, user: User, **params: object) -> Job:
    return job_submit(team=team, user=user, kind="test-exercise", raw_params=params)


@pytest.fixture
def celery_app() -> Celery:
    import workers.tasks  # noqa: F401  (registers the tasks on the app)
    from webapp.celery import app

    return app


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict[str, object]:
    return {"queues": ("gpu", "cpu", "verify"), "perform_ping_check": False, "shutdown_timeout": 30}


@pytest.fixture
def start_worker(media_in_tmp: Path, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(name: str, *, beat: bool = False, queues: str = "gpu,cpu,verify", **extra_env: str) -> WorkerProcess:
        log = tmp_path / f"{name}.log"
        worker = WorkerProcess(name, media=media_in_tmp, log=log, extra_env=extra_env, beat=beat, queues=queues)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
