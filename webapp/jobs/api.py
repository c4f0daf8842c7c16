"""The jobs' part of the JSON API at ``/api/v1/`` (django-ninja): the same services and selectors
as the pages. The API's root, its bearer tokens and the error rules every endpoint shares are in
:mod:`webapp.api`, which mounts :data:`router` and calls :func:`install`; the OpenAPI document
(``/api/v1/openapi.json``) is generated from the endpoints and checked with schemathesis in the tests.

The contract with ``moelab submit`` (``mlcore/jobs/cli.py``): ``POST /jobs`` takes a multipart
body with ``kind``, optional ``team`` (a slug; default: the caller's first team), ``params``
(a JSON object as a string) and files under their parameter names, and answers 201 with
``{id, url, status, ...}``; ``GET /jobs/{id}`` answers ``{status, progress, stage, error, ...}``.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import PermissionDenied
from django.http import FileResponse, HttpRequest, HttpResponse
from django.urls import reverse
from ninja import Form, NinjaAPI, Query, Router, Schema
from ninja import Status as HttpStatus
from pydantic import Field

from mlcore.jobs.registry import all_kinds
from webapp.accounts.models import Team
from webapp.accounts.selectors import membership_for, teams_for_user
from webapp.jobs import selectors, services
from webapp.jobs.downloads import artifact_response
from webapp.jobs.models import Job, JobArtifact
from webapp.security import client_ip

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
#: Mounted at the API's root (``/api/v1/kinds``, ``/api/v1/jobs``, ...) by :mod:`webapp.api`.
router = Router()


# -- schemas -----------------------------------------------------------------------------------


class FieldErrorOut(Schema):
    field: str = Field(description='The parameter (or "kind", "team", "params", "__all__") the message is about.')
    message: str


class ErrorOut(Schema):
    detail: str | list[FieldErrorOut]


class TeamOut(Schema):
    slug: str
    name: str
    role: str


class JobSummaryOut(Schema):
    id: uuid.UUID
    url: str
    kind: str
    kind_version: int
    team: str
    status: Status
    progress: float
    stage: str
    error: str
    submitted_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    cancel_requested: bool


class JobOut(JobSummaryOut):
    params: dict[str, Any]
    metrics: dict[str, Any]
    charts: list[str]
    worker: str
    device: str
    attempt: int
    rerun_of: uuid.UUID | None
    provenance: dict[str, Any]


class JobPageOut(Schema):
    count: int
    page: int
    page_size: int
    items: list[JobSummaryOut]


class ArtifactOut(Schema):
    name: str
    media_type: str
    size: int
    attempt: int
    unfinished: bool
    created_at: datetime
    url: str


def _summary(request: HttpRequest, job: Job) -> dict[str, Any]:
    duration = job.duration
    return {
        "id": job.id,
        "url": request.build_absolute_uri(reverse("jobs:detail", args=[job.id])),
        "kind": job.kind,
        "kind_version": job.kind_version,
        "team": job.team.slug,
        "status": job.status,
        "progress": job.progress,
        "stage": job.stage,
        "error": job.error,
        "submitted_by": job.submitted_by.get_username() if job.submitted_by else None,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "duration_seconds": duration.total_seconds() if duration is not None else None,
        "cancel_requested": job.cancel_requested,
    }


def _full(request: HttpRequest, job: Job) -> dict[str, Any]:
    return {
        **_summary(request, job),
        "params": job.params,
        "metrics": job.metrics,
        "charts": sorted(job.charts or {}),
        "worker": job.worker,
        "device": job.device,
        "attempt": job.attempt,
        "rerun_of": job.rerun_of_id,
        "provenance": job.provenance,
    }


def _artifact(request: HttpRequest, item: JobArtifact) -> dict[str, Any]:
    path = reverse("api:job_artifact", kwargs={"job_id": item.job_id, "name": item.name})
    return {
        "name": item.name,
        "media_type": item.media_type,
        "size": item.size,
        "attempt": item.attempt,
        "unfinished": item.unfinished,
        "created_at": item.created_at,
        "url": request.build_absolute_uri(path),
    }


def _team(request: HttpRequest, slug: str | None, *, write: bool = False) -> Team:
    """The named team (404 for outsiders), or the caller's first team when no slug is given."""
    if slug:
        membership = membership_for(request.auth, slug)
    else:
        team = teams_for_user(request.auth).first()
        if team is None:
            raise services.SubmitError([("team", "You are not in any team; create one on the website first.")])
        membership = membership_for(request.auth, team.slug)
    if write and not membership.can_write:
        raise PermissionDenied("Viewers cannot submit or change jobs.")
    return membership.team


# -- endpoints ---------------------------------------------------------------------------------

ERRORS = {401: ErrorOut, 404: ErrorOut, 422: ErrorOut}


@router.get("/kinds", response={200: list[dict[str, Any]], 401: ErrorOut}, summary="Job kinds and their parameters")
def list_kinds(request: HttpRequest) -> list[dict[str, Any]]:
    """Each kind's ``spec.describe()``: what ``params`` may hold and which files it takes."""
    return [kind.spec.describe() for kind in all_kinds()]


