"""Portal pages: the watermark page (mark or check), the public check (no login), batch verification
for logged-in members (a ``watermark-verify`` job), each team's key registry and, for its owners, the keys' audit log.

What a check shows is decided by ``services.view_for`` (``mlcore.watermark.disclosure``); every
check spends one image of the daily budget for other teams' keys (``services.check_budget``).

Every key is reached through ``key_for_user`` (404 to outsiders, 403 to non-owners who try to
revoke or rotate) and every team through ``team_for_user``; the public page reaches neither.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.accounts.selectors import membership_for, team_for_user, teams_for_user
from webapp.accounts.views import remember_team, remembered_team
from webapp.jobs.services import SubmitError, job_submit
from webapp.portal import conf, ratelimit, selectors, services
from webapp.portal.uploads import UploadRefused, check_upload


def _verify_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    return {
        "max_bytes": conf.max_bytes(),
        "max_pixels": conf.max_pixels(),
        "rate_per_minute": conf.rate_per_minute(),
        "daily_budget": f"{conf.daily_match_budget():,}",
        "teams": list(teams_for_user(request.user)),
        "nav": "verify",
        **extra,
    }


@require_http_methods(["GET", "POST"])
def verify(request: HttpRequest) -> HttpResponse:
    """Anyone may check one image: the verdict, and the organisation when detected; a member of the
    marking team, logged in, also sees the key, the bits matched, the p-value and the thresholds."""
    if request.method == "GET":
        return render(request, "portal/verify.html", _verify_context(request))
    decision = ratelimit.take_for(request)
    if not decision.allowed:
        response = render(
            request,
            "portal/verify.html",
            _verify_context(request, error=ratelimit.refusal_message(decision)),
            status=429,
        )
        response["Retry-After"] = str(max(1, round(decision.retry_after)))
        return response
    upload = request.FILES.get("image")
    if upload is None:
        return render(
            request, "portal/verify.html", _verify_context(request, error="Choose an image to check."), status=400
        )
    team_ids = selectors.team_ids_of(request.user)
    try:
        image = check_upload(upload, thumbnail=True)
        only_teams = services.check_budget(address=ratelimit.client_ip(request), team_ids=team_ids)
        answer = services.check_images([image], only_teams=only_teams)
    except UploadRefused as exc:
        return render(request, "portal/verify.html", _verify_context(request, error=str(exc)), status=400)
    except services.BudgetSpent as exc:
        return render(request, "portal/verify.html", _verify_context(request, error=str(exc)), status=429)
    except services.VerifierFailed as exc:
        return render(request, "portal/verify.html", _verify_context(request, error=str(exc)), status=400)
    except services.VerifierBusy as exc:
        return render(request, "portal/verify.html", _verify_context(request, error=str(exc)), status=503)
    match = answer["images"][0]
    result = services.view_for(match, answer["thresholds"], team_ids, public_weights=bool(answer.get("public_weights")))
    if only_teams is not None:
        result["limited"] = services.LIMITED_NOTE
    shared = request.POST.get("share") == "on"
    if shared:
        services.share_image(image, verdict=match["verdict"], organisation=result["organisation"])
    context = _verify_context(
        request, result=result, image_name=image.name, thumbnail=image.thumbnail_url, shared=shared
    )
    response = render(request, "portal/verify.html", context)
    # The answer holds a thumbnail of the image: no cache (the browser's or a proxy's) keeps it.
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def verify_batch(request: HttpRequest) -> HttpResponse:
    """A zip (or several images) becomes a ``watermark-verify`` job of the chosen team."""
    team = team_for_user(request.user, request.POST.get("team", ""), write=True)
    files = request.FILES.getlist("images")
    if not files:
        messages.error(request, "Choose a zip of images (or several images) to verify.")
        return redirect("portal:verify")
    try:
        job = job_submit(
            team=team,
            user=request.user,
            kind="watermark-verify",
            raw_params={},
            files={"images": files},
            address=ratelimit.client_ip(request),
        )
    except SubmitError as exc:
        messages.error(request, "; ".join(message for _, message in exc.errors))
        return redirect("portal:verify")
    return redirect("jobs:detail", job.pk)


#: The kinds the watermark page links to, in the order it offers them.
MARK_KIND, GENERATE_KIND = "watermark-embed", "watermark-generate"


def _installed(kind: str) -> bool:
    from mlcore.jobs.registry import UnknownKind, get_kind

    try:
        get_kind(kind)
    except UnknownKind:
        return False
    return True


@require_http_methods(["GET", "POST"])
def watermark(request: HttpRequest) -> HttpResponse:
    """Where the home page's watermark card leads: "mark my images" (a ``watermark-embed`` form with
    the team's key) and "check an image" (the public portal). A team without an active key creates
    its first one here, with the keys page's rule (members and owners; viewers only read)."""
    if request.method == "POST":
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        team = team_for_user(request.user, request.POST.get("team", ""), write=True)
        try:
            key = services.key_create(team=team, user=request.user, name=request.POST.get("name", ""))
        except services.KeyRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Created key {key.name!r} ({key.reference}); it is picked for you below.")
        remember_team(request, team)
        return redirect("portal:watermark")
    context: dict[str, Any] = {
        "nav": "watermark",
        "mark_kind": MARK_KIND if _installed(MARK_KIND) else None,
        "generate_kind": GENERATE_KIND if _installed(GENERATE_KIND) else None,
        "max_bytes": conf.max_bytes(),
        "key_bits": conf.key_bits(),
    }
    team = remembered_team(request) if request.user.is_authenticated else None
    if team is not None:
        membership = membership_for(request.user, team.slug)
        active = list(selectors.keys_for_team(team).filter(revoked_at=None))
        # The forms preselect the only active key, or the newest (webapp.jobs.forms.build_field).
        context.update(team=team, membership=membership, active_keys=active, preselected=active[0] if active else None)
    return render(request, "portal/watermark.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest, team_slug: str) -> HttpResponse:
    membership = membership_for(request.user, team_slug)
    remember_team(request, membership.team)
    if request.method == "POST":
        team = team_for_user(request.user, team_slug, write=True)
        try:
            key = services.key_create(team=team, user=request.user, name=request.POST.get("name", ""))
        except services.KeyRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Created key {key.name!r} ({key.reference}); use it in watermark jobs.")
        return redirect("portal:keys", team_slug)
    context = {
        "team": membership.team,
        "membership": membership,
        "keys": selectors.keys_for_team(membership.team),
        "key_bits": conf.key_bits(),
        "nav": "keys",
    }
    return render(request, "portal/keys.html", context)


@login_required
def key_audit(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Who created, rotated and revoked the team's keys: owners only (403 members, 404 outsiders)."""
    entries = selectors.audit_for_user(request.user, team_slug).select_related("team")[:500]
    membership = membership_for(request.user, team_slug)
    return render(request, "portal/key_audit.html", {"team": membership.team, "entries": entries, "nav": "keys"})


def _keys_page(key: Any) -> str:
    return reverse("portal:keys", args=[key.team.slug])


@login_required
@require_POST
def key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    key = selectors.key_for_user(request.user, key_id, manage=True)
    try:
        services.key_revoke(key=key, user=request.user)
    except services.KeyRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Revoked {key.name!r}: images it marked still verify, shown as revoked.")
    return redirect(_keys_page(key))


@login_required
@require_POST
def key_rotate(request: HttpRequest, key_id: str) -> HttpResponse:
    key = selectors.key_for_user(request.user, key_id, manage=True)
    try:
        new = services.key_rotate(key=key, user=request.user)
    except services.KeyRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Rotated {key.name!r}: {new.reference} replaces {key.reference}, now revoked.")
    return redirect(_keys_page(key))
