"""Library pages: the team's models and datasets, one item with its card and lineage, adding
items (resumable upload, worker paths for admins, promoting an artifact), download and delete.

Every view reaches an item through ``item_for_user`` or a team through ``team_for_user``, so
outsiders get 404 everywhere and viewers get 403 on every write. The upload endpoints answer JSON
to the page's upload script (``frontend/src/js/library-upload.js``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from mlcore.items.registry import DATASET_KINDS, MODEL_KINDS
from webapp.accounts.selectors import membership_for, team_for_user
from webapp.accounts.views import remember_team
from webapp.jobs.selectors import artifact_for_user, job_for_user
from webapp.library import selectors, services
from webapp.library.models import ChunkedUpload, LibraryItem
from webapp.library.storage import download_response

TABS = ("models", "datasets")


@login_required
def index(request: HttpRequest, team_slug: str) -> HttpResponse:
    membership = membership_for(request.user, team_slug)
    remember_team(request, membership.team)
    tab = request.GET.get("tab") if request.GET.get("tab") in TABS else "models"
    items = list(selectors.items_for_team(membership.team, category=tab))
    context = {
        "team": membership.team,
        "membership": membership,
        "tab": tab,
        "items": items,
        "like_named": selectors.like_named(items),
        "builtins": selectors.builtins(tab),
        "nav": "library",
    }
    return render(request, "library/index.html", context)


@login_required
def add(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = team_for_user(request.user, team_slug, write=True)
    remember_team(request, team)
    context = {"team": team, "model_kinds": MODEL_KINDS, "dataset_kinds": DATASET_KINDS, "nav": "library"}
    return render(request, "library/add.html", context)


def _item_context(request: HttpRequest, item: LibraryItem) -> dict[str, Any]:
    membership = membership_for(request.user, item.team.slug)
    return {
        "item": item,
        "team": item.team,
        "membership": membership,
        "uses": list(selectors.users_of(item)),
        "nav": "library",
    }


@login_required
def detail(request: HttpRequest, item_id: int) -> HttpResponse:
    item = selectors.item_for_user(request.user, item_id)
    remember_team(request, item.team)
    return render(request, "library/detail.html", _item_context(request, item))


@login_required
def download(request: HttpRequest, item_id: int) -> HttpResponse:
    item = selectors.item_for_user(request.user, item_id)
    if not item.file:
        return HttpResponse("This item has no stored file (a worker path, or refused).", status=404)
    return download_response(item)


@login_required
@require_POST
def delete(request: HttpRequest, item_id: int) -> HttpResponse:
    item = selectors.item_for_user(request.user, item_id, owner=True)
    try:
        services.item_delete(item=item, user=request.user)
    except services.ItemInUse as exc:
        messages.warning(request, str(exc))
        return redirect("library:detail", item.pk)
    messages.success(request, f"Deleted {item.name} from the library.")
    return redirect("library:index", item.team.slug)


@login_required
@require_POST
def register_path(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = team_for_user(request.user, team_slug, write=True)
    try:
        item = services.item_register_path(
            team=team,
            user=request.user,
            name=request.POST.get("name", ""),
            kind=request.POST.get("kind", ""),
            path=request.POST.get("path", ""),
        )
    except services.LibraryError as exc:
        messages.error(request, str(exc))
        return redirect("library:add", team.slug)
    return redirect("library:detail", item.pk)


@login_required
@require_POST
def promote(request: HttpRequest, job_id: str, name: str) -> HttpResponse:
    job_for_user(request.user, job_id, write=True)
    artifact = artifact_for_user(request.user, job_id, name)
    try:
        item = services.item_promote(
            artifact=artifact, user=request.user, kind=request.POST.get("kind", ""), name=request.POST.get("name", "")
        )
    except services.LibraryError as exc:
        messages.error(request, str(exc))
        return redirect("jobs:detail", job_id)
    return redirect("library:detail", item.pk)


# -- the resumable upload protocol (JSON): start → chunks at offsets → complete; GET says where to resume --


def _upload_json(upload: ChunkedUpload) -> dict[str, Any]:
    return {
        "id": str(upload.pk),
        "offset": upload.received,
        "size": upload.size,
        "url": reverse("library:upload", args=[upload.pk]),
    }


@login_required
@require_POST
def upload_start(request: HttpRequest, team_slug: str) -> JsonResponse:
    team = team_for_user(request.user, team_slug, write=True)
    try:
        upload = services.upload_start(
            team=team,
            user=request.user,
            name=request.POST.get("name", ""),
            filename=request.POST.get("filename", ""),
            kind=request.POST.get("kind", ""),
            size=int(request.POST.get("size") or 0),
        )
    except (services.LibraryError, ValueError) as exc:
        return JsonResponse({"detail": str(exc)}, status=422)
    return JsonResponse(_upload_json(upload), status=201)


@login_required
@require_GET
def upload_state(request: HttpRequest, upload_id: str) -> JsonResponse:
    return JsonResponse(_upload_json(selectors.upload_for_user(request.user, upload_id)))


@login_required
@require_POST
def upload_chunk(request: HttpRequest, upload_id: str) -> JsonResponse:
    upload = selectors.upload_for_user(request.user, upload_id)
    try:
        offset = int(request.GET.get("offset", ""))
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        # Read the request as a stream: request.body would hold the whole chunk in memory (and refuse it).
        services.upload_append(upload=upload, offset=offset, stream=request, length=length)
    except services.OffsetMismatch as exc:
        return JsonResponse({"detail": str(exc), "offset": exc.received}, status=409)
    except (services.LibraryError, ValueError) as exc:
        return JsonResponse({"detail": str(exc)}, status=422)
    return JsonResponse(_upload_json(upload))


@login_required
@require_POST
def upload_complete(request: HttpRequest, upload_id: str) -> JsonResponse:
    upload = selectors.upload_for_user(request.user, upload_id)
    try:
        item = services.upload_complete(upload=upload)
    except services.LibraryError as exc:
        return JsonResponse({"detail": str(exc)}, status=422)
    return JsonResponse({"id": item.pk, "url": reverse("library:detail", args=[item.pk]), "status": item.status})