@router.get("/teams", response={200: list[TeamOut], 401: ErrorOut}, summary="Your teams")
def list_teams(request: HttpRequest) -> list[dict[str, Any]]:
    teams = teams_for_user(request.auth)
    return [{"slug": t.slug, "name": t.name, "role": membership_for(request.auth, t.slug).role} for t in teams]


@router.post(
    "/jobs",
    response={201: JobOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut},
    summary="Submit a job",
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["kind"],
                        "properties": {
                            "kind": {"type": "string", "description": "A job kind's name (see GET /kinds)."},
                            "team": {"type": "string", "description": "Team slug; default: your first team."},
                            "params": {
                                "type": "string",
                                "default": "{}",
                                "description": 'The parameters as a JSON object, e.g. {"steps": 10}.',
                            },
                        },
                        "additionalProperties": {
                            "type": "string",
                            "format": "binary",
                            "description": "Files, each under the name of its file parameter.",
                        },
                    }
                }
            },
            "required": True,
        }
    },
)
def create_job(
    request: HttpRequest, kind: Form[str], team: Form[str | None] = None, params: Form[str] = "{}"
) -> HttpStatus[dict[str, Any]]:
    """Validate with the kind's spec (the same checks as the web form), save, and queue the job."""
    try:
        raw_params = json.loads(params or "{}")
    except json.JSONDecodeError as exc:
        raise services.SubmitError([("params", f"Not valid JSON: {exc.msg}.")]) from None
    if not isinstance(raw_params, dict):
        raise services.SubmitError([("params", "Must be a JSON object of parameter names and values.")])
    target = _team(request, team, write=True)
    files = {name: request.FILES.getlist(name) for name in request.FILES}
    job = services.job_submit(
        team=target, user=request.auth, kind=kind, raw_params=raw_params, files=files, address=client_ip(request)
    )
    job.refresh_from_db()
    return HttpStatus(201, _full(request, job))


@router.get("/jobs", response={200: JobPageOut, **ERRORS}, summary="List a team's jobs, newest first")
def list_jobs(
    request: HttpRequest,
    team: str | None = None,
    kind: str | None = None,
    status: Status | None = None,
    page: int = Query(1, ge=1, le=100_000),
    page_size: int = Query(25, ge=1, le=100),
) -> dict[str, Any]:
    target = _team(request, team)
    jobs = selectors.jobs_for_team(target, kind=kind or None, status=status)
    count = jobs.count()
    start = (page - 1) * page_size
    items = [_summary(request, job) for job in jobs.select_related("team")[start : start + page_size]]
    return {"count": count, "page": page, "page_size": page_size, "items": items}


@router.get("/jobs/{job_id}", response={200: JobOut, **ERRORS}, summary="A job's state and results")
def get_job(request: HttpRequest, job_id: uuid.UUID) -> dict[str, Any]:
    return _full(request, selectors.job_for_user(request.auth, job_id))


@router.post(
    "/jobs/{job_id}/cancel",
    response={200: JobOut, 403: ErrorOut, 409: ErrorOut, **ERRORS},
    summary="Cancel a queued or running job",
)
def cancel_job(request: HttpRequest, job_id: uuid.UUID) -> dict[str, Any]:
    """A queued job is cancelled at once; a running one is asked to stop at its next step."""
    job = selectors.job_for_user(request.auth, job_id, write=True)
    return _full(request, services.job_cancel(job=job, user=request.auth))


@router.get("/jobs/{job_id}/artifacts", response={200: list[ArtifactOut], **ERRORS}, summary="A job's files")
def list_artifacts(request: HttpRequest, job_id: uuid.UUID) -> list[dict[str, Any]]:
    job = selectors.job_for_user(request.auth, job_id)
    return [_artifact(request, item) for item in selectors.artifacts_of(job)]


@router.get(
    "/jobs/{job_id}/artifacts/{path:name}",
    response={**ERRORS},
    url_name="job_artifact",
    summary="Download one of a job's files",
    openapi_extra={
        "responses": {
            "200": {
                "description": "The file, with the media type the job recorded.",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            }
        }
    },
)
def download_artifact(request: HttpRequest, job_id: uuid.UUID, name: str) -> FileResponse:
    return artifact_response(selectors.artifact_for_user(request.auth, job_id, name), download=True)


def install(api: NinjaAPI) -> None:
    """Mount the jobs' endpoints at the root with their error rules: a refused submission is 422 with
    one message per field, an action the job's state refuses (cancel a finished job) is 409."""
    api.add_router("", router)

    @api.exception_handler(services.SubmitError)
    def _submit_error(request: HttpRequest, exc: services.SubmitError) -> HttpResponse:
        detail = [{"field": name, "message": message} for name, message in exc.errors]
        return api.create_response(request, {"detail": detail}, status=422)

    @api.exception_handler(services.JobStateError)
    def _conflict(request: HttpRequest, exc: services.JobStateError) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc)}, status=409)
