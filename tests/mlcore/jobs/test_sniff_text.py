"""Text uploads are recognised by their structure: JSON Lines by records, tables by a consistent
column count, prose as text, whatever characters their first line holds."""

from __future__ import annotations

import codecs
import json
import this
from pathlib import Path

import pytest

from mlcore.errors import JobError
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import check_files
from mlcore.sniff import SNIFF_BYTES, csv_dialect, require_format, sniff, text_shape

#: The Zen of Python as ``import this`` prints it: prose whose first line holds a comma.
ZEN = codecs.decode(this.s, "rot13")
RECORDS = [{"text": f"Hello, world number {i}, said the sender.", "source": "mail"} for i in range(6)]


def write(tmp_path: Path, name: str, text: str, *, encoding: str = "utf-8", newline: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode(encoding))
    return path


def jsonl(records: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_jsonl_whose_records_hold_commas_is_jsonl_not_csv(tmp_path: Path) -> None:
    assert sniff(write(tmp_path, "mail.txt", jsonl(RECORDS))) == "jsonl"


def test_prose_with_commas_is_text(tmp_path: Path) -> None:
    assert ZEN.startswith("The Zen of Python, by Tim Peters")
    shape = text_shape(write(tmp_path, "zen.csv", ZEN))
    assert shape is not None and shape.format == "txt"


def test_a_csv_with_quoted_commas_is_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, "rows.txt", 'text,label\n"Hello, world",yes\n"a, b, c",no\nplain,yes\n')
    assert sniff(path) == "csv"


@pytest.mark.parametrize(("delimiter", "name"), [("\t", "tab"), (";", "semicolon")])
def test_a_tsv_or_semicolon_table_is_a_table_with_its_delimiter(tmp_path: Path, delimiter: str, name: str) -> None:
    rows = ["text", "label"], ["one, two", "1"], ["three four", "0"]
    path = write(tmp_path, "rows", "".join(delimiter.join(row) + "\n" for row in rows))
    assert sniff(path) == "csv"
    assert csv_dialect(path).delimiter == delimiter


def test_a_byte_order_mark_and_windows_line_ends_change_nothing(tmp_path: Path) -> None:
    table = "text,label\nx,1\ny,0\n"
    for text, expected in ((jsonl(RECORDS), "jsonl"), (table, "csv"), (ZEN, "txt")):
        plain = write(tmp_path, "plain", text)
        windows = write(tmp_path, "windows", "\ufeff" + text, newline="\r\n")
        assert sniff(plain) == sniff(windows) == expected


def test_a_json_document_stays_json(tmp_path: Path) -> None:
    assert sniff(write(tmp_path, "report", json.dumps({"hit_rates": {"model": []}}, indent=2))) == "json"
    assert sniff(write(tmp_path, "one-record", json.dumps(RECORDS[0]) + "\n")) == "json"


def test_a_table_with_a_ragged_row_is_text_and_the_refusal_names_the_row(tmp_path: Path) -> None:
    path = write(tmp_path, "runs.csv", "name,kind,loss\na,dense,1.0\nb,moe\nc,moe,0.9\n")
    assert sniff(path) == "txt"
    with pytest.raises(JobError) as refused:
        require_format(path, ("csv",), label="Runs")
    assert str(refused.value).startswith(
        "Runs: expected csv, got a txt file (line 3 has 2 comma-separated fields where line 1 has 3)."
    )


def test_jsonl_with_a_broken_line_is_refused_naming_that_line(tmp_path: Path) -> None:
    lines = jsonl(RECORDS).splitlines()
    lines[3] = lines[3][:-2]  # the closing quote and brace cut off
    path = write(tmp_path, "broken.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(JobError, match=r"expected jsonl, got a txt file \(line 4 is not JSON \("):
        require_format(path, ("jsonl",), label="Text")


def test_records_past_the_sniffed_sample_do_not_change_the_verdict(tmp_path: Path) -> None:
    record = json.dumps({"text": "x, " * 2000}) + "\n"
    path = write(tmp_path, "big.jsonl", record * (SNIFF_BYTES // len(record) + 5))
    assert sniff(path) == "jsonl"  # the record cut by the sample window is not held against it


@pytest.mark.parametrize(
    ("kind", "field"),
    [("distill", "text_file"), ("data-mixture", "target_file"), ("data-mixture", "source_files")],
)
@pytest.mark.parametrize("content", ["jsonl", "zen", "table"])
def test_every_text_upload_of_the_text_kinds_is_accepted(tmp_path: Path, kind: str, field: str, content: str) -> None:
    text = {"jsonl": jsonl(RECORDS), "zen": ZEN, "table": 'text,label\n"Hello, world",1\nbye,0\n'}[content]
    path = write(tmp_path, "upload", text)
    inputs = check_files(get_kind(kind), {field: [path]}, tmp_path / "work")
    assert inputs[field] in (path, [path])


def test_the_sniffer_callers_that_take_labelled_tasks_accept_jsonl(tmp_path: Path) -> None:
    path = write(tmp_path, "task", jsonl([{"text": "1, 2", "label": "a"}, {"text": "3", "label": "b"}]))
    for kind in ("lora-moe-finetune", "router-align"):
        assert check_files(get_kind(kind), {"task_file": [path]}, tmp_path / kind)["task_file"] == path


def _paragraphs(count: int) -> list[str]:
    """Multi-line prose with commas, semicolons and doubled quotes, as a docs export holds it."""
    return [
        f'Paragraph {i}: the ""default"" rule, for one; the\nother rule, for two; and a third\nline, to end.'
        for i in range(count)
    ]


def test_a_tsv_whose_quoted_cells_hold_line_breaks_reads_row_by_row(tmp_path: Path) -> None:
    from mlcore.data.textset import load_text_dataset

    rows = "".join(f'paragraph {i}\t"{text}"\n' for i, text in enumerate(_paragraphs(40)))
    path = write(tmp_path, "docs.tsv", "title\ttext\n" + rows)
    assert sniff(path) == "csv" and csv_dialect(path).delimiter == "\t"
    documents = load_text_dataset(path).documents
    assert len(documents) == 40
    assert documents[3][1] == _paragraphs(4)[3].replace('""', '"')


def test_a_semicolon_export_with_decimal_commas_and_multi_line_prose_is_a_semicolon_table(tmp_path: Path) -> None:
    """As a spreadsheet in a comma-decimal locale exports Python's help topics with a score: the
    prose holds commas, doubled quotes and line breaks, the scores decimal commas."""
    from pydoc_data.topics import topics

    from mlcore.data.textset import load_text_dataset

    paragraphs = [p.strip() for topic in sorted(topics) for p in topics[topic].split("\n\n") if len(p.strip()) > 80]
    texts = paragraphs[:200]
    quoted = [text.replace('"', '""') for text in texts]
    rows = "".join(f'"{text}";{i % 5},5\n' for i, text in enumerate(quoted))
    path = write(tmp_path, "forum.csv", "text;score\n" + rows, newline="\r\n")
    assert sniff(path) == "csv" and csv_dialect(path).delimiter == ";"
    documents = load_text_dataset(path).documents
    assert len(documents) == 200 and documents[7][1] == texts[7]
