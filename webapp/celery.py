"""The Celery app. It holds configuration only; the one task lives in ``workers.tasks``, and the
web process enqueues it by name, so the web never imports the worker's code (nor torch)."""

from __future__ import annotations

import os

from celery import Celery
from kombu import Exchange, Queue

from mlcore.jobs.spec import QUEUES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

RUN_JOB = "workers.run_job"
REAP = "workers.reap_stale_jobs"
LIBRARY_INGEST = "workers.library_ingest"

app = Celery("moelab", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each queue with its own exchange and routing key: with the defaults, all three would bind the
# default exchange under one key and a message for one queue would land in all of them.
app.conf.task_queues = [Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES]
app.conf.task_routes = {REAP: {"queue": "cpu"}, LIBRARY_INGEST: {"queue": "cpu"}}


def configure_beat() -> None:
    from django.conf import settings

    app.conf.beat_schedule = {
        "reap-stale-jobs": {"task": REAP, "schedule": float(settings.REAPER_INTERVAL_SECONDS)},
    }


configure_beat()
