"""Built-in items — the zoo's models and ``mlcore.data``'s datasets — and how they reach disk.

An item is built once into a cache directory by its ``builder`` (``"module:function"``, called
with the target directory) and reused after that; a ``.complete`` marker makes an interrupted
build start again rather than hand a half-written directory to a job. Builders may import torch;
listing items does not.
"""

from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MARKER = ".complete"


@dataclass(frozen=True, kw_only=True)
class BuiltinItem:
    name: str
    #: The item kind that parameters ``accepts`` (``hf-moe-lm``, ``text``, ...).
    kind: str
    title: str
    description: str
    builder: str
    card: dict[str, Any] = field(default_factory=dict)


def cache_root() -> Path:
    return Path(os.environ.get("MOELAB_CACHE", Path.home() / ".cache" / "moelab"))


def materialize(item: BuiltinItem, root: Path | None = None) -> Path:
    """Return a directory holding ``item``, building it on first use."""
    target = (root or cache_root()) / item.kind / item.name
    if (target / _MARKER).exists():
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    module, _, function = item.builder.partition(":")
    getattr(importlib.import_module(module), function)(target)
    (target / _MARKER).touch()
    return target
