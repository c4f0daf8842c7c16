"""An API token stops reaching a team the moment its owner leaves the team or is removed from it.

Tokens belong to a user, not to a team: every request resolves the user's memberships afresh
(``webapp/accounts/selectors.py``), so nothing about the token has to change when a membership
does, and the token keeps working in the teams its owner is still in. An outsider gets 404, as
the API answers anyone outside a team (never a 403 that would confirm the team exists)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.views.conftest import make_job  # noqa: F401  (fixture)
from webapp.accounts.models import Membership, Role, Team
from webapp.accounts.services import api_token_create, membership_remove
from webapp.jobs.models import Job

pytestmark = pytest.mark.django_db


def api(raw: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def team_urls(team: Team, job: Job) -> list[str]:
    return [
        f"/api/v1/jobs?team={team.slug}",
        f"/api/v1/jobs/{job.pk}",
        f"/api/v1/jobs/{job.pk}/artifacts",
        f"/api/v1/jobs/{job.pk}/artifacts/summary.json",
        f"/api/v1/library/items?team={team.slug}",
        f"/api/v1/watermark/keys?team={team.slug}",
    ]


@pytest.fixture
def setup(team: Team, other_team: Team, owner: User, member: User, make_job):  # noqa: F811
    Membership.objects.create(team=other_team, user=member, role=Role.MEMBER)
    job = make_job(Job.Status.SUCCEEDED, by=member, steps=2)
    _, raw = api_token_create(user=member, name="laptop")
    return job, raw


def assert_reaches(client: Client, raw: str, team: Team, job: Job) -> None:
    for url in team_urls(team, job):
        assert client.get(url, **api(raw)).status_code == 200, url


def assert_cannot_reach(client: Client, raw: str, team: Team, job: Job) -> None:
    for url in team_urls(team, job):
        assert client.get(url, **api(raw)).status_code == 404, url
    cancel = client.post(f"/api/v1/jobs/{job.pk}/cancel", **api(raw))
    assert cancel.status_code == 404
    submit = client.post("/api/v1/jobs", {"kind": "test-exercise", "team": team.slug}, **api(raw))
    assert submit.status_code == 404
    assert team.slug not in [t["slug"] for t in client.get("/api/v1/teams", **api(raw)).json()]


def test_a_token_stops_reaching_a_team_the_moment_its_owner_leaves(setup, team, other_team, member) -> None:
    job, raw = setup
    client = Client()
    assert_reaches(client, raw, team, job)

    membership_remove(team=team, user=member, by=member)

    assert_cannot_reach(client, raw, team, job)
    # Still the member's token everywhere else: the other team, and the default team is that one.
    assert client.get(f"/api/v1/jobs?team={other_team.slug}", **api(raw)).status_code == 200
    assert [t["slug"] for t in client.get("/api/v1/teams", **api(raw)).json()] == [other_team.slug]
    created = client.post("/api/v1/jobs", {"kind": "test-exercise", "params": '{"steps": 1}'}, **api(raw))
    assert created.status_code == 201 and created.json()["team"] == other_team.slug


def test_a_token_stops_reaching_a_team_the_moment_an_owner_removes_its_owner(setup, team, owner, member) -> None:
    job, raw = setup
    client = Client()
    assert_reaches(client, raw, team, job)

    membership_remove(team=team, user=member, by=owner)

    assert_cannot_reach(client, raw, team, job)


def test_coming_back_to_the_team_is_what_lets_the_token_in_again(setup, team, owner, member) -> None:
    job, raw = setup
    membership_remove(team=team, user=member, by=owner)
    Membership.objects.create(team=team, user=member, role=Role.VIEWER)
    client = Client()
    assert client.get(f"/api/v1/jobs/{job.pk}", **api(raw)).status_code == 200
    # With the rights of the new membership only: a viewer cannot cancel.
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel", **api(raw)).status_code == 403


def test_a_user_who_left_every_team_is_still_authenticated_but_reaches_no_team(setup, team, other_team, member) -> None:
    job, raw = setup
    membership_remove(team=team, user=member, by=member)
    membership_remove(team=other_team, user=member, by=member)
    client = Client()
    assert client.get("/api/v1/teams", **api(raw)).json() == []
    assert_cannot_reach(client, raw, team, job)
