"""``pointcloud-heldout``: how well a SynMix-trained segmenter does on a scene family it never saw.

Every scan of the held-out family (:mod:`bench.heldout_scenes`) is written in every encoding users
have (PLY ASCII / binary little-endian / binary big-endian float64, PCD ASCII / binary /
binary_compressed, XYZ, XYZRGB 0-255, LAS 1.2 point format 3 with 16-bit RGB, LAS 1.4 point format
6 with intensity at UTM coordinates; :func:`bench.pointcloud_encodings.encodings` writes them) and
each file is segmented the way the ``pointcloud-segment`` job does with its defaults: read by
:func:`~mlcore.pointcloud.io.read_cloud`, grid and scene kind from the scan's extent (``setting``
auto), the kind's classes only, and the attributes ``auto`` gives the model for that kind (colour
indoors, intensity outdoors) where the file holds them. Fine-class mIoU (SynMix's master classes)
and coarse mIoU (:data:`mlcore.pointcloud.labels.COARSE`) are pooled over the scans of each kind.

Models: the zoo's Point-MoE (``pointmoe-synmix``) and, in the full tier, the zoo recipe trained
with seeds 0, 1, 2 by :func:`mlcore.pointcloud.pipeline.train` (seed 0 is the zoo checkpoint when
its recipe is the current one), and the recipe's :data:`VARIANTS` (the card's training budget, with
and without the robust attribute augmentation) with the same seeds, each beside its mIoU on SynMix's
own validation scans. :func:`evaluate_model` takes any segmenter, so a new recipe's seeds are
measured the same way.

This is the one module of the package that imports the segmenter, and through it SynMix's code:
it makes no scene, only files from the family's scans. The family is a test set: nothing here
selects or tunes a model.

``python -m bench pointcloud-heldout --tier quick|full`` writes ``bench/results/pointcloud-heldout.md``
and ``.json``; ``python -m bench.heldout_scenes.evaluate --tier full --zoo-only`` measures the zoo
model alone. Full-tier rows are cached per (model, scan) in ``bench/cache/pointcloud-heldout.jsonl``
and trained seeds' checkpoints kept in ``bench/cache/pointcloud-heldout/state/``, so an interrupted
run resumes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import Store
from bench.common import (
    ZOO_CHECKPOINTS,
    carry_over,
    full_tier_cache,
    last_report,
    machine,
    write_results,
    zoo_fingerprints,
)
from bench.heldout_scenes.params import parameters, sha256
from bench.heldout_scenes.scans import RAY_CAST, HeldoutScan, make_scan
from mlcore.pointcloud.labels import COARSE, COARSE_OF, LABELS

NAME = "pointcloud-heldout"
ZOO = "pointmoe-synmix"
GOAL = 0.6  #: coarse mIoU the zoo recipe should reach in every encoding
CACHE_ROOT = Path(__file__).resolve().parents[1] / "cache"
#: Master id → coarse id.
COARSE_ID = np.array([COARSE.index(COARSE_OF[n]) for n in LABELS], np.int64)
#: The reference encoding for the per-sensor and per-class tables (the project's own PLY writer).
REFERENCE = "PLY binary LE (own writer)"
#: The diagnostic run on the reference file: heights below this quantile lifted to it (see
#: :func:`segment_like_the_job`). Its rows are reported apart and never count towards the goal.
CLAMP_QUANTILE = 0.005
DIAGNOSTIC = f"{REFERENCE}, lowest {CLAMP_QUANTILE:.1%} of heights clamped (diagnostic)"


#: The zoo recipe with other training choices, trained with the tier's seeds and measured like it.
#: The earlier recipe (150 steps on 16 scans per dataset, attributes as the scans hold them) asks what
#: the current one (1,200 steps on 48, "batch-30" with statistics per presence, chosen on SynMix) changed
#: on scenes it never saw. Chosen before they were measured here; none is selected by this family.
VARIANTS: dict[str, dict[str, Any]] = {
    "the earlier zoo recipe: 150 steps, 16 scans per dataset, no attribute augmentation": {
        "steps": 150,
        "scenes": 16,
        "attribute_augment": None,
        "presence_stats": False,
    },
}


def store() -> Store:
    return Store(CACHE_ROOT / f"{NAME}.jsonl")


def state_folder() -> Path:
    return CACHE_ROOT / NAME / "state"


# -- segmenting a file the way the job does --------------------------------------------------------


def segment_like_the_job(
    model: Any, config: dict[str, Any], path: Path, *, clamp_below: float | None = None
) -> dict[str, Any]:
    """Labels for every point of the file at ``path``, with ``pointcloud-segment``'s defaults
    (``setting`` auto, ``attributes`` auto, no classes picked, its chunk size), and what it chose.

    ``clamp_below`` (a diagnostic, not what the job does): lift every point below that quantile of
    the heights to it first, so a few gross outliers under the ground no longer set the lowest
    point that the model's height feature is measured from."""
    from mlcore.jobs.pointcloud_segment import (
        MAX_POINTS,
        allowed_classes,
        chosen_attributes,
        held_attributes,
        segment_read_cloud,
        segmenting_grid,
        spec,
    )
    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.segmenter_classes import read_classes

    classes = read_classes(config, model.cfg.num_classes)
    read = cloud = read_cloud(path, max_points=MAX_POINTS)
    if clamp_below is not None:
        z = cloud.xyz[:, 2]
        cloud = cloud.replace(
            xyz=np.column_stack([cloud.xyz[:, :2], np.maximum(z, np.quantile(z, clamp_below))]).astype(np.float32)
        )
    grid, kind = segmenting_grid(cloud.xyz, "auto", classes)
    allowed, _ = allowed_classes([], classes, kind)
    wanted = chosen_attributes("auto", kind, None)
    available = held_attributes(cloud)
    used = tuple(a for a in wanted if available[a])
    chunk = next(p.default for p in spec.params if p.name == "chunk_points")
    result = segment_read_cloud(model, cloud, used, grid=grid, classes=allowed, chunk_points=chunk)
    return {"labels": result.labels, "cloud": read, "kind": kind, "grid": grid, "used": used}


