"""Uploaded task rows go to train or test by their content (or their own id), never by their line:
the same rows split the same way as JSONL or CSV, with a header, a byte-order mark or reordered."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mlcore.lora_moe.labelled import LabelledData, load_labelled

ROWS = [
    {"text": f"review {i}: {'good' if i % 3 else 'bad'}, says reader {i % 7}", "label": str(i % 3)} for i in range(195)
]


def as_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def as_csv(path: Path, rows: list[dict[str, str]], *, delimiter: str = ",", bom: bool = False) -> Path:
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)  # CRLF line ends, as Excel
        writer.writeheader()
        writer.writerows(rows)
    return path


def split_of(data: LabelledData) -> dict[str, str]:
    return dict(zip(data.texts, data.splits, strict=True))


def test_the_same_rows_split_identically_as_jsonl_csv_tsv_and_with_a_bom(tmp_path: Path) -> None:
    jsonl = load_labelled(as_jsonl(tmp_path / "rows.jsonl", ROWS))
    table = load_labelled(as_csv(tmp_path / "rows.csv", ROWS))
    tsv = load_labelled(as_csv(tmp_path / "rows.tsv", ROWS, delimiter="\t", bom=True))
    assert jsonl.texts == table.texts == tsv.texts
    assert jsonl.splits == table.splits == tsv.splits
    test = jsonl.splits.count("test")
    assert 20 < test < 60 and test != 32  # 1 in 5 by hash, not the former line-number split's 163/32


def test_reordering_the_rows_moves_none_to_the_other_side(tmp_path: Path) -> None:
    forward = load_labelled(as_jsonl(tmp_path / "a.jsonl", ROWS))
    backward = load_labelled(as_jsonl(tmp_path / "b.jsonl", ROWS[::-1]))
    assert split_of(forward) == split_of(backward)


def test_a_repeated_text_never_lands_on_both_sides(tmp_path: Path) -> None:
    data = load_labelled(as_jsonl(tmp_path / "twice.jsonl", ROWS + ROWS[:40]))
    sides: dict[str, set[str]] = {}
    for text, split in zip(data.texts, data.splits, strict=True):
        sides.setdefault(text, set()).add(split)
    assert all(len(s) == 1 for s in sides.values())


def test_an_id_column_decides_the_split_instead_of_the_text(tmp_path: Path) -> None:
    with_ids = [{**row, "id": f"row-{i}"} for i, row in enumerate(ROWS)]
    by_id = load_labelled(as_csv(tmp_path / "ids.csv", with_ids))
    retexted = load_labelled(
        as_jsonl(tmp_path / "ids.jsonl", [{**row, "text": row["text"].upper()} for row in with_ids])
    )
    assert by_id.splits == retexted.splits  # new texts, same ids: the same split
    assert by_id.splits != load_labelled(as_csv(tmp_path / "plain.csv", ROWS)).splits
