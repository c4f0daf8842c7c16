"""The point-cloud study's cache: finished runs and throughputs in ``bench/cache/pointcloud.jsonl``;
unfinished runs' training state and the ``--jobs`` logs in the gitignored ``bench/cache/pointcloud/``."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.pointcloud.tiers import TIERS

ROOT = Path(__file__).resolve().parents[2]
#: ``MOELAB_POINTCLOUD_CACHE`` moves it (``--jobs`` hands its own to the runs it starts).
CACHE = Path(os.environ.get("MOELAB_POINTCLOUD_CACHE") or ROOT / "bench" / "cache" / "pointcloud").resolve()


@functools.cache
def _store_at(path: Path) -> Store:
    return Store(path)


def folder() -> Path:
    """The folder of unfinished runs' state and the ``--jobs`` logs (read when called, so a test or
    ``MOELAB_POINTCLOUD_CACHE`` can move it)."""
    return CACHE


def store() -> Store:
    """The finished runs and throughputs: ``CACHE.jsonl`` beside the folder of unfinished runs' state."""
    return _store_at(CACHE.with_suffix(".jsonl"))


def _cached_runs(tier: str) -> list[dict[str, Any]]:
    """The finished runs of ``tier`` in the cache; nothing is trained (the GPU tiers' runs come from
    ``--only`` / ``--jobs`` on a machine with a GPU)."""
    spec = TIERS[tier]
    keys = (f"{tier}-{config}-s{seed}" for seed in range(spec.seeds) for config in spec.configs)
    return [row for key in keys if (row := store().get(key)) is not None]