# -- measuring -------------------------------------------------------------------------------------


def confusion(pred: np.ndarray, truth: np.ndarray, k: int) -> np.ndarray:
    """[k, k] counts, rows the truth."""
    return np.bincount(truth.astype(np.int64) * k + pred.astype(np.int64), minlength=k * k).reshape(k, k)


def miou(conf: np.ndarray, names: tuple[str, ...]) -> tuple[float, dict[str, float]]:
    """Mean IoU over the classes present in the truth (rows), and each one's IoU."""
    ious = {}
    for c in np.flatnonzero(conf.sum(1)):
        union = conf[c].sum() + conf[:, c].sum() - conf[c, c]
        ious[names[c]] = float(conf[c, c] / union)
    return (float(np.mean(list(ious.values()))) if ious else 0.0), ious


def as_scene(scan: HeldoutScan) -> Any:
    """The scan as :mod:`bench.pointcloud_encodings`' ``Scene``, which its writers take."""
    from bench.pointcloud_encodings import Scene

    return Scene(scan.xyz, scan.rgb, scan.intensity, scan.labels)


def encoding_names(wanted: str | list[str]) -> list[str]:
    """The encodings a tier writes: ``"all"`` or a list of names of :func:`bench.pointcloud_encodings.encodings`."""
    from bench.pointcloud_encodings import encodings

    probe = as_scene(make_scan(parameters()["scans"][0]["name"]))
    known = list(encodings(probe))
    if wanted == "all":
        return known
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(f"unknown encodings {unknown}; known: {known}")
    return list(wanted)


