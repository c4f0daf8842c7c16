"""Library blobs in the platform's storage (a folder or an S3-compatible bucket, like artifacts),
and the worker's way of getting an item onto its disk: by sha256, through the bounded cache."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.http import FileResponse

from mlcore.items.checks import check_tree, tree_sha256, unpack_item
from mlcore.jobs.spec import JobError
from mlcore.uploads import files_of
from webapp.library.cache import LibraryCache
from webapp.library.models import LibraryItem

#: Fixed member timestamps: the same directory always zips to the same bytes, hence the same sha256.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def sha256_of_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def pack_directory(source: Path, target: Path) -> Path:
    """Zip ``source`` deterministically (sorted members, fixed times), so equal content is one item."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(path.relative_to(source).as_posix(), date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                with path.open("rb") as src, zf.open(info, "w") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    return target


def save_blob(item: LibraryItem, path: Path, filename: str) -> None:
    with path.open("rb") as f:
        item.file.save(Path(filename).name or "item", File(f), save=False)


def download_blob(item: LibraryItem, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with item.file.open("rb") as src, target.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return target


def download_response(item: LibraryItem) -> FileResponse:
    """The stored blob as an attachment; user content on our origin, so it may never run as a page."""
    response = FileResponse(item.file.open("rb"), as_attachment=True, filename=item.file.name.rsplit("/", 1)[-1])
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def delete_blob(item: LibraryItem) -> None:
    if item.file:
        item.file.delete(save=False)


def worker_cache() -> LibraryCache:
    return LibraryCache(settings.LIBRARY_CACHE_DIR, settings.LIBRARY_CACHE_BYTES)


def _stat_signature(root: Path) -> str:
    """A cheap fingerprint of a tree (paths, sizes, mtimes): unchanged means no need to hash again."""
    digest = hashlib.sha256()
    for path in files_of(root):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def verified_worker_path(item: LibraryItem) -> Path:
    """The item's worker path, after proving it still holds the content validated (items are immutable).

    Hashing a multi-GB checkpoint for every job would be slow, so each host remembers the stat
    signature it last verified and hashes again only when sizes or mtimes moved.
    """
    root = Path(item.worker_path)
    if not root.exists():
        # The folder is named to staff (the admin), not to the team's users whose job reads it.
        raise JobError(f"{item.name}: its registered path does not exist on this worker; ask an admin to fix it.")
    check_tree(root)
    signature = _stat_signature(root)
    stamp = Path(settings.LIBRARY_CACHE_DIR) / "verified-paths" / item.sha256
    if stamp.is_file() and stamp.read_text() == signature:
        return root
    if tree_sha256(root) != item.sha256:
        raise JobError(
            f"{item.name}: its folder changed on this worker since it was registered. Library items never change; "
            "register the new content as a new item (or restore the old one)."
        )
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(signature)
    return root


def local_copy(item: LibraryItem) -> Path:
    """A local directory holding a ready item: its (verified) worker path, or its blob fetched once
    into the cache."""
    if item.worker_path:
        return verified_worker_path(item)

    def fill(folder: Path) -> Path:
        blob = download_blob(item, folder.parent / "blob" / Path(item.file.name).name)
        try:
            return unpack_item(blob, folder)
        finally:
            shutil.rmtree(blob.parent, ignore_errors=True)

    return worker_cache().get(item.sha256, fill)
