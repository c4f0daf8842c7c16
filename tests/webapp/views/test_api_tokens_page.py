"""API tokens: created on a page that shows the secret once, listed by prefix, revocable."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.views.helpers import post
from webapp.accounts.models import ApiToken
from webapp.accounts.services import user_for_api_token


def test_a_token_is_shown_once_listed_by_prefix_and_revoked(member: User, csrf_client: Callable[..., Client]) -> None:
    client = csrf_client(member)
    created = post(client, "/account/tokens/", {"name": "laptop"}).content.decode()
    raw = re.search(r'<code class="secret" id="new-token">(\S+)</code>', created).group(1)
    assert user_for_api_token(raw) == member
    listing = client.get("/account/tokens/").content.decode()
    assert raw not in listing and f"<code>{raw[:8]}…</code>" in listing
    token = ApiToken.objects.get(user=member)
    assert post(client, f"/account/tokens/{token.pk}/revoke/", {})["Location"] == "/account/tokens/"
    assert user_for_api_token(raw) is None
    assert "revoked" in client.get("/account/tokens/").content.decode()


def test_someone_elses_token_cannot_be_revoked(member: User, owner: User, csrf_client: Callable[..., Client]) -> None:
    post(csrf_client(owner), "/account/tokens/", {"name": "owner's"})
    token = ApiToken.objects.get(user=owner)
    assert post(csrf_client(member), f"/account/tokens/{token.pk}/revoke/", {}).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_a_token_needs_a_name(member: User, csrf_client: Callable[..., Client]) -> None:
    response = post(csrf_client(member), "/account/tokens/", {"name": ""})
    assert "This field is required." in response.content.decode() and not ApiToken.objects.exists()
