"""A path an administrator registered on the workers is used in place, so its immutability is
checked where it is used: a job gets it only while it still holds the content that was validated."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from mlcore.jobs.params import Dataset
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Team
from webapp.jobs.resolver import PlatformResolver
from webapp.library import services
from webapp.library.ingest import ingest_item
from webapp.library.models import LibraryItem

pytestmark = pytest.mark.django_db
CORPUS = Dataset(name="corpus", accepts=("text",))


@pytest.fixture
def registered(team: Team, owner: User, tmp_path: Path) -> tuple[LibraryItem, Path]:
    owner.is_staff = True
    folder = tmp_path / "shared-corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("experts\nrouters\n")
    item = services.item_register_path(team=team, user=owner, name="shared", kind="text", path=str(folder))
    assert ingest_item(item.pk) == LibraryItem.Status.READY
    item.refresh_from_db()
    return item, folder


def test_a_job_gets_the_registered_path_while_its_content_is_unchanged(team: Team, registered) -> None:
    item, folder = registered
    resolver = PlatformResolver(team=team.pk)
    assert resolver.resolve(CORPUS, item.reference) == folder
    os.utime(folder / "a.txt", ns=(10**18, 10**18))  # touched (new mtime), same bytes: still this item
    assert resolver.resolve(CORPUS, item.reference) == folder


def test_a_path_whose_content_changed_after_registration_is_refused(team: Team, registered) -> None:
    item, folder = registered
    PlatformResolver(team=team.pk).resolve(CORPUS, item.reference)
    (folder / "a.txt").write_text("experts\ngates\n")
    with pytest.raises(JobError, match="changed on this worker since it was registered"):
        PlatformResolver(team=team.pk).resolve(CORPUS, item.reference)


def test_a_link_planted_in_a_registered_path_is_refused(team: Team, registered) -> None:
    item, folder = registered
    (folder / "b.txt").symlink_to("/etc/passwd")
    with pytest.raises(JobError, match=r"b\.txt is a symbolic link"):
        PlatformResolver(team=team.pk).resolve(CORPUS, item.reference)
