"""What the worker checks before a library item becomes usable, and the card it writes.

Django-free. Archives are unpacked with :func:`mlcore.jobs.sniff.unpack` (no links, no paths
outside the target, caps on size and compression ratio); Hugging Face checkpoints go through
:func:`mlcore.hf.checkpoint.checked_config` (safetensors only, no remote code, a supported MoE
architecture), which imports torch, so only the worker calls :func:`card_for` on a model.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
from pathlib import Path
from typing import Any

from mlcore.jobs import sniff
from mlcore.jobs.spec import JobError

ARCHIVES = ("zip", "tar")
#: Files whose records a text card counts, by sniffed format.
TEXT_FORMATS = ("txt", "csv", "json")
MAX_SOURCES = 20


def unpack_item(blob: Path, target: Path) -> Path:
    """A directory holding the item: an archive unpacked safely, a single file in a folder of its own."""
    fmt = sniff.sniff(blob)
    if fmt in ARCHIVES:
        sniff.unpack(blob, target)
        children = list(target.iterdir())
        # An archive of one folder ("my-model/config.json, ...") is that folder.
        return children[0] if len(children) == 1 and children[0].is_dir() else target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(blob, target / blob.name)
    return target


def check_tree(root: Path) -> None:
    """Refuse links anywhere in an item (a registered path could point a job at any file on the worker)."""
    if root.is_symlink():
        raise JobError(f"{root.name} is a symbolic link; register the directory it points to instead.")
    for path in root.rglob("*"):
        if path.is_symlink():
            raise JobError(f"{path.relative_to(root)} is a symbolic link; refusing the item.")


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]


def tree_sha256(root: Path) -> str:
    """The content address of a directory: sha256 over its files' relative paths and sha256s."""
    digest = hashlib.sha256()
    for path in files_of(root):
        with path.open("rb") as f:
            file_digest = hashlib.file_digest(f, "sha256").hexdigest()
        digest.update(f"{path.relative_to(root).as_posix() if root.is_dir() else path.name}\0{file_digest}\n".encode())
    return digest.hexdigest()


def safetensors_parameters(path: Path) -> int:
    """Parameters in a safetensors file, from its header alone (no tensor is read)."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100 * 2**20:
            raise JobError(f"{path.name}: safetensors header is implausibly large; the file is corrupt.")
        try:
            header = json.loads(f.read(length))
        except ValueError:
            raise JobError(f"{path.name}: corrupt safetensors header.") from None
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def hf_moe_card(root: Path) -> dict[str, Any]:
    """Architecture, parameter count, layers, experts per layer and top-k of an HF MoE checkpoint."""
    from mlcore.hf.architectures import arch_spec
    from mlcore.hf.checkpoint import checked_config, weight_files

    try:
        config = checked_config(root)
    except JobError as exc:
        # The worker's scratch path means nothing to the user; the rest of the message does.
        raise JobError(str(exc).replace(f"{root}: ", "")) from None
    spec = arch_spec(config.model_type)
    return {
        "architecture": spec.title,
        "model_type": config.model_type,
        "parameters": sum(safetensors_parameters(p) for p in weight_files(root)),
        "layers": getattr(config, "num_hidden_layers", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "experts_per_layer": getattr(config, spec.experts_field, None),
        "top_k": getattr(config, "num_experts_per_tok", None),
    }


def dataset_card(root: Path) -> dict[str, Any]:
    """Records (lines of text files, else files) and sources (file names) of a dataset."""
    files = files_of(root)
    records = 0
    for path in files:
        if sniff.sniff(path) in TEXT_FORMATS:
            with path.open("rb") as f:
                records += sum(1 for line in f if line.strip())
        else:
            records += 1
    sources = [p.relative_to(root).as_posix() if root.is_dir() else p.name for p in files[:MAX_SOURCES]]
    return {"records": records, "files": len(files), "sources": sources}


def card_for(kind: str, category: str, root: Path) -> dict[str, Any]:
    """Validate ``root`` as an item of ``kind`` and describe it; raises ``JobError`` with what to fix."""
    check_tree(root)
    files = files_of(root)
    if not files:
        raise JobError("The item holds no files.")
    card: dict[str, Any] = {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    if kind == "hf-moe-lm":
        return {**card, **hf_moe_card(root)}
    if category == "dataset":
        return {**card, **dataset_card(root)}
    return card
