"""The JSON API's root at ``/api/v1/`` (django-ninja): the instance, its bearer tokens and the error
rules every endpoint shares. Each app brings its own endpoints and error rules and installs them
here (``webapp.jobs.api``, ``webapp.library.api``), so the apps' APIs never import each other. The
watermark API (``webapp.portal.api``) is a document of its own at ``/api/v1/watermark/`` with the
same tokens (:class:`webapp.accounts.auth.ApiTokenAuth`).

Every error is ``{"detail": ...}``, so clients need one parser: invalid input is 422 with one
message per field, a refusal is 403, and anything unexpected is 500 with a reference id (the
traceback goes to the log for staff, never to the client).
"""

from __future__ import annotations

import logging
import secrets

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import ValidationError as NinjaValidationError

from webapp.accounts.auth import ApiTokenAuth
from webapp.jobs import api as jobs_api
from webapp.library import api as library_api

log = logging.getLogger(__name__)

api = NinjaAPI(
    title="MoE Lab API",
    version="1",
    description=(
        "Submit and follow MoE Lab jobs. Authenticate with `Authorization: Bearer <token>` "
        "(create a token on the API tokens page). The same API drives `moelab submit`."
    ),
    urls_namespace="api",
    auth=ApiTokenAuth(),
)


@api.exception_handler(NinjaValidationError)
def _validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    detail = [
        {
            "field": ".".join(str(part) for part in error.get("loc", ())[1:]) or "__all__",
            "message": error.get("msg", ""),
        }
        for error in exc.errors
    ]
    return api.create_response(request, {"detail": detail}, status=422)


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not allowed."}, status=403)


@api.exception_handler(Exception)
def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Anything unexpected: a reference id for the client, the traceback in the log for staff.
    (Left to django-ninja, a DEBUG server would answer with the traceback itself.)"""
    reference = secrets.token_hex(4)
    log.error("API %s %s: internal error (reference %s)", request.method, request.path, reference, exc_info=exc)
    detail = f"Internal error (reference {reference}): the request failed on our side; the staff have the details."
    return api.create_response(request, {"detail": detail}, status=500)


# The order is the document's: the jobs' endpoints at the root, then the library's under /library.
jobs_api.install(api)
library_api.install(api)
