"""Checking an uploaded image in the web process, before anything is queued: the size cap, the
format from the content (never the name or the browser's type), and a full decode with a pixel cap
so truncated files and decompression bombs are refused here with a clear message."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from django.core.files.uploadedfile import UploadedFile
from PIL import Image

from mlcore.watermark.verification import BadImage, open_image
from webapp.portal import conf

_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"))


class UploadRefused(ValueError):
    """An upload we will not check; the message names the file and what to do."""


#: The longest side of the thumbnail the portal shows of a checked image, in pixels (twice the CSS
#: size, for sharp screens).
THUMBNAIL_SIDE = 256


@dataclass(frozen=True)
class CheckedImage:
    name: str
    data: bytes
    format: str
    width: int
    height: int
    #: A small JPEG of the image as it is shown (EXIF orientation applied), when the caller asked.
    thumbnail: bytes = b""

    @property
    def thumbnail_url(self) -> str:
        """The thumbnail as a ``data:`` URL: it lives in the answer page only, never in storage
        (the page's Content-Security-Policy allows ``img-src data:``)."""
        return f"data:image/jpeg;base64,{base64.b64encode(self.thumbnail).decode()}" if self.thumbnail else ""


def sniff_image(head: bytes) -> str | None:
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def thumbnail_of(image: Image.Image, side: int = THUMBNAIL_SIDE) -> bytes:
    """A JPEG at most ``side`` pixels on its longest side, from an image already decoded (and
    oriented) by the check, so the upload is not decoded a second time."""
    small = image.copy()
    small.thumbnail((side, side), Image.Resampling.LANCZOS, reducing_gap=3.0)
    buffer = io.BytesIO()
    small.convert("RGB").save(buffer, "JPEG", quality=80)
    return buffer.getvalue()


def check_bytes(data: bytes, name: str, *, thumbnail: bool = False) -> CheckedImage:
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
    small = thumbnail_of(image) if thumbnail else b""
    return CheckedImage(name=name, data=data, format=found, width=image.width, height=image.height, thumbnail=small)


def check_upload(upload: UploadedFile, *, thumbnail: bool = False) -> CheckedImage:
    name = (upload.name or "image")[-100:]
    limit = conf.max_bytes()
    # Refuse by the declared size before reading: Django has no per-file cap of its own.
    if upload.size is not None and upload.size > limit:
        raise UploadRefused(f"{name}: {upload.size:,} bytes is over the limit of {limit:,}; send a smaller image.")
    return check_bytes(upload.read(limit + 1), name, thumbnail=thumbnail)
