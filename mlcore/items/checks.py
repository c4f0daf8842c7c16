"""What a worker checks before a library item becomes usable, and the card it writes.

Django-free. Archives are unpacked with :func:`mlcore.sniff.unpack` (no links, no paths outside
the target, caps on size and compression ratio), then checked as a job's upload is, with the same
sentences (:func:`mlcore.uploads.check_tree`: links and pickles anywhere refused, every
safetensors header sound). Then the item goes through its kind's check (``ItemKind.check`` in
:mod:`mlcore.items.registry`), the loader that kind's jobs use. Loaders import torch, so only the
worker calls :func:`card_for`.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from mlcore import sniff, uploads
from mlcore.errors import JobError
from mlcore.items.registry import get_item_kind
from mlcore.uploads import files_of, relative_name

MAX_SOURCES = 20


def unpack_item(blob: Path, target: Path) -> Path:
    """A directory holding the item: an archive unpacked safely, a single file in a folder of its own."""
    fmt = sniff.sniff(blob)
    if fmt in sniff.ARCHIVES:
        sniff.unpack(blob, target)
        children = list(target.iterdir())
        # An archive of one folder ("my-model/config.json, ...") is that folder.
        return children[0] if len(children) == 1 and children[0].is_dir() else target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(blob, target / blob.name)
    return target


def check_tree(root: Path) -> None:
    """Refuse links anywhere in an item (a registered path could point a job at any file on the worker)."""
    uploads.check_links(root)


def tree_sha256(root: Path) -> str:
    """The content address of a directory: sha256 over its files' relative paths and sha256s."""
    digest = hashlib.sha256()
    for path in files_of(root):
        with path.open("rb") as f:
            file_digest = hashlib.file_digest(f, "sha256").hexdigest()
        digest.update(f"{path.relative_to(root).as_posix() if root.is_dir() else path.name}\0{file_digest}\n".encode())
    return digest.hexdigest()


def _run_check(kind: str, root: Path) -> dict[str, Any]:
    """The kind's check, with every loader failure turned into one line for the user."""
    check = get_item_kind(kind).check
    if check is None:
        raise JobError(f"A team library holds no {kind} items.")
    try:
        return check(root)
    except JobError:
        raise
    except (ValueError, OSError, RuntimeError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"It does not load as a {kind} item: {first[:300]}") from None


def card_for(kind: str, category: str, root: Path) -> dict[str, Any]:
    """Validate ``root`` as an item of ``kind`` and describe it; raises ``JobError`` with what to fix.

    The message names files by their place in the item, never by ``root``; a caller that shows it
    to users still passes it through its own path scrubbing (the web's ingest does), since a loader
    may name other folders of the worker."""
    check_tree(root)
    files = files_of(root)
    if not files:
        raise JobError("The item holds no files.")
    # Before any loader runs (some, diffusers' from_pretrained, would fall back to unpickling a .bin):
    # what a job's upload gets too, so both refuse the same content with the same sentence.
    uploads.check_tree(root)
    card: dict[str, Any] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    try:
        card |= _run_check(kind, root)
    except JobError as exc:
        # The worker's scratch path means nothing to the user; the rest of the message does.
        message = str(exc).replace(f"{root}: ", "").replace(f"{root}/", "").replace(str(root), root.name)
        raise JobError(message) from None
    if category == "dataset":
        card["sources"] = [relative_name(p, root) for p in files[:MAX_SOURCES]]
    return card
