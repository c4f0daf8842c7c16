"""The key leak, closed on the platform: a ``watermark-verify`` job of an outsider team shows nothing of another
team's key; matching against other teams' keys spends a daily budget; unsealed keys never stay on
disk; the committed demo markers cannot mark under a team key in production unless acknowledged."""

from __future__ import annotations

import io
import json
import re
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from mlcore.jobs.params import Key
from mlcore.jobs.registry import get_kind
from mlcore.watermark.disclosure import PUBLIC_WEIGHTS_NOTE
from tests.webapp.portal.conftest import key_with_bits, png_bytes
from webapp.accounts.models import Team
from webapp.jobs.models import Job
from webapp.jobs.resolver import PlatformResolver
from webapp.jobs.services import job_submit
from webapp.jobs.storage import read_log
from webapp.portal import budget, services
from webapp.portal.models import WatermarkKey
from workers.lifecycle import run_job

KEY = Key(name="key")


def _zoo_bits(images: list[bytes]) -> list[str]:
    from mlcore.watermark.verification import cached_extractor, decode, open_image
    from mlcore.zoo.molm import CHECKPOINT

    probabilities = decode(cached_extractor(CHECKPOINT), [open_image(data) for data in images])
    return ["".join("1" if p > 0.5 else "0" for p in row) for row in probabilities]


def _zip(images: list[bytes]) -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for i, data in enumerate(images):
            zf.writestr(f"{i:02d}.png", data)
    return SimpleUploadedFile("random.zip", buffer.getvalue())


def _random_images(count: int) -> list[bytes]:
    rng = np.random.default_rng(19)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def _outputs(job: Job) -> str:
    """Everything the job's pages and API show: artifacts, metrics, charts, log, summary, provenance."""
    job.refresh_from_db()
    texts = []
    for artifact in job.artifacts.all():
        with artifact.file.open("rb") as f:
            texts.append(f.read().decode())
    summary = get_kind(job.kind).spec.summary_line(job.metrics["scalars"])
    parts = [*texts, json.dumps(job.metrics), json.dumps(job.charts), job.log_tail, read_log(job), summary]
    return "\n".join([*parts, job.error, json.dumps(job.provenance)])


@pytest.mark.django_db(transaction=True)
def test_an_outsiders_verify_job_shows_nothing_of_another_teams_key(
    team: Team, other_team: Team, outsider: User, settings
) -> None:
    images = _random_images(6)
    decoded = _zoo_bits(images)
    # Routing Lab's key "marked" the first image; the outsider's team (Other Lab) has no key.
    victim = key_with_bits(team, decoded[0], name="spring campaign")
    started = tempfile.gettempdir()
    job = job_submit(
        team=other_team,
        user=outsider,
        kind="watermark-verify",
        raw_params={},
        files={"images": [_zip(images)]},
        address="203.0.113.9",
    )
    assert job.submitted_from == "203.0.113.9"
    assert run_job(str(job.pk)) == "succeeded", Job.objects.get(pk=job.pk).error
    shown = _outputs(job)
    for secret in (victim.public_id, "spring campaign", decoded[0], *decoded[1:]):
        assert secret not in shown
    assert not re.search(rf"key:{victim.pk}(?![A-Za-z0-9_-])", shown)  # an opaque id may start with its digits
    rows = json.loads(next(a for a in job.artifacts.all() if a.name == "results.json").file.read())["images"]
    assert rows[0] == {"image": "00.png", "verdict": "detected", "organisation": "Routing Lab", "searched": "every key"}
    assert PUBLIC_WEIGHTS_NOTE in shown  # the zoo extractor is the public demo one
    assert set(job.charts) == {"verdicts"} and "mean_bits_matched" not in job.metrics["scalars"]
    # The unsealed keyring lived in the worker's memory only: no file on disk holds the key's bits.
    leftovers = [
        p
        for p in Path(started).rglob("*")
        if p.is_file() and p.stat().st_size < 2**20 and decoded[0].encode() in p.read_bytes()
    ]
    assert leftovers == []
    # The spent budget: six images against other teams' keys, charged to the team and the address.
    assert budget.remaining([budget.team_scope(other_team.pk)]) == settings_budget(settings) - 6
    assert budget.remaining([budget.address_scope("203.0.113.9")]) == settings_budget(settings) - 6


def settings_budget(settings) -> int:
    from webapp.portal import conf

    return conf.daily_match_budget()


@pytest.mark.django_db(transaction=True)
def test_a_verify_job_past_the_budget_matches_its_own_keys_only_and_says_so(
    team: Team, other_team: Team, outsider: User, settings
) -> None:
    settings.WATERMARK_DAILY_MATCH_BUDGET = 2
    images = _random_images(4)
    key_with_bits(team, _zoo_bits(images)[3], name="spring campaign")
    job = job_submit(
        team=other_team, user=outsider, kind="watermark-verify", raw_params={}, files={"images": [_zip(images)]}
    )
    assert run_job(str(job.pk)) == "succeeded"
    job.refresh_from_db()
    assert job.metrics["scalars"]["images_own_keys_only"] == 2
    assert "2 of 4 image(s) were matched against your team's 0 key(s) only" in job.log_tail
    assert "beyond today's budget" in get_kind(job.kind).spec.summary_line(job.metrics["scalars"])
    rows = json.loads(next(a for a in job.artifacts.all() if a.name == "results.json").file.read())["images"]
    assert rows[3]["verdict"] == "not detected"  # Routing Lab's mark was not looked for past the budget
    assert budget.take([budget.team_scope(other_team.pk)], 5) == 0


