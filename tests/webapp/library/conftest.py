"""Library fixtures: items added the way users add them (a resumable upload, then the worker's
``library-ingest`` step called directly), a tiny Hugging Face MoE checkpoint, and archives."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.api.conftest import api_as  # noqa: F401  (shared fixtures)
from tests.webapp.views.conftest import fast_passwords, make_job  # noqa: F401
from webapp.accounts.models import Team
from webapp.library import services
from webapp.library.ingest import ingest_item
from webapp.library.models import LibraryItem

KINDS = "tests.jobkinds.exercise,tests.jobkinds.library_consumer"
AddItem = Callable[..., LibraryItem]


@pytest.fixture(autouse=True)
def library_kinds(monkeypatch: pytest.MonkeyPatch) -> str:
    """The test kinds, including one that takes library items (workers in this process see it too)."""
    monkeypatch.setenv("MOELAB_EXTRA_KINDS", KINDS)
    return KINDS


@pytest.fixture(autouse=True)
def library_dirs(settings, tmp_path: Path) -> Path:
    """Part files and the worker cache of a test live in its own folder."""
    settings.LIBRARY_UPLOAD_DIR = tmp_path / "uploads"
    settings.LIBRARY_CACHE_DIR = tmp_path / "cache"
    return tmp_path


def upload(team: Team, user: User, data: bytes, *, name: str, kind: str, filename: str) -> LibraryItem:
    """The whole upload protocol in one call: start, one chunk, complete."""
    started = services.upload_start(team=team, user=user, name=name, filename=filename, kind=kind, size=len(data))
    services.upload_append(upload=started, offset=0, stream=io.BytesIO(data), length=len(data))
    return services.upload_complete(upload=started)


@pytest.fixture
def add_item(team: Team, owner: User) -> AddItem:
    """``add_item(data, kind=..., name=..., filename=..., by=user)``: uploaded and ingested as a worker would."""

    def add(
        data: bytes,
        *,
        kind: str = "text",
        name: str = "corpus",
        filename: str = "corpus.txt",
        by: User | None = None,
    ) -> LibraryItem:
        item = upload(team, by or owner, data, name=name, kind=kind, filename=filename)
        ingest_item(item.pk)
        item.refresh_from_db()
        return item

    return add


@pytest.fixture
def corpus(add_item: AddItem) -> LibraryItem:
    return add_item(b"the router picks two experts\n\nexperts specialise\nload balances\n")


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def zip_folder(folder: Path, prefix: str = "") -> bytes:
    return zip_bytes(
        {prefix + p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    )


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Mixtral checkpoint (hidden 32, 8 experts, top-2) saved as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("mixtral"))
    folder = tmp_path_factory.mktemp("tiny-mixtral")
    model.save_pretrained(folder)
    (folder / "parameters.txt").write_text(str(sum(p.numel() for p in model.parameters())))
    return folder
