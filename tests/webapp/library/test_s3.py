"""With S3-compatible storage (moto's server), library items live in the bucket like artifacts:
uploaded there, fetched by key into a worker's cache, and a job's output registered back there."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.library.conftest import AddItem
from tests.workers.conftest import celery_app, celery_worker_parameters, empty_broker  # noqa: F401
from tests.workers.processes import wait_for_status
from tests.workers.test_s3_storage import BUCKET, s3  # noqa: F401
from webapp.accounts.models import Team
from webapp.jobs import services as job_services
from webapp.jobs.models import Job
from webapp.library.models import LibraryItem

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_library_items_travel_through_the_bucket_and_are_cached_by_sha256(
    celery_worker,
    s3,  # noqa: F811
    team: Team,
    owner: User,
    add_item: AddItem,
    library_dirs: Path,
) -> None:
    corpus = add_item(b"experts\nrouters\n", name="bucket corpus", filename="bucket.txt")
    assert corpus.is_ready, corpus.error
    job = job_services.job_submit(
        team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": corpus.reference}
    )
    job = wait_for_status(job, Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=60)
    assert job.status == Job.Status.SUCCEEDED, job.error

    made = LibraryItem.objects.get(produced_by=job)
    keys = {obj["Key"] for obj in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert {corpus.file.name, made.file.name} <= keys
    assert corpus.file.name.startswith(f"library/{team.pk}/{corpus.sha256}/")
    body = s3.get_object(Bucket=BUCKET, Key=made.file.name)["Body"].read()
    assert body == b"bucket.txt 2\n"
    # The worker fetched the item by key into its cache, under its sha256; nothing went to local media.
    cached = library_dirs / "cache" / corpus.sha256 / "data" / "bucket.txt"
    assert cached.read_bytes() == b"experts\nrouters\n"
    assert not (library_dirs / "media" / "library").exists()
