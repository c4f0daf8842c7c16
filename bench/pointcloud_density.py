"""``pointcloud-density``: a large scan labels as well as a small sample of the same scene (issue #22,
point 6: a 2-million-point scan's mIoU within 0.03 of the scene sampled at 100,000 points).

The scene. A SynMix street 240 m long (:func:`mlcore.pointcloud.scenes.street`), surveyed as a mobile
mapping van does: the validation street's 64-beam LiDAR (dataset C's sensor) fired from positions
evenly spaced along the road, every scan's points merged, until the survey holds
:data:`SURVEY_POINTS`. Each point keeps the intensity and the label the LiDAR gave it. The smaller
clouds are uniform random samples of that survey (the same surfaces, fewer points): what a user who
thins a survey before uploading it, or a sparser sensor's pass, gives the segmenter.

Each cloud is segmented as ``pointcloud-segment`` does on a street (:func:`~mlcore.pointcloud.segment.
segment_cloud`: grid 0.1 m, the outdoor classes, intensity, tiles of at most 150k voxels) and scored
by mIoU over the classes present, on every point of that cloud. *Δ* is the survey's mIoU minus the
100k sample's (goal |Δ| ≤ :data:`GOAL`). Voxels per point says what changes with density: one
grid-sampled voxel stands for many more survey points, and the model sees every surface filled in
where a single scan (what it was trained on) leaves it sparse at range.

**Tile borders** (point 6: tiling must not change labels near tile borders, at most :data:`TILE_GOAL` of
the points differing from an untiled run on a scan that fits both ways). Each 100k sample fits one
tile (under 150k voxels); it is segmented again in tiles of at most :data:`SMALL_TILE` voxels (each
with the job's context around it), and the share of points whose label differs is reported.

Models: the zoo Point-MoE and any segmenter folder named in ``$MOELAB_BENCH_SEGMENTERS``
(``name=folder;…``, as :mod:`bench.pointcloud_attributes` reads it).

``python -m bench pointcloud-density --tier quick|full`` writes ``bench/results/pointcloud-density.md``
and ``.json``; the full tier caches each (model, street, size) row in
``bench/cache/pointcloud-density.jsonl``, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import Store
from bench.common import full_tier_cache, last_report, machine, write_results

NAME = "pointcloud-density"
GOAL = 0.03  #: |mIoU(survey) − mIoU(100k sample)| the issue allows
SURVEY_POINTS = 2_000_000
STREET_LENGTH = 240.0  #: metres
GRID = 0.1  #: the job's outdoor grid
TILE_GOAL = 0.01  #: the share of points a tiled run may label differently from an untiled one
SMALL_TILE = 10_000  #: voxels per tile in the tiled run of the tile-border check
#: Streets (seeds) and cloud sizes per tier; the largest size is the survey itself.
TIERS: dict[str, dict[str, Any]] = {
    "quick": {"streets": 1, "sizes": (100_000, SURVEY_POINTS)},
    "full": {"streets": 3, "sizes": (100_000, 500_000, SURVEY_POINTS)},
}
CACHE = Path(__file__).resolve().parent / "cache" / f"{NAME}.jsonl"


@dataclasses.dataclass
class Survey:
    xyz: np.ndarray  #: [n, 3] float32, metres
    intensity: np.ndarray  #: [n] float32 in [0, 1]
    labels: np.ndarray  #: [n] dataset C's labels (master ids; −1 unlabelled)
    positions: int  #: LiDAR positions merged


def survey(street: int, points: int = SURVEY_POINTS) -> Survey:
    """Street ``street`` (its own seed) surveyed by dataset C's LiDAR from evenly spaced positions along
    the road until ``points`` points are held (the last scan's extra points dropped at random)."""
    from mlcore.pointcloud import scenes
    from mlcore.pointcloud.datasets import get_dataset, lidar_at

    spec = get_dataset("C")
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"{NAME}/{street}".encode()).digest()[:8], "little"))
    scene = scenes.street(rng, length=STREET_LENGTH)
    half = STREET_LENGTH / 2 - 10.0  # stay clear of the street's ends
    # Three probe scans tell the points per scan; the van then drives the whole street once, its
    # positions evenly spaced, with 5% to spare (the merged survey is cut to ``points``).
    probes = [len(lidar_at(scene, rng, x, **spec.sensor_args).xyz) for x in (-half / 2, 0.0, half / 2)]
    positions = int(np.ceil(1.05 * points / statistics.mean(probes)))
    scans = [lidar_at(scene, rng, float(x), **spec.sensor_args) for x in np.linspace(-half, half, positions)]
    xyz = np.concatenate([s.xyz for s in scans])
    intensity = np.concatenate([s.intensity for s in scans])
    labels = spec.remap()[np.concatenate([s.labels for s in scans])].astype(np.int32)
    keep = np.sort(rng.permutation(len(xyz))[:points])
    return Survey(xyz[keep].astype(np.float32), intensity[keep].astype(np.float32), labels[keep], len(scans))


