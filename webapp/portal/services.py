"""Writes for the key registry and the portal check.

Keys: created at random and kept ``min_distance`` bits from every key on the platform (all teams:
two organisations' keys must not be confusable), rotated (a fresh key replaces the old, which is
revoked) and revoked. A check: the web process puts the images on the ``verify`` queue by task
name, then waits a few seconds on a :class:`VerifyRequest` row for the worker's answer, so the web
never imports torch and nothing of the image is stored (unless the uploader opts in).
"""

from __future__ import annotations

import base64
import hashlib
import random
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from mlcore.watermark import keys as keylib
from webapp.accounts.models import Team
from webapp.portal import conf
from webapp.portal.crypto import seal, unseal
from webapp.portal.models import SharedImage, VerifyRequest, WatermarkKey
from webapp.portal.queue import VERIFY_IMAGES, VERIFY_QUEUE
from webapp.portal.uploads import CheckedImage


class KeyRefused(ValueError):
    """A key operation that cannot be done; the message says why."""


class VerifierBusy(RuntimeError):
    """No verify worker answered in time."""


class VerifierFailed(RuntimeError):
    """The verify worker refused the images (the message says why) or failed."""


# -- keys --------------------------------------------------------------------------------------


def bits_of(key: WatermarkKey) -> str:
    return unseal(key.sealed_bits)


def _all_bits() -> list[str]:
    return [bits_of(k) for k in WatermarkKey.objects.only("sealed_bits")]


@transaction.atomic
def key_create(*, team: Team, user: AbstractBaseUser | None, name: str) -> WatermarkKey:
    name = name.strip()
    if not name:
        raise KeyRefused("Give the key a name (it is shown to your team only).")
    if len(name) > 100:
        raise KeyRefused("The name may have at most 100 characters.")
    num_bits = conf.key_bits()
    # Two concurrent creations could both pass the distance check; with random keys the chance
    # that they also land within a quarter of the bits of each other is negligible (~1e-4 at 48 bits).
    try:
        bits = keylib.new_key_bits(num_bits, _all_bits())
    except keylib.InvalidKey as exc:
        raise KeyRefused(f"No key could be created: {exc}") from None
    return WatermarkKey.objects.create(team=team, name=name, num_bits=num_bits, sealed_bits=seal(bits), created_by=user)


@transaction.atomic
def key_revoke(*, key: WatermarkKey, user: AbstractBaseUser | None) -> WatermarkKey:
    """Revoked keys still match in verification (shown as revoked) but new jobs cannot use them."""
    if key.is_revoked:
        raise KeyRefused(f"{key.name!r} is already revoked.")
    key.revoked_at = timezone.now()
    key.revoked_by = user
    key.save(update_fields=["revoked_at", "revoked_by"])
    return key


@transaction.atomic
def key_rotate(*, key: WatermarkKey, user: AbstractBaseUser | None) -> WatermarkKey:
    """Revoke ``key`` and create its replacement under the same name."""
    if key.is_revoked:
        raise KeyRefused(f"{key.name!r} is revoked; create a new key instead.")
    new = key_create(team=key.team, user=user, name=key.name)
    key_revoke(key=key, user=user)
    key.replaced_by = new
    key.save(update_fields=["replaced_by"])
    return new


def keyring_records() -> list[keylib.KeyRecord]:
    """Every registered key, revoked ones included, labelled with its team's name."""
    return [
        keylib.KeyRecord(id=str(k.pk), name=k.name, organisation=k.team.name, bits=bits_of(k), revoked=k.is_revoked)
        for k in WatermarkKey.objects.select_related("team").order_by("pk")
    ]


def write_keyring_file(path: Path) -> Path:
    """The ``keyring:platform`` dataset a ``watermark-verify`` job searches."""
    return keylib.write_keyring(path, keyring_records())


def write_key_file(key: WatermarkKey, path: Path) -> Path:
    """What a job's ``key`` parameter resolves to."""
    return keylib.write_key_file(path, id=str(key.pk), name=key.name, bits=bits_of(key))


# -- checks ------------------------------------------------------------------------------------


def check_images(images: Sequence[CheckedImage], *, wait: float | None = None) -> dict[str, Any]:
    """Ask the verify queue about ``images`` and wait for the answer.

    Returns ``{"thresholds": {...}, "images": [Match.describe() + {"team_id"}, ...]}``. Raises
    :class:`VerifierBusy` when no worker answered within ``wait`` seconds (the request is then
    withdrawn: a worker that picks it up later finds no row and skips it).
    """
    from webapp.celery import app

    if random.random() < 0.01:
        # Rows are deleted once read; only a web process that died while waiting leaves one behind.
        VerifyRequest.objects.filter(created_at__lt=timezone.now() - timedelta(minutes=10)).delete()
    request = VerifyRequest.objects.create()
    payload = [base64.b64encode(image.data).decode("ascii") for image in images]
    app.send_task(VERIFY_IMAGES, args=[str(request.pk), payload], queue=VERIFY_QUEUE)
    deadline = time.monotonic() + (conf.wait_seconds() if wait is None else wait)
    delay = 0.005
    while True:
        answered = VerifyRequest.objects.filter(pk=request.pk, answered_at__isnull=False).first()
        if answered is not None or time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)  # answers come in tens of milliseconds: poll fast, then back off
    VerifyRequest.objects.filter(pk=request.pk).delete()
    if answered is None:
        raise VerifierBusy("The verifier is busy right now; try again in a minute.")
    if answered.error:
        raise VerifierFailed(answered.error)
    assert answered.result is not None
    return answered.result


def share_image(image: CheckedImage, *, verdict: str, organisation: str | None) -> SharedImage:
    """Keep an image because its uploader asked us to (the only way an upload is stored)."""
    shared = SharedImage(
        sha256=hashlib.sha256(image.data).hexdigest(), verdict=verdict, organisation=organisation or ""
    )
    shared.image.save(f"{shared.sha256[:16]}.{image.format}", ContentFile(image.data), save=True)
    return shared


# -- what each audience sees ---------------------------------------------------------------------


def public_view(match: dict[str, Any]) -> dict[str, Any]:
    """What anyone may see: the verdict, a coarse confidence and the organisation. Never the key,
    its id, the bits or the score (a public score oracle would guide removal and forgery)."""
    detected = match["verdict"] == "detected"
    return {
        "verdict": match["verdict"],
        "confidence": match["confidence"],
        "organisation": match["organisation"] if detected else None,
    }


def owner_view(match: dict[str, Any], thresholds: dict[str, Any]) -> dict[str, Any]:
    """Full detail, for members of the team whose key matched best."""
    return {
        **public_view(match),
        "key_id": int(match["key_id"]),
        "key_name": match["key_name"],
        "revoked": match["revoked"],
        "bits_matched": match["bits_matched"],
        "num_bits": match["num_bits"],
        "p_value": match["p_value"],
        "p_corrected": match["p_corrected"],
        "decoded_bits": match["decoded_bits"],
        "thresholds": thresholds,
    }


def view_for(match: dict[str, Any], thresholds: dict[str, Any], team_ids: set[int]) -> dict[str, Any]:
    if match.get("team_id") is not None and match["team_id"] in team_ids:
        return owner_view(match, thresholds)
    return public_view(match)
