"""API clients: bearer tokens for the owner, member, viewer and outsider of the test team."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.views.conftest import fast_passwords, make_job  # noqa: F401  (shared fixtures)
from tests.workers.conftest import media_in_tmp  # noqa: F401
from webapp.accounts.services import api_token_create


class ApiClient:
    """A test client that sends ``Authorization: Bearer <token>`` (or nothing, for anonymous)."""

    def __init__(self, token: str | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def get(self, path: str, data: dict | None = None):
        return self.client.get(path, data or {}, **self.headers)

    def post(self, path: str, data: dict | None = None):
        return self.client.post(path, data or {}, **self.headers)


@pytest.fixture
def api_as(owner: User, member: User, viewer: User, outsider: User) -> Callable[[str], ApiClient]:
    people = {"owner": owner, "member": member, "viewer": viewer, "outsider": outsider}

    def make(role: str) -> ApiClient:
        if role == "anonymous":
            return ApiClient(None)
        return ApiClient(api_token_create(user=people[role], name="tests")[1])

    return make
