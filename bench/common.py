"""Helpers every benchmark uses: timing with warm-up and medians, machine facts, result files."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cache import Store


def median_seconds(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


#: Names the device benchmark training runs on when a caller passes none (e.g. ``cuda`` on a lent GPU).
DEVICE_ENV = "MOELAB_BENCH_DEVICE"


def bench_device(name: str | None = None) -> Any:
    """The ``torch.device`` of a benchmark's training: ``name``, else ``$MOELAB_BENCH_DEVICE``, else the
    CPU; a clear error for a name torch does not know or a CUDA device this torch cannot see."""
    import torch

    name = (name or os.environ.get(DEVICE_ENV, "")).strip() or "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"{DEVICE_ENV}={name!r} is not a torch device ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{DEVICE_ENV}={name!r}, but this torch sees no CUDA device; unset it to use the CPU")
    return device


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def matmul_peak_flops(dtype: str = "float32", n: int = 1024, repeats: int = 5) -> float:
    """The machine's measured fp32 matmul throughput (FLOP/s), the denominator of 'fraction of peak'."""
    import torch

    a = torch.randn(n, n, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, dtype=getattr(torch, dtype))
    seconds = median_seconds(lambda: a @ b, repeats=repeats, warmup=2)
    return 2 * n**3 / seconds


def stamp(data: Any, length: int = 12) -> str:
    """A short digest of JSON-able ``data`` (keys sorted; what JSON cannot hold, as ``str``): the part
    of a cache key that changes whenever a configuration's settings do."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:length]


def full_tier_cache(store: Store, tier: str) -> Store | None:
    """Where a benchmark caches its finished configurations: ``store`` for the full tier, which
    resumes; none for the quick tier, which always recomputes."""
    return store if tier == "full" else None


ZOO_CHECKPOINTS = Path(__file__).resolve().parents[1] / "mlcore" / "zoo" / "checkpoints"
#: The key of the record of the zoo models a study's rows were computed from.
ZOO_RECORD = "zoo"


class StaleCache(RuntimeError):
    """Cached rows were computed from zoo models that have since been retrained."""


def zoo_fingerprints(names: tuple[str, ...]) -> dict[str, str]:
    """A short digest of each committed zoo checkpoint's files (its manifest's sha256s); "missing"
    for one that is not there."""
    prints = {}
    for name in names:
        manifest = ZOO_CHECKPOINTS / name / "manifest.json"
        files = json.loads(manifest.read_text()).get("files", {}) if manifest.is_file() else None
        prints[name] = "missing" if files is None else stamp(files)
    return prints


def check_zoo_cache(store: Store, names: tuple[str, ...], stale: str) -> None:
    """Refuse to report cached rows computed from other zoo models than the committed ones.

    Cache rows are keyed by configuration, not by model contents, so a retrained zoo model would
    otherwise be reported with its predecessor's figures. The store's ``zoo`` row records the models
    the rows were computed from (each written on first use); when one of ``names`` has changed and
    rows whose keys match ``stale`` (space-separated globs: the rows that depend on ``names``) are
    still there, :class:`StaleCache` says which to delete; the next run recomputes them and records
    the new models.
    """
    recorded = store.get(ZOO_RECORD) or {}
    current = zoo_fingerprints(names)
    changed = sorted(n for n in names if recorded.get(n, current[n]) != current[n])
    if changed and any(store.keys(pattern) for pattern in stale.split()):
        raise StaleCache(
            f"{store.path} holds rows computed from an earlier {', '.join(changed)}: delete the rows "
            f"{stale} there (`python -m bench.cache keys {store.path.stem}` lists them; they are "
            "recomputed on the next run), then run again"
        )
    merged = dict(sorted({**recorded, **current}.items()))
    if merged != recorded:
        store.put(ZOO_RECORD, merged)


#: Where a quick tier writes when a larger tier's report already stands in the results folder.
QUICK_FOLDER = "quick"


def tier_of(data: dict[str, Any]) -> str | None:
    """The tier a results file was written by (``tier``, or its ``name`` where it is a config)."""
    tier = data.get("tier")
    if isinstance(tier, dict):
        tier = tier.get("name")
    return tier if isinstance(tier, str) else None


def last_report(path: Path, tier: str | None = None) -> dict[str, Any] | None:
    """The results file a study last wrote at ``path`` (its ``.json``), or None when there is none, it
    cannot be read, or ``tier`` is given and it was written by another tier."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or (tier is not None and tier_of(data) != tier):
        return None
    return data


def carry_over(items: dict[str, Any], measured: Collection[str], origin: Any) -> dict[str, dict[str, Any]]:
    """The entries of a last report's ``items`` that this run did not measure (``measured``: their names;
    their inputs live in a gitignored folder of the machine that made them, or their training is
    retired), each marked ``carried_over`` with ``origin`` — or with the mark it already has, so an entry
    carried twice still says where it was measured."""
    return {
        name: {**entry, "carried_over": entry.get("carried_over") or origin}
        for name, entry in items.items()
        if name not in measured
    }


def results_folder(results: Path, name: str, data: dict[str, Any]) -> Path:
    """``results``, unless this is a quick tier and ``results`` holds a larger tier's report of ``name``:
    then ``results/quick/``, so ``make bench`` never replaces a full study's report (and the verdicts
    the guides quote) by its quick tier's."""
    if tier_of(data) != "quick":
        return results
    try:
        standing = tier_of(json.loads((results / f"{name}.json").read_text()))
    except (OSError, ValueError, AttributeError):
        return results
    if standing is None or standing == "quick":
        return results
    folder = results / QUICK_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    print(f"bench: {name}: kept the {standing} tier's report in {results}; the quick tier's is in {folder}")
    return folder


def report_excerpt(path: Path, sections: tuple[str | None, ...], *, shift: int = 1) -> list[str]:
    """Lines of another study's written report to repeat in this one: each ``## `` section whose title
    starts with one of ``sections`` (with its subsections; None: the text between the title and the
    first section), every heading ``shift`` levels down, without the title and the "_Written" stamp.
    [] when that study has not written its report."""
    if not path.is_file():
        return []
    kept: list[str] = []
    keep = None in sections
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            continue
        if line.startswith("## "):
            keep = any(s is not None and line[3:].startswith(s) for s in sections)
        if line.startswith("#"):
            line = "#" * shift + line
        if keep and not line.startswith("_Written "):
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def written_at(path: Path) -> str:
    """When a study's ``.json`` says it was written ("?" when it has none)."""
    return json.loads(path.read_text()).get("written_at", "?") if path.is_file() else "?"


def write_results(results: Path, name: str, markdown: str, data: dict[str, Any]) -> None:
    results = results_folder(results, name, data)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    data = {"name": name, "written_at": stamp, "machine": machine(), **data}
    (results / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))
    (results / f"{name}.md").write_text(markdown.rstrip() + f"\n\n_Written {stamp} on {machine()['platform']}._\n")