@pytest.mark.django_db
def test_the_budget_grants_the_smallest_remainder_of_every_scope(settings) -> None:
    settings.WATERMARK_DAILY_MATCH_BUDGET = 5
    assert budget.take(["address:a", "team:1"], 3) == 3
    assert budget.take(["address:b", "team:1"], 3) == 2  # the team has 2 left, whatever the address
    assert budget.take(["address:a"], 10) == 2
    assert budget.take(["address:a", "team:2"], 1) == 0


@pytest.mark.django_db
def test_the_portal_refuses_a_check_past_the_budget_without_keys_of_ones_own(settings, team: Team, member: User):
    settings.WATERMARK_DAILY_MATCH_BUDGET = 0
    response = Client().post("/verify/", {"image": SimpleUploadedFile("a.png", png_bytes(1))})
    assert response.status_code == 429 and "Daily limit reached" in response.content.decode()
    with pytest.raises(services.BudgetSpent):
        services.check_budget(address="198.51.100.1", team_ids={team.pk})
    services.key_create(team=team, user=member, name="ours")
    assert services.check_budget(address="198.51.100.1", team_ids={team.pk}) == [team.pk]


def test_a_portal_view_follows_the_disclosure_rule_and_names_public_weights() -> None:
    match = {
        "verdict": "inconclusive",
        "confidence": "low",
        "key_id": "abc",
        "key_name": "n",
        "organisation": "Lab",
        "revoked": False,
        "bits_matched": 38,
        "num_bits": 48,
        "p_value": 1e-4,
        "p_corrected": 1e-3,
        "decoded_bits": "01" * 24,
        "team_id": 7,
    }
    outsider = services.view_for(match, {"num_keys": 3}, {8}, public_weights=True)
    assert outsider == {"verdict": "not detected", "organisation": None, "note": PUBLIC_WEIGHTS_NOTE}
    own = services.view_for(match, {"num_keys": 3}, {7})
    assert own["bits_matched"] == 38 and own["thresholds"] == {"num_keys": 3} and "note" not in own


# -- unsealed keys ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_key_files_live_in_memory_and_vanish_when_the_job_ends(team: Team, owner: User) -> None:
    key = services.key_create(team=team, user=owner, name="launch")
    resolver = PlatformResolver(team=team)
    try:
        path = resolver.resolve(KEY, key.reference)
        assert str(path).startswith("/proc/self/fd/") and services.bits_of(key) in path.read_text()
    finally:
        resolver.close()
    assert not path.exists()


@pytest.mark.django_db
def test_without_memory_files_a_key_file_is_private_and_removed(team: Team, owner: User, tmp_path, monkeypatch):
    import stat

    from webapp.jobs import resolver as module

    monkeypatch.setattr(module, "in_memory_supported", lambda: False)
    key = services.key_create(team=team, user=owner, name="launch")
    with PlatformResolver(team=team, workdir=tmp_path) as resolver:
        path = resolver.resolve(KEY, key.reference)
        assert path.parent == tmp_path and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.exists() and list(tmp_path.iterdir()) == []


# -- the public demo markers ---------------------------------------------------------------------


@pytest.mark.django_db
def test_production_refuses_to_mark_under_a_team_key_with_the_public_demo_markers(
    team: Team, owner: User, settings
) -> None:
    from mlcore.jobs import InMemoryContext
    from mlcore.jobs.runner import execute
    from mlcore.watermark.keys import public_weights_allowed
    from mlcore.zoo.molm import CHECKPOINT

    settings.DEBUG = False
    key = services.key_create(team=team, user=owner, name="launch")
    kind = get_kind("watermark-generate")
    params = kind.spec.clean({"key": key.reference, "seed": 0})
    with PlatformResolver(team=team) as resolver:
        inputs = {"model": CHECKPOINT, "key": resolver.resolve(KEY, key.reference)}
        outcome = execute(kind, params, inputs, InMemoryContext())
    assert outcome.status == "failed"
    assert "these are the zoo's public demo markers" in outcome.error
    assert "MOELAB_ALLOW_PUBLIC_WATERMARK_WEIGHTS=1" in outcome.error

    settings.WATERMARK_ALLOW_PUBLIC_WEIGHTS = True
    with PlatformResolver(team=team) as resolver:
        assert public_weights_allowed(resolver.resolve(KEY, key.reference))
    del settings.WATERMARK_ALLOW_PUBLIC_WEIGHTS
    settings.DEBUG = True  # make run: the demo markers are for trying the method out
    with PlatformResolver(team=team) as resolver:
        assert public_weights_allowed(resolver.resolve(KEY, key.reference))
    assert WatermarkKey.objects.count() == 1
