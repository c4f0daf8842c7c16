"""The watermark JSON API's key endpoints: the same rules as the pages (404 to outsiders, owners
revoke and rotate), and never a key's bits."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import Team
from webapp.accounts.services import api_token_create
from webapp.portal import services
from webapp.portal.models import WatermarkKey

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    return Client(headers={"Authorization": f"Bearer {api_token_create(user=user, name='t')[1]}"})


def test_a_member_creates_and_lists_keys_without_ever_seeing_bits(team: Team, member: User) -> None:
    client = _client(member)
    created = client.post("/api/v1/watermark/keys", {"name": "launch", "team": team.slug})
    assert created.status_code == 201
    key = WatermarkKey.objects.get()
    assert created.json()["reference"] == f"key:{key.public_id}" and created.json()["num_bits"] == 48
    listed = client.get(f"/api/v1/watermark/keys?team={team.slug}")
    assert [k["name"] for k in listed.json()] == ["launch"]
    assert services.bits_of(key) not in created.content.decode() + listed.content.decode()


def test_an_owner_rotates_through_the_api(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    response = _client(owner).post(f"/api/v1/watermark/keys/{key.public_id}/rotate")
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.is_revoked and response.json()["id"] == key.replaced_by.public_id


def test_revoking_twice_is_a_conflict(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    client = _client(owner)
    assert client.post(f"/api/v1/watermark/keys/{key.public_id}/revoke").status_code == 200
    second = client.post(f"/api/v1/watermark/keys/{key.public_id}/revoke")
    assert second.status_code == 409 and "already revoked" in second.json()["detail"]


def test_an_outsider_gets_404_and_a_member_403(team: Team, owner: User, member: User, outsider: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    assert _client(outsider).post(f"/api/v1/watermark/keys/{key.public_id}/revoke").status_code == 404
    assert _client(outsider).get(f"/api/v1/watermark/keys?team={team.slug}").status_code == 404
    assert _client(member).post(f"/api/v1/watermark/keys/{key.public_id}/revoke").status_code == 403
    key.refresh_from_db()
    assert not key.is_revoked


def test_a_viewer_cannot_create_keys(team: Team, viewer: User) -> None:
    response = _client(viewer).post("/api/v1/watermark/keys", {"name": "x", "team": team.slug})
    assert response.status_code == 403 and not WatermarkKey.objects.exists()


def test_the_api_needs_a_token() -> None:
    assert Client().get("/api/v1/watermark/keys").status_code == 401
    assert Client().get("/api/v1/watermark/openapi.json").status_code == 200
