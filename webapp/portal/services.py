"""Writes for the key registry and the portal check.

Keys: created at random and kept ``min_distance`` bits from every key on the platform (all teams:
two organisations' keys must not be confusable), rotated (a fresh key replaces the old, which is
revoked) and revoked; each of these writes a :class:`KeyAuditEntry` (who, when, which key by its
opaque id and name; never bits) for the team's owners. A check: the web process puts the images
on the ``verify`` queue by task name, then waits a few seconds on a :class:`VerifyRequest` row for
the worker's answer, so the web never imports torch and nothing of the image is stored (unless the
uploader opts in).
"""

from __future__ import annotations

import base64
import hashlib
import random
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from mlcore.watermark import keys as keylib
from mlcore.watermark.disclosure import PUBLIC_WEIGHTS_NOTE, disclose
from webapp.accounts.models import Team
from webapp.portal import conf
from webapp.portal.crypto import seal, unseal
from webapp.portal.models import KeyAuditEntry, SharedImage, VerifyRequest, WatermarkKey
from webapp.portal.queue import VERIFY_IMAGES, VERIFY_QUEUE
from webapp.portal.uploads import CheckedImage


class KeyRefused(ValueError):
    """A key operation that cannot be done; the message says why."""


class BudgetSpent(RuntimeError):
    """The viewer's daily budget for other teams' keys is spent and they have no keys of their own."""


class VerifierBusy(RuntimeError):
    """No verify worker answered in time."""


class VerifierFailed(RuntimeError):
    """The verify worker refused the images (the message says why) or failed."""


# -- keys --------------------------------------------------------------------------------------


def bits_of(key: WatermarkKey) -> str:
    return unseal(key.sealed_bits)


def _all_bits() -> list[str]:
    return [bits_of(k) for k in WatermarkKey.objects.only("sealed_bits")]


def _audit(
    key: WatermarkKey, action: str, user: AbstractBaseUser | None, *, replacement: WatermarkKey | None = None
) -> KeyAuditEntry:
    return KeyAuditEntry.objects.create(
        team_id=key.team_id,
        key=key,
        key_public_id=key.public_id,
        key_name=key.name,
        action=action,
        replacement_public_id=replacement.public_id if replacement is not None else "",
        actor=user if user is not None and user.is_authenticated else None,
        actor_name=user.get_username() if user is not None and user.is_authenticated else "",
    )


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
    key = WatermarkKey.objects.create(team=team, name=name, num_bits=num_bits, sealed_bits=seal(bits), created_by=user)
    _audit(key, KeyAuditEntry.Action.CREATED, user)
    return key


def _revoke(key: WatermarkKey, user: AbstractBaseUser | None) -> None:
    if key.is_revoked:
        raise KeyRefused(f"{key.name!r} is already revoked.")
    key.revoked_at = timezone.now()
    key.revoked_by = user
    key.save(update_fields=["revoked_at", "revoked_by"])


@transaction.atomic
def key_revoke(*, key: WatermarkKey, user: AbstractBaseUser | None) -> WatermarkKey:
    """Revoked keys still match in verification (shown as revoked) but new jobs cannot use them."""
    _revoke(key, user)
    _audit(key, KeyAuditEntry.Action.REVOKED, user)
    return key


@transaction.atomic
def key_rotate(*, key: WatermarkKey, user: AbstractBaseUser | None) -> WatermarkKey:
    """Revoke ``key`` and create its replacement under the same name."""
    if key.is_revoked:
        raise KeyRefused(f"{key.name!r} is revoked; create a new key instead.")
    new = key_create(team=key.team, user=user, name=key.name)
    _revoke(key, user)
    key.replaced_by = new
    key.save(update_fields=["replaced_by"])
    _audit(key, KeyAuditEntry.Action.ROTATED, user, replacement=new)
    return new


def keyring_records(
    *, own_team_ids: set[int] | frozenset[int] = frozenset(), only_teams: bool = False
) -> list[keylib.KeyRecord]:
    """Every registered key, revoked ones included, labelled with its team's name; ``own`` marks
    the keys of ``own_team_ids`` (the viewer's), and ``only_teams`` leaves out every other key."""
    keys = WatermarkKey.objects.select_related("team").order_by("pk")
    if only_teams:
        keys = keys.filter(team_id__in=own_team_ids)
    return [
        keylib.KeyRecord(
            id=k.public_id,
            name=k.name,
            organisation=k.team.name,
            bits=bits_of(k),
            revoked=k.is_revoked,
            own=k.team_id in own_team_ids,
        )
        for k in keys
    ]


