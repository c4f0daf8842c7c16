"""The video study's cache: finished rows in ``bench/cache/video.jsonl``, the judges trained here
(checkpoints) in ``bench/cache/video/``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from bench.cache import Store

#: The judges trained here (checkpoints); the finished rows are ``CACHE.jsonl`` beside it.
CACHE = Path(__file__).resolve().parents[1] / "cache" / "video"


@functools.cache
def _store_at(path: Path) -> Store:
    return Store(path)


def store() -> Store:
    return _store_at(CACHE.with_suffix(".jsonl"))


def _cached(name: str, compute: Any) -> dict[str, Any]:
    return store().cached(name, compute)


def _static_judge_info(steps: int) -> dict[str, Any] | None:
    """The cached static judge's held-out scores, without loading (or training) it."""
    path = CACHE / f"judge-static-{steps}" / "judgement.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _load_or_compute(name: str, compute: Any, enabled: bool) -> dict[str, Any] | None:
    if name in store() or enabled:
        return _cached(name, compute)
    return None
