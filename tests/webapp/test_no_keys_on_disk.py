"""No unsealed key reaches a disk: after a ``watermark-verify`` job on a real
worker ends — succeeded, or failed on a corrupt image after its keyring was resolved — no file in the
temporary folder, the worker's caches or the media storage holds any registered key's bits, in any
encoding the leak test knows (``tests/webapp/canary.py``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile

from mlcore.catalog import cache_root
from tests.webapp import canary
from tests.webapp.conftest import make_user
from tests.workers.conftest import celery_app, celery_worker_parameters, empty_broker  # noqa: F401
from tests.workers.processes import wait_for_status
from webapp.accounts.models import Membership, Role, Team
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit
from webapp.portal import services as keys
from webapp.portal.models import WatermarkKey

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = pytest.mark.django_db(transaction=True)


def _person(team: Team, username: str, role: str) -> User:
    user = make_user(username)
    Membership.objects.create(team=team, user=user, role=role)
    return user


@pytest.fixture
def disk(settings, tmp_path: Path) -> list[Path]:
    """Where a worker writes: the temporary folder, the library and zoo caches, the media storage."""
    settings.WATERMARK_KEY_BITS = 48  # what the zoo extractor reads
    settings.LIBRARY_CACHE_DIR = tmp_path / "library-cache"
    settings.LIBRARY_UPLOAD_DIR = tmp_path / "uploads"
    media = Path(settings.STORAGES["default"]["OPTIONS"]["location"])
    return [Path(tempfile.gettempdir()), settings.LIBRARY_CACHE_DIR, cache_root(), media]


@pytest.fixture
def team() -> Team:
    """A team with a key, beside another team with one: the platform keyring holds both."""
    others = Team.objects.create(name="Canary Works", slug="canary-works")
    keys.key_create(team=others, user=_person(others, "cora", Role.OWNER), name=canary.CANARY_NAME)
    team = Team.objects.create(name="Bystanders", slug="bystanders")
    keys.key_create(team=team, user=None, name="our own campaign")
    return team


def every_keys_needles() -> list[canary.Needle]:
    return [needle for key in WatermarkKey.objects.all() for needle in canary.bit_needles(keys.bits_of(key))]


def _verify(team: Team, images: bytes) -> Job:
    member = _person(team, "bob", Role.MEMBER)
    upload = SimpleUploadedFile("images.zip", images, content_type="application/zip")
    return job_submit(team=team, user=member, kind="watermark-verify", raw_params={}, files={"images": [upload]})


def test_the_disk_scan_finds_a_keyring_left_in_a_temporary_folder(disk: list[Path], team: Team) -> None:
    """What the verify job used to leave behind (a keyring.json in the worker's temp folder) is found."""
    started = time.time() - 1
    with tempfile.TemporaryDirectory(prefix="moelab-keyring-probe-") as folder:
        (Path(folder) / "keyring.json").write_bytes(keys.keyring_bytes(team.pk))
        found = canary.on_disk(disk, every_keys_needles(), newer_than=started)
    assert len(found) == 1 and found[0].startswith(f"{folder}/keyring.json: bits as a 0/1 string")


@pytest.mark.slow
def test_no_key_bits_remain_on_disk_after_a_verify_job_succeeds(celery_worker, disk: list[Path], team: Team) -> None:
    started = time.time() - 1
    job = wait_for_status(_verify(team, canary.images_zip(4)), Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=120)
    assert job.status == Job.Status.SUCCEEDED, job.error
    found = canary.on_disk(disk, every_keys_needles(), newer_than=started)
    assert not found, "unsealed key bits left on disk:\n" + "\n".join(found)


@pytest.mark.slow
def test_no_key_bits_remain_on_disk_after_a_verify_job_fails_on_a_corrupt_image(
    celery_worker, disk: list[Path], team: Team
) -> None:
    # A PNG cut short: its signature passes the upload checks, so the job resolves the keyring and
    # starts decoding before the image fails.
    started = time.time() - 1
    corrupt = canary.random_png(99)[:120]
    job = _verify(team, canary.images_zip(2, extra={"zz-cut-short.png": corrupt}))
    job = wait_for_status(job, Job.Status.SUCCEEDED, Job.Status.FAILED, timeout=120)
    assert job.status == Job.Status.FAILED and "zz-cut-short.png" in job.error, job.error
    assert job.provenance, "the job failed before its inputs (the keyring among them) were resolved"
    found = canary.on_disk(disk, every_keys_needles(), newer_than=started)
    assert not found, "unsealed key bits left on disk:\n" + "\n".join(found)
