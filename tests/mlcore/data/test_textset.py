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


def test_a_text_folder_reads_the_rows_of_a_csv_in_it(tmp_path):
    (tmp_path / "notes.jsonl").write_text(json.dumps({"text": "a note, " * 40}) + "\n")
    (tmp_path / "table.csv").write_text('id,text\n1,"first row, with a comma"\n2,"second row, also"\n')
    data = load_text_dataset(tmp_path)
    assert data.files == {"notes.jsonl": 1, "table.csv": 2}
    assert [text for _, text in data.documents][1:] == ["first row, with a comma", "second row, also"]
    assert data.read_from() == "3 documents (1 from notes.jsonl and 2 from table.csv)"


def test_a_text_folder_reads_files_by_structure_whatever_their_suffix(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "export.tsv").write_text("name\ttext\nfirst\t" + "tab separated " * 20 + "\n")
    (tmp_path / "README.md").write_text("# Notes\n\nProse in a markdown file. " * 10)
    data = load_text_dataset(tmp_path)
    assert data.files == {"README.md": 1, "sub/export.tsv": 1}
    assert [name for name, _ in data.documents] == ["README.md", "first"]


def test_a_text_folder_skips_its_card_and_hidden_files(tmp_path):
    (tmp_path / "a.txt").write_text("alpha " * 100)
    (tmp_path / "card.json").write_text(json.dumps({"records": 1}))
    (tmp_path / ".complete").write_text("1")
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x01binary")
    (tmp_path / "__MACOSX").mkdir()
    (tmp_path / "__MACOSX" / "._a.txt").write_bytes(b"\x00\x05\x16\x07")
    assert load_text_dataset(tmp_path).files == {"a.txt": 1}


def test_a_text_folder_with_a_binary_file_is_refused_by_the_files_name(tmp_path):
    (tmp_path / "a.txt").write_text("alpha " * 100)
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4)
    with pytest.raises(TextDatasetError, match=r"photo\.jpg is not UTF-8 text"):
        load_text_dataset(tmp_path)


def test_a_folder_without_text_files_says_what_to_add(tmp_path):
    (tmp_path / "card.json").write_text("{}")
    with pytest.raises(TextDatasetError, match="holds no text files; add UTF-8 text, JSONL or CSV"):
        load_text_dataset(tmp_path)


def test_it_reads_a_pretty_printed_json_export_as_its_records(tmp_path):
    path = tmp_path / "export.json"
    records = [{"name": f"note{i}", "text": f"record {i} " * 30} for i in range(4)]
    path.write_text(json.dumps(records, indent=2), encoding="utf-8-sig")
    data = load_text_dataset(path)
    assert [name for name, _ in data.documents] == ["note0", "note1", "note2", "note3"]
    assert data.documents[2][1].startswith("record 2")


def test_it_reads_a_json_list_of_strings_and_a_single_json_record(tmp_path):
    strings = tmp_path / "strings.json"
    strings.write_text(json.dumps(["first " * 40, "  ", "second " * 40], indent=1))
    assert [text.split()[0] for _, text in load_text_dataset(strings).documents] == ["first", "second"]
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"text": "only " * 60}, indent=4))
    assert len(load_text_dataset(single).documents) == 1


def test_it_names_the_record_of_a_json_document_that_holds_no_text(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"text": "fine " * 60}, {"body": "no"}], indent=2))
    with pytest.raises(TextDatasetError, match='record 2 is neither a string nor an object with a "text"'):
        load_text_dataset(path)


def test_a_json_file_of_json_lines_is_still_read_line_by_line(tmp_path):
    path = tmp_path / "lines.json"
    path.write_text("\n".join(json.dumps({"text": f"line {i} " * 30}) for i in range(3)))
    assert len(load_text_dataset(path).documents) == 3
