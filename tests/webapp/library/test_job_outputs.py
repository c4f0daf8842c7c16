"""On a real worker: a job takes a library item and registers its output, and the lineage runs both
ways (the new item was made by the job; the job used the old item)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.library.conftest import AddItem
from tests.workers.conftest import celery_app, celery_worker_parameters, empty_broker  # noqa: F401
from tests.workers.processes import wait_for_status
from webapp.accounts.models import Team
from webapp.jobs import services as job_services
from webapp.jobs.models import Job
from webapp.library import services
from webapp.library.models import LibraryItem

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_job_consumes_a_library_item_and_registers_a_new_one(
    celery_worker, team: Team, owner: User, add_item: AddItem, library_dirs: Path
) -> None:
    corpus = add_item(b"experts\nrouters\n\ngates\n", name="tiny corpus", filename="tiny.txt")
    job = job_services.job_submit(
        team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": corpus.reference}
    )
    job = wait_for_status(job, Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=60)
    assert job.status == Job.Status.SUCCEEDED, job.error
    made = LibraryItem.objects.get(produced_by=job)
    assert made.name == "summary of the inputs" and made.kind == "text" and made.is_ready
    assert made.card["records"] == 1 and made.card["made_from"] == ["corpus"]
    with made.file.open("rb") as f:
        assert f.read() == b"tiny.txt 3\n"
    assert list(corpus.uses.values_list("job", flat=True)) == [job.pk]
    # The job held its input in the worker's cache while it ran (a lease), and let go at the end.
    lease_file = library_dirs / "cache" / corpus.sha256 / ".lease"
    assert lease_file.exists()
    with lease_file.open("ab") as lease:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)  # would raise BlockingIOError if still held
    assert f"added summary.txt to the team library as {made.reference}" in job.log_tail

    # The new item feeds the next job, which is recorded as its user.
    follow = job_services.job_submit(
        team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": made.reference}
    )
    assert wait_for_status(follow, Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=60).status == "succeeded"
    assert list(made.uses.values_list("job", flat=True)) == [follow.pk]
    with pytest.raises(services.ItemInUse):
        services.item_delete(item=made, user=owner)
