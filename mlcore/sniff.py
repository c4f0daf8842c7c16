"""Recognise uploaded files by their content and unpack archives safely.

Extensions and browser-sent content types are never trusted: a file is what its first bytes
say. Archives are unpacked member by member with caps on count, total size and compression
ratio, refusing links and paths that leave the target directory (zip slip, tar bombs).

Used by the job layer (uploads, ``mlcore.jobs.runner``) and by the item kinds' checks
(``mlcore.items``) alike, so it sits below both, beside the method packages: it asks
:mod:`mlcore.pointcloud.io.formats` about point clouds.
"""

from __future__ import annotations

import csv
import io
import json
import lzma
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from mlcore.errors import JobError
from mlcore.uploads import MAX_SAFETENSORS_HEADER

MAX_ARCHIVE_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 64 * 2**30
MAX_COMPRESSION_RATIO = 200
#: The formats :func:`unpack` takes apart.
ARCHIVES = ("zip", "tar")

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
    (b"\x1f\x8b", "gzip"),
    (b"ply\n", "ply"),
    (b"ply\r\n", "ply"),
)


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 10:
        return False
    (header_len,) = struct.unpack("<Q", head[:8])
    return 2 <= header_len <= min(size - 8, MAX_SAFETENSORS_HEADER) and head[8:9] == b"{"


