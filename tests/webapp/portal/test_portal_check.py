"""A portal check end to end on a real worker (a thread running the project's Celery app against
Redis, consuming the ``verify`` queue): the public sees the verdict and the organisation, never
the key, the scores or a confidence; members of the marking team see everything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.webapp.portal.conftest import bits_of, flip, key_with_bits, png_bytes
from tests.workers.conftest import celery_worker_parameters, empty_broker  # noqa: F401
from webapp.accounts.models import Team
from webapp.accounts.services import api_token_create
from webapp.portal import services
from webapp.portal.models import SharedImage, VerifyRequest

pytest_plugins = ["celery.contrib.pytest"]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def celery_app():
    import workers.tasks
    import workers.verify  # noqa: F401
    from webapp.celery import app

    return app


@pytest.fixture
def marked(with_extractor: Path, team: Team, other_team: Team) -> tuple[bytes, str]:
    """An image, and the key that "marked" it registered to Routing Lab; Other Lab holds a far key."""
    data = png_bytes(11)
    bits = bits_of(with_extractor, data)
    key_with_bits(team, bits, name="spring campaign")
    key_with_bits(other_team, flip(bits, 48), name="rival")
    return data, bits


def _check(client: Client, data: bytes, **extra: str) -> str:
    response = client.post("/verify/", {"image": SimpleUploadedFile("photo.png", data), **extra})
    assert response.status_code == 200, response.content.decode()[-2000:]
    return response.content.decode()


def _login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# One worker per test costs seconds to start and stop, so each test checks several behaviours.


def test_the_public_answer_names_the_organisation_and_never_the_key(celery_worker, marked, outsider: User) -> None:
    data, bits = marked
    body = _check(Client(), data)
    assert 'data-verdict="detected"' in body and "Routing Lab" in body
    assert 'data-field="confidence"' not in body  # a coarse score is still a score
    for secret in (bits, flip(bits, 48), "spring campaign", "rival", "Bits matched", "p-value", "key:"):
        assert secret not in body
    assert "The image was not kept." in body
    assert not VerifyRequest.objects.exists() and not SharedImage.objects.exists()

    # A member of another team, logged in, gets the same public answer.
    body = _check(_login(outsider), data)
    assert "Routing Lab" in body and "spring campaign" not in body and bits not in body and "rival" not in body

    # Opting in keeps the image, with its verdict.
    body = _check(Client(), data, share="on")
    assert "shared with the operators" in body
    shared = SharedImage.objects.get()
    assert (shared.verdict, shared.organisation) == ("detected", "Routing Lab")
    with shared.image.open("rb") as f:
        assert f.read() == data


def test_members_of_the_marking_team_see_full_detail_on_the_page_and_in_the_api(
    celery_worker, marked, owner: User, outsider: User
) -> None:
    data, bits = marked
    body = _check(_login(owner), data)
    assert "spring campaign" in body and 'data-field="bits">48 of 48' in body
    assert "corrected for 2 keys" in body and "detected at ≥ 36 bits" in body

    def ask(user: User) -> dict:
        token = api_token_create(user=user, name="t")[1]
        response = Client().post(
            "/api/v1/watermark/verify",
            {"image": SimpleUploadedFile("a.png", data)},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.content
        return response.json()

    public = ask(outsider)
    assert public["verdict"] == "detected" and public["organisation"] == "Routing Lab"
    assert public["key_id"] is None and public["decoded_bits"] is None and bits not in str(public)
    full = ask(owner)
    assert full["key_name"] == "spring campaign" and full["bits_matched"] == 48 and full["decoded_bits"] == bits
    assert full["thresholds"]["detect_bits"] == 36 and full["p_corrected"] == pytest.approx(2 * 2.0**-48)


def test_a_revoked_key_still_matches_and_an_unmatched_image_is_not_detected(
    celery_worker, with_extractor: Path, team: Team, other_team: Team, owner: User
) -> None:
    # Only a key far from what the extractor reads: chance agreement, no verdict.
    other = png_bytes(13)
    key_with_bits(other_team, flip(bits_of(with_extractor, other), 48))
    body = _check(Client(), other)
    assert 'data-verdict="not detected"' in body and "Other Lab" not in body

    data = png_bytes(12)
    key_with_bits(team, bits_of(with_extractor, data), name="retired", revoked=True)
    body = _check(_login(owner), data)
    assert 'data-verdict="detected"' in body and "retired" in body and "revoked</span>" in body


def test_a_mark_only_the_second_extractor_reads_is_found_and_corrected_for_both(
    celery_worker, settings, extractor_dir: Path, second_extractor_dir: Path, team: Team, owner: User
) -> None:
    settings.WATERMARK_EXTRACTOR = f"{extractor_dir}, {second_extractor_dir}"
    data = png_bytes(16)
    bits = bits_of(second_extractor_dir, data)
    assert bits_of(extractor_dir, data) != bits
    key_with_bits(team, bits, name="photos")
    body = _check(_login(owner), data)
    assert 'data-verdict="detected"' in body and 'data-field="bits">48 of 48' in body
    assert "corrected for 1 key read by 2 extractors" in body
    # The platform's keyring lets a verify job match other teams' keys with either extractor.
    ring = json.loads(services.keyring_bytes(team.pk))
    assert len(ring["foreign_extractors"]) == 2


def test_a_photo_marked_with_the_shipped_photo_markers_is_found_by_the_default_extractors(
    celery_worker, settings, team: Team
) -> None:
    import numpy as np
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.embed_train import held_out_photos
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo.molm_photo import CHECKPOINT
    from webapp.portal.conf import DEFAULT_EXTRACTORS

    settings.WATERMARK_EXTRACTOR = DEFAULT_EXTRACTORS
    bits = np.random.default_rng(0).integers(0, 2, 48)
    # A photo whose mark reads well (38 of 48 bits): the rate over photos is the recipe's and the bench's to
    # measure (tests/mlcore/zoo/test_molm_photo.py); this checks the portal's plumbing end to end.
    photo = image_io.SourceImage(name="a.png", format="PNG", pixels=held_out_photos(6, seed=31)[4])
    marked = mark_image(
        load_bundle(CHECKPOINT),
        photo,
        torch.from_numpy(bits).float(),
        target_psnr=38.0,
        offset_rng=np.random.default_rng(4),
    )
    key_with_bits(team, "".join(map(str, bits)), name="our photos")
    body = _check(Client(), image_io.encode(marked.image))
    assert 'data-verdict="detected"' in body and "Routing Lab" in body
    assert 'data-verdict="not detected"' in _check(Client(), image_io.encode(photo))


def test_a_check_with_no_worker_says_the_verifier_is_busy(settings, with_extractor: Path) -> None:
    settings.PORTAL_WAIT_SECONDS = 0.3
    response = Client().post("/verify/", {"image": SimpleUploadedFile("a.png", png_bytes(14))})
    assert response.status_code == 503 and "The verifier is busy right now" in response.content.decode()
    assert not VerifyRequest.objects.exists()


def test_the_worker_skips_a_check_the_web_gave_up_on(with_extractor: Path) -> None:
    from webapp.portal.verifier import answer

    assert answer("00000000-0000-0000-0000-000000000000", []) == "withdrawn"


def test_the_service_reports_a_refused_image_from_the_worker(celery_worker, with_extractor: Path) -> None:
    from webapp.portal.uploads import CheckedImage

    broken = CheckedImage(name="x.png", data=png_bytes(15)[:200], format="png", width=40, height=40)
    with pytest.raises(services.VerifierFailed, match="image 1: truncated or corrupt image"):
        services.check_images([broken])
