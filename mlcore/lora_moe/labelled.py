"""Uploaded labelled task data: one format for every kind that fine-tunes on a labelled task
(``lora-moe-finetune``, ``router-align``), validated before any training starts.

Two spellings of the same table, recognised from the content:

- **JSONL**: one JSON object a line, ``{"text": "...", "label": "..."}``, optionally with
  ``"split"`` (``"train"`` or ``"test"``), ``"group"`` (a short name, e.g. a difficulty level,
  for per-group accuracy) and ``"id"`` (a row's own identifier). Blank lines are skipped.
- **CSV** (or TSV, or semicolon-separated: the delimiter is sniffed): a header row naming the
  columns ``text``, ``label`` and optionally ``split``, ``group``, ``id``; then one row per example
  (standard quoting for delimiters inside a text).

A byte-order mark and Windows line ends are fine. Labels are strings (numbers are read as their
text); the classes are the distinct labels, sorted. Without a ``split`` column the rows are split
80/20 by a hash of each row's ``id`` if given, else of its text: the content, never its position, so
the same rows split the same way as JSONL or CSV, in any order, on any machine and with any seed, and
a text that appears twice never lands on both sides. Every error names the line and what to fix.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ("text", "label", "split", "group", "id")
SPLITS = ("train", "test")
MAX_ROWS = 200_000
MAX_TEXT = 10_000
MAX_LABEL = 100
MAX_CLASSES = 1000


class LabelledDataError(ValueError):
    """Task data that cannot be used; the message says where and what to do."""


@dataclass(frozen=True)
class LabelledData:
    texts: tuple[str, ...]
    labels: tuple[int, ...]  #: index into ``classes``
    classes: tuple[str, ...]
    splits: tuple[str, ...]  #: "train" or "test" per row
    groups: tuple[str, ...] | None  #: per row, when the data has a ``group`` column

    def rows(self, split: str) -> list[int]:
        return [i for i, s in enumerate(self.splits) if s == split]


def load_labelled(path: Path, *, min_train: int = 8, min_test: int = 2) -> LabelledData:
    """Read and validate a JSONL or CSV task file (module docstring); a :class:`LabelledDataError` otherwise."""
    try:
        content = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise LabelledDataError("the file is not UTF-8 text; save it as UTF-8 JSONL or CSV") from None
    first = next((line.strip() for line in content.splitlines() if line.strip()), "")
    if not first:
        raise LabelledDataError("the file is empty; give one example per line")
    records = _jsonl(content) if first.startswith("{") else _csv(content, path)
    if len(records) > MAX_ROWS:
        raise LabelledDataError(f"{len(records)} rows is more than the {MAX_ROWS:,} allowed")
    texts, raw_labels, splits, groups = [], [], [], []
    has_split = any("split" in r for _, r in records)
    has_group = any("group" in r for _, r in records)
    has_id = any("id" in r for _, r in records)
    for line, record in records:
        text, label = _field(record, "text", line, MAX_TEXT), _field(record, "label", line, MAX_LABEL)
        key = "id\x00" + _field(record, "id", line, MAX_LABEL) if has_id else "text\x00" + text
        split = _field(record, "split", line, 10) if has_split else _hash_split(key)
        if split not in SPLITS:
            raise LabelledDataError(f"line {line}: split must be 'train' or 'test', got {split!r}")
        texts.append(text)
        raw_labels.append(label)
        splits.append(split)
        if has_group:
            groups.append(_field(record, "group", line, MAX_LABEL))
    classes = tuple(sorted(set(raw_labels)))
    if len(classes) < 2:
        raise LabelledDataError(f"every row has the label {classes[0]!r}; a task needs at least two labels")
    if len(classes) > MAX_CLASSES:
        raise LabelledDataError(f"{len(classes)} distinct labels is more than the {MAX_CLASSES} allowed")
    train, test = splits.count("train"), splits.count("test")
    if train < min_train or test < min_test:
        raise LabelledDataError(
            f"{train} training and {test} test rows; give at least {min_train} and {min_test} "
            "(mark rows with a split column, or add rows)"
        )
    index = {c: i for i, c in enumerate(classes)}
    return LabelledData(
        texts=tuple(texts),
        labels=tuple(index[label] for label in raw_labels),
        classes=classes,
        splits=tuple(splits),
        groups=tuple(groups) if has_group else None,
    )


def _jsonl(content: str) -> list[tuple[int, dict[str, object]]]:
    records = []
    for line, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise LabelledDataError(f"line {line}: not valid JSON ({exc.msg}); JSONL needs one object a line") from None
        if not isinstance(record, dict):
            raise LabelledDataError(f"line {line}: expected a JSON object with text and label")
        unknown = set(record) - set(COLUMNS)
        if unknown:
            raise LabelledDataError(f"line {line}: unknown field(s) {', '.join(sorted(unknown))}; allowed: {COLUMNS}")
        records.append((line, record))
    return records


def _csv(content: str, path: Path) -> list[tuple[int, dict[str, object]]]:
    from mlcore.sniff import csv_dialect

    reader = csv.reader(io.StringIO(content), csv_dialect(Path(path)))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except (StopIteration, csv.Error):
        raise LabelledDataError("could not read a CSV header; the first row must name text and label") from None
    if "text" not in header or "label" not in header:
        raise LabelledDataError(
            f"the header {header} lacks text and label; use JSONL objects or a CSV header like 'text,label'"
        )
    unknown = set(header) - set(COLUMNS)
    if unknown or len(set(header)) != len(header):
        raise LabelledDataError(f"header columns must be distinct names among {COLUMNS}, got {header}")
    records = []
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise LabelledDataError(
                    f"line {reader.line_num}: {len(row)} cells for {len(header)} columns; quote texts with commas"
                )
            records.append((reader.line_num, dict(zip(header, row, strict=True))))
    except csv.Error as exc:
        raise LabelledDataError(f"line {reader.line_num}: {exc}") from None
    return records


def _field(record: dict[str, object], name: str, line: int, limit: int) -> str:
    value = record.get(name)
    if value is None:
        raise LabelledDataError(f"line {line}: {name} is missing (every row needs one when any row has one)")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise LabelledDataError(f"line {line}: {name} must be a string (or a number), got {type(value).__name__}")
    text = str(value).strip() if name != "text" else str(value)
    if not text.strip():
        raise LabelledDataError(f"line {line}: {name} is empty")
    if len(text) > limit:
        raise LabelledDataError(f"line {line}: {name} has {len(text)} characters, more than the {limit} allowed")
    return text


def _hash_split(key: str) -> str:
    """Train or test (1 in 5) by the row's content or id, never by its line number: a CSV's header
    line or a reordered file must not move a row to the other side."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 5
    return "test" if bucket == 0 else "train"
