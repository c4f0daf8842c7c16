"""Who may do what in the library, on every page and every API endpoint: owners and members read
and add, viewers read (403 on writes), only owners delete, only administrators register worker
paths, an upload is its uploader's alone, and outsiders get 404 everywhere."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.api.conftest import ApiClient
from tests.webapp.views.helpers import CSRF, post
from tests.webapp.views.test_permissions import Case
from webapp.accounts.models import Team
from webapp.jobs.models import Job
from webapp.library import services
from webapp.library.models import ChunkedUpload, LibraryItem

pytestmark = pytest.mark.django_db
ROLES = ("owner", "member", "viewer", "outsider", "anonymous")


def expect(owner: int, member: int, viewer: int, outsider: int = 404, anonymous: int = 302) -> dict[str, int]:
    return {"owner": owner, "member": member, "viewer": viewer, "outsider": outsider, "anonymous": anonymous}


READ = expect(200, 200, 200)
PAGES = [
    Case("library models", "get", lambda w: "/t/routing-lab/library/", READ),
    Case("library datasets", "get", lambda w: "/t/routing-lab/library/?tab=datasets", READ),
    Case("item page", "get", lambda w: f"/library/{w['item'].pk}/", READ),
    Case("item download", "get", lambda w: f"/library/{w['item'].pk}/download", READ),
    Case("add page", "get", lambda w: "/t/routing-lab/library/add/", expect(200, 200, 403)),
    Case(
        "start an upload",
        "post",
        lambda w: "/t/routing-lab/library/uploads/",
        expect(201, 201, 403),
        {"name": "n", "kind": "text", "filename": "n.txt", "size": "10"},
    ),
    Case("upload state", "get", lambda w: f"/library/uploads/{w['upload'].pk}/", expect(200, 404, 404)),
    Case("complete an upload", "post", lambda w: f"/library/uploads/{w['upload'].pk}/complete", expect(422, 404, 404)),
    Case(
        "promote an artifact",
        "post",
        lambda w: f"/jobs/{w['job'].pk}/promote/losses.csv",
        expect(302, 302, 403),
        {"kind": "text"},
    ),
    Case(
        "register a worker path",
        "post",
        lambda w: "/t/routing-lab/library/paths/",
        expect(403, 403, 403),
        {"name": "m", "kind": "hf-moe-lm", "path": "/models/m"},
    ),
    Case("delete", "post", lambda w: f"/library/{w['item'].pk}/delete/", expect(302, 403, 403)),
]


@pytest.fixture
def world(
    team: Team, owner: User, member: User, viewer: User, outsider: User, make_job: Callable[..., Job], corpus
) -> dict[str, Any]:
    upload = services.upload_start(team=team, user=owner, name="half", filename="h.txt", kind="text", size=10)
    services.upload_append(upload=upload, offset=0, stream=io.BytesIO(b"hello"), length=5)
    people = {"owner": owner, "member": member, "viewer": viewer, "outsider": outsider}
    return {"item": corpus, "job": make_job(Job.Status.SUCCEEDED), "upload": upload, **people}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", PAGES, ids=lambda c: c.name)
def test_each_role_gets_what_its_role_allows_on_the_pages(case: Case, role: str, world: dict[str, Any]) -> None:
    client = Client(enforce_csrf_checks=True)
    if role != "anonymous":
        client.force_login(world[role])
    url = case.url(world)
    response = post(client, url, case.data) if case.method == "post" else client.get(url)
    assert response.status_code == case.expected[role], f"{role} {case.method.upper()} {url}"
    if role == "anonymous":
        assert response["Location"].startswith("/login/")


API = [
    Case("list items", "get", lambda w: "/api/v1/library/items?team=routing-lab", expect(200, 200, 200, 404, 401)),
    Case("get an item", "get", lambda w: f"/api/v1/library/items/{w['item'].pk}", expect(200, 200, 200, 404, 401)),
    Case(
        "download an item",
        "get",
        lambda w: f"/api/v1/library/items/{w['item'].pk}/download",
        expect(200, 200, 200, 404, 401),
    ),
    Case(
        "start an upload",
        "post",
        lambda w: "/api/v1/library/uploads",
        expect(201, 201, 403, 404, 401),
        {"team": "routing-lab", "name": "n", "filename": "n.txt", "kind": "text", "size": 10},
    ),
    Case("upload state", "get", lambda w: f"/api/v1/library/uploads/{w['upload'].pk}", expect(200, 404, 404, 404, 401)),
    Case(
        "complete an upload",
        "post",
        lambda w: f"/api/v1/library/uploads/{w['upload'].pk}/complete",
        expect(422, 404, 404, 404, 401),
    ),
    Case(
        "promote an artifact",
        "post",
        lambda w: "/api/v1/library/promote",
        expect(201, 201, 403, 404, 401),
        {"job": "JOB", "artifact": "losses.csv", "kind": "text"},
    ),
    Case(
        "register a worker path",
        "post",
        lambda w: "/api/v1/library/paths",
        expect(403, 403, 403, 404, 401),
        {"team": "routing-lab", "name": "m", "kind": "hf-moe-lm", "path": "/models/m"},
    ),
    Case(
        "delete an item", "delete", lambda w: f"/api/v1/library/items/{w['item'].pk}", expect(204, 403, 403, 404, 401)
    ),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", API, ids=lambda c: c.name)
def test_each_role_gets_what_its_role_allows_in_the_api(
    case: Case, role: str, world: dict[str, Any], api_as: Callable[[str], ApiClient]
) -> None:
    api = api_as(role)
    body = json.dumps(case.data).replace('"JOB"', f'"{world["job"].pk}"')
    response = api.client.generic(
        case.method.upper(), case.url(world), body if case.data else "", content_type="application/json", **api.headers
    )
    assert response.status_code == case.expected[role], response.content[:300]
    if response.status_code >= 400:
        assert "detail" in response.json()


#: Chunks: only the uploader may append, and nobody else's attempt changes what the upload holds.
CHUNK = expect(200, 404, 404)


@pytest.mark.parametrize("role", ROLES)
def test_only_the_uploader_sends_chunks_from_the_page(role: str, world: dict[str, Any]) -> None:
    client = Client(enforce_csrf_checks=True)
    if role != "anonymous":
        client.force_login(world[role])
    client.cookies["csrftoken"] = CSRF
    upload = world["upload"]
    response = client.post(
        f"/library/uploads/{upload.pk}/chunk?offset=5", b"world", "application/octet-stream", HTTP_X_CSRFTOKEN=CSRF
    )
    assert response.status_code == CHUNK[role]
    assert ChunkedUpload.objects.get(pk=upload.pk).received == (10 if role == "owner" else 5)


@pytest.mark.parametrize("role", ROLES)
def test_only_the_uploader_sends_chunks_through_the_api(
    role: str, world: dict[str, Any], api_as: Callable[[str], ApiClient]
) -> None:
    api = api_as(role)
    upload = world["upload"]
    response = api.client.put(
        f"/api/v1/library/uploads/{upload.pk}?offset=5", b"world", "application/octet-stream", **api.headers
    )
    assert response.status_code == {**CHUNK, "anonymous": 401}[role], response.content[:300]
    assert ChunkedUpload.objects.get(pk=upload.pk).received == (10 if role == "owner" else 5)


def test_an_administrator_registers_a_worker_path(team: Team, owner: User, tmp_path) -> None:
    owner.is_staff = True
    owner.save()
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("one\ntwo\n")
    client = Client()
    client.force_login(owner)
    response = client.post(
        "/t/routing-lab/library/paths/", {"name": "shared corpus", "kind": "text", "path": str(tmp_path / "corpus")}
    )
    item = LibraryItem.objects.get(name="shared corpus")
    assert response["Location"] == f"/library/{item.pk}/"
    from webapp.library.ingest import ingest_item

    assert ingest_item(item.pk) == "ready"
    item.refresh_from_db()
    assert item.card["records"] == 2 and item.size == 8 and len(item.sha256) == 64 and not item.file


def test_a_worker_path_holding_a_symlink_is_refused(team: Team, owner: User, tmp_path) -> None:
    owner.is_staff = True
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "passwd").symlink_to("/etc/passwd")
    item = services.item_register_path(team=team, user=owner, name="c", kind="text", path=str(tmp_path / "corpus"))
    from webapp.library.ingest import ingest_item

    assert ingest_item(item.pk) == "rejected"
    item.refresh_from_db()
    assert item.error == "passwd is a symbolic link; refusing the item."


def test_the_item_page_shows_the_card_and_lineage_both_ways(
    team: Team, owner: User, make_job: Callable[..., Job], corpus: LibraryItem
) -> None:
    maker = make_job(Job.Status.SUCCEEDED)
    LibraryItem.objects.filter(pk=corpus.pk).update(produced_by=maker)
    from webapp.jobs.services import job_submit

    user = job_submit(team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": corpus.reference})
    client = Client()
    client.force_login(owner)
    page = client.get(f"/library/{corpus.pk}/").content.decode()
    assert f'data-made-by href="/jobs/{maker.pk}/"' in page
    assert f'href="/jobs/{user.pk}/"' in page.split("data-used-by")[1]
    assert 'data-card-field="records">3<' in page
    job_page = client.get(f"/jobs/{user.pk}/").content.decode()
    assert f'data-used-item href="/library/{corpus.pk}/"' in job_page
