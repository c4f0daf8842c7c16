"""Every API endpoint for every role: 401 without a token, 404 for outsiders, 403 when a viewer
writes, success otherwise. No CSRF token is needed: bearer tokens are not sent by browsers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.webapp.api.conftest import ApiClient
from webapp.jobs.models import Job

ROLES = ("owner", "member", "viewer", "outsider", "anonymous")


def expect(owner: int, member: int, viewer: int, outsider: int = 404) -> dict[str, int]:
    return {"owner": owner, "member": member, "viewer": viewer, "outsider": outsider, "anonymous": 401}


CASES: list[tuple[str, str, Callable[[Job], str], dict[str, Any], dict[str, int]]] = [
    ("list kinds", "get", lambda j: "/api/v1/kinds", {}, expect(200, 200, 200, 200)),
    ("list teams", "get", lambda j: "/api/v1/teams", {}, expect(200, 200, 200, 200)),
    ("list jobs", "get", lambda j: "/api/v1/jobs?team=routing-lab", {}, expect(200, 200, 200)),
    ("get a job", "get", lambda j: f"/api/v1/jobs/{j.id}", {}, expect(200, 200, 200)),
    ("list artifacts", "get", lambda j: f"/api/v1/jobs/{j.id}/artifacts", {}, expect(200, 200, 200)),
    ("download", "get", lambda j: f"/api/v1/jobs/{j.id}/artifacts/losses.csv", {}, expect(200, 200, 200)),
    ("cancel", "post", lambda j: f"/api/v1/jobs/{j.id}/cancel", {}, expect(409, 409, 403)),
    (
        "submit",
        "post",
        lambda j: "/api/v1/jobs",
        {"kind": "test-exercise", "team": "routing-lab", "params": '{"steps": 2}'},
        expect(201, 201, 403),
    ),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_role_gets_what_its_role_allows(
    case: tuple, role: str, api_as: Callable[[str], ApiClient], make_job: Callable[..., Job]
) -> None:
    _, method, url, data, expected = case
    job = make_job(Job.Status.SUCCEEDED)
    response = getattr(api_as(role), method)(url(job), data)
    assert response.status_code == expected[role], response.content[:300]
    if response.status_code >= 400:
        assert "detail" in response.json()


def test_every_job_endpoint_of_the_openapi_document_is_in_the_table(make_job: Callable[..., Job]) -> None:
    from webapp.api import api

    job = make_job(Job.Status.SUCCEEDED)
    checked = {(method, urlsplit(url(job)).path) for _, method, url, _, _ in CASES}
    documented = [
        (method, path)
        for path, operations in api.get_openapi_schema()["paths"].items()
        if not path.startswith("/api/v1/library/")  # the library's own permission tests cover these
        for method in operations
    ]
    missing = [
        f"{method.upper()} {path}"
        for method, path in documented
        if not any(m == method and re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", path), p) for m, p in checked)
    ]
    assert documented and not missing, f"not checked for every role: {missing}"


def test_a_revoked_token_is_refused(api_as: Callable[[str], ApiClient], member) -> None:
    from webapp.accounts.models import ApiToken
    from webapp.accounts.services import api_token_revoke

    client = api_as("member")
    assert client.get("/api/v1/teams").status_code == 200
    api_token_revoke(token=ApiToken.objects.get(user=member), by=member)
    assert client.get("/api/v1/teams").status_code == 401
