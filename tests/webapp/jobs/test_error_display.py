"""A failed job's page shows its error, never its traceback: not to the submitter, not to an owner,
not to a viewer (staff read it in the admin)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit

pytestmark = pytest.mark.django_db

TRACEBACK = 'Reference 7f3a2c1d\nTraceback (most recent call last):\n  File "/srv/moelab/mlcore/x.py", line 1\nBoom'


@pytest.mark.parametrize("who", ["member", "owner", "viewer"])
def test_no_member_sees_the_traceback_on_the_job_page(team: Team, member: User, request, who: str) -> None:
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={})
    error = "Internal error (reference 7f3a2c1d): the job failed on our side; the staff have the details."
    Job.objects.filter(pk=job.pk).update(
        status=Job.Status.FAILED, error=error, traceback=TRACEBACK, finished_at=timezone.now()
    )
    client = Client()
    client.force_login(request.getfixturevalue(who))  # the member submitted it
    for name in ("jobs:detail", "jobs:live"):
        page = client.get(reverse(name, args=[job.pk])).content.decode()
        assert "reference 7f3a2c1d" in page
        assert "Traceback" not in page and "/srv/moelab" not in page and "Boom" not in page
