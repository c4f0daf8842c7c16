"""The key registry and its audit log, portal checks in flight, per-IP token buckets, the daily
budgets of images matched against other teams' keys, and images shared on purpose."""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.db import models


def new_public_id() -> str:
    """An opaque key id: sequential ids would tell how many keys exist and invite guessing."""
    return secrets.token_urlsafe(12)


class WatermarkKey(models.Model):
    """A team's watermark key. The bits are sealed (``webapp.portal.crypto``); pages never show them.

    Keys are named everywhere by ``public_id`` (pages, URLs, the API, ``key:<id>`` references,
    keyring files); the integer primary key stays inside the database.
    """

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="watermark_keys")
    name = models.CharField(max_length=100)
    num_bits = models.PositiveSmallIntegerField()
    sealed_bits = models.BinaryField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    #: Set when the key was rotated: the key that replaced it.
    replaced_by = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.team})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def reference(self) -> str:
        """What a job's ``key`` parameter takes."""
        return f"key:{self.public_id}"


class KeyAuditEntry(models.Model):
    """Who created, rotated or revoked which key, and when; the team's owners read it. Never bits."""

    class Action(models.TextChoices):
        CREATED = "created", "created"
        ROTATED = "rotated", "rotated"
        REVOKED = "revoked", "revoked"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="key_audit")
    #: Kept when the key row is gone: the log outlives what it describes.
    key = models.ForeignKey(WatermarkKey, on_delete=models.SET_NULL, null=True, related_name="+")
    key_public_id = models.CharField(max_length=32)
    key_name = models.CharField(max_length=100)
    action = models.CharField(max_length=16, choices=Action.choices)
    #: For a rotation: the key that replaced this one.
    replacement_public_id = models.CharField(max_length=32, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    #: The actor's username when it happened (the user may be deleted or renamed later).
    actor_name = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["team", "-at"], name="key_audit_team_at")]

    def __str__(self) -> str:
        return f"{self.key_name} ({self.key_public_id}) {self.action} by {self.actor_name or 'the platform'}"


class MatchBudget(models.Model):
    """Images matched against other teams' keys on one UTC day by one scope (``team:ID`` or
    ``address:IP``); ``webapp.portal.budget`` takes from it under a row lock."""

    scope = models.CharField(max_length=200)
    day = models.DateField()
    used = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "day"], name="one_match_budget_per_scope_day")]


class VerifyRequest(models.Model):
    """A portal check in flight: the web process waits on this row for the verify worker's answer,
    then deletes it. It holds the answer only, never the image (that travels in the message)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)


class RateBucket(models.Model):
    """A token bucket for the database rate limiter (the embedded default has no Redis)."""

    key = models.CharField(max_length=200, primary_key=True)
    tokens = models.FloatField()
    updated = models.FloatField(help_text="Unix time of the last refill.")


class SharedImage(models.Model):
    """An image whose uploader ticked "share this image with the operators"; nothing else is kept."""

    image = models.FileField(upload_to="portal/shared/%Y/%m/")
    sha256 = models.CharField(max_length=64)
    verdict = models.CharField(max_length=20)
    organisation = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