def evaluate_scan(
    model: Any, config: dict[str, Any], scan: HeldoutScan, encodings: list[str], folder: Path
) -> list[dict[str, Any]]:
    """One row per encoding of ``scan``: the confusion matrices (fine and coarse), what the job's
    defaults chose, and the reader's largest coordinate error."""
    from bench.pointcloud_encodings import encodings as writers

    table = writers(as_scene(scan))
    rows = []
    for name in [*encodings, DIAGNOSTIC]:
        file_name, write, shift = table[REFERENCE if name == DIAGNOSTIC else name]
        path = folder / f"{scan.name}-{file_name}"
        write(path)
        start = time.perf_counter()
        out = segment_like_the_job(model, config, path, clamp_below=CLAMP_QUANTILE if name == DIAGNOSTIC else None)
        seconds = time.perf_counter() - start
        path.unlink()
        pred = out["labels"].astype(np.int64)
        truth = scan.labels.astype(np.int64)
        error_mm = float(np.abs(out["cloud"].world() - (scan.xyz + shift)).max()) * 1000
        rows.append(
            {
                "scan": scan.name,
                "kind": scan.kind,
                "sensor": scan.sensor,
                "encoding": name,
                "diagnostic": name == DIAGNOSTIC,
                "points": len(scan),
                "chosen_kind": out["kind"],
                "grid": out["grid"],
                "attributes": "+".join(out["used"]) or "geometry",
                "fine_confusion": confusion(pred, truth, len(LABELS)).tolist(),
                "coarse_confusion": confusion(COARSE_ID[pred], COARSE_ID[truth], len(COARSE)).tolist(),
                "max_error_mm": error_mm,
                "seconds": seconds,
            }
        )
    return rows


def evaluate_model(
    model: Any,
    scans: list[HeldoutScan],
    encodings: list[str],
    *,
    config: dict[str, Any] | None = None,
    cache: Store | None = None,
    key: str = "",
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Rows (per scan and encoding) of ``model`` on the held-out ``scans``. ``config``: the
    segmenter's config.json (default: SynMix's classes, as :func:`~mlcore.pointcloud.pipeline.save_segmenter`
    writes). With ``cache`` each scan's rows are kept under ``key``/scan and reused."""
    config = config or {"labels": list(LABELS)}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="moelab-heldout-") as tmp:
        for scan in scans:
            row_key = f"{key}/{scan.name}/{sha256()[:12]}/{code_digest()}/{_digest(encodings)}"
            found = cache.get(row_key) if cache is not None else None
            if found is None:
                start = time.perf_counter()
                found = evaluate_scan(model, config, scan, encodings, Path(tmp))
                seconds = time.perf_counter() - start
                log(f"[{NAME}] {key or 'model'} {scan.name}: {len(encodings)} encodings in {seconds:.0f} s")
                if cache is not None:
                    cache.put(row_key, found)
            rows.extend(found)
    return rows


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def code_digest() -> str:
    """A digest of the source a row depends on besides the model: the family's generator, the
    writers, the reader, the job's choices and the segmenting code. Cached rows are reused only by
    the same code (other work changes the segmenter under a fixed checkpoint)."""
    root = Path(__file__).resolve().parents[2]
    files = sorted(
        [
            *(root / "bench" / "heldout_scenes").glob("*.py"),
            root / "bench" / "pointcloud_encodings.py",
            *(root / "mlcore" / "pointcloud" / "io").glob("*.py"),
            *(root / "mlcore" / "pointcloud" / n for n in ("segment.py", "ptv3.py", "datasets.py", "labels.py")),
            root / "mlcore" / "pointcloud" / "segmenter_classes.py",
            root / "mlcore" / "jobs" / "pointcloud_segment.py",
        ]
    )
    digest = hashlib.sha256()
    for path in files:
        if path.name != "evaluate.py":  # the report's wording is not the measurement
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# -- models ----------------------------------------------------------------------------------------


def load_zoo() -> tuple[Any, dict[str, Any]]:
    from mlcore.pointcloud.pipeline import load_segmenter

    return load_segmenter(ZOO_CHECKPOINTS / ZOO)


def recipe_digest() -> str:
    """The zoo recipe and the source of the code that trains it: a trained seed is reused only by both."""
    from mlcore.zoo.pointcloud import RECIPES

    digest = hashlib.sha256(json.dumps(RECIPES[ZOO].describe(), sort_keys=True).encode())
    folder = Path(__file__).resolve().parents[2] / "mlcore" / "pointcloud"
    for name in ("datasets.py", "scenes.py", "sensors.py", "labels.py", "pipeline.py", "ptv3.py"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()[:12]


def zoo_is_seed_zero() -> bool:
    """Whether the committed zoo checkpoint was trained by the current recipe (then it is seed 0)."""
    from mlcore.zoo.pointcloud import RECIPES

    manifest = ZOO_CHECKPOINTS / ZOO / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text()).get("recipe") == RECIPES[ZOO].describe()


