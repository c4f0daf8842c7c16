"""Accounts pages: sign up, log in, teams and roles, invites, API tokens.

Views parse, call one service or selector, and render. Ownership is decided by the selectors
(404 for outsiders) and the services (403 for members whose role does not allow the action).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from webapp.accounts import selectors, services
from webapp.accounts.forms import ApiTokenForm, InviteForm, RoleForm, SignupForm, TeamForm
from webapp.accounts.models import ApiToken, Invite, Role, Team

SESSION_TEAM = "moelab_team"


def remember_team(request: HttpRequest, team: Team) -> None:
    request.session[SESSION_TEAM] = team.slug


def remembered_team(request: HttpRequest) -> Team | None:
    """The team the person looked at last (kept in the session), else their first team."""
    teams = selectors.teams_for_user(request.user)
    slug = request.session.get(SESSION_TEAM)
    return (teams.filter(slug=slug).first() if slug else None) or teams.first()


def _safe_next(request: HttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure())
    return target if allowed else ""


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("dashboard:home")
    next_url = _safe_next(request)
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        # Someone following an invite link joins that team; everyone else gets a team of their own.
        if not next_url.startswith("/invites/"):
            team = services.team_create(name=form.cleaned_data["team_name"] or f"{user.username}'s team", owner=user)
            remember_team(request, team)
            messages.success(request, f"Welcome! {team.name} is ready: submit your first job.")
        return redirect(next_url or "dashboard:home")
    return render(request, "accounts/signup.html", {"form": form, "next": next_url})


@login_required
def team_create(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            team = services.team_create(name=form.cleaned_data["name"], owner=request.user)
        except services.AccountError as exc:
            form.add_error("name", str(exc))
        else:
            remember_team(request, team)
            return redirect("dashboard:index", team.slug)
    return render(request, "accounts/team_create.html", {"form": form, "team": remembered_team(request)})


def _team_page(
    request: HttpRequest, team: Team, *, invite_form: InviteForm | None = None, error: str = "", status: int = 200
) -> HttpResponse:
    membership = selectors.membership_for(request.user, team.slug)
    invites = Invite.objects.filter(team=team, accepted_at=None).order_by("-created_at")
    context = {
        "team": team,
        "membership": membership,
        "members": selectors.members_of(team),
        "invites": invites if membership.is_owner else [],
        "invite_form": invite_form or InviteForm(),
        "roles": Role.choices,
        "error": error,
        "now": timezone.now(),
        "nav": "team",
    }
    return render(request, "accounts/team_settings.html", context, status=400 if error else status)


@login_required
def team_settings(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = selectors.team_for_user(request.user, team_slug)
    remember_team(request, team)
    return _team_page(request, team)


@login_required
@require_POST
def invite_create(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = _owned_team(request, team_slug)
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _team_page(request, team, invite_form=form, status=400)
    try:
        invite, _raw = services.invite_create(
            team=team, email=form.cleaned_data["email"], role=form.cleaned_data["role"], by=request.user
        )
    except services.AccountError as exc:
        form.add_error("email", str(exc))
        return _team_page(request, team, invite_form=form, status=400)
    messages.success(request, f"Invite sent to {invite.email}.")
    return redirect("accounts:team_settings", team.slug)


def _owned_team(request: HttpRequest, team_slug: str) -> Team:
    """The team, for its owners: 404 for outsiders, 403 for members and viewers (before any form
    is read, so the answer does not depend on what they sent)."""
    membership = selectors.membership_for(request.user, team_slug)
    if not membership.is_owner:
        raise PermissionDenied("Only the team's owners can do this.")
    return membership.team


def _member(team: Team, user_id: int) -> AbstractBaseUser:
    membership = selectors.members_of(team).filter(user_id=user_id).first()
    if membership is None:
        raise Http404("No such member.")
    return membership.user


@login_required
@require_POST
def member_role(request: HttpRequest, team_slug: str, user_id: int) -> HttpResponse:
    team = _owned_team(request, team_slug)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _team_page(request, team, error="Choose owner, member or viewer.")
    person = _member(team, user_id)
    try:
        services.membership_set_role(team=team, user=person, role=form.cleaned_data["role"], by=request.user)
    except services.AccountError as exc:
        return _team_page(request, team, error=str(exc))
    messages.success(request, f"{person.get_username()} is now {form.cleaned_data['role']}.")
    return redirect("accounts:team_settings", team.slug)


@login_required
@require_POST
def member_remove(request: HttpRequest, team_slug: str, user_id: int) -> HttpResponse:
    team = selectors.team_for_user(request.user, team_slug)
    person = _member(team, user_id)
    try:
        services.membership_remove(team=team, user=person, by=request.user)
    except services.AccountError as exc:
        return _team_page(request, team, error=str(exc))
    if person.pk == request.user.pk:
        messages.success(request, f"You left {team.name}.")
        return redirect("dashboard:home")
    messages.success(request, f"{person.get_username()} was removed from {team.name}.")
    return redirect("accounts:team_settings", team.slug)


def invite_accept(request: HttpRequest, token: str) -> HttpResponse:
    try:
        invite = services.invite_for_token(token)
    except services.AccountError as exc:
        return render(request, "accounts/invite.html", {"error": str(exc)}, status=404)
    if request.method == "POST" and request.user.is_authenticated:
        try:
            membership = services.invite_accept(raw_token=token, user=request.user)
        except services.AccountError as exc:
            return render(request, "accounts/invite.html", {"error": str(exc)}, status=400)
        remember_team(request, membership.team)
        messages.success(request, f"You joined {membership.team.name} as {membership.role}.")
        return redirect("dashboard:index", membership.team.slug)
    return render(request, "accounts/invite.html", {"invite": invite, "path": request.path})


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            token, raw = services.api_token_create(user=request.user, name=form.cleaned_data["name"])
        except services.AccountError as exc:
            form.add_error("name", str(exc))
        else:
            # Rendered, not redirected: the raw token exists only in this response.
            created = {"token": token, "raw": raw}
            form = ApiTokenForm()
    context = {
        "form": form,
        "created": created,
        "tokens": selectors.api_tokens_for_user(request.user),
        "team": remembered_team(request),
        "nav": "tokens",
        "api_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render(request, "accounts/tokens.html", context)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    # Someone else's token is "not found", like anything else that is not yours.
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    services.api_token_revoke(token=token, by=request.user)
    messages.success(request, f"Token “{token.name}” revoked; programs using it get 401 from now on.")
    return redirect("accounts:tokens")
