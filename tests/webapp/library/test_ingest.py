"""The worker's ``library-ingest`` step: an item becomes usable only once its content checks out,
and a corrupt or malicious upload is refused with a clear message and nothing kept in storage."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.files.storage import default_storage

from tests.webapp.library.conftest import AddItem, zip_bytes, zip_folder
from webapp.library.models import LibraryItem

pytestmark = pytest.mark.django_db


def stored_library_files() -> list[str]:
    found: list[str] = []

    def walk(folder: str) -> None:
        if not default_storage.exists(folder):
            return
        dirs, files = default_storage.listdir(folder)
        found.extend(f"{folder}/{f}" for f in files)
        for d in dirs:
            walk(f"{folder}/{d}")

    walk("library")
    return found


def assert_refused(item: LibraryItem, *words: str) -> None:
    assert item.status == LibraryItem.Status.REJECTED, item.card
    for word in words:
        assert word in item.error, item.error
    assert not item.file and stored_library_files() == []


def test_it_accepts_a_tiny_hf_moe_checkpoint_and_writes_its_card(add_item: AddItem, tiny_moe: Path) -> None:
    item = add_item(zip_folder(tiny_moe, "tiny-mixtral/"), kind="hf-moe-lm", name="tiny", filename="tiny.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.format == "zip" and len(item.sha256) == 64
    assert item.card["architecture"] == "Mixtral" and item.card["model_type"] == "mixtral"
    assert (item.card["experts_per_layer"], item.card["top_k"]) == (8, 2)
    assert item.card["parameters"] == int((tiny_moe / "parameters.txt").read_text())
    assert stored_library_files() == [item.file.name]


def test_it_refuses_a_pickle_only_checkpoint(add_item: AddItem, tiny_moe: Path) -> None:
    files = {"config.json": (tiny_moe / "config.json").read_bytes(), "pytorch_model.bin": b"\x80\x04pickle"}
    item = add_item(zip_bytes(files), kind="hf-moe-lm", filename="pickled.zip")
    assert_refused(item, "pytorch_model.bin is a pickle", "convert the checkpoint to safetensors")


def test_it_refuses_a_checkpoint_that_is_not_an_moe_language_model(add_item: AddItem, tiny_moe: Path) -> None:
    config = json.loads((tiny_moe / "config.json").read_text()) | {"model_type": "llama"}
    files = {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": (tiny_moe / "model.safetensors").read_bytes(),
    }
    item = add_item(zip_bytes(files), kind="hf-moe-lm", filename="dense.zip")
    assert_refused(item, "'llama' is not a supported MoE architecture")


def test_it_refuses_an_archive_member_that_climbs_out(add_item: AddItem) -> None:
    item = add_item(zip_bytes({"../../etc/cron.d/evil": b"* * * * * root sh\n"}), filename="slip.zip")
    assert_refused(item, "points outside the archive")


def test_it_refuses_a_symlink_in_a_zip(add_item: AddItem) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        link = zipfile.ZipInfo("corpus.txt")
        link.external_attr = (0o120777) << 16
        zf.writestr(link, "/etc/passwd")
    item = add_item(buffer.getvalue(), filename="link.zip")
    assert_refused(item, "symbolic link")


def test_it_refuses_a_symlink_in_a_tar(add_item: AddItem) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        link = tarfile.TarInfo("corpus.txt")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    item = add_item(buffer.getvalue(), filename="link.tar.gz")
    assert_refused(item, "member 'corpus.txt' is a symbolic link")


def test_it_refuses_a_zip_bomb(add_item: AddItem) -> None:
    item = add_item(zip_bytes({"zeros.txt": b"0" * (24 * 2**20)}), filename="bomb.zip")
    assert_refused(item, "decompression bomb")


def test_it_refuses_a_corrupt_archive(add_item: AddItem) -> None:
    data = zip_bytes({"corpus.txt": b"some text\n" * 100})
    item = add_item(data[:40] + b"\x00" * 64 + data[104:], filename="broken.zip")
    assert_refused(item, "corrupt zip archive")


def test_it_counts_the_records_and_sources_of_a_dataset(add_item: AddItem) -> None:
    item = add_item(zip_bytes({"a/plays.txt": b"to be\n\nor not\n", "b/poems.txt": b"shall I\n"}), filename="t.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.card["records"] == 3 and item.card["files"] == 2
    assert item.card["sources"] == ["a/plays.txt", "b/poems.txt"]
