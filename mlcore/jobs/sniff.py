"""Recognise uploaded files by their content and unpack archives safely.

Extensions and browser-sent content types are never trusted: a file is what its first bytes
say. Archives are unpacked member by member with caps on count, total size and compression
ratio, refusing links and paths that leave the target directory (zip slip, tar bombs).
"""

from __future__ import annotations

import json
import struct
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from mlcore.jobs.spec import JobError

MAX_ARCHIVE_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 64 * 2**30
MAX_COMPRESSION_RATIO = 200

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
    return 2 <= header_len <= min(size - 8, 100 * 2**20) and head[8:9] == b"{"


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


def _sniff_text(path: Path, head: bytes) -> str | None:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the 4 KiB window is still text.
        if exc.start < len(head) - 4:
            return None
        text = head[: exc.start].decode("utf-8")
    if "\x00" in text:
        return None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return "json"
        except (ValueError, UnicodeDecodeError):
            pass
    first = text.splitlines()[0] if text else ""
    if first.count(",") >= 1 and len(text.splitlines()) > 1:
        return "csv"
    return "txt"


def require_format(path: Path, formats: tuple[str, ...], *, label: str) -> str:
    found = sniff(path)
    if formats and found not in formats:
        what = f"a {found} file" if found else "a file of unknown format"
        raise JobError(
            f"{label}: expected {' or '.join(formats)}, got {what}. Upload a {' or '.join(formats)} file "
            "(the format is read from the content, not from the file name)."
        )
    return found or "unknown"


def _safe_member_path(root: Path, name: str) -> Path:
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise JobError(f"Archive member {name!r} points outside the archive; refusing to unpack.")
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


def _check_totals(count: int, total: int, max_bytes: int, compressed: int) -> None:
    if count > MAX_ARCHIVE_MEMBERS:
        raise JobError(f"Archive has more than {MAX_ARCHIVE_MEMBERS} members.")
    if total > max_bytes:
        raise JobError(f"Archive unpacks to more than {max_bytes} bytes.")
    if total > 10 * 2**20 and total / compressed > MAX_COMPRESSION_RATIO:
        raise JobError("Archive expands more than 200x: refusing a likely decompression bomb.")


def _unzip(archive: Path, dest: Path, max_bytes: int, compressed: int) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _check_totals(len(infos), sum(i.file_size for i in infos), max_bytes, compressed)
            written = 0
            for info in infos:
                target = _safe_member_path(dest, info.filename)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise JobError(f"Archive member {info.filename!r} is a symbolic link; refusing.")
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as out:
                    # Count what is really written: the sizes in the directory can lie.
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > max_bytes:
                            raise JobError(f"Archive unpacks to more than {max_bytes} bytes.")
                        out.write(chunk)
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise JobError(f"{archive.name}: corrupt zip archive ({exc}).") from None


def _untar(archive: Path, dest: Path, max_bytes: int, compressed: int) -> None:
    try:
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            _check_totals(len(members), sum(m.size for m in members), max_bytes, compressed)
            for member in members:
                target = _safe_member_path(dest, member.name)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tf.extractfile(member)
                    assert src is not None
                    with src, target.open("wb") as out:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                else:
                    raise JobError(f"Archive member {member.name!r} is a link or device; refusing.")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise JobError(f"{archive.name}: corrupt tar archive ({exc}).") from None


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
