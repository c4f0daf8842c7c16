"""Who may do what, for every page: owners and members act, viewers read (403 on writes, since
they are members), outsiders get 404 everywhere (never a 403 that confirms the job exists), and
anonymous people are sent to the login page. Every POST carries a valid CSRF token."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLResolver, get_resolver, resolve

from tests.webapp.conftest import make_user
from tests.webapp.views.helpers import post
from webapp.accounts.models import Membership, Role, Team
from webapp.jobs.models import Job

ROLES = ("owner", "member", "viewer", "outsider", "anonymous")


def expect(owner: int, member: int, viewer: int) -> dict[str, int]:
    return {"owner": owner, "member": member, "viewer": viewer, "outsider": 404, "anonymous": 302}


READ = expect(200, 200, 200)
WRITE_PAGE = expect(200, 200, 403)
WRITE = expect(302, 302, 403)
OWNER_ONLY = expect(302, 403, 403)


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    url: Callable[[dict[str, Any]], str]
    expected: dict[str, int]
    data: dict[str, Any] = field(default_factory=dict)
    job_status: str = Job.Status.SUCCEEDED


CASES = [
    Case("dashboard", "get", lambda w: "/t/routing-lab/", READ),
    Case("dashboard jobs fragment", "get", lambda w: "/t/routing-lab/jobs/?status=succeeded", READ),
    Case("dashboard workers fragment", "get", lambda w: "/t/routing-lab/workers/", READ),
    Case("team page", "get", lambda w: "/t/routing-lab/team/", READ),
    Case("job page", "get", lambda w: f"/jobs/{w['job'].id}/", READ),
    Case("job live fragment", "get", lambda w: f"/jobs/{w['job'].id}/live/", READ),
    Case("job results fragment", "get", lambda w: f"/jobs/{w['job'].id}/results/", READ),
    Case("job log", "get", lambda w: f"/jobs/{w['job'].id}/log.txt", READ),
    Case("artifact", "get", lambda w: f"/jobs/{w['job'].id}/artifacts/losses.csv", READ),
    Case("chart data", "get", lambda w: f"/jobs/{w['job'].id}/charts/loss.json", READ),
    Case("chart png", "get", lambda w: f"/jobs/{w['job'].id}/charts/loss.png", READ),
    Case("chart spec", "get", lambda w: f"/jobs/{w['job'].id}/charts/loss.vl.json", READ),
    Case("compare", "get", lambda w: f"/jobs/compare/?job={w['job'].id}&job={w['other'].id}", READ),
    Case("kinds", "get", lambda w: "/t/routing-lab/submit/", WRITE_PAGE),
    Case("submit form", "get", lambda w: "/t/routing-lab/submit/test-exercise/", WRITE_PAGE),
    Case("submit", "post", lambda w: "/t/routing-lab/submit/test-exercise/", WRITE, {"steps": "2"}),
    Case("re-run form", "get", lambda w: f"/jobs/{w['job'].id}/rerun/", WRITE_PAGE),
    Case("re-run", "post", lambda w: f"/jobs/{w['job'].id}/rerun/", WRITE, {"steps": "4"}),
    Case("cancel", "post", lambda w: f"/jobs/{w['job'].id}/cancel/", WRITE, job_status=Job.Status.QUEUED),
    Case("delete", "post", lambda w: f"/jobs/{w['job'].id}/delete/", OWNER_ONLY),
    Case("invite", "post", lambda w: "/t/routing-lab/team/invite/", OWNER_ONLY, {"email": "n@x.org", "role": "member"}),
    Case(
        "change a role",
        "post",
        lambda w: f"/t/routing-lab/team/members/{w['viewer'].pk}/role/",
        OWNER_ONLY,
        {"role": "member"},
    ),
    Case("remove a member", "post", lambda w: f"/t/routing-lab/team/members/{w['bystander'].pk}/remove/", OWNER_ONLY),
]


@pytest.fixture
def world(
    team: Team, owner: User, member: User, viewer: User, outsider: User, make_job: Callable[..., Job]
) -> Callable[[str], dict[str, Any]]:
    # Someone else in the team, for the actions that target a person.
    bystander = make_user("bea")
    Membership.objects.create(team=team, user=bystander, role=Role.MEMBER)

    def build(job_status: str) -> dict[str, Any]:
        return {
            "job": make_job(job_status),
            "other": make_job(Job.Status.SUCCEEDED, steps=5),
            "owner": owner,
            "member": member,
            "viewer": viewer,
            "outsider": outsider,
            "bystander": bystander,
        }

    return build


def client_as(user: User | None) -> Client:
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_role_gets_what_its_role_allows(case: Case, role: str, world: Callable[[str], dict[str, Any]]) -> None:
    w = world(case.job_status)
    client = client_as(None if role == "anonymous" else w[role])
    url = case.url(w)
    response = post(client, url, case.data) if case.method == "post" else client.get(url)
    assert response.status_code == case.expected[role], f"{role} {case.method.upper()} {url}"
    if role == "anonymous":
        assert response["Location"].startswith("/login/")


def test_every_page_of_a_team_or_a_job_is_in_the_table(world: Callable[[str], dict[str, Any]]) -> None:
    w = world(Job.Status.SUCCEEDED)
    covered = {resolve(urlsplit(case.url(w)).path).view_name for case in CASES}
    scoped = set()
    for app in get_resolver().url_patterns:
        if isinstance(app, URLResolver) and app.namespace in ("accounts", "jobs", "dashboard"):
            for route in app.url_patterns:
                if {"team_slug", "job_id"} & set(route.pattern.converters):
                    scoped.add(f"{app.namespace}:{route.name}")
    assert scoped and scoped <= covered, f"not checked for every role: {sorted(scoped - covered)}"


def test_an_outsider_cannot_tell_a_missing_job_from_someone_elses(world: Callable[[str], dict[str, Any]]) -> None:
    w = world(Job.Status.SUCCEEDED)
    client = client_as(w["outsider"])
    theirs = client.get(f"/jobs/{w['job'].id}/")
    missing = client.get("/jobs/00000000-0000-0000-0000-000000000000/")
    assert theirs.status_code == missing.status_code == 404
    # Byte for byte the same page, but for the per-response CSRF token.
    assert re.sub(rb"[A-Za-z0-9]{64}", b"", theirs.content) == re.sub(rb"[A-Za-z0-9]{64}", b"", missing.content)
