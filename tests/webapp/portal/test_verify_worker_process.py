"""A real ``celery -A webapp worker`` process (prefork, as deployed) loads the extractor as its child
starts, then answers portal checks from the ``verify`` queue without loading it again."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.webapp.portal.conftest import bits_of, key_with_bits, png_bytes
from tests.workers.conftest import empty_broker, media_in_tmp, start_worker  # noqa: F401
from tests.workers.processes import wait_for
from webapp.accounts.models import Team

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_verify_worker_loads_the_extractor_before_the_first_check_and_never_again(
    request: pytest.FixtureRequest, with_extractor: Path, team: Team
) -> None:
    worker = request.getfixturevalue("start_worker")("verify-portal", MOELAB_WATERMARK_EXTRACTOR=str(with_extractor))
    wait_for(lambda: "is loaded and waiting for checks" in worker.log.read_text(), timeout=120, what="the warm-up")
    data = png_bytes(21)
    key_with_bits(team, bits_of(with_extractor, data))
    for _ in range(3):
        response = Client().post("/verify/", {"image": SimpleUploadedFile("a.png", data)})
        assert response.status_code == 200, response.content.decode()[-1500:]
        assert 'data-verdict="detected"' in response.content.decode() and "Routing Lab" in response.content.decode()
    assert worker.log.read_text().count("loaded the watermark extractor from") == 1
