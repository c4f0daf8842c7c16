"""Checking an uploaded image in the web process, before anything is queued: the size cap, the
format from the content (never the name or the browser's type), and a full decode with a pixel cap
so truncated files and decompression bombs are refused here with a clear message."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.files.uploadedfile import UploadedFile

from mlcore.watermark.verification import BadImage, open_image
from webapp.portal import conf

_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"))


class UploadRefused(ValueError):
    """An upload we will not check; the message names the file and what to do."""


@dataclass(frozen=True)
class CheckedImage:
    name: str
    data: bytes
    format: str
    width: int
    height: int


def sniff_image(head: bytes) -> str | None:
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def check_bytes(data: bytes, name: str) -> CheckedImage:
    limit = conf.max_bytes()
    if len(data) > limit:
        raise UploadRefused(f"{name}: {len(data):,} bytes is over the limit of {limit:,}; send a smaller image.")
    if not data:
        raise UploadRefused(f"{name}: the file is empty.")
    found = sniff_image(data[:16])
    if found is None:
        raise UploadRefused(f"{name}: not a PNG, JPEG or WebP image (judged by its content, not its name).")
    try:
        image = open_image(data, name=name, max_pixels=conf.max_pixels())
    except BadImage as exc:
        raise UploadRefused(str(exc)) from None
    return CheckedImage(name=name, data=data, format=found, width=image.width, height=image.height)


def check_upload(upload: UploadedFile) -> CheckedImage:
    name = (upload.name or "image")[-100:]
    limit = conf.max_bytes()
    # Refuse by the declared size before reading: Django has no per-file cap of its own.
    if upload.size is not None and upload.size > limit:
        raise UploadRefused(f"{name}: {upload.size:,} bytes is over the limit of {limit:,}; send a smaller image.")
    return check_bytes(upload.read(limit + 1), name)
