import json
import random

import pytest

from mlcore.data.packing import pack_windows
from mlcore.data.textset import BLOCK_CHARS, TextDataset, TextDatasetError, load_text_dataset, split_of


def _documents(count: int = 40, blocks: int = 10) -> list[tuple[str, str]]:
    rng = random.Random(0)
    return [(f"doc{i}", "".join(rng.choice("abcdef ") for _ in range(BLOCK_CHARS * blocks))) for i in range(count)]


def test_it_splits_blocks_ninety_five_five():
    data = TextDataset("synthetic", _documents())
    sizes = {name: len(blocks) for name, blocks in data.splits.items()}
    assert sum(sizes.values()) == 400
    assert 0.85 < sizes["train"] / 400 < 0.95
    assert 5 <= sizes["test"] <= 35 and 5 <= sizes["calibration"] <= 35


def test_the_split_does_not_depend_on_document_order():
    documents = _documents(10, 5)
    forward = TextDataset("a", documents).splits
    backward = TextDataset("b", documents[::-1]).splits
    assert {k: sorted(v) for k, v in forward.items()} == {k: sorted(v) for k, v in backward.items()}
    assert split_of("doc3", 2) == split_of("doc3", 2)


def test_a_tiny_upload_still_gets_held_out_blocks():
    data = TextDataset("tiny", [("one", "x" * (BLOCK_CHARS * 3))])
    assert all(data.split(name) for name in ("train", "calibration", "test"))


def test_it_reads_a_jsonl_upload_named_txt(tmp_path):
    path = tmp_path / "upload.txt"
    path.write_text("\n".join(json.dumps({"text": f"record {i} " * 30}) for i in range(5)))
    data = load_text_dataset(path)
    assert len(data.documents) == 5 and data.documents[0][1].startswith("record 0")


def test_it_reads_a_directory_of_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("alpha " * 100)
    (tmp_path / "b.jsonl").write_text(json.dumps({"name": "b", "text": "beta " * 100}) + "\n")
    data = load_text_dataset(tmp_path)
    assert sorted(name for name, _ in data.documents) == ["a.txt", "b"]


def test_it_rejects_an_empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    with pytest.raises(TextDatasetError, match="empty"):
        load_text_dataset(path)


def test_it_rejects_a_whitespace_only_file(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("   \n\n  ")
    with pytest.raises(TextDatasetError, match="0 characters"):
        load_text_dataset(path)


def test_it_rejects_a_jsonl_line_without_text(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": "fine " * 60}) + "\n" + json.dumps({"body": "no"}) + "\n")
    with pytest.raises(TextDatasetError, match='line 2 has no "text"'):
        load_text_dataset(path)


def test_pack_windows_cuts_the_joined_stream_into_full_windows():
    windows = pack_windows(["abc", "de"], lambda t: [ord(c) for c in t], eos_id=0, length=3)
    assert windows.tolist() == [[97, 98, 99], [0, 100, 101]]
    with pytest.raises(ValueError, match="fewer than 8 tokens"):
        pack_windows(["ab"], lambda t: [1, 2], eos_id=0, length=8)
