"""Posting like a browser does: with a CSRF cookie and the matching token, through a client that
enforces CSRF checks."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.test import Client

CSRF = "k" * 32


def post(client: Client, url: str, data: dict[str, Any] | None = None) -> HttpResponse:
    client.cookies["csrftoken"] = CSRF
    return client.post(url, data or {}, HTTP_X_CSRFTOKEN=CSRF)