def sniff(path: Path) -> str | None:
    """Name the format of ``path`` from its content, or ``None`` if it is not one we know."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(4096)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            if name == "gzip":
                return "tar" if _is_tar(path) else "gzip"
            return name
    # Point clouds (pcd, las/laz as "las", xyz/xyzrgb/pts text as "xyz"): their module knows them.
    from mlcore.pointcloud.io.formats import upload_format

    if (cloud := upload_format(head)) is not None:
        return cloud
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):  # EBML: the header's DocType says WebM or Matroska
        return "webm" if b"webm" in head[:64] else "mkv"
    if _is_safetensors(head, size):
        return "safetensors"
    if _is_tar(path):
        return "tar"
    return _sniff_text(path, head)


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (OSError, EOFError, tarfile.TarError):
        return False


#: Text is recognised from its first lines: enough rows to see a table's shape or a JSONL file's
#: records without reading a 200 MB upload whole.
SNIFF_BYTES = 1 << 20
SNIFF_LINES = 200
#: The delimiters a table may use: comma, tab (TSV), semicolon (spreadsheets in comma-decimal
#: locales) and bar. Never a space: that would make every paragraph of prose a table.
CSV_DELIMITERS = ",\t;|"
TEXT_FORMATS = ("json", "jsonl", "csv", "txt")


@dataclass(frozen=True)
class TextShape:
    """What a text file is (``json``, ``jsonl``, ``csv`` or ``txt``) and, for ``txt``, why it is
    not one of the structured formats, naming the line that decided it (for refusals)."""

    format: str
    reason: str = ""
    #: For ``csv``: the delimiter that splits every sampled row alike (readers take it from here).
    delimiter: str = ""

    @property
    def dialect(self) -> type[csv.Dialect]:
        return _standard(self.delimiter or ",")


def _sniff_text(path: Path, head: bytes) -> str | None:
    shape = text_shape(path, head)
    return shape.format if shape is not None else None


def _decoded(head: bytes) -> str | None:
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the window is still text.
        if exc.start < len(head) - 4:
            return None
        return head[: exc.start].decode("utf-8")


def _sample_lines(path: Path) -> tuple[list[str], bool]:
    """The first complete lines of the file (BOM and Windows line ends removed) and whether the
    file goes on past them. A line cut by the sample window is dropped: it would look malformed."""
    with path.open("rb") as f:
        raw = f.read(SNIFF_BYTES + 1)
    more = len(raw) > SNIFF_BYTES
    text = _decoded(raw[:SNIFF_BYTES]) or ""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if more or (lines and lines[-1] == ""):
        lines = lines[:-1]  # the cut line, or the empty string after the final newline
    truncated = more or len(lines) > SNIFF_LINES
    return lines[:SNIFF_LINES], truncated


def _jsonl_problem(lines: list[tuple[int, str]]) -> str:
    """Why these numbered non-empty lines are not JSON Lines, or "" when every one is a JSON object."""
    for number, line in lines:
        try:
            record = json.loads(line)
        except ValueError as exc:
            return f"line {number} is not JSON ({getattr(exc, 'msg', exc)} at column {getattr(exc, 'colno', 1)})"
        if not isinstance(record, dict):
            return f"line {number} is a JSON {type(record).__name__.replace('dict', 'object')}, not a JSON object"
    return ""


def _csv_problem(lines: list[tuple[int, str]], truncated: bool) -> str:
    """Why these lines, which no delimiter splits alike (:func:`_delimiter`), are not a table."""
    # To name the row that does not fit, split by the delimiter the first line uses most.
    first = lines[0][1]
    delimiter = max(CSV_DELIMITERS, key=first.count)
    if not first.count(delimiter):
        return "no delimiter (comma, tab, semicolon or bar) splits its lines into the same number of fields"
    rows = _rows(lines, truncated, delimiter)
    if isinstance(rows, str):
        return rows
    name = {",": "comma", "\t": "tab", ";": "semicolon", "|": "bar"}[delimiter]
    if len(rows) < 2:
        return "it has fewer than two rows"
    first_line, width = rows[0]
    if width < 2:
        return f"line {first_line} has no {name}-separated fields"
    for number, count in rows[1:]:
        if count != width:
            return f"line {number} has {count} {name}-separated fields where line {first_line} has {width}"
    return "its rows do not split into the same number of fields"


def _rows(lines: list[tuple[int, str]], truncated: bool, delimiter: str) -> list[tuple[int, int]] | str:
    """(line number, field count) of each non-empty row split by ``delimiter`` with standard CSV
    quoting (a quoted field may hold the delimiter, line breaks and doubled quotes), or why the
    lines do not parse. A row cut by the sample window is left out."""
    sample = "\n".join(line for _, line in lines)
    rows: list[tuple[int, int]] = []
    try:
        reader = csv.reader(io.StringIO(sample), _standard(delimiter))
        for row in reader:
            if any(cell.strip() for cell in row):
                rows.append((lines[min(reader.line_num, len(lines)) - 1][0], len(row)))
    except csv.Error as exc:
        return f"it does not parse as delimited rows ({exc})"
    if truncated and len(rows) > 2:
        rows = rows[:-1]  # a quoted field may run past the sample
    return rows


def _delimiter(lines: list[tuple[int, str]], truncated: bool) -> str | None:
    """The delimiter that splits the header and every sampled row into the same number (≥ 2) of
    fields, tried in the order the header uses them most; ``None`` when none does.

    Each candidate is parsed, not guessed: a dialect sniffer looks at character counts, so a
    semicolon export whose prose and decimal numbers hold commas, or a TSV whose quoted cells hold
    line breaks, was taken for something else and read as one document."""
    header = lines[0][1]
    for delimiter in sorted((d for d in CSV_DELIMITERS if d in header), key=header.count, reverse=True):
        rows = _rows(lines, truncated, delimiter)
        consistent = isinstance(rows, list) and len(rows) >= 2 and rows[0][1] >= 2
        if consistent and all(count == rows[0][1] for _, count in rows):
            return delimiter
    return None


def text_shape(path: Path, head: bytes | None = None) -> TextShape | None:
    """The structure of a text file, or ``None`` when it is not UTF-8 text.

    JSON when the whole file is one JSON document; JSONL when every non-empty line parses as a JSON
    object; CSV when a dialect sniffer finds a delimiter and the sampled rows all have the same
    number of fields (so prose with commas, or JSONL with commas, is not a table); text otherwise.
    """
    if head is None:
        with path.open("rb") as f:
            head = f.read(4096)
    text = _decoded(head)
    if text is None or "\x00" in text:
        return None
    lines, truncated = _sample_lines(path)
    numbered = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        return TextShape("txt", "it is empty")
    jsonl = _jsonl_problem(numbered)
    if not jsonl and (len(numbered) > 1 or truncated):
        return TextShape("jsonl")
    if text.removeprefix("\ufeff").lstrip().startswith(("{", "[")):
        try:
            json.loads(path.read_text(encoding="utf-8-sig"))
            return TextShape("json")
        except (ValueError, UnicodeDecodeError):
            pass
    if not _jsonl_problem(numbered[:1]):
        # It starts as JSON Lines, so a later line that is not a record is a broken record, not a
        # sign of a table (JSONL's quoted commas can look like consistent CSV fields).
        return TextShape("txt", jsonl)
    delimiter = _delimiter(numbered, truncated)
    if delimiter is not None:
        return TextShape("csv", delimiter=delimiter)
    table = _csv_problem(numbered, truncated)
    # The reason a refusal gives: JSON's when the file starts like JSON, else the table's.
    return TextShape("txt", jsonl if numbered[0][1].lstrip().startswith(("{", "[")) else table)


def _standard(delimiter: str) -> type[csv.Dialect]:
    """Standard CSV quoting (``"``, doubled to escape) with this delimiter."""
    return type("Delimited", (csv.excel,), {"delimiter": delimiter})


def csv_dialect(path: Path) -> type[csv.Dialect]:
    """The dialect of a file :func:`sniff` calls ``csv`` (plain CSV when none is found). Readers of
    tables use it, so a TSV or a semicolon-separated export reads like a CSV; it is the delimiter
    :func:`text_shape` found, never a second guess."""
    lines, truncated = _sample_lines(path)
    numbered = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    delimiter = _delimiter(numbered, truncated) if numbered else None
    return _standard(delimiter or ",")


def require_format(path: Path, formats: tuple[str, ...], *, label: str) -> str:
    found = sniff(path)
    if formats and found not in formats:
        if "xyz" in formats and found in ("txt", "csv"):
            # Text that is nearly a cloud: name the line that keeps it from being one.
            from mlcore.pointcloud.io.formats import text_cloud_problem

            if (problem := text_cloud_problem(path)) is not None:
                raise JobError(f"{label}: {problem}")
        what = f"a {found} file" if found else "a file of unknown format"
        if found in TEXT_FORMATS and (shape := text_shape(path)) is not None and shape.reason:
            what += f" ({shape.reason})"
        raise JobError(
            f"{label}: expected {' or '.join(formats)}, got {what}. Upload a {' or '.join(formats)} file "
            "(the format is read from the content, not from the file name)."
        )
    return found or "unknown"


def _safe_member_path(root: Path, name: str, archive: str, *, folder: bool = False) -> Path:
    pure = PurePosixPath(name.replace("\\", "/"))
    if not pure.parts:
        if folder:  # "./", the first member of every `tar -C dir -czf out.tgz .`: the root itself
            return root
        raise JobError(f"{archive}: a file member has an empty name ({name!r}); the archive is corrupt.")
    if pure.is_absolute() or ".." in pure.parts:
        how = "is an absolute path" if pure.is_absolute() else "climbs up with '..'"
        raise JobError(
            f"{archive}: member {name[:100]!r} {how}, which points outside the archive; refusing to unpack. "
            "Archive the files with paths relative to their folder."
        )
    return root.joinpath(*pure.parts)


def unpack(archive: Path, dest: Path, *, max_bytes: int = MAX_UNPACKED_BYTES) -> Path:
    """Unpack a zip or tar(.gz) into ``dest`` safely and return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    kind = sniff(archive)
    compressed = max(archive.stat().st_size, 1)
    if kind == "zip":
        _unzip(archive, dest, max_bytes, compressed)
    elif kind == "tar":
        _untar(archive, dest, max_bytes, compressed)
    else:
        raise JobError(f"{archive.name}: not a zip or tar archive.")
    return dest


def _gib(size: int) -> str:
    return f"{size:,} bytes ({size / 2**30:.1f} GiB)" if size >= 2**30 else f"{size:,} bytes"


def _check_totals(archive: str, count: int, total: int, max_bytes: int, compressed: int) -> None:
    """The caps, from the sizes the archive declares, before anything is written; each message states its cap."""
    if count > MAX_ARCHIVE_MEMBERS:
        raise JobError(
            f"{archive}: holds {count:,} members, more than the {MAX_ARCHIVE_MEMBERS:,} an upload may hold. "
            "Split it into archives of fewer files, or ask an admin to register the data in the team library."
        )
    if total > max_bytes:
        raise JobError(
            f"{archive}: its members add up to {_gib(total)} unpacked, more than the limit of {_gib(max_bytes)}. "
            "Upload less, or ask an admin to register the data in the team library."
        )
    if total > 10 * 2**20 and total / compressed > MAX_COMPRESSION_RATIO:
        raise JobError(
            f"{archive}: its {compressed:,} bytes declare {total:,} bytes unpacked, {total / compressed:,.0f} times "
            f"as many; archives may expand at most {MAX_COMPRESSION_RATIO}×, so this is refused as a likely "
            "decompression bomb. If the data is real, store it with less compression (zip -0) and upload again."
        )


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isdev():
        return "a device or FIFO"
    return "not a regular file or folder"


def _unzip(archive: Path, dest: Path, max_bytes: int, compressed: int) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _check_totals(archive.name, len(infos), sum(i.file_size for i in infos), max_bytes, compressed)
            written = 0
            for info in infos:
                target = _safe_member_path(dest, info.filename, archive.name, folder=info.is_dir())
                if info.is_dir():
                    _mkdir(archive.name, info.filename, target)
                    continue
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise JobError(
                        f"{archive.name}: member {info.filename[:100]!r} is a symbolic link; refusing it (a link "
                        "could point at any file on the server). Archive the files themselves (zip without -y)."
                    )
                _mkdir(archive.name, info.filename, target.parent)
                with zf.open(info) as src, _create(archive.name, info.filename, target) as out:
                    # Count what is really written: the sizes in the directory can lie.
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > max_bytes:
                            raise JobError(
                                f"{archive.name}: unpacks to more than the limit of {_gib(max_bytes)}, more than "
                                "its directory declares: the archive lies about its sizes; refused."
                            )
                        out.write(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise JobError(f"{archive.name}: corrupt zip archive ({_reason(exc)}).") from None


def _untar(archive: Path, dest: Path, max_bytes: int, compressed: int) -> None:
    try:
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            _check_totals(archive.name, len(members), sum(m.size for m in members), max_bytes, compressed)
            for member in members:
                target = _safe_member_path(dest, member.name, archive.name, folder=member.isdir())
                if member.isdir():
                    _mkdir(archive.name, member.name, target)
                elif member.isfile():
                    _mkdir(archive.name, member.name, target.parent)
                    src = tf.extractfile(member)
                    assert src is not None
                    with src, _create(archive.name, member.name, target) as out:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                else:
                    raise JobError(
                        f"{archive.name}: member {member.name[:100]!r} is {_member_kind(member)}; an archive may "
                        "hold only files and folders (a link could point at any file on the server)."
                    )
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise JobError(f"{archive.name}: corrupt tar archive ({_reason(exc)}).") from None


def _written(archive: str, member: str, exc: OSError) -> JobError:
    # A member the file system will not take (a name too long, say) is not corruption, and the
    # OSError's own text names a server path: say which member, and why, in the user's terms.
    return JobError(
        f"{archive}: member {member[:100]!r} cannot be written ({exc.strerror or type(exc).__name__}). "
        "Rename it (shorter names, no special characters) and upload again."
    )


def _mkdir(archive: str, member: str, folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _written(archive, member, exc) from None


def _create(archive: str, member: str, target: Path) -> BinaryIO:
    try:
        return target.open("wb")
    except OSError as exc:
        raise _written(archive, member, exc) from None


def _reason(exc: BaseException) -> str:
    """Why unpacking failed, without the path an ``OSError`` names (a folder on the server)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def unpacked_checkpoint(root: Path, *, label: str, marker: str = "config.json") -> Path:
    """The folder of an unpacked checkpoint archive that holds ``marker``: the archive's root or a
    folder one level down (archives made of a directory). A :class:`JobError` naming ``label`` otherwise."""
    for folder in [root, *sorted(p.parent for p in root.glob(f"*/{marker}"))]:
        if (folder / marker).is_file():
            return folder
    raise JobError(f"{label}: the uploaded archive holds no {marker}; archive the checkpoint directory.")


def native_architecture(folder: Path) -> str | None:
    """The ``architecture`` MoE Lab's own checkpoints name in config.json (e.g. ``lora-tiny-encoder``),
    or ``None`` for a Hugging Face checkpoint (whose config has a ``model_type``) or no readable config."""
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or "model_type" in raw or not isinstance(raw.get("architecture"), str):
        return None
    return raw["architecture"]
