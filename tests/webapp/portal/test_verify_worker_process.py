"""A real ``celery -A webapp worker`` process (prefork, as deployed) answers portal checks from the
``verify`` queue, keeping the extractor loaded between checks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.webapp.portal.conftest import bits_of, key_with_bits, png_bytes
from tests.workers.conftest import empty_broker, media_in_tmp, start_worker  # noqa: F401
from webapp.accounts.models import Team

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_worker_process_answers_portal_checks_and_keeps_the_extractor_loaded(
    request: pytest.FixtureRequest, with_extractor: Path, team: Team
) -> None:
    request.getfixturevalue("start_worker")("verify-portal", MOELAB_WATERMARK_EXTRACTOR=str(with_extractor))
    data = png_bytes(21)
    key_with_bits(team, bits_of(with_extractor, data))
    timings = []
    for _ in range(3):
        started = time.monotonic()
        response = Client().post("/verify/", {"image": SimpleUploadedFile("a.png", data)})
        timings.append(time.monotonic() - started)
        assert response.status_code == 200, response.content.decode()[-1500:]
        assert 'data-verdict="detected"' in response.content.decode() and "Routing Lab" in response.content.decode()
    # The first check pays for importing torch and loading the extractor; later ones reuse them.
    assert max(timings[1:]) < timings[0]
