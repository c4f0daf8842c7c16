"""The API's job lifecycle: submit (multipart, as ``moelab submit`` sends it), follow, list,
cancel, and download artifacts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile

from tests.webapp.api.conftest import ApiClient
from webapp.jobs.models import Job, JobInput


def test_submitting_queues_a_job_in_the_first_team_by_default(api_as: Callable[[str], ApiClient]) -> None:
    notes = SimpleUploadedFile("notes.txt", b"hello router\n", content_type="text/plain")
    response = api_as("member").post(
        "/api/v1/jobs", {"kind": "test-exercise", "params": '{"steps": 4, "seed": 1}', "notes": notes}
    )
    assert response.status_code == 201
    body = response.json()
    job = Job.objects.get(pk=body["id"])
    assert body["status"] == "queued" and body["url"] == f"http://testserver/jobs/{job.id}/"
    assert body["team"] == "routing-lab" and body["params"]["steps"] == 4
    assert JobInput.objects.get(job=job).original_name == "notes.txt"


def test_bad_parameters_come_back_as_field_errors(api_as: Callable[[str], ApiClient]) -> None:
    client = api_as("member")
    response = client.post("/api/v1/jobs", {"kind": "test-exercise", "params": '{"steps": 0, "colour": "red"}'})
    assert response.status_code == 422
    assert {"field": "steps", "message": "Must be at least 1."} in response.json()["detail"]
    assert {"field": "colour", "message": "Unknown parameter."} in response.json()["detail"]
    bad_json = client.post("/api/v1/jobs", {"kind": "test-exercise", "params": "{steps"})
    assert bad_json.status_code == 422 and bad_json.json()["detail"][0]["field"] == "params"
    unknown = client.post("/api/v1/jobs", {"kind": "no-such-kind"})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["field"] == "kind"
    assert not Job.objects.exists()


def test_another_teams_slug_is_not_found(api_as: Callable[[str], ApiClient]) -> None:
    response = api_as("member").post("/api/v1/jobs", {"kind": "test-exercise", "team": "other-lab"})
    assert response.status_code == 404


def test_get_and_list_show_state_progress_and_filters(
    api_as: Callable[[str], ApiClient], make_job: Callable[..., Job]
) -> None:
    running = make_job(Job.Status.RUNNING)
    done = make_job(Job.Status.SUCCEEDED, steps=2)
    client = api_as("viewer")
    body = client.get(f"/api/v1/jobs/{running.id}").json()
    assert (body["status"], body["progress"], body["stage"]) == ("running", 0.4, "step 2 of 5")
    finished = client.get(f"/api/v1/jobs/{done.id}").json()
    assert finished["metrics"]["scalars"]["final_loss"] == 0.5 and finished["charts"] == ["loss"]
    page = client.get("/api/v1/jobs", {"status": "succeeded"}).json()
    assert page["count"] == 1 and [item["id"] for item in page["items"]] == [str(done.id)]
    paged = client.get("/api/v1/jobs", {"page_size": 1, "page": 2}).json()
    assert paged["count"] == 2 and [item["id"] for item in paged["items"]] == [str(running.id)]  # newest first
    assert client.get("/api/v1/jobs", {"page_size": 0}).status_code == 422


def test_cancel_through_the_api(api_as: Callable[[str], ApiClient], make_job: Callable[..., Job]) -> None:
    job = make_job(Job.Status.QUEUED)
    client = api_as("member")
    response = client.post(f"/api/v1/jobs/{job.id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job.id}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


def test_artifacts_are_listed_and_downloaded(
    api_as: Callable[[str], ApiClient], make_job: Callable[..., Job], media_in_tmp: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=2)
    client = api_as("viewer")
    listing = client.get(f"/api/v1/jobs/{job.id}/artifacts").json()
    assert {a["name"] for a in listing} == {"losses.csv", "summary.json"}
    csv = next(a for a in listing if a["name"] == "losses.csv")
    assert csv["url"] == f"http://testserver/api/v1/jobs/{job.id}/artifacts/losses.csv"
    response = client.get(f"/api/v1/jobs/{job.id}/artifacts/losses.csv")
    assert response["Content-Type"] == "text/csv" and "attachment" in response["Content-Disposition"]
    assert b"".join(response.streaming_content) == b"step,loss\n0,1.0\n1,0.5\n"
    assert client.get(f"/api/v1/jobs/{job.id}/artifacts/missing.bin").status_code == 404


def test_kinds_are_described_from_their_specs(api_as: Callable[[str], ApiClient]) -> None:
    kinds = api_as("viewer").get("/api/v1/kinds").json()
    exercise = next(k for k in kinds if k["name"] == "test-exercise")
    assert [p["name"] for p in exercise["params"]] == ["steps", "step_seconds", "outcome", "fail_at", "notes", "seed"]
