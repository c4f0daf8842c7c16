"""The checks an item gets before it is usable, without the web: unpacking, the common upload
checks, the kind's loader check and the card (torch-free kinds, so these run in a blink)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from mlcore.errors import JobError
from mlcore.items.checks import card_for, tree_sha256, unpack_item


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def test_an_archive_of_one_folder_unpacks_to_that_folder_and_gets_a_text_card(tmp_path: Path) -> None:
    blob = tmp_path / "corpus.zip"
    blob.write_bytes(_zip({"corpus/a.txt": b"one\n\ntwo\n", "corpus/b.csv": b"x,y\n1,2\n"}))
    root = unpack_item(blob, tmp_path / "item")
    assert root == tmp_path / "item" / "corpus"
    card = card_for("text", "dataset", root)
    assert card == {"files": 2, "bytes": 17, "records": 4, "sources": ["a.txt", "b.csv"]}


def test_a_single_file_gets_a_folder_of_its_own_with_the_same_content_address(tmp_path: Path) -> None:
    blob = tmp_path / "notes.txt"
    blob.write_text("a line\n")
    root = unpack_item(blob, tmp_path / "item")
    assert [p.name for p in root.iterdir()] == ["notes.txt"]
    # A file and a folder holding only it are addressed alike: by its name and sha256.
    assert tree_sha256(root) == tree_sha256(blob)
    (root / "notes.txt").write_text("another line\n")
    assert tree_sha256(root) != tree_sha256(blob)


def test_a_refusal_names_the_file_inside_the_item_never_the_folder(tmp_path: Path) -> None:
    root = tmp_path / "scratch" / "item"
    root.mkdir(parents=True)
    (root / "blob.dat").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(JobError) as refused:
        card_for("text", "dataset", root)
    assert str(refused.value) == "blob.dat is binary data, not text; a text dataset holds .txt, .json, .jsonl or .csv."


def test_a_kind_no_library_holds_is_refused_with_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text('{"version": 1, "keys": []}')
    with pytest.raises(JobError, match=r"A team library holds no watermark-keyring items\."):
        card_for("watermark-keyring", "dataset", tmp_path)
