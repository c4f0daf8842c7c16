import pytest
from django.core.exceptions import PermissionDenied
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.jobs.models import Job
from webapp.jobs.services import JobStateError, job_cancel, job_changed_params, job_delete, job_rerun, job_submit

pytestmark = pytest.mark.django_db


def _submit(team, user, **params) -> Job:
    return job_submit(team=team, user=user, kind="test-exercise", raw_params=params)


def test_it_cancels_a_queued_job_at_once(team, member) -> None:
    job = job_cancel(job=_submit(team, member), user=member)
    assert job.status == Job.Status.CANCELLED and job.finished_at is not None


def test_it_asks_a_running_job_to_stop(team, member) -> None:
    job = _submit(team, member)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING)
    job = job_cancel(job=job, user=member)
    assert job.status == Job.Status.RUNNING and job.cancel_requested


def test_it_refuses_to_cancel_a_finished_job_or_for_a_viewer(team, member, viewer) -> None:
    job = _submit(team, member)
    with pytest.raises(PermissionDenied):
        job_cancel(job=job, user=viewer)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.SUCCEEDED)
    with pytest.raises(JobStateError, match="already succeeded"):
        job_cancel(job=job, user=member)


def test_it_reruns_with_the_same_params_and_a_copy_of_the_inputs(team, owner, member) -> None:
    notes = SimpleUploadedFile("notes.txt", b"hello")
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={"steps": 7}, files={"notes": [notes]})
    clone = job_rerun(job=job, user=owner)
    assert clone.rerun_of == job and clone.submitted_by == owner and clone.status == Job.Status.QUEUED
    assert clone.params == job.params
    copied = clone.inputs.get()
    assert copied.file.name != job.inputs.get().file.name
    with copied.file.open("rb") as f:
        assert f.read() == b"hello"


def test_it_reruns_with_edited_params_validated_by_the_spec(team, member) -> None:
    job = _submit(team, member, steps=7)
    assert job_rerun(job=job, user=member, raw_params={"steps": 2}).params["steps"] == 2


def test_it_names_the_params_whose_meaning_changed_since_the_jobs_kind_version(team, member) -> None:
    job = _submit(team, member)
    assert job_changed_params(job) == []
    Job.objects.filter(pk=job.pk).update(kind_version=0, params={**job.params, "steps": 0, "old_knob": 1})
    job.refresh_from_db()
    assert sorted(job_changed_params(job)) == ["old_knob", "steps"]


def test_it_lets_only_an_owner_delete_a_finished_job_and_its_files(team, owner, member) -> None:
    notes = SimpleUploadedFile("notes.txt", b"hello")
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={}, files={"notes": [notes]})
    stored = job.inputs.get().file.name
    with pytest.raises(JobStateError):
        job_delete(job=job, user=owner)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED)
    job.refresh_from_db()
    with pytest.raises(PermissionDenied):
        job_delete(job=job, user=member)
    job_delete(job=job, user=owner)
    assert not Job.objects.exists()
    assert not default_storage.exists(stored)
