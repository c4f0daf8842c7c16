"""Checkpoints committed under ``mlcore/zoo/checkpoints/NAME/``: verified, then copied to the cache.

Each folder holds fp16 safetensors, config, tokenizer, ``train_log.jsonl``, ``RECIPE.md`` and a
``manifest.json`` with every file's sha256; a file that does not match is an error that names the
command which rebuilds it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlcore.errors import JobError
from mlcore.zoo.lm import verify_manifest

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


def committed(name: str) -> Path:
    """The verified folder of ``name``; a :class:`JobError` that says how to rebuild it otherwise."""
    folder = CHECKPOINTS / name
    if not (folder / "manifest.json").is_file():
        raise JobError(f"The zoo has no checkpoint for {name!r}; train it with `python -m mlcore.zoo train {name}`.")
    try:
        verify_manifest(folder)
    except ValueError as exc:
        raise JobError(str(exc)) from None
    return folder


def copy_committed(name: str, target: Path) -> None:
    for path in committed(name).iterdir():
        if path.is_file():
            shutil.copy2(path, target / path.name)


def build_moe_lm_tiny(target: Path) -> None:
    copy_committed("moe-lm-tiny", target)


def build_moe_lm_olmoe(target: Path) -> None:
    copy_committed("moe-lm-olmoe", target)
