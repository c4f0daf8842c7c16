"""Bad uploads are refused in the web process with a message that names the problem, before
anything is queued, and nothing of them is kept."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from tests.webapp.portal.conftest import png_bytes
from webapp.portal.models import SharedImage, VerifyRequest
from webapp.portal.uploads import UploadRefused, check_bytes

pytestmark = pytest.mark.django_db


def _bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring width × height pixels, with a tiny compressed body."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    body = zlib.compress(b"\x00" * 1024, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def _real_png(width: int, height: int) -> bytes:
    """A real PNG of width × height pixels (1-bit, so a few KB): big, not a bomb."""
    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, "PNG")
    return buffer.getvalue()


def _post(data: bytes, name: str = "upload.png") -> tuple[int, str]:
    response = Client().post("/verify/", {"image": SimpleUploadedFile(name, data), "share": "on"})
    return response.status_code, response.content.decode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (png_bytes(1)[:300], "truncated or corrupt image"),
        (_bomb_png(20_000, 20_000), "a decompression bomb"),
        (_real_png(5000, 5000), "5000×5000 pixels is over the limit of 16,777,216"),
        (b"GIF89a" + b"\x00" * 64, "not a PNG, JPEG or WebP image"),
        (b"%PDF-1.7 not an image", "not a PNG, JPEG or WebP image"),
        (b"", "empty"),
    ],
    ids=["truncated-png", "decompression-bomb", "over-pixel-cap", "gif", "pdf-named-png", "empty"],
)
def test_it_refuses_a_bad_upload_and_keeps_nothing(data: bytes, message: str) -> None:
    status, body = _post(data)
    assert status == 400 and message in body
    assert not VerifyRequest.objects.exists() and not SharedImage.objects.exists()


def test_it_refuses_an_image_over_the_byte_cap(settings) -> None:
    settings.PORTAL_MAX_BYTES = 1000
    status, body = _post(png_bytes(2, size=64))
    assert status == 400 and "over the limit of 1,000" in body


def test_the_pixel_cap_is_checked_before_the_pixels_are_decoded(settings) -> None:
    settings.PORTAL_MAX_PIXELS = 1000
    with pytest.raises(UploadRefused, match="40×40 pixels is over the limit of 1,000"):
        check_bytes(png_bytes(3), "small.png")


def test_pillows_own_bomb_error_is_reported_as_a_bomb(settings) -> None:
    settings.PORTAL_MAX_PIXELS = 10**12  # our cap out of the way: Pillow's limit (twice its warning) remains
    with pytest.raises(UploadRefused, match=r"a decompression bomb"):
        check_bytes(_bomb_png(40_000, 40_000), "huge.png")


def test_a_good_jpeg_and_webp_pass(settings) -> None:
    for fmt in ("JPEG", "WEBP"):
        buffer = io.BytesIO()
        Image.new("RGB", (20, 10), "red").save(buffer, fmt)
        checked = check_bytes(buffer.getvalue(), f"x.{fmt.lower()}")
        assert (checked.format, checked.width, checked.height) == (fmt.lower(), 20, 10)
