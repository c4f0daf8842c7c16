"""Random secrets that are stored only as their sha256: invite links and API tokens."""

from __future__ import annotations

import hashlib
import secrets

API_TOKEN_PREFIX = "mlab_"


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_secret(prefix: str = "") -> str:
    return prefix + secrets.token_urlsafe(32)
