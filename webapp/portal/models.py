"""The key registry, portal checks in flight, per-IP token buckets, and images shared on purpose."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class WatermarkKey(models.Model):
    """A team's watermark key. The bits are sealed (``webapp.portal.crypto``); pages never show them."""

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
        return f"key:{self.pk}"


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