def sample(cloud: Survey, size: int, seed: int) -> Survey:
    """A uniform random ``size``-point sample of ``cloud`` (the survey itself at its own size)."""
    if size >= len(cloud.xyz):
        return cloud
    keep = np.sort(np.random.default_rng(seed).permutation(len(cloud.xyz))[:size])
    return Survey(cloud.xyz[keep], cloud.intensity[keep], cloud.labels[keep], cloud.positions)


def score(model: Any, cloud: Survey) -> dict[str, Any]:
    """Segment ``cloud`` as the job does on a street; mIoU over the classes present, per class IoU."""
    from mlcore.pointcloud.datasets import get_dataset
    from mlcore.pointcloud.labels import LABELS, scene_labels
    from mlcore.pointcloud.pipeline import confusion
    from mlcore.pointcloud.segment import segment_cloud

    classes = [LABELS.index(n) for n in scene_labels("outdoor")]
    start = time.perf_counter()
    result = segment_cloud(model, cloud.xyz, None, cloud.intensity, grid=GRID, classes=classes)
    seconds = time.perf_counter() - start
    conf = confusion(result.labels, cloud.labels.astype(np.int64))
    # Over the classes in the truth (pipeline.miou also counts classes only predicted).
    ious = {}
    for c in get_dataset("C").class_ids:
        union = conf[c].sum() + conf[:, c].sum() - conf[c, c]
        if conf[c].sum():
            ious[LABELS[c]] = float(conf[c, c] / union)
    return {
        "points": len(cloud.xyz),
        "voxels": int(result.voxels),
        "miou": float(np.mean(list(ious.values()))),
        "iou": ious,
        "seconds": seconds,
    }


def tile_borders(model: Any, cloud: Survey) -> dict[str, Any]:
    """Labels of ``cloud`` in one tile and in tiles of at most :data:`SMALL_TILE` voxels: the share of
    points that differ, and each run's tiles."""
    from mlcore.pointcloud.labels import LABELS, scene_labels
    from mlcore.pointcloud.segment import segment_cloud

    classes = [LABELS.index(n) for n in scene_labels("outdoor")]
    runs = {
        name: segment_cloud(model, cloud.xyz, None, cloud.intensity, grid=GRID, classes=classes, chunk_points=size)
        for name, size in (("whole", max(len(cloud.xyz), 150_000)), ("tiled", SMALL_TILE))
    }
    return {
        "points": len(cloud.xyz),
        "voxels": int(runs["whole"].voxels),
        "tiles": {name: int(r.chunks) for name, r in runs.items()},
        "differ": float((runs["whole"].labels != runs["tiled"].labels).mean()),
    }


def _code_digest() -> str:
    """The segmentation path's code: a change to it re-measures the tile-border rows."""
    from mlcore.pointcloud import segment

    return hashlib.sha256(Path(segment.__file__).read_bytes()).hexdigest()[:12]


