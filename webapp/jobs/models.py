"""Jobs: our own row is the source of truth for a job's state, not Celery's result backend.

Lifecycle ``QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED`` (``docs/architecture.md``, "Job
lifecycle"). Inputs, artifacts and the full log live in storage; the row keeps what the pages show.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models


def empty_metrics() -> dict[str, Any]:
    return {"scalars": {}, "series": {}}


def input_path(instance: JobInput, filename: str) -> str:
    return f"inputs/{instance.job_id}/{instance.param}/{filename}"


def artifact_path(instance: JobArtifact, filename: str) -> str:
    # A per-attempt prefix, so a redelivered or re-run attempt never overwrites an earlier one's files.
    return f"artifacts/{instance.job_id}/{instance.attempt}/{filename}"


def log_path(job_id: uuid.UUID | str) -> str:
    return f"logs/{job_id}.txt"


class Job(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    TERMINAL = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="jobs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    #: The submitter's client address: budgets that bound per address (watermark matching) charge it.
    submitted_from = models.CharField(max_length=64, blank=True, default="")
    kind = models.CharField(max_length=64)
    kind_version = models.PositiveIntegerField(default=1)
    queue = models.CharField(max_length=16)
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.FloatField(default=0.0)
    stage = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    device = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True, help_text="What went wrong, for the user.")
    traceback = models.TextField(blank=True, help_text="Shown to the submitter and the team's owners.")
    metrics = models.JSONField(default=empty_metrics)
    charts = models.JSONField(default=dict, help_text="Chart name → Vega-Lite spec.")
    log_tail = models.TextField(blank=True)
    provenance = models.JSONField(default=dict)
    rerun_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reruns")
    celery_task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="job_team_created"),
            models.Index(fields=["team", "status"], name="job_team_status"),
            models.Index(fields=["team", "kind"], name="job_team_kind"),
            models.Index(fields=["status", "heartbeat_at"], name="job_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None:
            return None
        if self.finished_at is not None:
            return self.finished_at - self.started_at
        from django.utils import timezone

        return timezone.now() - self.started_at

    @property
    def log_name(self) -> str:
        return log_path(self.id)


class JobInput(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="inputs")
    param = models.CharField(max_length=64)
    file = models.FileField(upload_to=input_path, max_length=500)
    original_name = models.CharField(max_length=255)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    format = models.CharField(max_length=32)

    class Meta:
        ordering = ["param", "id"]

    def __str__(self) -> str:
        return f"{self.param}: {self.original_name}"


class JobArtifact(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=255)
    file = models.FileField(upload_to=artifact_path, max_length=500)
    media_type = models.CharField(max_length=100)
    size = models.BigIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    unfinished = models.BooleanField(default=False, help_text="From a run that failed or was cancelled.")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "name", "attempt"], name="one_artifact_name_per_attempt")]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.name}"


class WorkerStatus(models.Model):
    """One row per worker, refreshed by a heartbeat thread; "up" means seen within 30 s."""

    hostname = models.CharField(max_length=200, unique=True)
    queues = models.JSONField(default=list)
    device = models.CharField(max_length=200, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["hostname"]
        verbose_name_plural = "worker statuses"

    def __str__(self) -> str:
        return self.hostname
