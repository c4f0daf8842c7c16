"""Writes for the library: resumable uploads, registering worker paths, promoting artifacts,
recording what jobs use, and deleting. Keyword-only, typed and validating.

A refused request raises :class:`LibraryError` with a one-line message for the user;
permission failures raise ``PermissionDenied``. Validation of content happens in the worker
(:mod:`webapp.library.ingest`); until then an item is ``pending`` and no job can pick it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.files import File
from django.db import transaction
from django.utils import timezone

from mlcore import sniff
from mlcore.items.registry import category_of
from mlcore.jobs.params import Dataset, Model
from mlcore.jobs.registry import Kind
from webapp.accounts.models import Membership, Team
from webapp.jobs.models import Job, JobArtifact
from webapp.library import storage
from webapp.library.models import ChunkedUpload, LibraryItem, LibraryUse
from webapp.library.offers import artifact_format
from webapp.library.selectors import item_for_reference

CHUNK_READ = 1 << 20


class LibraryError(Exception):
    """A library request that cannot be accepted; the message says what to do."""


class OffsetMismatch(LibraryError):
    """A chunk that does not start where the upload stands; ``received`` is where to resume."""

    def __init__(self, received: int) -> None:
        self.received = received
        super().__init__(f"The upload has {received} bytes; send the chunk that starts at offset {received}.")


class ItemInUse(LibraryError):
    def __init__(self, item: LibraryItem, jobs: list[Job]) -> None:
        self.jobs = jobs
        names = ", ".join(str(job.pk)[:8] for job in jobs)
        those = "that job" if len(jobs) == 1 else "those jobs"
        super().__init__(f"{item.name} is used by {_count(len(jobs), 'job')}: {names}. Delete {those} first.")


def _count(n: int, noun: str) -> str:
    """``1 job``, ``3 jobs``: counts in messages agree with their noun."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _require_write(team: Team, user: AbstractBaseUser) -> None:
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise PermissionDenied("You are not in this team.")
    if not membership.can_write:
        raise PermissionDenied("Viewers cannot change the library.")


def _checked_kind(kind: str) -> str:
    try:
        category_of(kind)
    except ValueError as exc:
        raise LibraryError(str(exc)) from None
    return kind


def _checked_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise LibraryError("Give the item a name of 1 to 200 characters.")
    return name


def enqueue_ingest(item: LibraryItem) -> None:
    """Validate in a worker once the row is committed (the web never imports torch)."""
    from webapp.celery import LIBRARY_INGEST, app

    def send() -> None:
        LibraryItem.objects.filter(pk=item.pk).update(ingest_sent_at=timezone.now())
        app.send_task(LIBRARY_INGEST, args=[item.pk], queue="cpu")

    transaction.on_commit(send)


# -- resumable uploads -------------------------------------------------------------------------------


def part_path(upload: ChunkedUpload) -> Path:
    return Path(settings.LIBRARY_UPLOAD_DIR) / f"{upload.pk}.part"


def upload_start(
    *, team: Team, user: AbstractBaseUser, name: str, filename: str, kind: str, size: int
) -> ChunkedUpload:
    _require_write(team, user)
    if not 0 < size <= settings.LIBRARY_MAX_BYTES:
        raise LibraryError(f"The file must be 1 to {settings.LIBRARY_MAX_BYTES} bytes; it is {size}.")
    sweep_abandoned_uploads()
    upload = ChunkedUpload.objects.create(
        team=team,
        user=user,
        name=_checked_name(name),
        filename=Path((filename or "upload").replace("\\", "/")).name[:255] or "upload",
        kind=_checked_kind(kind),
        size=size,
    )
    part_path(upload).parent.mkdir(parents=True, exist_ok=True)
    part_path(upload).write_bytes(b"")
    return upload


def sweep_abandoned_uploads(*, idle_seconds: int | None = None) -> int:
    """Drop uploads nobody appended to for ``idle_seconds``, with their part files; returns how many.

    Part files live on the web host that received them, so the sweep runs on the web side (each new
    upload starts one) rather than in beat, which may run on a host without those files.
    """
    idle_seconds = idle_seconds if idle_seconds is not None else settings.LIBRARY_UPLOAD_ABANDON_SECONDS
    cutoff = timezone.now() - timedelta(seconds=idle_seconds)
    abandoned = list(ChunkedUpload.objects.filter(updated_at__lt=cutoff))
    for upload in abandoned:
        _discard(upload)
    return len(abandoned)


