import base64
import hashlib
import json

import pytest
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.jobs.models import Job
from webapp.jobs.services import SubmitError, job_submit

pytestmark = pytest.mark.django_db


def test_it_saves_a_queued_job_with_cleaned_params_and_a_recorded_seed(team, member) -> None:
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={"steps": "4"})
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED and job.queue == "cpu" and job.kind_version == 1
    assert job.params["steps"] == 4 and job.params["outcome"] == "succeed"
    assert isinstance(job.params["seed"], int)
    assert job.submitted_by == member


def test_it_reports_each_bad_parameter_next_to_its_field(team, member) -> None:
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="test-exercise", raw_params={"steps": "0", "outcome": "explode"})
    fields = dict(caught.value.errors)
    assert "at least 1" in fields["steps"] and "Choose one of" in fields["outcome"]
    assert not Job.objects.exists()


def test_it_runs_the_kinds_cross_field_rule(team, member) -> None:
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="test-exercise", raw_params={"steps": 2, "fail_at": 5})
    assert caught.value.errors == [("fail_at", "Must not exceed steps.")]


def test_it_refuses_an_unknown_kind(team, member) -> None:
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="no-such-kind", raw_params={})
    assert caught.value.errors[0][0] == "kind"


def test_it_refuses_a_viewer_and_an_outsider(team, viewer, outsider) -> None:
    for user in (viewer, outsider):
        with pytest.raises(PermissionDenied):
            job_submit(team=team, user=user, kind="test-exercise", raw_params={})
    assert not Job.objects.exists()


def test_it_stores_an_upload_with_its_hash_and_sniffed_format(team, member) -> None:
    upload = SimpleUploadedFile("notes.txt", b"step,loss\n0,1.0\n", content_type="application/octet-stream")
    job = job_submit(team=team, user=member, kind="test-exercise", raw_params={}, files={"notes": [upload]})
    item = job.inputs.get()
    assert (item.param, item.original_name, item.size, item.format) == ("notes", "notes.txt", 16, "csv")
    assert item.sha256 == hashlib.sha256(b"step,loss\n0,1.0\n").hexdigest()
    with item.file.open("rb") as f:
        assert f.read() == b"step,loss\n0,1.0\n"


def test_it_refuses_an_upload_whose_content_is_not_an_accepted_format(team, member) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    upload = SimpleUploadedFile("notes.txt", png)
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="test-exercise", raw_params={}, files={"notes": [upload]})
    field, message = caught.value.errors[0]
    assert field == "notes" and "got a png file" in message


def test_it_refuses_an_upload_over_the_size_cap_and_an_unknown_file_field(team, member) -> None:
    big = SimpleUploadedFile("notes.txt", b"x" * 1_000_001)
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="test-exercise", raw_params={}, files={"notes": [big]})
    assert caught.value.errors[0][0] == "notes" and "limit is 1000000" in caught.value.errors[0][1]
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="test-exercise", raw_params={}, files={"extra": [big]})
    assert caught.value.errors == [("extra", "This job takes no such file.")]


def test_it_enqueues_the_job_id_on_the_kinds_queue_after_commit(
    team, member, broker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = job_submit(team=team, user=member, kind="test-exercise", raw_params={})
        assert broker.llen("cpu") == 0
    for callback in callbacks:
        callback()
    message = json.loads(broker.lpop("cpu"))
    assert message["headers"]["task"] == "workers.run_job"
    assert message["headers"]["id"] == Job.objects.get().celery_task_id
    body = json.loads(base64.b64decode(message["body"]))
    assert body[0] == [str(job.id)]
    assert message["headers"]["timelimit"] == [90, 60]


def test_each_queue_gets_only_its_own_messages(broker) -> None:
    from webapp.celery import RUN_JOB, app

    for queue in ("gpu", "verify"):
        app.send_task(RUN_JOB, args=["x"], queue=queue)
    assert (broker.llen("gpu"), broker.llen("verify"), broker.llen("cpu")) == (1, 1, 0)
