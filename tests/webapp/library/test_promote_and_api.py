"""One click from a job's artifact to a library item made by that job; and the upload protocol
over the JSON API, resumed after a chunk is lost."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from tests.webapp.api.conftest import ApiClient
from tests.webapp.views.helpers import post
from webapp.jobs.models import Job
from webapp.library.ingest import ingest_item
from webapp.library.models import LibraryItem

pytestmark = pytest.mark.django_db


def test_promoting_an_artifact_makes_an_item_made_by_the_job(make_job: Callable[..., Job], owner: User, csrf_client):
    job = make_job(Job.Status.SUCCEEDED, steps=4)
    page = csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert f'action="/jobs/{job.pk}/promote/losses.csv"' in page
    response = post(csrf_client(owner), f"/jobs/{job.pk}/promote/losses.csv", {"kind": "text", "name": "losses"})
    item = LibraryItem.objects.get()
    assert response["Location"] == f"/library/{item.pk}/"
    assert (item.name, item.produced_by, item.added_by, item.status) == ("losses", job, owner, "pending")
    assert ingest_item(item.pk) == "ready"
    item.refresh_from_db()
    assert item.card["records"] == 5  # the header and four steps
    assert f'data-made-item href="/library/{item.pk}/"' in csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode()


def test_a_viewer_sees_no_promote_button(make_job: Callable[..., Job], viewer: User, csrf_client) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    assert "/promote/" not in csrf_client(viewer).get(f"/jobs/{job.pk}/").content.decode()


def test_an_upload_through_the_api_resumes_after_a_lost_chunk(api_as: Callable[[str], ApiClient]) -> None:
    api = api_as("member")
    data = b"gate logits\n" * 5000
    started = api.client.post(
        "/api/v1/library/uploads",
        json.dumps({"team": "routing-lab", "name": "logits", "filename": "l.txt", "kind": "text", "size": len(data)}),
        content_type="application/json",
        **api.headers,
    )
    assert started.status_code == 201, started.content
    url = f"/api/v1/library/uploads/{started.json()['id']}"

    def put(offset: int, chunk: bytes):
        return api.client.put(f"{url}?offset={offset}", chunk, content_type="application/octet-stream", **api.headers)

    assert put(0, data[:20_000]).json()["offset"] == 20_000
    lost = put(40_000, data[40_000:])  # the chunk for 20,000..40,000 never arrived
    assert lost.status_code == 409 and lost.json()["offset"] == 20_000
    assert api.get(url).json()["offset"] == 20_000
    assert put(20_000, data[20_000:]).json()["offset"] == len(data)
    done = api.client.post(f"{url}/complete", **api.headers)
    assert done.status_code == 201 and done.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert done.json()["status"] == "pending" and done.json()["reference"] == f"library:{done.json()['id']}"


def test_the_api_refuses_to_delete_an_item_in_use_and_names_the_jobs(
    api_as: Callable[[str], ApiClient], owner: User, team, corpus: LibraryItem
) -> None:
    from webapp.jobs.services import job_submit

    job = job_submit(team=team, user=owner, kind="test-library-consumer", raw_params={"corpus": corpus.reference})
    api = api_as("owner")
    response = api.client.delete(f"/api/v1/library/items/{corpus.pk}", **api.headers)
    assert response.status_code == 409 and response.json()["jobs"] == [str(job.pk)]
    assert api.get(f"/api/v1/library/items/{corpus.pk}").json()["used_by"] == [str(job.pk)]


def test_the_jobs_api_takes_library_items_by_id_and_records_the_version(
    api_as: Callable[[str], ApiClient], corpus: LibraryItem
) -> None:
    params = json.dumps({"corpus": f"library:{corpus.pk}"})
    response = api_as("member").post("/api/v1/jobs", {"kind": "test-library-consumer", "params": params})
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert [(u.item_id, u.sha256) for u in job.library_uses.all()] == [(corpus.pk, corpus.sha256)]
    # An outsider cannot reach into the team's library by guessing ids.
    refused = api_as("outsider").post("/api/v1/jobs", {"kind": "test-library-consumer", "params": params})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["field"] == "corpus"
    assert "was not found in your team's library" in refused.json()["detail"][0]["message"]
    assert Job.objects.count() == 1


@pytest.mark.parametrize("reference", ["bare", "number"])
def test_the_jobs_api_takes_a_bare_item_id_too(
    api_as: Callable[[str], ApiClient], corpus: LibraryItem, reference: str
) -> None:
    value = corpus.pk if reference == "number" else str(corpus.pk)
    params = json.dumps({"corpus": value})
    response = api_as("member").post("/api/v1/jobs", {"kind": "test-library-consumer", "params": params})
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.params["corpus"] == f"library:{corpus.pk}"
    assert [u.item_id for u in job.library_uses.all()] == [corpus.pk]


@pytest.mark.parametrize("reference", ["library:99999999999999999999999", "library:²", "library:-1"])
def test_an_impossible_item_id_is_refused_as_not_found(api_as: Callable[[str], ApiClient], reference: str) -> None:
    params = json.dumps({"corpus": reference})
    response = api_as("member").post("/api/v1/jobs", {"kind": "test-library-consumer", "params": params})
    assert response.status_code == 422
    assert "was not found in your team's library" in response.json()["detail"][0]["message"]
