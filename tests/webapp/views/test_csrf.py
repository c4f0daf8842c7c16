"""Every form POST is refused without a CSRF token, and htmx requests carry it in a header."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.models import Job

POSTS = [
    "/t/routing-lab/submit/test-exercise/",
    "/jobs/{job}/cancel/",
    "/jobs/{job}/rerun/",
    "/jobs/{job}/delete/",
    "/t/routing-lab/team/invite/",
    "/t/routing-lab/team/members/{owner}/role/",
    "/t/routing-lab/team/members/{owner}/remove/",
    "/account/tokens/",
    "/teams/new/",
    "/logout/",
]


@pytest.mark.parametrize("url", POSTS)
def test_a_post_without_a_csrf_token_is_refused(
    url: str, owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.QUEUED)
    client = csrf_client(owner)
    response = client.post(url.format(job=job.id, owner=owner.pk), {"name": "x", "email": "a@b.org", "role": "member"})
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED


def test_every_page_hands_its_csrf_token_to_htmx(owner: User, csrf_client: Callable[..., Client]) -> None:
    client = csrf_client(owner)
    html = client.get("/t/routing-lab/").content.decode()
    token = client.cookies["csrftoken"].value
    assert token and 'hx-headers=\'{"X-CSRFToken": "' in html
    # The header form of the token is accepted, as htmx sends it.
    header = html.split('"X-CSRFToken": "')[1].split('"')[0]
    response = client.post("/account/tokens/", {"name": "from htmx"}, HTTP_X_CSRFTOKEN=header)
    assert response.status_code == 200 and "from htmx" in response.content.decode()
