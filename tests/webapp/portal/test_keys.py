"""The key registry: teams create, rotate and revoke keys; the bits are sealed at rest and never
shown; outsiders get 404, members may create, only owners revoke and rotate."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mlcore.watermark.keys import hamming
from webapp.accounts.models import Team
from webapp.portal import services
from webapp.portal.models import WatermarkKey

pytestmark = pytest.mark.django_db


def test_a_new_key_has_the_configured_length_and_is_sealed_at_rest(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    bits = services.bits_of(key)
    assert key.num_bits == len(bits) == 48 and set(bits) <= {"0", "1"}
    stored = bytes(WatermarkKey.objects.get(pk=key.pk).sealed_bits)
    assert bits.encode() not in stored and len(stored) > 48


def test_keys_keep_the_minimum_distance_across_all_teams(team: Team, other_team: Team, owner: User) -> None:
    made = [services.key_create(team=t, user=None, name=f"k{i}") for i, t in enumerate([team, other_team] * 10)]
    bits = [services.bits_of(k) for k in made]
    assert min(hamming(a, b) for i, a in enumerate(bits) for b in bits[i + 1 :]) >= 12


def test_a_key_needs_a_name(team: Team, owner: User) -> None:
    with pytest.raises(services.KeyRefused, match="Give the key a name"):
        services.key_create(team=team, user=owner, name="  ")


def test_rotating_revokes_the_old_key_and_links_its_replacement(team: Team, owner: User) -> None:
    old = services.key_create(team=team, user=owner, name="launch")
    new = services.key_rotate(key=old, user=owner)
    old.refresh_from_db()
    assert old.is_revoked and old.replaced_by == new and not new.is_revoked
    assert new.name == "launch" and services.bits_of(new) != services.bits_of(old)


def test_a_revoked_key_cannot_be_revoked_again(team: Team, owner: User) -> None:
    key = services.key_revoke(key=services.key_create(team=team, user=owner, name="x"), user=owner)
    with pytest.raises(services.KeyRefused, match="already revoked"):
        services.key_revoke(key=key, user=owner)


def test_the_keyring_lists_every_key_with_its_organisation_and_revocation(
    team: Team, other_team: Team, owner: User
) -> None:
    a = services.key_create(team=team, user=owner, name="a")
    b = services.key_revoke(key=services.key_create(team=other_team, user=None, name="b"), user=None)
    ring = {k.id: k for k in services.keyring_records()}
    assert ring[a.public_id].organisation == "Routing Lab" and not ring[a.public_id].revoked
    assert ring[b.public_id].organisation == "Other Lab" and ring[b.public_id].revoked
    assert ring[a.public_id].bits == services.bits_of(a)


# -- pages -------------------------------------------------------------------------------------


def test_a_member_creates_a_key_and_the_page_never_shows_its_bits(
    csrf_client: Callable[[User | None], Client], team: Team, member: User
) -> None:
    client = csrf_client(member)
    client.get(f"/t/{team.slug}/keys/")  # the page sets the CSRF cookie the form posts back
    token = client.cookies["csrftoken"].value
    response = client.post(
        f"/t/{team.slug}/keys/", {"name": "spring campaign", "csrfmiddlewaretoken": token}, follow=True
    )
    key = WatermarkKey.objects.get(team=team)
    body = response.content.decode()
    assert response.status_code == 200 and "spring campaign" in body and key.reference in body
    assert services.bits_of(key) not in body


def test_a_viewer_cannot_create_a_key(team: Team, viewer: User) -> None:
    client = Client()
    client.force_login(viewer)
    assert client.post(f"/t/{team.slug}/keys/", {"name": "x"}).status_code == 403
    assert not WatermarkKey.objects.exists()


def test_an_owner_revokes_and_rotates_from_the_page(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    client = Client()
    client.force_login(owner)
    response = client.post(f"/keys/{key.public_id}/rotate/", follow=True)
    assert "replaces" in response.content.decode()
    key.refresh_from_db()
    assert key.is_revoked and key.replaced_by is not None


def test_a_member_may_not_revoke(team: Team, owner: User, member: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    client = Client()
    client.force_login(member)
    assert client.post(f"/keys/{key.public_id}/revoke/").status_code == 403
    key.refresh_from_db()
    assert not key.is_revoked


@pytest.mark.parametrize("action", ["revoke", "rotate"])
def test_an_outsider_gets_404_for_another_teams_key(team: Team, owner: User, outsider: User, action: str) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    client = Client()
    client.force_login(outsider)
    assert client.post(f"/keys/{key.public_id}/{action}/").status_code == 404
    assert client.get(f"/t/{team.slug}/keys/").status_code == 404
    key.refresh_from_db()
    assert not key.is_revoked


def test_the_keys_page_needs_a_login(team: Team) -> None:
    response = Client().get(f"/t/{team.slug}/keys/")
    assert response.status_code == 302 and "/login" in response["Location"]
