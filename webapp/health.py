"""``/healthz``: for load balancers and compose health checks. 200 when the database answers."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse


def healthz(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not healthy", with the reason for the operator
        return HttpResponse(f"database unavailable: {type(exc).__name__}", status=503, content_type="text/plain")
    return HttpResponse("ok", content_type="text/plain")
