"""The generic leak test (``docs/security.md``): a canary key is registered in
one team; a member of another team runs every job kind in the registry at its smallest settings on
a real worker; nothing that member can read — artifacts (zips unpacked), metrics, charts, the log,
the summary line, provenance, the job page and its fragments, chart and artifact downloads, the JSON
API, the team's pages — may hold the canary's id, primary key, reference, name or bits in any
encoding (``tests/webapp/canary.py``).

The first tests show that the matcher finds each encoding as real code writes it, so the leak test
can fail; the last one runs the jobs."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
import zipfile
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client

from mlcore.jobs.registry import all_kinds
from tests.webapp import canary
from tests.webapp.conftest import make_user
from tests.workers.conftest import celery_app, celery_worker_parameters, empty_broker  # noqa: F401
from tests.workers.processes import wait_for_status
from webapp.accounts.models import Membership, Role, Team
from webapp.accounts.services import api_token_create
from webapp.jobs.models import Job
from webapp.jobs.services import job_submit
from webapp.portal import services as keys
from webapp.portal.models import WatermarkKey

pytest_plugins = ["celery.contrib.pytest"]

BITS = "101100111000101011110000110100101101001110001011"  # 48 bits, as a key has
OTHER = "010011000111010100001111001011010010110001110100"  # another key: its complement


def packed(bits: str) -> bytes:
    return int(bits, 2).to_bytes(len(bits) // 8, "big")


def values(bits: str) -> list[int]:
    return [int(b) for b in bits]


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


#: Each encoding the matcher knows, written the way real code would write it (not by the matcher's
#: own recipe), inside some surrounding output.
WRITTEN: dict[str, Callable[[str], bytes]] = {
    "bits as a 0/1 string": lambda b: f"image-3.png,detected,{b},0.0001\n".encode(),
    "bits as hex": lambda b: f"key {packed(b).hex(' ').upper()} loaded".encode(),
    "bits as base64": lambda b: json.dumps({"k": base64.b64encode(packed(b)).decode()}).encode(),
    "bits as URL-safe base64": lambda b: f"/keys/{base64.urlsafe_b64encode(packed(b)).decode()}/".encode(),
    "bits as a list of ints": lambda b: json.dumps({"bits": values(b)}, indent=1).encode(),
    "bits as a list of floats": lambda b: repr([float(v) for v in values(b)]).encode(),
    "bits as a printed float tensor": lambda b: ("tensor([" + ", ".join(f"{v}." for v in values(b)) + "])").encode(),
    "bits as a list of bools": lambda b: (
        repr([bool(v) for v in values(b)]) + json.dumps([bool(v) for v in values(b)])
    ).encode(),
    "sha256 of the bit string": lambda b: f"digest={hashlib.sha256(b.encode()).hexdigest().upper()}".encode(),
    "sha256 of the packed bits": lambda b: hashlib.sha256(packed(b)).hexdigest().encode(),
    "bits as raw packed bytes": lambda b: b"\x00\x01header" + packed(b) + b"\xff trailer",
    "bits as a uint8 array": lambda b: npy(np.array(values(b), dtype=np.uint8)),
    "bits as a float32 array": lambda b: npy(np.array(values(b), dtype=np.float32)),
    "bits as an int64 array": lambda b: npy(np.array(values(b), dtype=np.int64)),
    "bits as an integer in hex": lambda b: f"id={hex(int(b, 2))}".encode(),
    "bits as a decimal integer": lambda b: f"seed {int(b, 2)}".encode(),
}


def test_the_canary_covers_every_encoding_the_issue_names_and_each_has_a_written_example() -> None:
    whats = [needle.what for needle in canary.bit_needles(BITS)]
    assert sorted(whats) == sorted(WRITTEN)
    for named in ("0/1 string", "hex", "base64", "list of ints", "list of bools", "sha256 of the bit string"):
        assert any(named in what for what in whats), named


@pytest.mark.parametrize("what", sorted(WRITTEN))
def test_the_matcher_finds_each_encoding_of_the_bits_as_real_code_writes_it(what: str) -> None:
    written = WRITTEN[what](BITS)
    assert what in canary.find(written, canary.bit_needles(BITS))
    # ... and numpy's plain print, the spaced-out 0/1 string.
    assert "bits as a 0/1 string" in canary.find(str(np.array(values(BITS))), canary.bit_needles(BITS))


@pytest.mark.parametrize("what", sorted(WRITTEN))
def test_the_matcher_does_not_mistake_another_keys_bits_for_the_canary(what: str) -> None:
    assert canary.find(WRITTEN[what](OTHER), canary.bit_needles(BITS)) == []


def test_the_matcher_finds_the_keys_ids_and_name_but_not_a_short_primary_key() -> None:
    key = WatermarkKey(pk=canary.CANARY_PK, name=canary.CANARY_NAME, num_bits=48)
    needles = canary.key_needles(key, BITS)
    page = f'<a href="/keys/{key.public_id}/revoke/">{canary.CANARY_NAME.upper()}</a> row {canary.CANARY_PK}'
    found = canary.find(page, needles)
    assert {"the key's name", "the key's primary key", "the key's public_id"} <= set(found)
    assert "the key's reference" in canary.find(f"key={key.reference}", needles)
    short = WatermarkKey(pk=3, name="launch", num_bits=48)
    assert "the key's primary key" not in {n.what for n in canary.key_needles(short, BITS)}


def test_archives_are_searched_member_by_member() -> None:
    inner = io.BytesIO()  # both compressed: the bits are invisible unless each level is unpacked
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("checkpoint/meta.json", json.dumps({"bits": values(BITS)}))
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("nested.zip", inner.getvalue())
        archive.writestr("clean.txt", "nothing here")
    found = canary.leaks(canary.expand("model.zip", outer.getvalue()), canary.bit_needles(BITS))
    assert found == ["model.zip!nested.zip!checkpoint/meta.json: bits as a list of ints"]


def test_every_smallest_setting_names_a_real_kind_and_parameter_and_validates() -> None:
    kinds = {kind.name: kind for kind in all_kinds()}
    assert set(canary.SMALLEST) <= set(kinds), "SMALLEST names kinds that are not registered"
    for name, overrides in canary.SMALLEST.items():
        spec = kinds[name].spec
        assert set(overrides) <= {p.name for p in spec.params}, name
    for kind in kinds.values():
        params, _ = canary.smallest_submission(kind, own_key="key:own-key-id")
        kind.spec.clean(params)


# -- the leak test -----------------------------------------------------------------------------

#: The whole test should take under 3 minutes on 2 cores. Measured: 40-71 s on a quiet machine
#: (compress-moe 16-26 s, watermark-robustness 5-18 s: its floor is 1,000 clean images), 229 s with
#: the same 2 cores shared with four other test runs. Each job may take this long before the test fails:
#: a generous bound, since a slow job on a loaded CI machine is not a leak.
JOB_TIMEOUT = 300


def _person(team: Team, username: str, role: str) -> User:
    user = make_user(username)
    Membership.objects.create(team=team, user=user, role=role)
    return user


@pytest.fixture
def leak_settings(settings, tmp_path) -> None:
    settings.WATERMARK_KEY_BITS = 48  # what the zoo extractor reads
    # The committed demo markers may mark images here: this test is about what is shown, not
    # about the production refusal (tests/webapp/portal/test_key_leak.py tests that).
    settings.WATERMARK_ALLOW_PUBLIC_WEIGHTS = True
    settings.LIBRARY_CACHE_DIR = tmp_path / "library-cache"
    settings.LIBRARY_UPLOAD_DIR = tmp_path / "uploads"


def _outputs(jobs: list[Job], team: Team, user: User) -> Iterator[tuple[str, bytes]]:
    web = Client()
    web.force_login(user)
    api = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=user, name='leak test')[1]}"}
    for job in jobs:
        yield from canary.job_outputs(job, web=web, api=api, api_headers=headers)
    yield from canary.team_pages(team.slug, web=web, api=api, api_headers=headers)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_no_job_kind_shows_another_teams_key_to_a_member_of_this_team(celery_worker, leak_settings, settings) -> None:
    started = time.monotonic()
    canaries = Team.objects.create(name="Canary Works", slug="canary-works")
    set_by = _person(canaries, "cora", Role.OWNER)
    canary.set_next_pk(WatermarkKey, canary.CANARY_PK)
    key = keys.key_create(team=canaries, user=set_by, name=canary.CANARY_NAME)
    assert key.pk == canary.CANARY_PK
    needles = canary.key_needles(key, keys.bits_of(key))

    team = Team.objects.create(name="Bystanders", slug="bystanders")
    member = _person(team, "bob", Role.MEMBER)
    own = keys.key_create(team=team, user=member, name="our own campaign")

    submitted: list[Job] = []
    for kind in all_kinds():
        params, files = canary.smallest_submission(kind, own_key=own.reference)
        submitted.append(job_submit(team=team, user=member, kind=kind.name, raw_params=params, files=files))
    timings = {}
    for job in submitted:
        wait_for_status(job, Job.Status.SUCCEEDED, Job.Status.FAILED, Job.Status.CANCELLED, timeout=JOB_TIMEOUT)
        timings[job.kind] = (job.finished_at - job.started_at).total_seconds()
    # It should take under 3 minutes on 2 cores; not asserted (shared CI machines), printed for -s.
    slowest = sorted(timings.items(), key=lambda t: -t[1])
    print(f"jobs done after {time.monotonic() - started:.0f} s; by kind: {slowest}")
    failed = {job.kind: job.error for job in submitted if job.status != Job.Status.SUCCEEDED}
    assert not failed, f"every kind must run to the end to be checked: {failed}"
    # The attack path must really have searched the canary, or finding nothing would prove nothing.
    (verify,) = [job for job in submitted if job.kind == "watermark-verify"]
    assert verify.metrics["scalars"]["keys_searched"] == WatermarkKey.objects.count() == 2
    assert not verify.metrics["scalars"].get("images_own_keys_only"), "the daily budget cut the search short"

    found = canary.leaks(_outputs(submitted, team, member), needles)
    found += canary.leaks(canary.files_under(settings.STORAGES["default"]["OPTIONS"]["location"]), needles)
    assert not found, "the canary key of another team leaked:\n" + "\n".join(found)
    print(f"leak test: {time.monotonic() - started:.0f} s")
