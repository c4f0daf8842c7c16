"""Recognise uploaded files by their content and unpack archives safely.

Extensions and browser-sent content types are never trusted: a file is what its first bytes
say. Archives are unpacked member by member with caps on count, total size and compression
ratio, refusing links and paths that leave the target directory (zip slip, tar bombs).

Used by the job layer (uploads, ``mlcore.jobs.runner``) and by the item kinds' checks
(``mlcore.items``) alike, so it sits below both, beside the method packages: it asks
:mod:`mlcore.pointcloud.io.formats` about point clouds.
"""

from __future__ import annotations

import json
import lzma
import struct
import tarfile
import zipfile
import zlib
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
        if "xyz" in formats and found in ("txt", "csv"):
            # Text that is nearly a cloud: name the line that keeps it from being one.
            from mlcore.pointcloud.io.formats import text_cloud_problem

            if (problem := text_cloud_problem(path)) is not None:
                raise JobError(f"{label}: {problem}")
        what = f"a {found} file" if found else "a file of unknown format"
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
