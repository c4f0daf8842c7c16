"""Reads for accounts. Ownership is decided here, in one place, so no view can forget it:
outsiders get 404 (never a 403 that confirms the team exists), viewers asking to write get 403."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from webapp.accounts.models import ApiToken, Membership, Team


def teams_for_user(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).order_by("name")


def membership_for(user: AbstractBaseUser | AnonymousUser, team_slug: str) -> Membership:
    if not user.is_authenticated:
        raise Http404("No such team.")
    membership = Membership.objects.select_related("team").filter(user=user, team__slug=team_slug).first()
    if membership is None:
        raise Http404("No such team.")
    return membership


def team_for_user(user: AbstractBaseUser | AnonymousUser, slug: str, *, write: bool = False) -> Team:
    membership = membership_for(user, slug)
    if write and not membership.can_write:
        raise PermissionDenied("Viewers cannot change anything in this team.")
    return membership.team


def members_of(team: Team) -> QuerySet[Membership]:
    return Membership.objects.filter(team=team).select_related("user").order_by("user__username")


def api_tokens_for_user(user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at")