def run(tier: str, results: Path, *, log: Any = print) -> dict[str, Any]:
    from bench.pointcloud_attributes import fingerprint, segmenters
    from mlcore.pointcloud.pipeline import load_segmenter

    started = time.perf_counter()
    cfg = TIERS[tier]
    cache = full_tier_cache(Store(CACHE), tier)
    surveys: dict[int, Survey] = {}
    rows: list[dict[str, Any]] = []
    borders: list[dict[str, Any]] = []
    sources: dict[str, str] = {}
    for name, folder in segmenters().items():
        model, config = load_segmenter(folder)  # in eval mode
        sources[name] = (config.get("card") or {}).get("command") or folder.name
        for street in range(cfg["streets"]):
            for size in cfg["sizes"]:
                key = f"{fingerprint(folder)}/{street}/{size}/{SURVEY_POINTS}/{STREET_LENGTH}"
                found = cache.get(key) if cache is not None else None
                if found is None:
                    if street not in surveys:
                        surveys[street] = survey(street)
                    found = score(model, sample(surveys[street], size, seed=street))
                    found["positions"] = surveys[street].positions
                    if cache is not None:
                        cache.put(key, found)
                    log(f"[{NAME}] {name} street {street} {size:,} points: mIoU {found['miou']:.3f} "
                        f"({found['voxels']:,} voxels, {found['seconds']:.0f} s)")  # fmt: skip
                rows.append({"model": name, "street": street, "size": size, **found})
            key = f"tiles/{fingerprint(folder)}/{street}/{SMALL_TILE}/{SURVEY_POINTS}/{STREET_LENGTH}/{_code_digest()}"
            found = cache.get(key) if cache is not None else None
            if found is None:
                if street not in surveys:
                    surveys[street] = survey(street)
                found = tile_borders(model, sample(surveys[street], min(cfg["sizes"]), seed=street))
                if cache is not None:
                    cache.put(key, found)
            borders.append({"model": name, "street": street, **found})
    previous = last_report(results / f"{NAME}.json", tier) or {}
    rows += carried_rows(previous, {r["model"] for r in rows})
    for name, source in (previous.get("sources") or {}).items():
        sources.setdefault(name, source)
    result = {
        "tier": tier,
        "goal": GOAL,
        "survey_points": SURVEY_POINTS,
        "street_length_m": STREET_LENGTH,
        "rows": rows,
        "tile_borders": borders,
        "tile_goal": TILE_GOAL,
        "sources": sources,
        "seconds": time.perf_counter() - started,
        "machine": machine(),
    }
    write_results(results, NAME, report(result), result)
    return result


def carried_rows(previous: dict[str, Any], measured: set[str]) -> list[dict[str, Any]]:
    """The rows of the last report (``previous``, this tier's) of segmenters this run did not measure (a
    seed's folder lives in a gitignored state folder of the machine that trained it), each marked with
    when it was measured."""
    origin = previous.get("written_at", "?")
    return [
        {**r, "carried_over": r.get("carried_over") or origin}
        for r in previous.get("rows", [])
        if r["model"] not in measured
    ]


