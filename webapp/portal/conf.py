"""The portal's settings: each read from Django settings when a test or deployment sets it there,
else from the environment (``MOELAB_PORTAL_*``), else a default that works without any server."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from webapp.env import env_bool, env_int, env_str


def _get(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def max_bytes() -> int:
    """The largest image the public portal accepts (bytes)."""
    return int(_get("PORTAL_MAX_BYTES", env_int("MOELAB_PORTAL_MAX_BYTES", 10 * 2**20)))


def max_pixels() -> int:
    """The most pixels an uploaded image may declare: well below Pillow's bomb limit."""
    return int(_get("PORTAL_MAX_PIXELS", env_int("MOELAB_PORTAL_MAX_PIXELS", 4096 * 4096)))


def max_batch_bytes() -> int:
    """The largest zip a logged-in owner may send for batch verification."""
    return int(_get("PORTAL_MAX_BATCH_BYTES", env_int("MOELAB_PORTAL_MAX_BATCH_BYTES", 200 * 2**20)))


def rate_per_minute() -> int:
    """Checks one IP address may make per minute (also the burst size)."""
    return int(_get("PORTAL_RATE_PER_MINUTE", env_int("MOELAB_PORTAL_RATE_PER_MINUTE", 20)))


def rate_backend() -> str:
    """``redis`` when ``REDIS_URL`` is set, else ``database`` (works on the embedded default)."""
    chosen = _get("PORTAL_RATE_BACKEND", env_str("MOELAB_PORTAL_RATE_BACKEND", "auto"))
    if chosen == "auto":
        return "redis" if settings.REDIS_URL else "database"
    if chosen not in ("redis", "database"):
        raise ValueError(f"PORTAL_RATE_BACKEND={chosen!r}: use auto, redis or database")
    return chosen


def wait_seconds() -> float:
    """How long the web waits for the verify queue's answer before saying it is busy."""
    return float(_get("PORTAL_WAIT_SECONDS", env_int("MOELAB_PORTAL_WAIT_SECONDS", 15)))


#: The zoo's sets of markers: the generator's (32-pixel images) and the photos' (``watermark-embed``: per-tile
#: keys from folded projections, its default, then the per-tile keys and the secret phase of the marks it made
#: before).
DEFAULT_EXTRACTORS = "zoo:molm-tiny,zoo:molm-photo-parity,zoo:molm-photo-tiles,zoo:molm-photo"


def extractors() -> list[str]:
    """The extractors verify workers load, each a zoo reference (``zoo:molm-tiny``) or a directory;
    ``MOELAB_WATERMARK_EXTRACTOR`` separates them with commas."""
    value = str(_get("WATERMARK_EXTRACTOR", env_str("MOELAB_WATERMARK_EXTRACTOR", DEFAULT_EXTRACTORS)))
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise ValueError("MOELAB_WATERMARK_EXTRACTOR is empty: name at least one extractor")
    return names


def key_bits() -> int:
    """Bits per new key; must equal what the extractor reads (the workers check)."""
    return int(_get("WATERMARK_KEY_BITS", env_int("MOELAB_WATERMARK_KEY_BITS", 48)))


def fpr() -> float:
    return float(_get("WATERMARK_FPR", float(env_str("MOELAB_WATERMARK_FPR", "1e-3"))))


def suspicious_fpr() -> float:
    return float(_get("WATERMARK_SUSPICIOUS_FPR", float(env_str("MOELAB_WATERMARK_SUSPICIOUS_FPR", "1e-2"))))


def secret() -> str:
    """What keys are encrypted with at rest. Set ``MOELAB_WATERMARK_SECRET`` (or ``_FILE``) in
    production: the fallback derives from ``SECRET_KEY``, so rotating that would lock the keys."""
    return str(_get("WATERMARK_SECRET", env_str("MOELAB_WATERMARK_SECRET", "")) or settings.SECRET_KEY)


def daily_match_budget() -> int:
    """Images a team, and separately a client address, may match against other teams' keys per UTC
    day, through the portal and ``watermark-verify`` jobs together: each answer is one more
    equation in another team's key, so the number of answers is bounded, not only their rate."""
    return int(_get("WATERMARK_DAILY_MATCH_BUDGET", env_int("MOELAB_WATERMARK_DAILY_MATCH_BUDGET", 1000)))


def allow_public_weights() -> bool:
    """Whether production may mark images under the platform's keys with the committed demo markers.

    They are public, so anyone can read such marks offline; a deployment must say it knows
    (``MOELAB_ALLOW_PUBLIC_WATERMARK_WEIGHTS=1``). With ``DEBUG`` (``make run``) they are allowed.
    """
    return settings.DEBUG or bool(
        _get("WATERMARK_ALLOW_PUBLIC_WEIGHTS", env_bool("MOELAB_ALLOW_PUBLIC_WATERMARK_WEIGHTS", False))
    )
