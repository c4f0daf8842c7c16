"""Cancel, Re-run and Delete from the job page."""

from __future__ import annotations

import os
from collections.abc import Callable

from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.views.helpers import post
from webapp.jobs.models import Job


def test_cancel_stops_a_queued_job_at_once(
    member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.QUEUED)
    response = post(csrf_client(member), f"/jobs/{job.id}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.id}/"
    job.refresh_from_db()
    assert job.status == Job.Status.CANCELLED


def test_cancel_asks_a_running_job_to_stop(
    member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.RUNNING)
    client = csrf_client(member)
    post(client, f"/jobs/{job.id}/cancel/")
    job.refresh_from_db()
    assert job.status == Job.Status.RUNNING and job.cancel_requested
    assert "stopping…" in client.get(f"/jobs/{job.id}/").content.decode()


def test_cancelling_a_finished_job_says_so(
    member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    client = csrf_client(member)
    post(client, f"/jobs/{job.id}/cancel/")
    assert "already succeeded" in client.get(f"/jobs/{job.id}/").content.decode()


def test_rerun_prefills_the_form_and_submits_an_edited_clone(
    member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=6, seed=3)
    client = csrf_client(member)
    form = client.get(f"/jobs/{job.id}/rerun/").content.decode()
    assert 'name="steps" value="6"' in form and 'name="seed" value="3"' in form
    assert 'type="file"' not in form  # inputs are copied from the original
    response = post(client, f"/jobs/{job.id}/rerun/", {"steps": "9", "seed": "3", "outcome": "succeed"})
    clone = Job.objects.exclude(pk=job.pk).get()
    assert response["Location"] == f"/jobs/{clone.id}/"
    assert clone.rerun_of == job and clone.params["steps"] == 9 and clone.submitted_by == member


def test_rerun_with_a_bad_value_shows_the_error_on_the_field(
    member: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    response = post(csrf_client(member), f"/jobs/{job.id}/rerun/", {"steps": "-1"})
    assert response.status_code == 400 and "Must be at least 1." in response.content.decode()
    assert Job.objects.count() == 1


def test_an_owner_deletes_a_finished_job_with_its_files(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job], media_in_tmp
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    stored = [a.file.path for a in job.artifacts.all()]
    response = post(csrf_client(owner), f"/jobs/{job.id}/delete/")
    assert response["Location"] == "/t/routing-lab/"
    assert not Job.objects.filter(pk=job.pk).exists()
    assert stored and not any(os.path.exists(p) for p in stored)


def test_a_running_job_cannot_be_deleted(
    owner: User, csrf_client: Callable[..., Client], make_job: Callable[..., Job]
) -> None:
    job = make_job(Job.Status.RUNNING)
    response = post(csrf_client(owner), f"/jobs/{job.id}/delete/")
    assert response["Location"] == f"/jobs/{job.id}/"
    assert Job.objects.filter(pk=job.pk).exists()
