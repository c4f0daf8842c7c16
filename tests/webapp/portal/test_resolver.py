"""Keys reach job kinds as files: a ``key`` parameter names one of the submitting team's active
keys, ``keyring:platform`` every registered key; other teams' keys read as missing."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.spec import JobError
from mlcore.watermark.keys import load_key_file, load_keyring
from webapp.accounts.models import Team
from webapp.jobs.resolver import PlatformResolver, check_reference
from webapp.portal import services

pytestmark = pytest.mark.django_db
KEY = Key(name="key")
KEYRING = Dataset(name="keyring", accepts=("watermark-keyring",))


def test_a_teams_key_resolves_to_a_private_key_file(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    for reference in (key.reference, key.public_id):
        with PlatformResolver(team=team) as resolver:
            path = resolver.resolve(KEY, reference)
            record = load_key_file(path)
            assert (record.id, record.name, record.bits) == (key.public_id, "launch", services.bits_of(key))
            assert str(path).startswith("/proc/self/fd/")  # in memory: no key bits on the worker's disk
        assert not path.exists()


def test_another_teams_key_reads_exactly_like_a_missing_one(team: Team, other_team: Team, owner: User) -> None:
    theirs = services.key_create(team=other_team, user=None, name="theirs")
    with pytest.raises(JobError) as foreign:
        check_reference(KEY, theirs.reference, team=team)
    with pytest.raises(JobError) as missing:
        check_reference(KEY, "key:999999", team=team)
    assert str(foreign.value).replace(theirs.reference, "X") == str(missing.value).replace("key:999999", "X")
    assert "was not found in your team" in str(foreign.value)


def test_a_revoked_key_cannot_mark_new_images(team: Team, owner: User) -> None:
    key = services.key_revoke(key=services.key_create(team=team, user=owner, name="old"), user=owner)
    with pytest.raises(JobError, match="'old' was revoked"):
        check_reference(KEY, key.reference, team=team)


def test_the_platform_keyring_holds_every_key_with_revocations(team: Team, other_team: Team, owner: User) -> None:
    mine = services.key_create(team=team, user=owner, name="mine")
    services.key_revoke(key=services.key_create(team=other_team, user=None, name="theirs"), user=None)
    with PlatformResolver(team=team) as resolver:
        path = resolver.resolve(KEYRING, "keyring:platform")
        ring = load_keyring(path)
        assert json.loads(path.read_text())["version"] == 1
    assert [(k.organisation, k.revoked, k.own) for k in ring] == [
        ("Routing Lab", False, True),
        ("Other Lab", True, False),
    ]
    assert ring[0].bits == services.bits_of(mine) and ring[0].id == mine.public_id


@pytest.mark.parametrize(
    ("param", "reference", "message"),
    [
        (KEYRING, "keyring:everything", "the only keyring is 'keyring:platform'"),
        (Model(name="m", accepts=("hf-moe-lm",)), "keyring:platform", "does not take one"),
    ],
)
def test_it_refuses_keyrings_where_they_do_not_belong(param, reference: str, message: str, team: Team) -> None:
    with pytest.raises(JobError, match=message):
        check_reference(param, reference, team=team)


def test_a_verify_job_can_be_submitted_with_the_platform_keyring(team: Team, owner: User, media_in_tmp) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.webapp.portal.conftest import png_bytes
    from webapp.jobs.services import job_submit

    job = job_submit(
        team=team,
        user=owner,
        kind="watermark-verify",
        raw_params={},
        files={"images": [SimpleUploadedFile("a.png", png_bytes(1))]},
    )
    assert job.params["keyring"] == "keyring:platform" and job.queue == "verify"
