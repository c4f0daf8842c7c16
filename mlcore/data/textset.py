"""A text dataset on disk, read the same way whether built in or uploaded, with fixed splits.

A dataset is one text file or a directory of them (a built-in corpus, a library item, an unpacked
upload). Every file is read by its structure, not its name (:func:`mlcore.sniff.text_shape`): JSON
Lines as records (a ``"text"`` field, optionally ``"name"``), a table (CSV, TSV) with a ``text``
column as one document per row, any other text (a table without a ``text`` column included) as one
document. In a directory, ``card.json`` (the item's description) and hidden files are skipped, so
a folder reads as its files would one by one. Documents are cut
into blocks of :data:`BLOCK_CHARS` characters, and each block goes to ``train`` (90%),
``calibration`` (5%) or ``test`` (5%) by a hash of the document name and block number: the split
never depends on file order, machine or seed, and a block keeps its text contiguous.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

SPLITS = ("train", "calibration", "test")
#: Long enough for several 128-token windows, short enough that a 5% split samples every document.
BLOCK_CHARS = 4096
MIN_CHARS = 200


class TextDatasetError(ValueError):
    """A dataset that cannot be used; the message says what is wrong and what to do."""


def split_of(name: str, block: int) -> str:
    """The split of block ``block`` of document ``name``: buckets 0 and 1 of 20 are held out."""
    bucket = int.from_bytes(hashlib.sha256(f"{name}\x00{block}".encode()).digest()[:8], "big") % 20
    return "test" if bucket == 0 else "calibration" if bucket == 1 else "train"


@dataclass
class TextDataset:
    name: str
    documents: list[tuple[str, str]]
    splits: dict[str, list[str]] = field(default_factory=dict)
    #: Documents read from each file (its path inside the folder), so a job can say what it read.
    files: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.splits = {split: [] for split in SPLITS}
        for doc_name, text in self.documents:
            for block, start in enumerate(range(0, len(text), BLOCK_CHARS)):
                self.splits[split_of(doc_name, block)].append(text[start : start + BLOCK_CHARS])
        # A small dataset may hash every block into train; hold one out (chosen by content, so the
        # choice does not depend on document order) rather than fail later.
        for split in ("test", "calibration"):
            train = self.splits["train"]
            if not self.splits[split] and len(train) > 1:
                pick = min(range(len(train)), key=lambda i: hashlib.sha256(train[i].encode()).digest())
                self.splits[split].append(train.pop(pick))

    def split(self, split: str) -> list[str]:
        if split not in SPLITS:
            raise TextDatasetError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        return self.splits[split]

    @property
    def characters(self) -> int:
        return sum(len(text) for _, text in self.documents)

    def read_from(self, shown: int = 4) -> str:
        """ "52 documents (12 from notes.jsonl and 40 from table.csv)": the log shows every file was read."""
        counts = [f"{count:,} from {name}" for name, count in self.files.items()]
        if len(counts) > shown + 1:
            counts = [
                *counts[:shown],
                f"{sum(list(self.files.values())[shown:]):,} from {len(counts) - shown} more files",
            ]
        listed = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        return f"{len(self.documents):,} documents" + (f" ({listed})" if counts else "")


def _read_jsonl(path: Path) -> list[tuple[str, str]]:
    documents = []
    # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the first record.
    with path.open(encoding="utf-8-sig") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise TextDatasetError(
                    f"{path.name} is read as JSON Lines, but line {number} is not JSON; give one JSON object a line"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise TextDatasetError(f'{path.name} line {number} has no "text" string field')
            if record["text"].strip():
                documents.append((str(record.get("name", f"{path.stem}:{number}")), record["text"].strip()))
    return documents


def _read_json_document(path: Path) -> list[tuple[str, str]] | None:
    """A ``.json`` file that is one JSON document (an export's pretty-printed list of records, a
    list of strings, or one record), or ``None`` when it is not one document (then it is JSON Lines)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    records = data if isinstance(data, list) else [data]
    documents = []
    for number, record in enumerate(records, 1):
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            name, text = str(record.get("name", f"{path.stem}:{number}")), record["text"]
        elif isinstance(record, str):
            name, text = f"{path.stem}:{number}", record
        else:
            raise TextDatasetError(
                f'{path.name}: record {number} is neither a string nor an object with a "text" string field'
            )
        if text.strip():
            documents.append((name, text.strip()))
    return documents


