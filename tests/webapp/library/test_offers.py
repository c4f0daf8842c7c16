"""Beside each file of a finished job: "in the library" (with a link) when the job already put it
there, else "Add to library" with the kinds its content can be, the likeliest one preselected only
when the content says which (a video or a chart's JSON is not offered as a model)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.views.helpers import post
from webapp.jobs import storage
from webapp.jobs.models import Job
from webapp.library.ingest import register_output
from webapp.library.models import LibraryItem
from webapp.library.offers import guess_from_members

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
MP4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + b"\x00" * 64
PLY = b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n"
PLY += b"0 0 0\n1 1 1\n"


def folder(root: Path, files: dict[str, bytes | str]) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def store(job: Job, name: str, path: Path, media_type: str = "application/zip") -> None:
    """As the worker stores ``ctx.artifact`` (a folder zipped)."""
    storage.store_artifact(job=job, name=name, path=path, media_type=media_type, attempt=job.attempt)


def control(page: str, name: str) -> str:
    """What the page shows beside the file ``name``: its artifact row's head."""
    return page.split(f'data-artifact="{name}"', 1)[1].split('class="artifact-view', 1)[0].split("<video", 1)[0]


def options(head: str) -> tuple[list[str], str]:
    """The kinds offered in a row, and the one preselected ("" when the page asks)."""
    offered = re.findall(r'<option value="([^"]+)"', head)
    chosen = re.findall(r'<option value="([^"]*)"[^>]* selected', head)
    return offered, chosen[0] if chosen else ""


