"""The watermark JSON API at ``/api/v1/watermark/`` (django-ninja), with the same bearer tokens as
the jobs API (:class:`webapp.accounts.auth.ApiTokenAuth`) and the same services as the pages.

``POST /verify`` checks one image through the verify queue (rate limited per IP and bounded by the
daily budget for other teams' keys, like the portal): the verdict for everyone, the organisation
when detected; the key, bits matched, p-values, decoded bits and thresholds only when the caller
is in the team whose key matched (``services.view_for``). ``/keys`` lists, creates, revokes and
rotates a team's keys by their opaque ids; their bits are never returned. ``/keys/audit`` is the
keys' audit log, for the team's owners. Its OpenAPI document: ``/api/v1/watermark/openapi.json``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from ninja import File, Form, NinjaAPI, Schema
from ninja import Status as HttpStatus
from ninja.files import UploadedFile
from pydantic import Field

from webapp.accounts.auth import ApiTokenAuth
from webapp.accounts.models import Team
from webapp.accounts.selectors import membership_for, teams_for_user
from webapp.portal import ratelimit, selectors, services
from webapp.portal.models import WatermarkKey
from webapp.portal.uploads import UploadRefused, check_upload

api = NinjaAPI(
    title="MoE Lab watermark API",
    version="1",
    description="Verify watermarked images and manage your team's watermark keys. "
    "Authenticate with `Authorization: Bearer <token>` (the API tokens page).",
    urls_namespace="watermark-api",
    auth=ApiTokenAuth(),
)

Verdict = Literal["detected", "inconclusive", "not detected"]


class ErrorOut(Schema):
    detail: str


class ThresholdsOut(Schema):
    num_bits: int
    num_keys: int
    fpr: float
    suspicious_fpr: float
    detect_bits: int | None = Field(description="Fewest matching bits that reach the false-positive rate.")
    suspicious_bits: int | None


class VerifyOut(Schema):
    verdict: Verdict
    organisation: str | None = Field(description="The team whose key marked the image (when detected).")
    confidence: Literal["very high", "high", "moderate", "low", "none"] | None = Field(
        None, description="Only when the key is your team's."
    )
    key_id: str | None = Field(None, description="Only when the key is your team's.")
    key_name: str | None = None
    revoked: bool | None = None
    bits_matched: int | None = None
    num_bits: int | None = None
    p_value: float | None = None
    p_corrected: float | None = Field(None, description="min(1, N·p) for N keys searched.")
    decoded_bits: str | None = None
    thresholds: ThresholdsOut | None = None
    note: str | None = Field(None, description="Set when the verdict rests on the public demo weights.")
    limited: str | None = Field(
        None, description="Set when today's budget for other teams' keys is spent: only your keys were searched."
    )


class KeyOut(Schema):
    id: str = Field(description="The key's opaque id.")
    reference: str = Field(description="What a job's key parameter takes.")
    name: str
    team: str
    num_bits: int
    created_at: datetime
    revoked_at: datetime | None
    replaced_by: str | None


class AuditOut(Schema):
    at: datetime
    action: Literal["created", "rotated", "revoked"]
    key_id: str
    key_name: str
    replaced_by: str | None
    by: str | None


def _key(item: WatermarkKey) -> dict[str, Any]:
    return {
        "id": item.public_id,
        "reference": item.reference,
        "name": item.name,
        "team": item.team.slug,
        "num_bits": item.num_bits,
        "created_at": item.created_at,
        "revoked_at": item.revoked_at,
        "replaced_by": item.replaced_by.public_id if item.replaced_by is not None else None,
    }


def _team(request: HttpRequest, slug: str | None) -> Team:
    if slug:
        return membership_for(request.auth, slug).team
    team = teams_for_user(request.auth).first()
    if team is None:
        raise PermissionDenied("You are not in any team; create one on the website first.")
    return team


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not allowed."}, status=403)


@api.exception_handler(services.KeyRefused)
def _refused(request: HttpRequest, exc: services.KeyRefused) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=409)


ERRORS = {401: ErrorOut, 404: ErrorOut}


@api.post(
    "/verify",
    response={200: VerifyOut, 400: ErrorOut, 401: ErrorOut, 429: ErrorOut, 503: ErrorOut},
    summary="Verify one image",
)
def verify(request: HttpRequest, image: File[UploadedFile]) -> Any:
    decision = ratelimit.take_for(request)
    if not decision.allowed:
        response = api.create_response(request, {"detail": ratelimit.refusal_message(decision)}, status=429)
        response["Retry-After"] = str(max(1, round(decision.retry_after)))
        return response
    team_ids = selectors.team_ids_of(request.auth)
    try:
        checked = check_upload(image)
        only_teams = services.check_budget(address=ratelimit.client_ip(request), team_ids=team_ids)
        answer = services.check_images([checked], only_teams=only_teams)
    except (UploadRefused, services.VerifierFailed) as exc:
        return HttpStatus(400, {"detail": str(exc)})
    except services.BudgetSpent as exc:
        return HttpStatus(429, {"detail": str(exc)})
    except services.VerifierBusy as exc:
        return HttpStatus(503, {"detail": str(exc)})
    view = services.view_for(
        answer["images"][0], answer["thresholds"], team_ids, public_weights=bool(answer.get("public_weights"))
    )
    if only_teams is not None:
        view["limited"] = services.LIMITED_NOTE
    return view


@api.get("/keys", response={200: list[KeyOut], 403: ErrorOut, **ERRORS}, summary="A team's keys, newest first")
def list_keys(request: HttpRequest, team: str | None = None) -> list[dict[str, Any]]:
    return [_key(k) for k in selectors.keys_for_team(_team(request, team)).select_related("team")]


@api.get(
    "/keys/audit",
    response={200: list[AuditOut], 403: ErrorOut, **ERRORS},
    summary="Who created, rotated and revoked the team's keys (owners only), newest first",
)
def key_audit(request: HttpRequest, team: str | None = None) -> list[dict[str, Any]]:
    entries = selectors.audit_for_user(request.auth, _team(request, team).slug)[:500]
    return [
        {
            "at": e.at,
            "action": e.action,
            "key_id": e.key_public_id,
            "key_name": e.key_name,
            "replaced_by": e.replacement_public_id or None,
            "by": e.actor_name or None,
        }
        for e in entries
    ]


@api.post("/keys", response={201: KeyOut, 403: ErrorOut, 409: ErrorOut, **ERRORS}, summary="Create a key")
def create_key(request: HttpRequest, name: Form[str], team: Form[str | None] = None) -> Any:
    target = _team(request, team)
    if not membership_for(request.auth, target.slug).can_write:
        raise PermissionDenied("Viewers cannot create keys.")
    return HttpStatus(201, _key(services.key_create(team=target, user=request.auth, name=name)))


@api.post("/keys/{key_id}/revoke", response={200: KeyOut, 403: ErrorOut, 409: ErrorOut, **ERRORS}, summary="Revoke")
def revoke_key(request: HttpRequest, key_id: str) -> dict[str, Any]:
    key = selectors.key_for_user(request.auth, key_id, manage=True)
    return _key(services.key_revoke(key=key, user=request.auth))


@api.post(
    "/keys/{key_id}/rotate",
    response={200: KeyOut, 403: ErrorOut, 409: ErrorOut, **ERRORS},
    summary="Replace a key by a fresh one (the old one is revoked)",
)
def rotate_key(request: HttpRequest, key_id: str) -> dict[str, Any]:
    key = selectors.key_for_user(request.auth, key_id, manage=True)
    return _key(services.key_rotate(key=key, user=request.auth))
