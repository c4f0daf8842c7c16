"""Keys are named by opaque random ids everywhere (never the database pk), and creating, rotating
and revoking them is written to an audit log that only the team's owners can read."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mlcore.jobs.params import Key
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Team
from webapp.accounts.services import api_token_create
from webapp.jobs.resolver import check_reference
from webapp.portal import services
from webapp.portal.models import KeyAuditEntry

pytestmark = pytest.mark.django_db


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_key_ids_are_opaque_random_strings_and_the_pk_reaches_no_page(team: Team, owner: User) -> None:
    first = services.key_create(team=team, user=owner, name="a")
    second = services.key_create(team=team, user=owner, name="b")
    assert first.public_id != second.public_id and len(first.public_id) >= 16
    assert not first.public_id.isdigit() and first.reference == f"key:{first.public_id}"
    body = _login(owner).get(f"/t/{team.slug}/keys/").content.decode()
    # A random id may itself start with the pk's digits ("key:6-0zoz…"): only a whole reference counts.
    integer_reference = re.compile(rf"key:{first.pk}(?![A-Za-z0-9_-])")
    assert first.reference in body and not integer_reference.search(body) and f"/keys/{first.pk}/" not in body
    # The old integer forms name nothing any more.
    assert _login(owner).post(f"/keys/{first.pk}/revoke/").status_code == 404
    with pytest.raises(JobError, match="was not found in your team"):
        check_reference(Key(name="key"), f"key:{first.pk}", team=team)
    check_reference(Key(name="key"), first.reference, team=team)


def test_the_api_names_keys_by_their_opaque_id(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    token = api_token_create(user=owner, name="t")[1]
    listed = Client().get("/api/v1/watermark/keys", headers={"Authorization": f"Bearer {token}"}).json()
    assert [(k["id"], k["reference"]) for k in listed] == [(key.public_id, key.reference)]


def test_create_rotate_and_revoke_are_audited_by_who_when_and_which_key(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    new = services.key_rotate(key=key, user=owner)
    services.key_revoke(key=new, user=owner)
    entries = list(KeyAuditEntry.objects.filter(team=team).order_by("pk"))
    assert [(e.action, e.key_public_id, e.key_name, e.actor_name) for e in entries] == [
        ("created", key.public_id, "launch", "olivia"),
        ("created", new.public_id, "launch", "olivia"),
        ("rotated", key.public_id, "launch", "olivia"),
        ("revoked", new.public_id, "launch", "olivia"),
    ]
    assert entries[2].replacement_public_id == new.public_id


def test_owners_read_the_audit_log_and_it_holds_no_bits(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    services.key_revoke(key=key, user=owner)
    body = _login(owner).get(f"/t/{team.slug}/keys/audit/").content.decode()
    assert "data-key-audit" in body and key.public_id in body and "launch" in body and "olivia" in body
    assert 'data-action="revoked"' in body and services.bits_of(key) not in body
    assert f"/t/{team.slug}/keys/audit/" in _login(owner).get(f"/t/{team.slug}/keys/").content.decode()
    token = api_token_create(user=owner, name="t")[1]
    api = Client().get(f"/api/v1/watermark/keys/audit?team={team.slug}", headers={"Authorization": f"Bearer {token}"})
    assert [(e["action"], e["key_id"], e["by"]) for e in api.json()] == [
        ("revoked", key.public_id, "olivia"),
        ("created", key.public_id, "olivia"),
    ]


def test_members_get_403_and_outsiders_404_for_the_audit_log(
    team: Team, owner: User, member: User, outsider: User
) -> None:
    services.key_create(team=team, user=owner, name="launch")
    assert _login(member).get(f"/t/{team.slug}/keys/audit/").status_code == 403
    assert _login(outsider).get(f"/t/{team.slug}/keys/audit/").status_code == 404
    assert "keys/audit" not in _login(member).get(f"/t/{team.slug}/keys/").content.decode()
    for user, status in ((member, 403), (outsider, 404)):
        token = api_token_create(user=user, name="t")[1]
        response = Client().get(
            f"/api/v1/watermark/keys/audit?team={team.slug}", headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == status
