"""An unexpected failure behind the API answers a reference id, never a traceback (django-ninja
would send the traceback itself on a DEBUG server); the log keeps the traceback under that id."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import pytest

from tests.webapp.api.conftest import ApiClient
from webapp.jobs import selectors

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_answers_a_reference_and_logs_the_traceback(
    api_as: Callable[[str], ApiClient], monkeypatch, settings, caplog, debug: bool
) -> None:
    settings.DEBUG = debug

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("database at /srv/moelab/var/db.sqlite3 is locked")

    monkeypatch.setattr(selectors, "job_for_user", broken)
    with caplog.at_level(logging.ERROR, logger="webapp.jobs.api"):
        response = api_as("member").get("/api/v1/jobs/0b2c8a6e-9a43-4a57-9c7b-3f0d3a3f6c11")
    assert response.status_code == 500
    detail = response.json()["detail"]
    match = re.fullmatch(
        r"Internal error \(reference ([0-9a-f]{8})\): the request failed on our side; the staff have the details\.",
        detail,
    )
    assert match, detail
    assert "/srv/moelab" not in response.content.decode() and "Traceback" not in response.content.decode()
    [record] = [r for r in caplog.records if match.group(1) in r.getMessage()]
    assert record.exc_info and "is locked" in str(record.exc_info[1])


def test_a_missing_job_is_still_a_plain_404(api_as: Callable[[str], ApiClient]) -> None:
    response = api_as("member").get("/api/v1/jobs/0b2c8a6e-9a43-4a57-9c7b-3f0d3a3f6c11")
    assert response.status_code == 404
