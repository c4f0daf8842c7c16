"""The ``library-ingest`` step, run in a worker: sniff, unpack safely, validate, write the card.

Only then does an item become ``ready`` (pickable by jobs). A refused item keeps its row with the
reason, so the uploader sees why, but nothing of its content stays in storage. Job outputs
(``ctx.register``) go through the same checks, inline, since the worker is already there.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from mlcore import sniff
from mlcore.errors import JobError
from mlcore.items.checks import card_for, tree_sha256, unpack_item
from mlcore.items.registry import category_of
from mlcore.jobs.runner import scrub_paths
from mlcore.uploads import files_of
from webapp.jobs.models import Job
from webapp.library import storage
from webapp.library.models import LibraryItem

log = logging.getLogger(__name__)


def _card(item: LibraryItem, root: Path) -> dict[str, Any]:
    """The item kind's check and card (``mlcore.items``), its refusal safe to store for the user: the
    check names files inside the item, and a loader may still name a folder of this worker."""
    try:
        return card_for(item.kind, category_of(item.kind), root)
    except JobError as exc:
        raise JobError(scrub_paths(str(exc))) from None


def _validate_blob(item: LibraryItem, scratch: Path) -> dict[str, Any]:
    blob = storage.download_blob(item, scratch / "blob" / Path(item.file.name).name)
    root = unpack_item(blob, scratch / "unpacked")
    return _card(item, root)


def _validate_path(item: LibraryItem) -> dict[str, Any]:
    root = Path(item.worker_path)
    if not root.exists() and not root.is_symlink():
        raise JobError(f"{item.worker_path} does not exist on this worker; register a path every worker has.")
    card = _card(item, root)
    item.sha256 = tree_sha256(root)
    item.size = sum(p.stat().st_size for p in files_of(root))
    item.format = "directory" if root.is_dir() else sniff.sniff(root) or "unknown"
    return card


def reject(item: LibraryItem, message: str) -> None:
    storage.delete_blob(item)
    LibraryItem.objects.filter(pk=item.pk).update(
        status=LibraryItem.Status.REJECTED, error=message[:2000], file="", sha256=""
    )
    item.refresh_from_db()


def validate(item: LibraryItem, *, given_card: dict[str, Any] | None = None) -> str:
    """Validate a pending item; returns its new status."""
    try:
        with tempfile.TemporaryDirectory(prefix="moelab-ingest-") as scratch:
            card = _validate_path(item) if item.worker_path else _validate_blob(item, Path(scratch))
    except JobError as exc:
        reject(item, str(exc))
        return item.status
    item.card = {**card, **(given_card or {})}
    item.status = LibraryItem.Status.READY
    try:
        with transaction.atomic():
            item.save(update_fields=["card", "status", "sha256", "size", "format"])
    except IntegrityError:
        same = LibraryItem.objects.filter(team=item.team_id, kind=item.kind, sha256=item.sha256).first()
        reject(item, f"The same content is already in the library as {same.name if same else 'another item'}.")
    return item.status


def ingest_item(item_id: int) -> str:
    """The worker task's body: validate one pending item (a duplicate delivery finds it done)."""
    item = LibraryItem.objects.filter(pk=item_id, status=LibraryItem.Status.PENDING).first()
    if item is None:
        return "skipped"
    status = validate(item)
    log.info("library item %s: %s %s", item_id, status, item.error)
    return status


def register_output(*, job: Job, kind: str, path: Path, card: dict[str, Any]) -> LibraryItem:
    """``ctx.register``: store a job's output as an item made by the job, validated at once."""
    try:
        category_of(kind)
    except ValueError as exc:
        raise JobError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="moelab-register-") as scratch:
        blob = storage.pack_directory(path, Path(scratch) / f"{path.name}.zip") if path.is_dir() else path
        digest = storage.sha256_of_file(blob)
        existing = LibraryItem.objects.filter(team=job.team_id, kind=kind, sha256=digest).first()
        if existing is not None:
            return existing
        item = LibraryItem(
            team_id=job.team_id,
            name=str(card.get("name") or path.name)[:200],
            kind=kind,
            format=sniff.sniff(blob) or "unknown",
            size=blob.stat().st_size,
            sha256=digest,
            source=LibraryItem.Source.JOB,
            added_by_id=job.submitted_by_id,
            produced_by=job,
        )
        storage.save_blob(item, blob, blob.name)
        item.save()
    validate(item, given_card={k: v for k, v in card.items() if k != "name"})
    return item
