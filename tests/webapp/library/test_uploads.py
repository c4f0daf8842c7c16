"""The resumable upload: chunks append at the offset the server holds; after an interruption the
client asks where it stands and resumes from there; completing stores one content-addressed item."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.library import services
from webapp.library.ingest import ingest_item
from webapp.library.models import ChunkedUpload, LibraryItem

pytestmark = pytest.mark.django_db

DATA = b"".join(f"line {i}: experts and routers\n".encode() for i in range(4000))


class CutConnection(io.BytesIO):
    """A request body whose connection drops after ``keep`` bytes."""

    def __init__(self, data: bytes, keep: int) -> None:
        super().__init__(data[:keep])


def start(team: Team, user: User) -> ChunkedUpload:
    return services.upload_start(team=team, user=user, name="notes", filename="notes.txt", kind="text", size=len(DATA))


def test_an_interrupted_upload_resumes_from_the_offset_the_server_holds(team: Team, owner: User) -> None:
    upload = start(team, owner)
    third = len(DATA) // 3
    services.upload_append(upload=upload, offset=0, stream=io.BytesIO(DATA[:third]), length=third)
    with pytest.raises(services.LibraryError, match="resend it"):
        services.upload_append(upload=upload, offset=third, stream=CutConnection(DATA[third:], 1000), length=third)
    # The client reconnects and asks where the upload stands: the cut chunk was not counted.
    upload = ChunkedUpload.objects.get(pk=upload.pk)
    assert upload.received == third
    with pytest.raises(services.OffsetMismatch) as mismatch:
        services.upload_append(upload=upload, offset=2 * third, stream=io.BytesIO(DATA[2 * third :]), length=10)
    assert mismatch.value.received == third
    services.upload_append(upload=upload, offset=third, stream=io.BytesIO(DATA[third:]), length=len(DATA) - third)
    item = services.upload_complete(upload=upload)
    assert item.sha256 == hashlib.sha256(DATA).hexdigest() and item.size == len(DATA)
    with item.file.open("rb") as f:
        assert f.read() == DATA
    assert not ChunkedUpload.objects.filter(pk=upload.pk).exists()
    assert ingest_item(item.pk) == "ready"


def test_an_abandoned_upload_is_swept_with_its_part_file_when_the_next_one_starts(team: Team, owner: User) -> None:
    old = start(team, owner)
    services.upload_append(upload=old, offset=0, stream=io.BytesIO(DATA[:100]), length=100)
    fresh = start(team, owner)
    ChunkedUpload.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=2))
    newest = start(team, owner)
    assert set(ChunkedUpload.objects.values_list("pk", flat=True)) == {fresh.pk, newest.pk}
    assert not services.part_path(old).exists()
    assert services.part_path(fresh).exists()


def test_it_refuses_to_complete_an_upload_with_bytes_missing(team: Team, owner: User) -> None:
    upload = start(team, owner)
    services.upload_append(upload=upload, offset=0, stream=io.BytesIO(DATA[:100]), length=100)
    with pytest.raises(services.LibraryError, match=f"has 100 of {len(DATA)} bytes"):
        services.upload_complete(upload=upload)
    assert not LibraryItem.objects.exists()


def test_it_refuses_a_chunk_past_the_declared_size(team: Team, owner: User) -> None:
    upload = start(team, owner)
    with pytest.raises(services.LibraryError, match="A chunk must hold"):
        services.upload_append(upload=upload, offset=0, stream=io.BytesIO(DATA + b"x"), length=len(DATA) + 1)


def test_the_same_content_uploaded_twice_is_one_item(team: Team, owner: User, member: User) -> None:
    first = start(team, owner)
    services.upload_append(upload=first, offset=0, stream=io.BytesIO(DATA), length=len(DATA))
    second = start(team, member)
    services.upload_append(upload=second, offset=0, stream=io.BytesIO(DATA), length=len(DATA))
    assert services.upload_complete(upload=first) == services.upload_complete(upload=second)
    assert LibraryItem.objects.count() == 1


def test_it_refuses_an_unknown_kind_and_an_empty_file(team: Team, owner: User) -> None:
    with pytest.raises(services.LibraryError, match="Unknown item kind 'weights'"):
        services.upload_start(team=team, user=owner, name="x", filename="x.bin", kind="weights", size=10)
    with pytest.raises(services.LibraryError, match="must be 1 to"):
        services.upload_start(team=team, user=owner, name="x", filename="x.txt", kind="text", size=0)


def test_the_upload_endpoints_speak_the_protocol_in_the_browser(team: Team, owner: User, csrf_client) -> None:
    from tests.webapp.views.helpers import CSRF

    client = csrf_client(owner)
    client.cookies["csrftoken"] = CSRF
    started = client.post(
        "/t/routing-lab/library/uploads/",
        {"name": "notes", "kind": "text", "filename": "notes.txt", "size": len(DATA)},
        HTTP_X_CSRFTOKEN=CSRF,
    )
    assert started.status_code == 201, started.content
    url = started.json()["url"]

    def chunk(offset: int, data: bytes):
        return client.post(
            f"{url}chunk?offset={offset}", data, content_type="application/octet-stream", HTTP_X_CSRFTOKEN=CSRF
        )

    assert chunk(0, DATA[:5000]).json()["offset"] == 5000
    stale = chunk(0, DATA[:5000])
    assert stale.status_code == 409 and stale.json()["offset"] == 5000
    assert client.get(url).json()["offset"] == 5000
    assert chunk(5000, DATA[5000:]).json()["offset"] == len(DATA)
    done = client.post(f"{url}complete", HTTP_X_CSRFTOKEN=CSRF)
    assert done.status_code == 200 and done.json()["status"] == "pending"
    assert LibraryItem.objects.get().sha256 == hashlib.sha256(DATA).hexdigest()