def test_an_output_the_job_registered_shows_in_the_library_and_is_not_offered_again(
    make_job: Callable[..., Job], owner: User, viewer: User, csrf_client, tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=4)
    losses = job.artifacts.get(name="losses.csv")
    # What the worker does after ctx.artifact: the same file, registered (and validated) as text.
    item = register_output(job=job, kind="text", path=Path(losses.file.path), card={"name": "losses"})
    assert item.is_ready, item.error
    page = csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode()
    head = control(page, "losses.csv")
    assert f'href="/library/{item.pk}/" data-in-library="losses.csv"' in head and "In the library" in head
    assert "data-promote" not in head
    # The other file is still offered, and a viewer sees the link but no button.
    assert 'data-promote="summary.json"' in control(page, "summary.json")
    page = csrf_client(viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-in-library="losses.csv"' in page and "data-promote" not in page


def test_a_registered_folder_is_recognised_in_its_zipped_artifact(
    make_job: Callable[..., Job], owner: User, csrf_client, tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    corpus = folder(tmp_path / "corpus", {"a.txt": "experts route\n", "b/c.txt": "gates\nload\n"})
    store(job, "corpus", corpus)  # zipped with the files' own timestamps
    item = register_output(job=job, kind="text", path=corpus, card={})  # zipped with fixed ones
    assert item.is_ready, item.error
    head = control(csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode(), "corpus")
    assert f'href="/library/{item.pk}/" data-in-library="corpus"' in head and "data-promote" not in head


def test_a_rejected_registration_is_not_in_the_library_so_the_file_is_offered(
    make_job: Callable[..., Job], owner: User, csrf_client, tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    images = folder(tmp_path / "images", {"a.png": PNG})  # a PNG signature, no image: refused
    store(job, "images", images)
    assert register_output(job=job, kind="images", path=images, card={}).status == "rejected"
    head = control(csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode(), "images")
    assert "data-in-library" not in head and 'data-promote="images"' in head and options(head)[1] == "images"


def test_each_file_is_offered_as_the_kinds_its_content_can_be_with_the_likeliest_preselected(
    make_job: Callable[..., Job], owner: User, csrf_client, tmp_path: Path
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    files = tmp_path / "files"
    files.mkdir()
    (files / "clip.mp4").write_bytes(MP4)
    (files / "report.json").write_text(json.dumps({"accuracy": 0.9}))
    (files / "graphs.json").write_text(json.dumps({"graphs": []}))
    (files / "scan.ply").write_bytes(PLY)
    (files / "frame.png").write_bytes(PNG)
    store(job, "clip.mp4", files / "clip.mp4", "video/mp4")
    store(job, "report.json", files / "report.json", "application/json")
    store(job, "graphs.json", files / "graphs.json", "application/json")
    # The format is read from the content, not from the media type the job declared.
    store(job, "scan.ply", files / "scan.ply", "application/octet-stream")
    store(job, "frame.png", files / "frame.png", "application/octet-stream")
    moe = {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    weights = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    store(job, "checkpoint", folder(tmp_path / "moe", {"config.json": json.dumps(moe), "w.safetensors": weights}))
    dense = {"model_type": "llama", "hidden_size": 32}
    store(job, "student", folder(tmp_path / "dense", {"m/config.json": json.dumps(dense), "m/w.safetensors": b"1"}))
    own = {"architecture": "ptv3-lite", "labels": ["floor"]}
    store(job, "segmenter", folder(tmp_path / "seg", {"config.json": json.dumps(own), "model.safetensors": b"1"}))
    store(job, "frames", folder(tmp_path / "frames", {"a.png": PNG, "b/c.jpg": b"\xff\xd8\xff"}))

    page = csrf_client(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "data-promote" not in control(page, "clip.mp4")  # a video is no library item
    offered, chosen = options(control(page, "report.json"))
    assert offered == ["text", "graphs"] and chosen == ""  # a JSON report: the person says what it is
    assert "Choose a kind…" in control(page, "report.json")
    assert options(control(page, "graphs.json")) == (["text", "graphs"], "graphs")
    assert options(control(page, "scan.ply")) == (["pointclouds"], "pointclouds")
    assert options(control(page, "frame.png")) == (["images"], "images")
    offered, chosen = options(control(page, "checkpoint"))
    assert chosen == "hf-moe-lm" and offered[0] == "hf-moe-lm" and "images" in offered
    assert options(control(page, "student"))[1] == "hf-lm"
    assert options(control(page, "segmenter"))[1] == ""  # MoE Lab's own weights: several kinds look alike
    assert options(control(page, "frames"))[1] == "images"


def test_adding_a_file_without_choosing_a_kind_is_refused_with_what_to_do(
    make_job: Callable[..., Job], owner: User, csrf_client
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    client = csrf_client(owner)
    response = post(client, f"/jobs/{job.pk}/promote/summary.json", {"kind": ""})
    assert response.status_code == 302 and not LibraryItem.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert "Choose the library kind of summary.json (what it is), then add it again." in page


def test_an_added_file_records_its_sniffed_format_and_then_shows_in_the_library(
    make_job: Callable[..., Job], owner: User, csrf_client
) -> None:
    job = make_job(Job.Status.SUCCEEDED)
    client = csrf_client(owner)
    post(client, f"/jobs/{job.pk}/promote/summary.json", {"kind": "text"})
    item = LibraryItem.objects.get()
    assert item.format == "json"
    head = control(client.get(f"/jobs/{job.pk}/").content.decode(), "summary.json")
    assert f'href="/library/{item.pk}/" data-in-library="summary.json"' in head


@pytest.mark.parametrize(
    ("names", "config", "kind"),
    [
        (["config.json", "model.safetensors"], {"model_type": "qwen3_moe", "num_experts": 16}, "hf-moe-lm"),
        (["config.json", "model.safetensors"], {"model_type": "qwen2", "num_experts": 1}, "hf-lm"),
        (["config.json", "diffusion_pytorch_model.safetensors"], {"_class_name": "AutoencoderKL"}, "diffusers-vae"),
        (["config.json", "model.safetensors"], {"architecture": "video-dit"}, ""),
        (["scans/a.ply", "scans/b.LAS"], None, "pointclouds"),
        (["train.jsonl", "notes.txt"], None, "text"),
        (["data/graphs.json"], None, "graphs"),
        (["cat/a.mp4", "dog/b.mp4"], None, "video-clips"),
        (["trace-0.safetensors", "trace-1.safetensors"], None, "routing-trace"),
        (["a.png", "b.ply"], None, ""),
        ([], None, ""),
    ],
)
def test_a_folders_files_suggest_its_kind_only_when_they_agree(names: list[str], config, kind: str) -> None:
    assert guess_from_members(names, config) == kind
