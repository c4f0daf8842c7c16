"""The library's JSON API under ``/api/v1/library`` (django-ninja): the same services and selectors
as the pages, with the same bearer tokens as the rest of the API.

Uploads are resumable: ``POST /uploads`` declares the file, ``PUT /uploads/{id}?offset=N`` sends
raw bytes starting at ``N`` (a 409 answers the offset to resume from), ``GET /uploads/{id}`` says
how far it got, and ``POST /uploads/{id}/complete`` turns it into an item that a worker validates.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from ninja import NinjaAPI, Query, Router, Schema
from ninja import Status as HttpStatus
from pydantic import Field

from mlcore.items.registry import all_item_kinds, category_of
from webapp.accounts.selectors import membership_for, team_for_user
from webapp.jobs.selectors import artifact_for_user, job_for_user
from webapp.library import selectors, services
from webapp.library.models import ChunkedUpload, LibraryItem
from webapp.library.storage import download_response

router = Router(tags=["library"])
Category = Literal["models", "datasets"]


class LibraryFieldError(Schema):
    field: str
    message: str


class LibraryErrorOut(Schema):
    """The API's one error shape: a message, or (for invalid input) one message per field."""

    detail: str | list[LibraryFieldError]


class ConflictOut(Schema):
    detail: str
    offset: int | None = Field(None, description="For uploads: the offset to resume from.")
    jobs: list[uuid.UUID] = Field(default_factory=list, description="For deletes: the jobs that use the item.")


class ItemKindOut(Schema):
    name: str = Field(description="What an item's kind and a parameter's accepts name.")
    category: Literal["model", "dataset"]
    title: str
    summary: str
    formats: list[str] = Field(description="What an upload may be, read from its content (zip or tar: a folder).")


class ItemOut(Schema):
    id: int
    reference: str = Field(description="What a model or dataset parameter takes: library:ID.")
    url: str
    team: str
    name: str
    kind: str
    category: str
    format: str
    size: int
    sha256: str
    status: Literal["pending", "ready", "rejected"]
    error: str
    card: dict[str, Any]
    source: str
    added_by: str | None
    created_at: datetime
    produced_by: uuid.UUID | None
    used_by: list[uuid.UUID]


class UploadIn(Schema):
    team: str = Field(max_length=60)
    name: str = Field(max_length=200)
    filename: str = Field(max_length=255)
    kind: str = Field(max_length=64)
    size: int = Field(ge=1)


class UploadOut(Schema):
    id: uuid.UUID
    offset: int
    size: int


class PathIn(Schema):
    team: str = Field(max_length=60)
    name: str = Field(max_length=200)
    kind: str = Field(max_length=64)
    path: str = Field(max_length=1000, description="An absolute path that exists on every worker.")


class PromoteIn(Schema):
    job: uuid.UUID
    artifact: str = Field(max_length=255)
    kind: str = Field(max_length=64)
    name: str = Field("", max_length=200)


def item_json(request: HttpRequest, item: LibraryItem) -> dict[str, Any]:
    return {
        "id": item.pk,
        "reference": item.reference,
        "url": request.build_absolute_uri(reverse("library:detail", args=[item.pk])),
        "team": item.team.slug,
        "name": item.name,
        "kind": item.kind,
        "category": category_of(item.kind),
        "format": item.format,
        "size": item.size,
        "sha256": item.sha256,
        "status": item.status,
        "error": item.error,
        "card": item.card,
        "source": item.source,
        "added_by": item.added_by.get_username() if item.added_by else None,
        "created_at": item.created_at,
        "produced_by": item.produced_by_id,
        "used_by": [use.job_id for use in selectors.users_of(item)],
    }


def upload_json(upload: ChunkedUpload) -> dict[str, Any]:
    return {"id": upload.pk, "offset": upload.received, "size": upload.size}


