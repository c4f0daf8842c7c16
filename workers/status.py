"""Worker health for the dashboard: each worker's parent process refreshes a ``WorkerStatus`` row
from a thread. It works on every broker, the server-less default included, because it writes to
the database rather than relying on broker events."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from webapp.jobs.models import WorkerStatus
from workers.device import describe_device

log = logging.getLogger(__name__)


class StatusBeat:
    def __init__(self, *, hostname: str, queues: list[str], interval: float | None = None) -> None:
        self.hostname = hostname
        self.queues = queues
        self.interval = interval or max(1.0, settings.WORKER_UP_SECONDS / 3)
        self.device = describe_device()
        self.started_at = timezone.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="worker-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> None:
        WorkerStatus.objects.update_or_create(
            hostname=self.hostname,
            defaults={
                "queues": self.queues,
                "device": self.device,
                "pid": os.getpid(),
                "started_at": self.started_at,
                "last_seen": timezone.now(),
            },
        )

    def _loop(self) -> None:
        try:
            while True:
                try:
                    self.beat()
                except Exception:
                    log.exception("worker status update failed")
                    close_old_connections()
                if self._stop.wait(self.interval):
                    break
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            WorkerStatus.objects.filter(hostname=self.hostname).delete()
        finally:
            connection.close()


def queues_of(consumer: Any) -> list[str]:
    try:
        return sorted(q.name for q in consumer.task_consumer.queues)
    except AttributeError:
        return []
