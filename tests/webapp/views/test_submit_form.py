"""The submit page is drawn from the kind's spec and validated by it, with errors next to fields."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from django.contrib.auth.models import User
from django.test import Client

from webapp.jobs.models import Job, JobInput

URL = "/t/routing-lab/submit/test-exercise/"


def field_html(html: str, name: str) -> str:
    match = re.search(rf'<div class="field[^"]*" data-param="{name}".*?\n</div>', html, re.S)
    assert match, f"no field {name}"
    return match.group(0)


def test_it_draws_one_widget_per_parameter_with_bounds_choices_and_formats(
    owner: User, csrf_client: Callable[..., Client]
) -> None:
    html = csrf_client(owner).get(URL).content.decode()
    steps = field_html(html, "steps")
    assert 'type="number"' in steps and 'min="1"' in steps and 'max="10000"' in steps and 'value="3"' in steps
    assert "How many steps to count." in steps and "1 to 10000" in steps
    outcome = field_html(html, "outcome")
    assert re.findall(r'<option value="([^"]+)"', outcome) == ["succeed", "user-error", "crash"]
    notes = field_html(html, "notes")
    assert 'type="file"' in notes and 'accept=".txt,.text,.csv,.tsv,.json"' in notes
    assert "at most 976.6" in notes  # the kind's byte cap, in words
    seed = field_html(html, "seed")
    assert 'placeholder="random"' in seed
    assert 'enctype="multipart/form-data"' in html


def test_it_shows_the_specs_errors_next_to_their_fields_and_keeps_the_values(
    owner: User, csrf_client: Callable[..., Client]
) -> None:
    client = csrf_client(owner)
    token = client.get(URL).cookies["csrftoken"].value
    response = client.post(URL, {"steps": "0", "step_seconds": "abc", "csrfmiddlewaretoken": token})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Must be at least 1." in field_html(html, "steps")
    assert "Enter a number." in field_html(html, "step_seconds")
    assert 'value="abc"' in field_html(html, "step_seconds")
    assert "field-error" not in field_html(html, "outcome")
    assert not Job.objects.exists()


def test_a_cross_field_rule_of_the_spec_is_shown_on_its_field(owner: User, csrf_client: Callable[..., Client]) -> None:
    client = csrf_client(owner)
    token = client.get(URL).cookies["csrftoken"].value
    response = client.post(URL, {"steps": "2", "fail_at": "5", "csrfmiddlewaretoken": token})
    assert response.status_code == 400
    assert "Must not exceed steps." in field_html(response.content.decode(), "fail_at")


def test_a_valid_form_queues_the_job_with_its_upload_and_opens_its_page(
    owner: User, csrf_client: Callable[..., Client], tiny_upload: Path
) -> None:
    client = csrf_client(owner)
    token = client.get(URL).cookies["csrftoken"].value
    with tiny_upload.open("rb") as f:
        response = client.post(
            URL, {"steps": "4", "outcome": "succeed", "seed": "7", "notes": f, "csrfmiddlewaretoken": token}
        )
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.id}/"
    assert job.status == Job.Status.QUEUED and job.submitted_by == owner
    assert job.params["steps"] == 4 and job.params["seed"] == 7 and job.params["step_seconds"] == 0.0
    assert JobInput.objects.get(job=job).original_name == "notes.txt"


def test_an_upload_in_a_format_the_kind_does_not_take_is_refused_on_its_field(
    owner: User, csrf_client: Callable[..., Client], tmp_path: Path
) -> None:
    png = tmp_path / "notes.txt"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    client = csrf_client(owner)
    token = client.get(URL).cookies["csrftoken"].value
    with png.open("rb") as f:
        response = client.post(URL, {"steps": "2", "notes": f, "csrfmiddlewaretoken": token})
    assert response.status_code == 400
    assert "field-errors" in field_html(response.content.decode(), "notes")
    assert not Job.objects.exists()


def test_an_unknown_kind_has_no_page(owner: User, csrf_client: Callable[..., Client]) -> None:
    assert csrf_client(owner).get("/t/routing-lab/submit/no-such-kind/").status_code == 404


def test_the_kinds_page_lists_every_registered_kind(owner: User, csrf_client: Callable[..., Client]) -> None:
    html = csrf_client(owner).get("/t/routing-lab/submit/").content.decode()
    assert 'href="/t/routing-lab/submit/test-exercise/"' in html and "Exercise the job contract" in html