def upload_append(*, upload: ChunkedUpload, offset: int, stream: IO[bytes], length: int) -> int:
    """Append one chunk at ``offset`` (which must be the bytes received so far); returns the new total."""
    if offset != upload.received:
        raise OffsetMismatch(upload.received)
    if length <= 0 or offset + length > upload.size:
        raise LibraryError(f"A chunk must hold 1 to {upload.size - offset} bytes; this one holds {length}.")
    with part_path(upload).open("r+b") as out:
        # A connection dropped mid-chunk may have left bytes past ``received``: they are not counted.
        out.truncate(offset)
        out.seek(offset)
        left = length
        while left and (piece := stream.read(min(CHUNK_READ, left))):
            out.write(piece)
            left -= len(piece)
    if left:
        raise LibraryError(f"The chunk ended after {length - left} of {length} bytes; resend it.")
    ChunkedUpload.objects.filter(pk=upload.pk, received=offset).update(received=offset + length)
    upload.received = offset + length
    return upload.received


def upload_complete(*, upload: ChunkedUpload) -> LibraryItem:
    """Store the finished upload as a pending item and queue its validation; the same content
    uploaded again (same kind) is the existing item."""
    if upload.received != upload.size:
        raise LibraryError(f"The upload has {upload.received} of {upload.size} bytes; send the rest first.")
    part = part_path(upload)
    digest = storage.sha256_of_file(part)
    existing = LibraryItem.objects.filter(team=upload.team, kind=upload.kind, sha256=digest).first()
    if existing is not None:
        _discard(upload)
        return existing
    with transaction.atomic():
        item = LibraryItem(
            team=upload.team,
            name=upload.name,
            kind=upload.kind,
            format=sniff.sniff(part) or "unknown",
            size=upload.size,
            sha256=digest,
            source=LibraryItem.Source.UPLOAD,
            added_by=upload.user,
        )
        storage.save_blob(item, part, upload.filename)
        item.save()
        enqueue_ingest(item)
    _discard(upload)
    return item


def _discard(upload: ChunkedUpload) -> None:
    part_path(upload).unlink(missing_ok=True)
    upload.delete()


# -- other ways in -------------------------------------------------------------------------------------


def item_register_path(*, team: Team, user: AbstractBaseUser, name: str, kind: str, path: str) -> LibraryItem:
    """Register a file or directory that exists on the workers (admins only: it exposes worker disk)."""
    _require_write(team, user)
    if not getattr(user, "is_staff", False):
        raise PermissionDenied("Only administrators can register paths on the workers.")
    if not path.startswith("/") or "\x00" in path or len(path) > 1000:
        raise LibraryError("Give an absolute path on the workers, e.g. /models/mixtral-tiny.")
    item = LibraryItem.objects.create(
        team=team,
        name=_checked_name(name),
        kind=_checked_kind(kind),
        format="directory",
        worker_path=path,
        source=LibraryItem.Source.PATH,
        added_by=user,
    )
    enqueue_ingest(item)
    return item


def item_promote(*, artifact: JobArtifact, user: AbstractBaseUser, kind: str, name: str = "") -> LibraryItem:
    """Offer a job's artifact to the library with one click; it is validated like an upload."""
    _require_write(artifact.job.team, user)
    if not kind:
        raise LibraryError(f"Choose the library kind of {artifact.name} (what it is), then add it again.")
    kind = _checked_kind(kind)
    with artifact.file.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    team = artifact.job.team
    existing = LibraryItem.objects.filter(team=team, kind=kind, sha256=digest).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        item = LibraryItem(
            team=team,
            name=_checked_name(name or artifact.name),
            kind=kind,
            format=artifact_format(artifact) or "unknown",
            size=artifact.size,
            sha256=digest,
            source=LibraryItem.Source.JOB,
            added_by=user,
            produced_by=artifact.job,
        )
        # A copy, not the artifact's file: a re-run may replace the artifact; the item never changes.
        with artifact.file.open("rb") as f:
            item.file.save(Path(artifact.file.name).name, File(f), save=False)
        item.save()
        enqueue_ingest(item)
    return item


def item_delete(*, item: LibraryItem, user: AbstractBaseUser) -> None:
    """Delete an item and its blob; refused while any job records having used it."""
    membership = Membership.objects.filter(team=item.team, user=user).first()
    if membership is None or not membership.is_owner:
        raise PermissionDenied("Only the team's owners can delete library items.")
    jobs = [use.job for use in LibraryUse.objects.filter(item=item).select_related("job").order_by("created_at")]
    if jobs:
        raise ItemInUse(item, jobs)
    storage.delete_blob(item)
    item.delete()


# -- lineage -------------------------------------------------------------------------------------------


def record_uses(*, job: Job, kind: Kind, params: Mapping[str, Any]) -> list[LibraryUse]:
    """Record, at submission, the exact items (by sha256) a job's references name."""
    uses = []
    for param in kind.spec.value_params:
        reference = params.get(param.name)
        if isinstance(param, Model | Dataset) and isinstance(reference, str) and reference.startswith("library:"):
            item = item_for_reference(job.team_id, param, reference)
            uses.append(LibraryUse.objects.create(job=job, item=item, param=param.name, sha256=item.sha256))
    return uses
