"""The portal's answer shows a small thumbnail of the checked image, made from the upload as the
check decoded it (EXIF orientation applied) and sent inside the page as a ``data:`` URL: nothing of
the image is stored, and no cache keeps the page. "not detected" is painted neutral, not as a warning.

The page tests run a real verify worker (a thread on the project's Celery app, as in test_portal_check)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from tests.webapp.portal.conftest import bits_of, flip, key_with_bits, png_bytes
from tests.workers.conftest import celery_worker_parameters, empty_broker  # noqa: F401
from webapp.accounts.models import Team
from webapp.portal.models import SharedImage
from webapp.portal.uploads import THUMBNAIL_SIDE, check_bytes

pytest_plugins = ["celery.contrib.pytest"]


@pytest.fixture
def celery_app():
    import workers.tasks
    import workers.verify  # noqa: F401
    from webapp.celery import app

    return app


def jpeg(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_the_thumbnail_is_a_small_jpeg_of_the_image() -> None:
    wide = Image.new("RGB", (600, 300), (200, 30, 30))
    buffer = io.BytesIO()
    wide.save(buffer, "PNG")
    checked = check_bytes(buffer.getvalue(), "wide.png", thumbnail=True)
    small = jpeg(checked.thumbnail)
    assert small.format == "JPEG" and small.size == (THUMBNAIL_SIDE, THUMBNAIL_SIDE // 2)
    assert checked.thumbnail_url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(checked.thumbnail_url.split(",", 1)[1]) == checked.thumbnail


def test_the_thumbnail_shows_a_photo_the_way_up_its_camera_said() -> None:
    # Stored 300 wide and 200 tall, with EXIF orientation 6: viewers show it rotated, 200 wide.
    photo = Image.new("RGB", (300, 200), (30, 30, 200))
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG", exif=exif)
    small = jpeg(check_bytes(buffer.getvalue(), "photo.jpg", thumbnail=True).thumbnail)
    assert small.size[0] < small.size[1] and max(small.size) <= THUMBNAIL_SIDE


def test_a_small_image_is_not_enlarged_and_no_thumbnail_is_made_unless_asked() -> None:
    data = png_bytes(3, size=40)
    assert jpeg(check_bytes(data, "tiny.png", thumbnail=True).thumbnail).size == (40, 40)
    plain = check_bytes(data, "tiny.png")
    assert plain.thumbnail == b"" and plain.thumbnail_url == ""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_answer_shows_the_thumbnail_paints_not_detected_neutral_and_keeps_nothing(
    celery_worker, with_extractor: Path, other_team: Team, tmp_path: Path
) -> None:
    data = png_bytes(21)
    key_with_bits(other_team, flip(bits_of(with_extractor, data), 48))  # far from what the image holds
    response = Client().post("/verify/", {"image": SimpleUploadedFile("holiday.png", data)})
    assert response.status_code == 200, response.content.decode()[-2000:]
    body = response.content.decode()
    assert 'data-verdict="not detected"' in body
    pill = body.split('data-field="verdict"', 1)[0].rsplit("<span", 1)[1]
    assert "pill-neutral" in pill and "pill-cancelled" not in pill and "pill-failed" not in pill
    src = body.split('data-field="thumbnail"', 1)[0].rsplit('src="', 1)[1].split('"', 1)[0]
    assert src.startswith("data:image/jpeg;base64,")
    assert jpeg(base64.b64decode(src.split(",", 1)[1])).size == (40, 40)
    assert 'alt="The checked image, holiday.png"' in body
    assert response["Cache-Control"] == "no-store"
    # Nothing of the image stayed on the server: no shared copy, no file in storage.
    assert not SharedImage.objects.exists()
    media = tmp_path / "media"  # this test's storage (tests/webapp/conftest.py)
    assert not media.exists() or not [p for p in media.rglob("*") if p.is_file()]