def gaps(rows: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Per model and street: mIoU of the survey minus that of its 100k sample."""
    by = {(r["model"], r["street"], r["size"]): r["miou"] for r in rows}
    out: dict[str, dict[int, float]] = {}
    for model, street, size in by:
        if size == SURVEY_POINTS and (model, street, 100_000) in by:
            out.setdefault(model, {})[street] = by[model, street, size] - by[model, street, 100_000]
    return out


def training(model: str) -> str:
    """The training a segmenter's name stands for: the name without a trailing seed (" s1")."""
    head, _, tail = model.rpartition(" s")
    return head if head and tail.isdigit() else model


def report(result: dict[str, Any]) -> str:
    rows = result["rows"]
    sizes = sorted({r["size"] for r in rows})
    lines = [
        "# Point clouds: a large scan against a sample of it",
        "",
        f"Written by `python -m bench {NAME} --tier {result['tier']}` (bench/pointcloud_density.py); issue #22 "
        "point 6.",
        "",
        f"A SynMix street {result['street_length_m']:.0f} m long surveyed by dataset C's 64-beam LiDAR from "
        f"positions along the road, merged to {result['survey_points']:,} points; the smaller clouds are uniform "
        "random samples of it. Each is segmented as `pointcloud-segment` does on a street (grid 0.1 m, outdoor "
        "classes, intensity, tiled) and scored on all its points. *Δ*: the survey's mIoU minus the 100k "
        f"sample's (goal |Δ| ≤ {result['goal']}).",
        "",
        "| model | street | " + " | ".join(f"mIoU at {s:,} (voxels)" for s in sizes) + " | Δ |",
        "|---|---|" + "---|" * (len(sizes) + 1),
    ]
    table = {(r["model"], r["street"], r["size"]): r for r in rows}
    found = gaps(rows)
    for model in dict.fromkeys(r["model"] for r in rows):
        for street in sorted({r["street"] for r in rows if r["model"] == model}):
            cells = []
            for size in sizes:
                r = table.get((model, street, size))
                cells.append("-" if r is None else f"{r['miou']:.3f} ({r['voxels']:,})")
            delta = found.get(model, {}).get(street)
            mark = "-" if delta is None else f"{delta:+.3f}" + ("" if abs(delta) <= result["goal"] else " ✗")
            lines.append(f"| {model} | {street} | " + " | ".join(cells) + f" | {mark} |")
    lines += ["", "Per model, over streets:", ""]
    for model, per_street in found.items():
        values = list(per_street.values())
        worst = max(values, key=abs)
        spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
        met = all(abs(v) <= result["goal"] for v in values)
        lines.append(
            f"- {model}: Δ {statistics.mean(values):+.3f}{spread} over {len(values)} street(s), largest |Δ| "
            f"{abs(worst):.3f}: goal {'met' if met else 'missed'}."
        )
    groups: dict[str, list[float]] = {}
    for model, per_street in found.items():
        groups.setdefault(training(model), []).extend(per_street.values())
    if any(len({m for m in found if training(m) == g}) > 1 for g in groups):
        lines += [
            "",
            "Per training, over its seeds and streets (`NAME sN` is seed N of NAME's training; the zoo "
            "checkpoint is seed 0 of its recipe):",
            "",
        ]
        lines += ["| training | seeds | Δ mean ± sd | Δ range | streets within the goal |", "|---|---|---|---|---|"]
        for group, values in groups.items():
            seeds = len({m for m in found if training(m) == group})
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            within = sum(abs(v) <= result["goal"] for v in values)
            lines.append(
                f"| {group} | {seeds} | {statistics.mean(values):+.3f} ± {spread:.3f} | "
                f"{min(values):+.3f} … {max(values):+.3f} | {within} of {len(values)} |"
            )
    lines += ["", "Per-class IoU (first street):", "", "| model | points | IoU per class |", "|---|---|---|"]
    for (model, street, size), r in table.items():
        if street == 0:
            per = ", ".join(f"{k} {v:.2f}" for k, v in r["iou"].items())
            lines.append(f"| {model} | {size:,} | {per} |")
    carried = sorted({(r["model"], r["carried_over"]) for r in rows if r.get("carried_over")})
    if carried:
        lines += ["", "Carried over from an earlier run (their folders are not on this machine):", ""]
        lines += [f"- {model}: measured {when}." for model, when in carried]
    if result.get("tile_borders"):
        lines += [
            "",
            "## Tile borders",
            "",
            f"Each street's 100k sample, which fits one tile, segmented again in tiles of at most {SMALL_TILE:,} "
            "voxels with the job's context around each: the share of its points labelled differently (goal "
            f"≤ {result['tile_goal']:.0%}).",
            "",
            "| model | street | voxels | tiles | points labelled differently |",
            "|---|---|---|---|---|",
        ]
        for r in result["tile_borders"]:
            mark = "" if r["differ"] <= result["tile_goal"] else " ✗"
            lines.append(
                f"| {r['model']} | {r['street']} | {r['voxels']:,} | {r['tiles']['tiled']} | {r['differ']:.2%}{mark} |"
            )
    if result.get("sources"):
        lines += ["", "Segmenters (how each was trained):", ""]
        lines += [f"- {name}: `{source}`" for name, source in result["sources"].items()]
    lines += ["", f"Machine: {result['machine']['platform']}; {result['seconds']:.0f} s in all.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m bench {NAME}", description=__doc__)
    parser.add_argument("--tier", choices=tuple(TIERS), default="quick")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    run(args.tier, args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
