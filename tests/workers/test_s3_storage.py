"""With S3-compatible storage configured, uploads and artifacts travel through the bucket, so a
worker on another host needs no shared disk. Tested against moto's S3 server mode."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import boto3
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from moto.server import ThreadedMotoServer

from tests.webapp.conftest import make_user
from tests.workers.processes import wait_for_status
from webapp.accounts.models import Membership, Role, Team
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit
from webapp.jobs.storage import read_log

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
BUCKET = "moelab-test"


@pytest.fixture
def s3(settings, media_in_tmp) -> Iterator[object]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": endpoint,
                "access_key": "test",
                "secret_key": "test",
                "region_name": "us-east-1",
                "file_overwrite": True,
                "default_acl": None,
            },
        },
    }
    yield client
    server.stop()


def test_a_workers_artifacts_and_inputs_travel_through_the_bucket(celery_worker, s3, media_in_tmp) -> None:
    user = make_user("sam")
    team = Team.objects.create(name="Bucket Lab", slug="bucket-lab")
    Membership.objects.create(team=team, user=user, role=Role.MEMBER)
    notes = SimpleUploadedFile("notes.txt", b"read me from the bucket")
    job = job_submit(team=team, user=user, kind="test-exercise", raw_params={"steps": 3}, files={"notes": [notes]})
    job = wait_for_status(job, Job.Status.SUCCEEDED)

    keys = {obj["Key"] for obj in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    artifact = job.artifacts.get(name="losses.csv")
    assert {artifact.file.name, job.inputs.get().file.name, f"logs/{job.pk}.txt"} <= keys
    body = s3.get_object(Bucket=BUCKET, Key=artifact.file.name)["Body"].read().decode()
    assert body.splitlines()[-1] == "2,0.3333333333333333"
    with artifact.file.open("rb") as f:  # downloadable through storage, as the web serves it
        assert f.read().decode() == body
    assert "notes: read me from the bucket" in read_log(job)
    assert not any(media_in_tmp.rglob("*.csv"))  # nothing went to the local disk
