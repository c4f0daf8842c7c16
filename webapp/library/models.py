"""The team library: models and datasets that jobs take as inputs and register as outputs.

An item is content-addressed and immutable: its ``sha256`` names the stored blob (an uploaded
file or archive, or a job output zipped deterministically), and no field that describes the
content changes after validation. A job records the exact items it used (:class:`LibraryUse`,
written at submission), and an item in use cannot be deleted.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from mlcore.items.registry import ALL_KINDS


def item_path(instance: LibraryItem, filename: str) -> str:
    # Keyed by content, so workers on any host fetch (and cache) an item by its sha256.
    return f"library/{instance.team_id}/{instance.sha256}/{filename}"


class LibraryItem(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Validating"
        READY = "ready", "Ready"
        REJECTED = "rejected", "Rejected"

    class Source(models.TextChoices):
        UPLOAD = "upload", "Upload"
        JOB = "job", "Job output"
        PATH = "path", "Worker path"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="library_items")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=64, choices=[(k, k) for k in ALL_KINDS])
    format = models.CharField(max_length=32, blank=True, help_text="Sniffed from content: zip, tar, txt, ...")
    size = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True, db_index=True)
    file = models.FileField(upload_to=item_path, max_length=500, blank=True)
    worker_path = models.CharField(max_length=1000, blank=True, help_text="For items registered from a worker path.")
    card = models.JSONField(default=dict, help_text="Architecture, parameters, experts, top-k; records, sources.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True, help_text="Why validation refused the item, for the user.")
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.UPLOAD)
    added_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    #: When validation was last asked of a worker; the reaper asks again if a pending item waits too long.
    ingest_sent_at = models.DateTimeField(null=True, blank=True)
    produced_by = models.ForeignKey(
        "jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="library_outputs"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "kind", "sha256"], condition=~models.Q(sha256=""), name="one_item_per_content"
            )
        ]
        indexes = [models.Index(fields=["team", "kind"], name="library_team_kind")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def reference(self) -> str:
        return f"library:{self.pk}"

    @property
    def is_ready(self) -> bool:
        return self.status == self.Status.READY


class LibraryUse(models.Model):
    """A job used an item, at this exact version; recorded when the job is submitted."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="library_uses")
    item = models.ForeignKey(LibraryItem, on_delete=models.PROTECT, related_name="uses")
    param = models.CharField(max_length=64)
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "param"], name="one_use_per_param")]

    def __str__(self) -> str:
        return f"{self.job_id} used {self.item_id} as {self.param}"


class ChunkedUpload(models.Model):
    """A resumable upload in progress: chunks append at ``received``; the client asks for it to resume.

    The bytes live in a local part file on the web host (object stores cannot append); completing
    the upload moves them to storage as a library item.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=200)
    filename = models.CharField(max_length=255)
    kind = models.CharField(max_length=64)
    size = models.BigIntegerField()
    received = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"upload {self.filename} ({self.received}/{self.size})"
