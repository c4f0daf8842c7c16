"""Built-in items — the zoo's models and ``mlcore.data``'s datasets — and how they reach disk.

An item is built once into a cache directory by its ``builder`` (``"module:function"``, called
with the target directory) and reused after that; a ``.complete`` marker makes an interrupted
build start again rather than hand a half-written directory to a job. The marker holds the
item's version (the sha256 of its ``stamp`` file, e.g. a committed checkpoint's manifest), so a
retrained checkpoint replaces the stale copy instead of hiding behind it. Builders may import torch;
listing items does not.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MARKER = ".complete"
_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, kw_only=True)
class BuiltinItem:
    name: str
    #: The item kind that parameters ``accepts`` (``hf-moe-lm``, ``text``, ...).
    kind: str
    title: str
    description: str
    builder: str
    card: dict[str, Any] = field(default_factory=dict)
    #: A file whose content versions the built item (relative to the repository root).
    stamp: str | None = None
    #: What else the builder puts into the item that the stamp file does not record (a seed it writes).
    salt: str = ""

    def version(self) -> str:
        if self.stamp is None:
            return "1"
        return hashlib.sha256((_ROOT / self.stamp).read_bytes() + self.salt.encode()).hexdigest()


def cache_root() -> Path:
    return Path(os.environ.get("MOELAB_CACHE", Path.home() / ".cache" / "moelab"))


def materialize(item: BuiltinItem, root: Path | None = None) -> Path:
    """Return a directory holding ``item``, building it on first use."""
    target = (root or cache_root()) / item.kind / item.name
    marker = target / _MARKER
    version = item.version()
    if marker.exists() and marker.read_text() == version:
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    module, _, function = item.builder.partition(":")
    getattr(importlib.import_module(module), function)(target)
    marker.write_text(version)
    return target