def _read_table(path: Path, text: str, dialect: type[csv.Dialect]) -> list[tuple[str, str]] | None:
    """One document per row of a table's ``text`` column (and its ``name`` column if any), or
    ``None`` when the table has no ``text`` column (it is then read as plain text)."""
    reader = csv.reader(io.StringIO(text), dialect)
    header = [cell.strip().lower() for cell in next(reader, [])]
    if "text" not in header:
        return None
    column, name = header.index("text"), header.index("name") if "name" in header else None
    documents = []
    try:
        for row in reader:
            if len(row) != len(header):
                raise TextDatasetError(
                    f"{path.name} line {reader.line_num} has {len(row)} fields where the header has {len(header)}; "
                    "quote texts that hold the delimiter"
                )
            if row[column].strip():
                label = row[name] if name is not None and row[name].strip() else f"{path.stem}:{reader.line_num}"
                documents.append((label, row[column].strip()))
    except csv.Error as exc:
        raise TextDatasetError(f"{path.name} line {reader.line_num}: {exc}") from None
    return documents


def _read_file(path: Path) -> list[tuple[str, str]]:
    from mlcore.sniff import text_shape

    if path.stat().st_size == 0:
        raise TextDatasetError(f"{path.name} is empty; upload a UTF-8 text or JSONL file with some text in it")
    if path.suffix.lower() == ".json" and (documents := _read_json_document(path)) is not None:
        return documents
    if path.suffix.lower() in (".jsonl", ".json"):
        return _read_jsonl(path)
    try:
        text = path.read_text(encoding="utf-8-sig").strip()
    except UnicodeDecodeError:
        raise TextDatasetError(f"{path.name} is not UTF-8 text; give UTF-8 text, JSONL or CSV") from None
    # An upload keeps its name as given, which may not say JSONL: a first line that parses as a record
    # is one (a later line that does not is then named as the error, not read as prose).
    first = text.split("\n", 1)[0].strip()
    if first.startswith("{"):
        try:
            if isinstance(json.loads(first), dict):
                return _read_jsonl(path)
        except json.JSONDecodeError:
            pass
    shape = text_shape(path)
    if shape is not None and shape.format == "csv" and (rows := _read_table(path, text, shape.dialect)) is not None:
        return rows
    return [(path.name, text)] if text else []


def _is_text(path: Path, root: Path) -> bool:
    """Whether a file of a dataset folder is its text: not the item's ``card.json``, nor what systems
    and archivers leave behind (``.DS_Store``, ``__MACOSX/``, the build cache's ``.complete``)."""
    parts = path.relative_to(root).parts
    return path.name != "card.json" and not any(part.startswith((".", "__MACOSX")) for part in parts)


def load_text_dataset(path: Path, *, name: str | None = None) -> TextDataset:
    """Read a built-in corpus directory, a library item or unpacked upload, or one text file.

    Every file of a directory is read by its structure, as a single upload is: a CSV export in a
    library item is its rows, whatever its name, never skipped for its suffix."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _is_text(p, path))
        if not files:
            raise TextDatasetError(f"{path.name} holds no text files; add UTF-8 text, JSONL or CSV files")
    elif path.is_file():
        files = [path]
    else:
        raise TextDatasetError(f"{path} does not exist")
    documents: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    for file in files:
        read = _read_file(file)
        counts[file.relative_to(path).as_posix() if path.is_dir() else file.name] = len(read)
        documents += read
    total = sum(len(text) for _, text in documents)
    if total < MIN_CHARS:
        raise TextDatasetError(f"{path.name} has {total} characters of text; a text dataset needs at least {MIN_CHARS}")
    return TextDataset(name or path.name, documents, files=counts)


def source_splits(sources: tuple[str, ...], split: str) -> dict[str, list[str]]:
    """The ``split`` blocks of each named built-in text source (built on first use)."""
    from mlcore.catalog import materialize
    from mlcore.data.registry import DATASETS

    items = {item.name: item for item in DATASETS}
    unknown = [name for name in sources if name not in items]
    if unknown:
        raise TextDatasetError(f"no built-in text source named {unknown[0]!r}; known: {', '.join(items)}")
    return {name: load_text_dataset(materialize(items[name]), name=name).split(split) for name in sources}