def keyring_bytes(team_id: int | None) -> bytes:
    """The ``keyring:platform`` dataset a ``watermark-verify`` job of ``team_id`` searches: other
    teams' keys may be matched by the platform's extractors only (``foreign_extractors``)."""
    from mlcore.watermark.disclosure import extractor_fingerprint
    from webapp.portal.verifier import extractor_paths

    return keylib.keyring_payload(
        keyring_records(own_team_ids={team_id} if team_id is not None else set()),
        foreign_extractors=[extractor_fingerprint(folder) for folder in extractor_paths()],
    )


def key_file_bytes(key: WatermarkKey) -> bytes:
    """What a job's ``key`` parameter resolves to, with the platform's policy on public weights."""
    return keylib.key_file_payload(
        id=key.public_id, name=key.name, bits=bits_of(key), allow_public_weights=conf.allow_public_weights()
    )


# -- checks ------------------------------------------------------------------------------------


def check_images(
    images: Sequence[CheckedImage], *, wait: float | None = None, only_teams: Sequence[int] | None = None
) -> dict[str, Any]:
    """Ask the verify queue about ``images`` and wait for the answer.

    Returns ``{"thresholds": {...}, "public_weights": bool, "images": [Match.describe() + {"team_id"}, ...]}``:
    full detail, which only :func:`view_for` may turn into a response. ``only_teams`` searches those
    teams' keys only (the viewer's, once their daily budget for other keys is spent). Raises
    :class:`VerifierBusy` when no worker answered within ``wait`` seconds (the request is then
    withdrawn: a worker that picks it up later finds no row and skips it).
    """
    from webapp.celery import app

    if random.random() < 0.01:
        # Rows are deleted once read; only a web process that died while waiting leaves one behind.
        VerifyRequest.objects.filter(created_at__lt=timezone.now() - timedelta(minutes=10)).delete()
    request = VerifyRequest.objects.create()
    payload = [base64.b64encode(image.data).decode("ascii") for image in images]
    args: list[Any] = [str(request.pk), payload]
    if only_teams is not None:
        args.append(sorted(only_teams))
    app.send_task(VERIFY_IMAGES, args=args, queue=VERIFY_QUEUE)
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


def check_budget(*, address: str, team_ids: set[int]) -> list[int] | None:
    """Spend one image of the daily budget for other teams' keys (``webapp.portal.budget``), charged
    to the client's address and each of the viewer's teams. Returns ``None`` to search every key; once
    the budget is spent, the viewer's teams (to search their own keys only) if they hold keys, else
    raises :class:`BudgetSpent`."""
    from webapp.portal import budget

    scopes = [budget.address_scope(address), *(budget.team_scope(t) for t in sorted(team_ids))]
    if budget.take(scopes, 1):
        return None
    if team_ids and WatermarkKey.objects.filter(team_id__in=team_ids).exists():
        return sorted(team_ids)
    raise BudgetSpent(budget.refusal_message())


LIMITED_NOTE = (
    "Today's limit for checks against other organisations' keys is reached, so this image was "
    "matched against your teams' keys only. The limit renews at midnight UTC."
)


def share_image(image: CheckedImage, *, verdict: str, organisation: str | None) -> SharedImage:
    """Keep an image because its uploader asked us to (the only way an upload is stored)."""
    shared = SharedImage(
        sha256=hashlib.sha256(image.data).hexdigest(), verdict=verdict, organisation=organisation or ""
    )
    shared.image.save(f"{shared.sha256[:16]}.{image.format}", ContentFile(image.data), save=True)
    return shared


# -- what each audience sees ---------------------------------------------------------------------


def view_for(
    match: dict[str, Any], thresholds: dict[str, Any], team_ids: set[int], *, public_weights: bool = False
) -> dict[str, Any]:
    """What a viewer in ``team_ids`` may see of a portal answer: the disclosure rule of
    :func:`mlcore.watermark.disclosure.disclose` (the same one every job output goes through), plus
    the thresholds for the key's own team and the public-weights sentence for everyone."""
    own = match.get("team_id") is not None and match["team_id"] in team_ids
    view = disclose(match, own=own)
    if own:
        view["thresholds"] = thresholds
    if public_weights:
        view["note"] = PUBLIC_WEIGHTS_NOTE
    return view
