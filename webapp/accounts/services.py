"""Writes for accounts: teams, invites, roles and API tokens. Keyword-only and validating.

Permission failures raise ``PermissionDenied``; input that cannot be accepted raises
``AccountError`` with a message for the user.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.text import slugify

from webapp.accounts.models import ApiToken, Invite, Membership, Role, Team
from webapp.accounts.tokens import API_TOKEN_PREFIX, digest, new_secret


class AccountError(Exception):
    """A request that cannot be carried out; the message says why and what to do."""


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "team"
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def _require_owner(team: Team, user: AbstractBaseUser) -> None:
    if not Membership.objects.filter(team=team, user=user, role=Role.OWNER).exists():
        raise PermissionDenied("Only the team's owners can do this.")


@transaction.atomic
def team_create(*, name: str, owner: AbstractBaseUser) -> Team:
    name = name.strip()
    if not name:
        raise AccountError("Give the team a name.")
    team = Team.objects.create(name=name, slug=_unique_slug(name))
    Membership.objects.create(team=team, user=owner, role=Role.OWNER)
    return team


def _invite_url(raw_token: str) -> str:
    try:
        path = reverse("accounts:invite_accept", args=[raw_token])
    except NoReverseMatch:
        path = f"/invites/{raw_token}/"
    return settings.SITE_URL.rstrip("/") + path


def invite_create(*, team: Team, email: str, role: str, by: AbstractBaseUser) -> tuple[Invite, str]:
    """Create an invite and email its link; returns the invite and the raw token (sent only by email)."""
    _require_owner(team, by)
    if role not in Role.values:
        raise AccountError(f"Role must be one of: {', '.join(Role.values)}.")
    email = email.strip().lower()
    if not email or "@" not in email:
        raise AccountError("Enter a valid email address.")
    if Membership.objects.filter(team=team, user__email__iexact=email).exists():
        raise AccountError(f"{email} is already in {team.name}.")
    raw = new_secret()
    invite = Invite.objects.create(
        team=team,
        email=email,
        role=role,
        token_hash=digest(raw),
        invited_by=by,
        expires_at=timezone.now() + timedelta(days=settings.INVITE_DAYS),
    )
    send_mail(
        subject=f"You are invited to {team.name} on MoE Lab",
        message=(
            f"{by.get_username()} invited you to join {team.name} on MoE Lab as {role}.\n\n"
            f"Accept within {settings.INVITE_DAYS} days: {_invite_url(raw)}\n"
        ),
        from_email=None,
        recipient_list=[email],
    )
    return invite, raw


def invite_for_token(raw_token: str) -> Invite:
    """The open invite for a link's token; ``AccountError`` if it is unknown, used or expired."""
    invite = Invite.objects.select_related("team").filter(token_hash=digest(raw_token)).first()
    if invite is None:
        raise AccountError("This invite link is not valid. Ask the team owner for a new one.")
    if invite.accepted_at is not None:
        raise AccountError("This invite has already been used.")
    if invite.expires_at <= timezone.now():
        raise AccountError("This invite has expired. Ask the team owner for a new one.")
    return invite


@transaction.atomic
def invite_accept(*, raw_token: str, user: AbstractBaseUser) -> Membership:
    invite = invite_for_token(raw_token)
    # Lock the row: two clicks on the same link must not both succeed.
    invite = Invite.objects.select_for_update().get(pk=invite.pk)
    if invite.accepted_at is not None:
        raise AccountError("This invite has already been used.")
    membership, created = Membership.objects.get_or_create(team=invite.team, user=user, defaults={"role": invite.role})
    if not created:
        raise AccountError(f"You are already in {invite.team.name}.")
    invite.accepted_at = timezone.now()
    invite.accepted_by = user
    invite.save(update_fields=["accepted_at", "accepted_by"])
    return membership


def _owners_left_after(team: Team, user: AbstractBaseUser) -> int:
    return Membership.objects.filter(team=team, role=Role.OWNER).exclude(user=user).count()


@transaction.atomic
def membership_set_role(*, team: Team, user: AbstractBaseUser, role: str, by: AbstractBaseUser) -> Membership:
    _require_owner(team, by)
    if role not in Role.values:
        raise AccountError(f"Role must be one of: {', '.join(Role.values)}.")
    # Lock the team's owner rows so two owners demoting each other cannot leave it without one.
    list(Membership.objects.select_for_update().filter(team=team, role=Role.OWNER))
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise AccountError(f"{user.get_username()} is not in {team.name}.")
    if membership.role == Role.OWNER and role != Role.OWNER and _owners_left_after(team, user) == 0:
        raise AccountError("A team needs at least one owner: make someone else an owner first.")
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, team: Team, user: AbstractBaseUser, by: AbstractBaseUser) -> None:
    """Remove ``user`` from ``team``; owners may remove anyone, and anyone may leave."""
    if by.pk != user.pk:
        _require_owner(team, by)
    list(Membership.objects.select_for_update().filter(team=team, role=Role.OWNER))
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise AccountError(f"{user.get_username()} is not in {team.name}.")
    if membership.role == Role.OWNER and _owners_left_after(team, user) == 0:
        raise AccountError("A team needs at least one owner: make someone else an owner first.")
    membership.delete()


def api_token_create(*, user: AbstractBaseUser, name: str) -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored."""
    name = name.strip()
    if not name:
        raise AccountError("Give the token a name, e.g. the machine it is for.")
    for _ in range(3):
        raw = new_secret(API_TOKEN_PREFIX)
        try:
            token = ApiToken.objects.create(user=user, name=name[:100], prefix=raw[:8], key_hash=digest(raw))
        except IntegrityError:  # pragma: no cover - a 256-bit collision
            continue
        return token, raw
    raise AccountError("Could not create a token; try again.")  # pragma: no cover


def api_token_revoke(*, token: ApiToken, by: AbstractBaseUser) -> None:
    if token.user_id != by.pk:
        raise PermissionDenied("You can revoke only your own tokens.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def user_for_api_token(raw: str) -> AbstractBaseUser | None:
    """The active user a bearer token belongs to, or ``None``; records when it was last used."""
    if not raw or not raw.startswith(API_TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(key_hash=digest(raw), revoked_at=None).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    # At most one write a minute per token: the API is polled once a second by `moelab submit`.
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
