"""The admin site: staff manage teams, memberships, tokens, jobs and workers; nobody else gets in."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import Team
from webapp.jobs.models import Job

CHANGELISTS = (
    "accounts/team",
    "accounts/invite",
    "accounts/apitoken",
    "jobs/job",
    "jobs/workerstatus",
    "auth/user",
)


@pytest.fixture
def admin_client(db: None, csrf_client: Callable[..., Client]) -> Client:
    staff = User.objects.create_superuser("root", "root@example.com", "an-admin-password-1")
    return csrf_client(staff)


@pytest.mark.parametrize("changelist", CHANGELISTS)
def test_staff_open_every_changelist(admin_client: Client, make_job: Callable[..., Job], changelist: str) -> None:
    make_job(Job.Status.SUCCEEDED)
    assert admin_client.get(f"/admin/{changelist}/").status_code == 200


def test_staff_open_a_job_with_its_artifacts_and_a_team_with_its_members(
    admin_client: Client, team: Team, member: User, make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "losses.csv" in page and "summary.json" in page
    assert member.get_username() in admin_client.get(f"/admin/accounts/team/{team.pk}/change/").content.decode()


def test_team_members_who_are_not_staff_are_sent_to_the_admin_login(
    owner: User, csrf_client: Callable[..., Client]
) -> None:
    response = csrf_client(owner).get("/admin/jobs/job/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