ERRORS = {401: LibraryErrorOut, 404: LibraryErrorOut, 422: LibraryErrorOut}
#: Endpoints with a JSON body also answer 400 when the body does not parse (django-ninja's own check).
BODY_ERRORS = {400: LibraryErrorOut, **ERRORS}
BINARY = {"description": "The stored file.", "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}


@router.get("/kinds", response={200: list[ItemKindOut], 401: LibraryErrorOut}, summary="The item kinds a library holds")
def list_kinds(request: HttpRequest) -> list[dict[str, Any]]:
    """Each kind of model and dataset a team may add (``mlcore.items``): what ``kind`` takes on upload."""
    return [kind.describe() for kind in all_item_kinds() if kind.in_library]


@router.get("/items", response={200: list[ItemOut], **ERRORS}, summary="A team's library items, newest first")
def list_items(request: HttpRequest, team: str, category: Category | None = None) -> list[dict[str, Any]]:
    """The team's own items; built-in models and datasets are ``zoo:NAME`` references (see GET /kinds,
    the job kinds, for what each parameter accepts)."""
    target = membership_for(request.auth, team).team
    return [item_json(request, item) for item in selectors.items_for_team(target, category=category)]


@router.get("/items/{item_id}", response={200: ItemOut, **ERRORS}, summary="One item with its card and lineage")
def get_item(request: HttpRequest, item_id: int) -> dict[str, Any]:
    return item_json(request, selectors.item_for_user(request.auth, item_id))


@router.get(
    "/items/{item_id}/download",
    response={**ERRORS},
    summary="Download an item's stored file",
    openapi_extra={"responses": {"200": BINARY}},
)
def download_item(request: HttpRequest, item_id: int) -> HttpResponse:
    item = selectors.item_for_user(request.auth, item_id)
    if not item.file:
        return HttpResponse(b'{"detail": "This item has no stored file."}', status=404, content_type="application/json")
    return download_response(item)


@router.delete(
    "/items/{item_id}",
    response={204: None, 403: LibraryErrorOut, 409: ConflictOut, **ERRORS},
    summary="Delete an item (owners; refused while jobs use it)",
)
def delete_item(request: HttpRequest, item_id: int) -> HttpStatus[Any]:
    item = selectors.item_for_user(request.auth, item_id, owner=True)
    try:
        services.item_delete(item=item, user=request.auth)
    except services.ItemInUse as exc:
        return HttpStatus(409, {"detail": str(exc), "jobs": [job.pk for job in exc.jobs]})
    return HttpStatus(204, None)


@router.post(
    "/uploads", response={201: UploadOut, 403: LibraryErrorOut, **BODY_ERRORS}, summary="Start a resumable upload"
)
def start_upload(request: HttpRequest, body: UploadIn) -> HttpStatus[dict[str, Any]]:
    team = team_for_user(request.auth, body.team, write=True)
    upload = services.upload_start(
        team=team, user=request.auth, name=body.name, filename=body.filename, kind=body.kind, size=body.size
    )
    return HttpStatus(201, upload_json(upload))


@router.get("/uploads/{upload_id}", response={200: UploadOut, **ERRORS}, summary="Where an upload stands")
def get_upload(request: HttpRequest, upload_id: uuid.UUID) -> dict[str, Any]:
    return upload_json(selectors.upload_for_user(request.auth, upload_id))


@router.put(
    "/uploads/{upload_id}",
    response={200: UploadOut, 409: ConflictOut, **ERRORS},
    summary="Send the bytes of an upload starting at offset",
    openapi_extra={
        "requestBody": {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            "required": True,
        }
    },
)
def put_chunk(
    request: HttpRequest, upload_id: uuid.UUID, offset: int = Query(..., ge=0, le=2**62)
) -> HttpStatus[dict[str, Any]]:
    upload = selectors.upload_for_user(request.auth, upload_id)
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        services.upload_append(upload=upload, offset=offset, stream=request, length=length)
    except services.OffsetMismatch as exc:
        return HttpStatus(409, {"detail": str(exc), "offset": exc.received})
    return HttpStatus(200, upload_json(upload))


@router.post(
    "/uploads/{upload_id}/complete",
    response={201: ItemOut, **ERRORS},
    summary="Finish an upload: the item is stored and queued for validation",
)
def complete_upload(request: HttpRequest, upload_id: uuid.UUID) -> HttpStatus[dict[str, Any]]:
    item = services.upload_complete(upload=selectors.upload_for_user(request.auth, upload_id))
    return HttpStatus(201, item_json(request, item))


@router.post(
    "/paths",
    response={201: ItemOut, 403: LibraryErrorOut, **BODY_ERRORS},
    summary="Register a path on the workers (administrators)",
)
def register_path(request: HttpRequest, body: PathIn) -> HttpStatus[dict[str, Any]]:
    team = team_for_user(request.auth, body.team, write=True)
    item = services.item_register_path(team=team, user=request.auth, name=body.name, kind=body.kind, path=body.path)
    return HttpStatus(201, item_json(request, item))


@router.post(
    "/promote",
    response={201: ItemOut, 403: LibraryErrorOut, **BODY_ERRORS},
    summary="Add one of a job's artifacts to the library",
)
def promote(request: HttpRequest, body: PromoteIn) -> HttpStatus[dict[str, Any]]:
    job_for_user(request.auth, body.job, write=True)
    artifact = artifact_for_user(request.auth, body.job, body.artifact)
    item = services.item_promote(artifact=artifact, user=request.auth, kind=body.kind, name=body.name)
    return HttpStatus(201, item_json(request, item))


def install(api: NinjaAPI) -> None:
    """Mount the library under ``/library`` with its one error rule: refusals are 422 with a message."""
    api.add_router("/library", router)

    @api.exception_handler(services.LibraryError)
    def _library_error(request: HttpRequest, exc: services.LibraryError) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc)}, status=422)
