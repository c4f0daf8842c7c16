"""The watermark page the home card opens: mark my images (with the team's key, created right there
if it has none) and check an image; the keys page is reachable from the team page and the menu; the
generate and embed forms preselect the team's key."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import Team
from webapp.portal import services
from webapp.portal.models import WatermarkKey

pytestmark = pytest.mark.django_db


def _selected_key(html: str) -> str | None:
    select = re.search(r'<select id="[^"]*" name="key".*?</select>', html, re.S)
    if select is None:  # no active key: a text field, nothing to choose
        assert 'name="key"' in html
        return None
    chosen = re.search(r'<option value="([^"]*)" selected>', select.group(0))
    return chosen.group(1) if chosen else None


def test_the_home_cards_watermark_button_opens_the_watermark_page(client: Client) -> None:
    home = client.get("/welcome/").content.decode()
    card = re.search(r'<article[^>]*data-kind="watermark-[^"]*".*?</article>', home, re.S)
    assert card is not None
    assert 'href="/watermark/"' in card.group(0) and "Mark or check images" in card.group(0)
    page = client.get("/watermark/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Mark my images" in text and 'action="/verify/"' in text and "Log in" in text


def test_a_member_creates_the_teams_first_key_on_the_watermark_page(
    csrf_client: Callable[[User | None], Client], team: Team, member: User
) -> None:
    client = csrf_client(member)
    page = client.get("/watermark/").content.decode()
    assert 'data-action="create-first-key"' in page and 'data-action="mark-images"' not in page
    response = client.post(
        "/watermark/",
        {"team": team.slug, "name": "our photos", "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
        follow=True,
    )
    key = WatermarkKey.objects.get(team=team)
    assert key.name == "our photos" and key.created_by == member
    text = response.content.decode()
    assert "Created key" in text and key.reference in text
    assert 'data-action="create-first-key"' not in text
    assert f'href="/t/{team.slug}/submit/watermark-embed/"' in text


def test_a_viewer_is_told_to_ask_and_cannot_create_a_key_there(team: Team, viewer: User) -> None:
    client = Client()
    client.force_login(viewer)
    page = client.get("/watermark/").content.decode()
    assert 'data-action="create-first-key"' not in page and "ask a member or an owner" in page
    assert client.post("/watermark/", {"team": team.slug, "name": "x"}).status_code == 403
    assert not WatermarkKey.objects.exists()


def test_an_outsider_cannot_create_a_key_for_another_team(team: Team, outsider: User) -> None:
    client = Client()
    client.force_login(outsider)
    assert client.post("/watermark/", {"team": team.slug, "name": "x"}).status_code == 404
    assert not WatermarkKey.objects.filter(team=team).exists()


def test_a_visitor_posting_a_key_is_sent_to_log_in(team: Team) -> None:
    response = Client().post("/watermark/", {"team": team.slug, "name": "x"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not WatermarkKey.objects.exists()


def test_the_keys_page_is_linked_from_the_team_page_and_the_menu(team: Team, member: User) -> None:
    client = Client()
    client.force_login(member)
    team_page = client.get(_team_url(team)).content.decode()
    assert f'href="/t/{team.slug}/keys/" data-action="team-keys"' in team_page
    jobs = client.get(f"/t/{team.slug}/").content.decode()
    menu = re.search(r'<nav class="nav" id="main-nav".*?</nav>', jobs, re.S)
    assert menu is not None and f'href="/t/{team.slug}/keys/"' in menu.group(0)


@pytest.mark.parametrize("kind", ["watermark-embed", "watermark-generate"])
def test_the_marking_forms_preselect_the_teams_only_key(kind: str, team: Team, member: User) -> None:
    client = Client()
    client.force_login(member)
    assert _selected_key(client.get(f"/t/{team.slug}/submit/{kind}/").content.decode()) is None
    only = services.key_create(team=team, user=member, name="only")
    assert _selected_key(client.get(f"/t/{team.slug}/submit/{kind}/").content.decode()) == only.reference


def test_with_several_keys_the_newest_active_one_is_preselected(team: Team, owner: User) -> None:
    older = services.key_create(team=team, user=owner, name="older")
    newer = services.key_create(team=team, user=owner, name="newer")
    client = Client()
    client.force_login(owner)
    form = client.get(f"/t/{team.slug}/submit/watermark-embed/?sample=1").content.decode()
    assert _selected_key(form) == newer.reference
    services.key_revoke(key=newer, user=owner)
    form = client.get(f"/t/{team.slug}/submit/watermark-embed/").content.decode()
    assert _selected_key(form) == older.reference
    assert newer.reference not in form  # a revoked key marks nothing new


def _team_url(team: Team) -> str:
    from django.urls import reverse

    return reverse("accounts:team_settings", args=[team.slug])
