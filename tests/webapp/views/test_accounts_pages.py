"""Sign up, log in, teams, invites by email link, and roles."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.contrib.auth.models import User
from django.core import mail
from django.test import Client

from tests.webapp.conftest import PASSWORD
from tests.webapp.views.helpers import post
from webapp.accounts.models import Membership, Role, Team


def test_signing_up_makes_an_account_with_a_team_of_its_own(db: None) -> None:
    client = Client(enforce_csrf_checks=True)
    response = post(
        client,
        "/signup/",
        {"username": "grace", "email": "grace@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    team = Team.objects.get(memberships__user__username="grace")
    assert team.name == "grace's team" and Membership.objects.get(team=team).role == Role.OWNER
    assert response["Location"] == "/"
    assert client.get("/")["Location"] == f"/t/{team.slug}/"


def test_signing_up_with_a_taken_email_is_refused(owner: User) -> None:
    response = post(
        Client(enforce_csrf_checks=True),
        "/signup/",
        {"username": "other", "email": owner.email.upper(), "password1": PASSWORD, "password2": PASSWORD},
    )
    assert response.status_code == 200 and "log in instead" in response.content.decode()


def test_logging_in_and_out(owner: User) -> None:
    client = Client(enforce_csrf_checks=True)
    response = post(client, "/login/", {"username": "olivia", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/t/routing-lab/").status_code == 200
    post(client, "/logout/", {})
    assert client.get("/t/routing-lab/")["Location"].startswith("/login/")


def test_an_invite_is_emailed_and_its_link_adds_the_person_with_the_role(
    owner: User, csrf_client: Callable[..., Client]
) -> None:
    response = post(csrf_client(owner), "/t/routing-lab/team/invite/", {"email": "nina@example.com", "role": "viewer"})
    assert response["Location"] == "/t/routing-lab/team/"
    link = re.search(r"https?://\S+/invites/(\S+)/", mail.outbox[0].body)
    assert link and mail.outbox[0].to == ["nina@example.com"]
    path = f"/invites/{link.group(1)}/"
    anonymous = Client(enforce_csrf_checks=True).get(path).content.decode()
    assert "Sign up to accept" in anonymous and "Routing Lab" in anonymous
    nina = User.objects.create_user("nina", "nina@example.com", PASSWORD)
    client = csrf_client(nina)
    accepted = post(client, path, {})
    assert accepted["Location"] == "/t/routing-lab/"
    assert Membership.objects.get(user=nina).role == Role.VIEWER
    assert post(client, path, {}).status_code == 404  # a link works once


def test_an_unknown_invite_link_says_so(db: None) -> None:
    response = Client().get("/invites/not-a-real-token/")
    assert response.status_code == 404 and "not valid" in response.content.decode()


def test_an_owner_changes_a_role_but_cannot_leave_the_team_without_an_owner(
    owner: User, member: User, csrf_client: Callable[..., Client]
) -> None:
    client = csrf_client(owner)
    post(client, f"/t/routing-lab/team/members/{member.pk}/role/", {"role": "viewer"})
    assert Membership.objects.get(user=member).role == Role.VIEWER
    refused = post(client, f"/t/routing-lab/team/members/{owner.pk}/role/", {"role": "member"})
    assert refused.status_code == 400 and "at least one owner" in refused.content.decode()
    assert Membership.objects.get(user=owner).role == Role.OWNER


def test_a_member_sees_the_team_but_no_invite_form(member: User, csrf_client: Callable[..., Client]) -> None:
    html = csrf_client(member).get("/t/routing-lab/team/").content.decode()
    assert 'data-member="mario"' in html and "Invite someone" not in html


def test_creating_a_team_makes_you_its_owner(outsider: User, csrf_client: Callable[..., Client]) -> None:
    response = post(csrf_client(outsider), "/teams/new/", {"name": "Vision Lab"})
    team = Team.objects.get(name="Vision Lab")
    assert response["Location"] == f"/t/{team.slug}/"
    assert Membership.objects.get(team=team).user == outsider


def test_the_team_switcher_lists_only_your_teams(owner: User, csrf_client: Callable[..., Client], other_team) -> None:
    html = csrf_client(owner).get("/t/routing-lab/").content.decode()
    switcher = html.split("data-team-switcher")[1].split("</details>")[0]
    assert "Routing Lab" in switcher and "Other Lab" not in switcher
