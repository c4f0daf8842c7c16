"""Reads for the key registry. Every way to reach a key goes through here: outsiders get 404
(never a 403 that would confirm the key exists), members may create keys, owners revoke and rotate
and read the audit log. Keys are named by their opaque ``public_id``, never by the database pk."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from mlcore.jobs.params import Key
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Membership, Team
from webapp.accounts.selectors import membership_for
from webapp.portal.models import KeyAuditEntry, WatermarkKey


def keys_for_team(team: Team) -> QuerySet[WatermarkKey]:
    return WatermarkKey.objects.filter(team=team).select_related("created_by", "revoked_by", "replaced_by")


def key_for_user(user: AbstractBaseUser | AnonymousUser, key_id: str, *, manage: bool = False) -> WatermarkKey:
    """The key, if ``user`` is in its team (else 404); ``manage`` (revoke, rotate) needs an owner (else 403)."""
    key = WatermarkKey.objects.select_related("team").filter(public_id=str(key_id)).first()
    if key is None:
        raise Http404("No such key.")
    membership = membership_for(user, key.team.slug)  # 404 for outsiders
    if manage and not membership.is_owner:
        raise PermissionDenied("Only the team's owners can revoke or rotate its keys.")
    return key


def team_ids_of(user: AbstractBaseUser | AnonymousUser) -> set[int]:
    """The teams whose keys' full match details ``user`` may see."""
    if not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("team_id", flat=True))


def audit_for_user(user: AbstractBaseUser | AnonymousUser, team_slug: str) -> QuerySet[KeyAuditEntry]:
    """The team's key audit log, newest first: owners only (403 to other members, 404 to outsiders)."""
    membership = membership_for(user, team_slug)  # 404 for outsiders
    if not membership.is_owner:
        raise PermissionDenied("Only the team's owners can read the key audit log.")
    return KeyAuditEntry.objects.filter(team=membership.team)


def parse_key_reference(reference: str) -> str | None:
    """The opaque id in ``key:<id>`` (or a bare id)."""
    raw = str(reference).strip().removeprefix("key:")
    return raw if raw and len(raw) <= 32 else None


def key_for_job(team: Team | int | None, param: Key, reference: str) -> WatermarkKey:
    """The team's usable key named by a job's ``key`` parameter, or a :class:`JobError`.

    A key of another team reads exactly like a missing one, so ids reveal nothing across teams.
    """
    key_id = parse_key_reference(reference)
    team_id = team.pk if isinstance(team, Team) else team
    key = WatermarkKey.objects.filter(public_id=key_id, team_id=team_id).first() if key_id and team_id else None
    if key is None:
        raise JobError(f"{param.title}: watermark key {reference!r} was not found in your team.")
    if key.is_revoked:
        raise JobError(f"{param.title}: watermark key {key.name!r} was revoked; pick an active key or create one.")
    return key
