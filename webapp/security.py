"""HTTP hardening that Django does not ship: a Content-Security-Policy on every HTML page,
client errors (a 403 above all) logged as one line instead of a traceback, and the client's
address behind our own proxies (:func:`client_ip`, for rate limits and budgets per address).

The policy itself is ``settings.CONTENT_SECURITY_POLICY`` (where each directive is explained).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from webapp.env import env_int


class ContentSecurityPolicyMiddleware:
    """Adds the policy to every HTML response that does not set its own (artifact downloads do)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        content_type = response.get("Content-Type", "")
        if self.policy and content_type.startswith("text/html") and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response


def _printable(text: object, limit: int = 300) -> str:
    """One line whatever the client sent: a path or a reason with a newline cannot forge a log line."""
    value = str(text)[:limit]
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in value)


def _user_id(request: HttpRequest | None) -> str:
    if request is None:
        return "-"
    # API requests authenticate with a bearer token into request.auth; pages use the session user.
    for user in (getattr(request, "auth", None), getattr(request, "user", None)):
        try:
            if user is not None and user.is_authenticated:
                return str(user.pk)
        except Exception:  # a lazy session user whose lookup fails must not break the log line
            return "?"
    return "anonymous"


class ClientErrorOneLine(logging.Filter):
    """Rewrites Django's record of a 4xx response as one line with no traceback.

    Django logs a ``PermissionDenied`` with the exception's traceback (``django.request``) and a
    CSRF failure with its reason (``django.security.csrf``). A refusal is expected behaviour: the
    line says who asked for what and why, and a traceback would only bury real errors. 5xx
    records pass unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500 or getattr(record, "one_line", False):
            # A record passes every filter on its way up the loggers: rewrite it once.
            return True
        request: HttpRequest | None = getattr(record, "request", None)
        reason = ""
        if record.exc_info and record.exc_info[1] is not None:
            reason = str(record.exc_info[1])
        if not reason and record.name == "django.security.csrf" and record.args:
            reason = str(record.args[0])  # "Forbidden (%s): %s" % (reason, path)
        if not reason:
            reason = record.getMessage().split(":", 1)[0]
        method = getattr(request, "method", None) or "-"
        path = getattr(request, "path", None) or "-"
        record.msg = "%s %s %s user=%s reason=%s"
        record.args = (status, _printable(method, 10), _printable(path), _user_id(request), _printable(reason))
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.one_line = True
        return True


def trusted_proxy_hops() -> int:
    """How many reverse proxies in front of us append to X-Forwarded-For (0: use REMOTE_ADDR).

    ``PORTAL_TRUSTED_PROXY_HOPS`` in Django settings wins (the portal's rate limit was its first user)."""
    return int(getattr(settings, "PORTAL_TRUSTED_PROXY_HOPS", env_int("MOELAB_TRUSTED_PROXY_HOPS", 0)))


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or with ``N`` trusted proxies the address the outermost of them saw.

    Only the entries our own proxies appended to X-Forwarded-For can be trusted; a client can
    put anything in front of them, so we count from the right.
    """
    hops = trusted_proxy_hops()
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if hops and len(forwarded) >= hops:
        return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "") or "unknown"
