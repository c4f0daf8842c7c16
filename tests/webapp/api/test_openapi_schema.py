"""The OpenAPI document is generated from the code and the API keeps to it: schemathesis sends
generated requests to every operation and checks for server errors and responses that do not
match the document."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from webapp.accounts.services import api_token_create
from webapp.jobs import services

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def connections_kept_open() -> Iterator[None]:
    """Like Django's test client: a request must not close the connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(connections_kept_open: None, owner: User, team, media_in_tmp) -> str:
    # One real job, so that list and get answer with content and not only with empty pages and 404s.
    services.job_submit(team=team, user=owner, kind="test-exercise", raw_params={"steps": 2})
    return api_token_create(user=owner, name="schemathesis")[1]


def test_the_document_describes_every_endpoint() -> None:
    paths = set(schema.raw_schema["paths"])
    assert {
        "/api/v1/kinds",
        "/api/v1/teams",
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/artifacts",
        "/api/v1/jobs/{job_id}/artifacts/{name}",
    } <= paths
    assert schema.raw_schema["components"]["securitySchemes"]["ApiTokenAuth"]["scheme"] == "bearer"


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_answers_generated_requests_as_documented(case: schemathesis.Case, token: str) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