def recipe_key(seed: int, changes: dict[str, Any] | None = None) -> str:
    """Names one training of the zoo recipe (with ``changes``, for a :data:`VARIANTS` entry): its
    state folder and its rows' cache key."""
    return f"recipe-{recipe_digest()}" + (f"-{_digest(changes)}" if changes else "") + f"-s{seed}"


def trained_seed(
    seed: int, *, changes: dict[str, Any] | None = None, log: Callable[[str], None] = print
) -> tuple[Any, dict[str, Any]]:
    """The zoo recipe trained with ``seed`` (and ``changes`` to its training, for a
    :data:`VARIANTS` entry) by :func:`mlcore.pointcloud.pipeline.train`, as ``python -m mlcore.zoo
    train`` does; resumes an interrupted run and reuses a finished one from
    ``bench/cache/pointcloud-heldout/state/``."""
    import torch

    from bench.common import bench_device
    from mlcore.pointcloud.pipeline import TrainConfig, load_segmenter, save_segmenter, train
    from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
    from mlcore.zoo.pointcloud import RECIPES

    recipe = RECIPES[ZOO]
    folder = state_folder() / recipe_key(seed, changes)
    done = folder / "segmenter"
    if (done / "model.safetensors").is_file():
        return load_segmenter(done)
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in recipe.train.items()}
    cfg = TrainConfig(**{**values, **(changes or {}), "seed": seed})
    torch.manual_seed(seed)
    model = PTv3(PTv3Config(**recipe.model))
    start = time.perf_counter()
    result = train(model, cfg, device=bench_device(), state_path=folder / "state.pt")
    log(f"[{NAME}] recipe {ZOO} {changes or ''} seed {seed}: trained {result.steps} steps in "
        f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    save_segmenter(model.cpu(), done, card={"recipe": recipe.describe(), "changes": changes or {}, "seed": seed})
    (folder / "state.pt").unlink(missing_ok=True)
    return load_segmenter(done)


def synmix_validation(model: Any, key: str, cache: Store | None) -> dict[str, float]:
    """The model's mIoU on SynMix's validation scans (the zoo card's 4 per dataset, E and F zero-shot):
    how well it fits the generator it was trained on, beside how it does on this family."""
    from mlcore.zoo.pointcloud import validate

    row_key = f"{key}/synmix-validation"
    found = cache.get(row_key) if cache is not None else None
    if found is None:
        found = {n: float(v) for n, v in validate(model)["miou"].items()}
        if cache is not None:
            cache.put(row_key, found)
    return found


# -- summarising -----------------------------------------------------------------------------------


def summarise(rows: list[dict[str, Any]], *, by: tuple[str, ...] = ("kind", "encoding")) -> dict[str, Any]:
    """Pooled fine and coarse mIoU (and per-class IoU) for each group of rows sharing ``by``."""
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = " | ".join(str(row[k]) for k in by)
        g = groups.setdefault(
            name,
            {
                **{k: row[k] for k in by},
                "fine": np.zeros((len(LABELS),) * 2, np.int64),
                "coarse": np.zeros((len(COARSE),) * 2, np.int64),
                "attributes": set(),
                "scans": 0,
            },
        )
        g["fine"] += np.asarray(row["fine_confusion"])
        g["coarse"] += np.asarray(row["coarse_confusion"])
        g["attributes"].add(row["attributes"])
        g["scans"] += 1
    out = {}
    for name, g in groups.items():
        fine, fine_iou = miou(g["fine"], LABELS)
        coarse, coarse_iou = miou(g["coarse"], COARSE)
        out[name] = {
            **{k: g[k] for k in by},
            "scans": g["scans"],
            "attributes": "/".join(sorted(g["attributes"])),
            "fine_miou": fine,
            "coarse_miou": coarse,
            "fine_iou": fine_iou,
            "coarse_iou": coarse_iou,
        }
    return out


def model_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    with_kind = [{**r, "sensor_kind": f"{r['kind']} {'ray-cast' if r['sensor'] in RAY_CAST else 'surface-sampled'}"}
                 for r in rows]  # fmt: skip
    return {
        "by_encoding": summarise([r for r in rows if not r["diagnostic"]]),
        "by_sensor": summarise([r for r in with_kind if r["encoding"] == REFERENCE], by=("sensor_kind",)),
        "by_scan": summarise([r for r in rows if r["encoding"] == REFERENCE], by=("scan",)),
        "diagnostic": summarise([r for r in rows if r["diagnostic"]]),
        "diagnostic_by_scan": summarise([r for r in rows if r["diagnostic"]], by=("scan",)),
        "kind_mismatches": sorted(
            {
                f"{r['scan']} ({r['encoding']}): {r['chosen_kind']}"
                for r in rows
                if r["chosen_kind"] != ("indoor" if r["kind"] == "room" else "outdoor")
            }
        ),
    }


def seed_table(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per kind and encoding: each seed's fine and coarse mIoU, their mean and standard deviation."""
    table: dict[str, Any] = {}
    for seed, summary in sorted(per_seed.items()):
        for name, cell in summary["by_encoding"].items():
            entry = table.setdefault(
                name, {"kind": cell["kind"], "encoding": cell["encoding"], "fine": {}, "coarse": {}}
            )
            entry["fine"][str(seed)] = cell["fine_miou"]
            entry["coarse"][str(seed)] = cell["coarse_miou"]
    for entry in table.values():
        for what in ("fine", "coarse"):
            values = list(entry[what].values())
            entry[f"{what}_mean"] = statistics.mean(values)
            entry[f"{what}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return table


# -- the report ------------------------------------------------------------------------------------


def _mark(value: float) -> str:
    return f"{value:.3f}" + ("" if value >= GOAL else " ✗")


def report(result: dict[str, Any]) -> str:
    zoo = result["zoo"]["summary"]
    kinds = sorted({c["kind"] for c in zoo["by_encoding"].values()})
    encodings = list(dict.fromkeys(c["encoding"] for c in zoo["by_encoding"].values()))
    lines = [
        "# Point clouds: a held-out scene family",
        "",
        f"Written by `python -m bench {NAME} --tier {result['tier']}` (bench/heldout_scenes/evaluate.py).",
        "",
        "A second procedural family that shares no code with SynMix (bench/heldout_scenes/: L-shaped rooms, "
        "shelves, sofas, beds, round tables, stools; streets with curbs and raised sidewalks, street lights with "
        "arms, signs, vans, buses, bikes, trees of trunk and crown blobs, fences; surface-sampled and ray-cast "
        "scans with their own noise and material models), used only to test. Its parameters "
        f"(parameters.json, sha256 `{result['parameters_sha256'][:16]}…`) were fixed before its first evaluation.",
        "",
        "Each scan is written in every encoding and the file segmented as `pointcloud-segment` does with its "
        "defaults: grid and scene kind from the extent, the kind's classes only, colour indoors and intensity "
        "outdoors where the file holds them (*attributes* says what the model got). mIoU is pooled over the "
        f"scans of a kind: fine over SynMix's classes present, coarse over {', '.join(COARSE)}. "
        f"Goal: coarse mIoU ≥ {GOAL} in every encoding (✗: below).",
        "",
        "## Scans",
        "",
        "| scan | kind | sensor | points | fine classes |",
        "|---|---|---|---|---|",
    ]
    for scan in result["scans"]:
        classes = ", ".join(scan["classes"])
        lines.append(f"| {scan['name']} | {scan['kind']} | {scan['sensor']} | {scan['points']:,} | {classes} |")
    lines += ["", f"## The zoo model ({ZOO}, {result['zoo']['source']})", ""]
    header = "| encoding | " + " | ".join(f"{k} attributes | {k} fine | {k} coarse" for k in kinds) + " |"
    lines += [header, "|---|" + "---|---|---|" * len(kinds)]
    for enc in encodings:
        cells = []
        for k in kinds:
            c = zoo["by_encoding"][f"{k} | {enc}"]
            cells.append(f"{c['attributes']} | {c['fine_miou']:.3f} | {_mark(c['coarse_miou'])}")
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    worst = min(zoo["by_encoding"].values(), key=lambda c: c["coarse_miou"])
    lines += [
        "",
        f"Lowest coarse mIoU: {worst['coarse_miou']:.3f} ({worst['kind']}, {worst['encoding']}), "
        f"{max(0.0, GOAL - worst['coarse_miou']):.3f} short of {GOAL}.",
        "",
        f"### By sensor and by scan ({REFERENCE})",
        "",
        "| scans | fine mIoU | coarse mIoU | coarse IoU per class |",
        "|---|---|---|---|",
    ]
    for group in ("by_sensor", "by_scan"):
        for name, c in zoo[group].items():
            per = ", ".join(f"{k} {v:.2f}" for k, v in c["coarse_iou"].items())
            lines.append(f"| {name} | {c['fine_miou']:.3f} | {c['coarse_miou']:.3f} | {per} |")
    lines += [
        "",
        f"### Per class ({REFERENCE})",
        "",
        "| kind | fine IoU per class | coarse IoU per class |",
        "|---|---|---|",
    ]
    for k in kinds:
        c = zoo["by_encoding"].get(f"{k} | {REFERENCE}")
        if c is not None:
            fine = ", ".join(f"{n} {v:.2f}" for n, v in c["fine_iou"].items())
            coarse = ", ".join(f"{n} {v:.2f}" for n, v in c["coarse_iou"].items())
            lines.append(f"| {k} | {fine} | {coarse} |")
    lines += [
        "",
        "### Diagnostic: low outliers",
        "",
        "This family's scans hold gross outliers, some below the ground, and the model's height feature starts at "
        "the scan's ground by its own rule (`PTv3Config.ground`; the zoo's is robust to a few points under it). The "
        f"same reference files segmented after lifting every height below the {CLAMP_QUANTILE:.1%} quantile to it "
        "(not what the job does; not counted towards the goal):",
        "",
        "| scans | fine mIoU | coarse mIoU | coarse IoU per class |",
        "|---|---|---|---|",
    ]
    for group in ("diagnostic", "diagnostic_by_scan"):
        for name, c in zoo[group].items():
            per = ", ".join(f"{k} {v:.2f}" for k, v in c["coarse_iou"].items())
            label = name.split(" | ")[0] if group == "diagnostic" else name
            lines.append(f"| {label} | {c['fine_miou']:.3f} | {c['coarse_miou']:.3f} | {per} |")
    if zoo["kind_mismatches"]:
        lines += [
            "",
            "Scans the job's `auto` setting took for the other kind: " + "; ".join(zoo["kind_mismatches"]) + ".",
        ]
    if result.get("seeds"):
        table = result["seeds"]["table"]
        seeds = result["seeds"]["seeds"]
        lines += [
            "",
            f"## The zoo recipe, seeds {', '.join(map(str, seeds))}",
            "",
            f"Trained by `mlcore.pointcloud.pipeline.train` ({result['seeds']['note']}). Mean ± standard deviation "
            "over seeds; *worst seed*: the lowest coarse mIoU of any seed.",
            "",
            *_seed_table_lines(table, kinds, encodings),
        ]
        met = all(e["coarse_mean"] >= GOAL for e in table.values())
        lines += ["", f"Goal (mean coarse mIoU ≥ {GOAL} in every encoding and kind): {'met' if met else 'not met'}."]
        if result.get("variants"):
            lines += _variant_lines(result, kinds)
    elif result["tier"] == "full":
        lines += ["", "## The zoo recipe, three seeds", "", f"Not run: {result.get('seeds_note', 'zoo only')}."]
    lines += [
        "",
        f"Machine: {result['machine']['platform']}; {result['seconds']:.0f} s in all. Code digest "
        f"`{result.get('code_digest', '?')}` (generator, writers, reader, the job's choices, segmenter: rows are "
        "recomputed when it changes).",
        "",
    ]
    return "\n".join(lines)


def _seed_table_lines(table: dict[str, Any], kinds: list[str], encodings: list[str]) -> list[str]:
    lines = [
        "| encoding | " + " | ".join(f"{k} fine | {k} coarse | {k} worst seed" for k in kinds) + " |",
        "|---|" + "---|---|---|" * len(kinds),
    ]
    for enc in encodings:
        cells = []
        for k in kinds:
            e = table.get(f"{k} | {enc}")
            if e is None:
                cells.append("- | - | -")
                continue
            cells.append(
                f"{e['fine_mean']:.3f} ± {e['fine_std']:.3f} | {e['coarse_mean']:.3f} ± {e['coarse_std']:.3f}"
                f"{'' if e['coarse_mean'] >= GOAL else ' ✗'} | {_mark(min(e['coarse'].values()))}"
            )
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    return lines


def _mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


#: The SynMix datasets the recipes train on; the rest are zero-shot.
SEEN = ("A", "B", "C", "D")
#: The geometry-only encoding: what a model does without the attributes it was trained with.
GEOMETRY = "XYZ (numpy)"


def _variant_lines(result: dict[str, Any], kinds: list[str]) -> list[str]:
    """The recipe beside its :data:`VARIANTS`: SynMix validation against this family, per seed."""
    trainings = {f"the zoo recipe ({ZOO})": result["seeds"], **result["variants"]}
    lines = [
        "",
        "## The recipe beside other trainings",
        "",
        "The zoo recipe retrained with the changes named, with the same seeds, and measured the same way "
        "(chosen before they were measured here; this family selects nothing). *SynMix validation*: mIoU on "
        "the zoo card's validation scans (4 per dataset), mean over the seen datasets A–D and the zero-shot E, F. "
        f"Held-out columns: coarse mIoU on this family with the file's attributes ({REFERENCE}) and with "
        f"geometry only ({GEOMETRY}). Mean ± sd over seeds.",
        "",
        "| training | seeds | SynMix seen | SynMix zero-shot | "
        + " | ".join(f"{k} coarse | {k} coarse, geometry only" for k in kinds)
        + " |",
        "|---|---|---|---|" + "---|---|" * len(kinds),
    ]
    carried = {label: entry["carried_over"] for label, entry in trainings.items() if entry.get("carried_over")}
    for label, entry in trainings.items():
        synmix = entry.get("synmix") or {}
        seen = [statistics.mean(v[n] for n in SEEN) for v in synmix.values()]
        unseen = [statistics.mean(v[n] for n in v if n not in SEEN) for v in synmix.values()]
        cells = [label + (" (carried over)" if label in carried else ""), str(len(entry["per_seed"]))]
        cells += [_mean_sd(values) if values else "-" for values in (seen, unseen)]
        for k in kinds:
            for enc in (REFERENCE, GEOMETRY):
                e = entry["table"].get(f"{k} | {enc}")
                cells.append("-" if e is None else _mean_sd(list(e["coarse"].values())))
        lines.append("| " + " | ".join(cells) + " |")
    for label, info in carried.items():
        lines += [
            "",
            f"*Carried over*: {label}: measured on {info['written_at']} by code `{info['code_digest']}`, with the "
            "recipe of that time as its base; no longer trained by this study.",
        ]
    lines += ["", f"Coarse IoU per class ({REFERENCE}), mean over seeds:", ""]
    lines += ["| training | kind | coarse IoU per class |", "|---|---|---|"]
    for label, entry in trainings.items():
        for k in kinds:
            per_class: dict[str, list[float]] = {}
            for summary in entry["per_seed"].values():
                cell = summary["by_encoding"].get(f"{k} | {REFERENCE}")
                for name, value in (cell or {}).get("coarse_iou", {}).items():
                    per_class.setdefault(name, []).append(value)
            text = ", ".join(f"{n} {statistics.mean(v):.2f}" for n, v in per_class.items())
            lines.append(f"| {label} | {k} | {text} |")
    return lines


# -- running ---------------------------------------------------------------------------------------


def run(tier: str, results: Path, *, zoo_only: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure ``tier`` (quick: one room and one street, three encodings, the zoo model; full: every
    scan and encoding, the zoo model and the recipe's seeds) and write the report."""
    start = time.perf_counter()
    cfg = parameters()["tiers"][tier]
    scans = [make_scan(name) for name in cfg["scans"]]
    log(f"[{NAME}] {len(scans)} scans made in {time.perf_counter() - start:.0f} s")
    encodings = encoding_names(cfg["encodings"])
    cache = full_tier_cache(store(), tier)
    zoo_key = f"zoo-{zoo_fingerprints((ZOO,))[ZOO]}"
    model, config = load_zoo()
    zoo_rows = evaluate_model(model, scans, encodings, config=config, cache=cache, key=zoo_key, log=log)
    result: dict[str, Any] = {
        "tier": tier,
        "parameters_sha256": sha256(),
        "goal": GOAL,
        "code_digest": code_digest(),
        "encodings": encodings,
        "scans": [
            {
                "name": s.name,
                "kind": s.kind,
                "sensor": s.sensor,
                "points": len(s),
                "classes": [LABELS[c] for c in np.unique(s.labels)],
            }
            for s in scans
        ],
        "zoo": {"source": f"the committed checkpoint, {zoo_key}", "rows": zoo_rows, "summary": model_summary(zoo_rows)},
    }
    seeds = [] if zoo_only else cfg["seeds"]
    if seeds:
        per_seed: dict[int, dict[str, Any]] = {}
        synmix: dict[int, dict[str, float]] = {}
        digest = recipe_digest()
        for seed in seeds:
            if seed == 0 and zoo_is_seed_zero():
                rows = zoo_rows
                synmix[seed] = synmix_validation(model, zoo_key, cache)
            else:
                seed_model, seed_config = trained_seed(seed, log=log)
                key = recipe_key(seed)
                rows = evaluate_model(seed_model, scans, encodings, config=seed_config, cache=cache, key=key, log=log)
                synmix[seed] = synmix_validation(seed_model, key, cache)
            per_seed[seed] = model_summary(rows)
        note = (
            "seed 0 is the committed zoo checkpoint" if 0 in seeds and zoo_is_seed_zero() else "every seed trained here"
        )
        result["seeds"] = {
            "seeds": seeds,
            "recipe_digest": digest,
            "note": note,
            "per_seed": per_seed,
            "table": seed_table(per_seed),
            "synmix": synmix,
        }
        result["variants"] = {}
        for label, changes in VARIANTS.items():
            per_seed, synmix = {}, {}
            for seed in seeds:
                seed_model, seed_config = trained_seed(seed, changes=changes, log=log)
                key = recipe_key(seed, changes)
                rows = evaluate_model(seed_model, scans, encodings, config=seed_config, cache=cache, key=key, log=log)
                per_seed[seed] = model_summary(rows)
                synmix[seed] = synmix_validation(seed_model, key, cache)
            result["variants"][label] = {
                "changes": changes,
                "per_seed": per_seed,
                "table": seed_table(per_seed),
                "synmix": synmix,
            }
        carry_variants(result, results / f"{NAME}.json")
    elif tier == "full":
        result["seeds_note"] = (
            "this run measured the zoo checkpoint alone (`--zoo-only`); `python -m bench pointcloud-heldout "
            "--tier full` trains seeds 1 and 2 of the recipe (seed 0 is the zoo checkpoint) and measures them"
        )
    result["seconds"] = time.perf_counter() - start
    result["machine"] = machine()
    write_results(results, NAME, report(result), _jsonable(result))
    return result


def carry_variants(result: dict[str, Any], previous: Path) -> None:
    """The last full report's variants that :data:`VARIANTS` no longer names (trainings of an earlier
    recipe, costly to repeat), kept in the table marked as carried over with the code they were
    measured by, so retiring a variant does not erase what it measured."""
    last = last_report(previous, result["tier"])
    if last is None:
        return
    origin = {"written_at": last.get("written_at") or "earlier", "code_digest": last.get("code_digest", "?")}
    result["variants"].update(carry_over(last.get("variants") or {}, {*result["variants"], *VARIANTS}, origin))


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: sorted(v) if isinstance(v, set) else float(v)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heldout_scenes.evaluate")
    parser.add_argument("--tier", choices=("quick", "full"), default="quick")
    parser.add_argument("--zoo-only", action="store_true", help="measure the zoo checkpoint only (train no seeds)")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    run(args.tier, args.results, zoo_only=args.zoo_only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
