"""Encoding invariance of the point-cloud reader and segmenter, and what attributes are worth.

1. **Encodings.** The same scene (a SynMix room seen by a depth camera, with colour; a street seen by
   a 64-beam LiDAR, with intensity), coordinates quantised to millimetres as a scanner's export
   is, is written with the tools users have (open3d, laspy) and the project's own writers in eleven
   encodings: PLY ASCII / binary little-endian / binary big-endian float64, PCD ASCII / binary /
   binary_compressed, XYZ, XYZRGB with 0-255 colours, LAS 1.2 point format 3 with 16-bit RGB, LAS
   1.4 point format 6 with 16-bit intensity at UTM-sized coordinates (x ≈ 512,000 m, y ≈ 5,400,000 m)
   with georeferenced header offsets. Each file is read by :func:`mlcore.pointcloud.io.read_cloud`
   and segmented by the zoo Point-MoE with every attribute the file carries. Encodings that carry
   the same attributes must give the same labels on ≥ 99.9% of points; the table says how many do,
   the mIoU of each, and the largest coordinate error against the scene (millimetres).
2. **Attributes.** The mIoU of the zoo segmenter on the built-in scenes with geometry only, colour,
   intensity, and both, where the scan has them: the numbers ``pointcloud-segment``'s ``auto``
   attribute choice was set by.

``python -m bench pointcloud-encodings --tier quick`` writes ``bench/results/pointcloud-encodings.md``
and ``.json``. The quick tier uses one scan per scene kind (and the attribute table one validation
scan per SynMix dataset), the full tier three.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ZOO_CHECKPOINTS, machine, write_results

#: The georeferenced placement of the LAS 1.4 encoding: a UTM zone 32N easting and northing.
UTM_SHIFT = np.array([512_000.0, 5_400_000.0, 300.0])
AGREEMENT_GOAL = 0.999
TIERS = {"quick": {"scans": 1, "attribute_scans": 1}, "full": {"scans": 3, "attribute_scans": 3}}
#: (scene kind, SynMix dataset, grid setting) of the scenes each encoding is written for.
SCENES = (("room", "A", "indoor"), ("street", "C", "outdoor"))
ATTRIBUTE_DATASETS = ("A", "B", "C", "D")
ATTRIBUTE_MODES = ("xyz-only", "colour", "intensity", "colour+intensity")


@dataclass
class Scene:
    """World coordinates (float64, millimetre multiples), colour, intensity in [0, 1], master labels."""

    xyz: np.ndarray
    rgb: np.ndarray | None
    intensity: np.ndarray | None
    labels: np.ndarray


def make_scene(dataset: str, index: int) -> Scene:
    from mlcore.pointcloud.datasets import make_scan

    scan = make_scan(dataset, index, "val")
    xyz = np.round(scan.xyz.astype(np.float64), 3)
    intensity = None if scan.intensity is None else np.round(scan.intensity.astype(np.float64) * 65535) / 65535
    return Scene(xyz, scan.rgb, None if intensity is None else intensity.astype(np.float32), scan.labels)


# -- writers --------------------------------------------------------------------------------------


def _o3d_cloud(scene: Scene) -> Any:
    import open3d as o3d

    cloud = o3d.t.geometry.PointCloud(o3d.core.Tensor(scene.xyz.astype(np.float32)))
    if scene.rgb is not None:
        cloud.point.colors = o3d.core.Tensor(scene.rgb.astype(np.float32) / 255.0)
    if scene.intensity is not None:
        cloud.point.intensity = o3d.core.Tensor(scene.intensity[:, None])
    return cloud


def write_ply_big_endian_double(scene: Scene, path: Path) -> None:
    """Our own numpy writer: float64 coordinates, big-endian, colour and intensity if present."""
    fields = [("x", ">f8", scene.xyz[:, 0]), ("y", ">f8", scene.xyz[:, 1]), ("z", ">f8", scene.xyz[:, 2])]
    if scene.rgb is not None:
        fields += [(c, "u1", scene.rgb[:, k]) for k, c in enumerate(("red", "green", "blue"))]
    if scene.intensity is not None:
        fields.append(("intensity", ">f4", scene.intensity))
    table = np.empty(len(scene.xyz), dtype=[(n, t) for n, t, _ in fields])
    for name, _, values in fields:
        table[name] = values
    names = {">f8": "double", ">f4": "float", "u1": "uchar"}
    header = ["ply", "format binary_big_endian 1.0", f"element vertex {len(table)}"]
    header += [f"property {names[t]} {n}" for n, t, _ in fields] + ["end_header"]
    path.write_bytes(("\n".join(header) + "\n").encode() + table.tobytes())


def write_las(scene: Scene, path: Path, *, version: str, point_format: int, shift: np.ndarray) -> None:
    import laspy

    header = laspy.LasHeader(point_format=point_format, version=version)
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = shift.copy()
    las = laspy.LasData(header)
    world = scene.xyz + shift
    las.x, las.y, las.z = world[:, 0], world[:, 1], world[:, 2]
    if point_format in (2, 3, 5, 7, 8, 10) and scene.rgb is not None:
        las.red, las.green, las.blue = (scene.rgb[:, k].astype(np.uint16) * 257 for k in range(3))
    if scene.intensity is not None:
        las.intensity = np.rint(scene.intensity.astype(np.float64) * 65535).astype(np.uint16)
    las.write(str(path))


def encodings(scene: Scene) -> dict[str, tuple[str, Callable[[Path], None], np.ndarray]]:
    """Name → (file name, writer, the shift its coordinates carry)."""
    import open3d as o3d

    from mlcore.pointcloud.io.ply import write_ply

    zero = np.zeros(3)
    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)

    def o3d_writer(**kwargs: Any) -> Callable[[Path], None]:
        return lambda path: o3d.t.io.write_point_cloud(str(path), _o3d_cloud(scene), **kwargs)

    def text(columns: Callable[[], np.ndarray], fmt: str) -> Callable[[Path], None]:
        return lambda path: np.savetxt(path, columns(), fmt=fmt)

    table: dict[str, tuple[str, Callable[[Path], None], np.ndarray]] = {
        "PLY ascii (open3d)": ("ascii.ply", o3d_writer(write_ascii=True), zero),
        "PLY binary LE (own writer)": (
            "le.ply",
            lambda path: write_ply(path, scene.xyz.astype(np.float32), rgb=scene.rgb, intensity=scene.intensity),
            zero,
        ),
        "PLY binary BE float64 (own writer)": ("be64.ply", lambda p: write_ply_big_endian_double(scene, p), zero),
        "PCD ascii (open3d)": ("ascii.pcd", o3d_writer(write_ascii=True), zero),
        "PCD binary (open3d)": ("binary.pcd", o3d_writer(write_ascii=False), zero),
        "PCD binary_compressed (open3d)": ("compressed.pcd", o3d_writer(write_ascii=False, compressed=True), zero),
        "XYZ (numpy)": ("cloud.xyz", text(lambda: scene.xyz, "%.3f"), zero),
    }
    if scene.rgb is not None:
        table["XYZRGB 0-255 (numpy)"] = (
            "cloud.xyzrgb",
            text(lambda: np.hstack([scene.xyz, scene.rgb.astype(np.float64)]), "%.3f %.3f %.3f %d %d %d"),
            zero,
        )
    table["LAS 1.2 pf3 16-bit RGB (laspy)"] = (
        "v12.las",
        lambda p: write_las(scene, p, version="1.2", point_format=3, shift=zero),
        zero,
    )
    table["LAS 1.4 pf6 intensity, UTM offsets (laspy)"] = (
        "v14.las",
        lambda p: write_las(scene, p, version="1.4", point_format=6, shift=UTM_SHIFT),
        UTM_SHIFT,
    )
    return table


# -- measuring ------------------------------------------------------------------------------------


def load_zoo() -> Any:
    from mlcore.pointcloud.pipeline import load_segmenter

    model, _ = load_segmenter(ZOO_CHECKPOINTS / "pointmoe-synmix")
    return model


def segment_file(model: Any, path: Path, setting: str) -> tuple[np.ndarray, Any]:
    """Read ``path`` and segment it the way ``pointcloud-segment`` does, with every attribute it carries."""
    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.labels import LABELS, scene_labels
    from mlcore.pointcloud.segment import choose_grid, segment_cloud

    cloud = read_cloud(path, max_points=10**7)
    grid = choose_grid(cloud.xyz, setting)
    classes = [LABELS.index(c) for c in scene_labels(setting)]
    result = segment_cloud(model, cloud.xyz, cloud.rgb, cloud.intensity, grid=grid, classes=classes)
    return result.labels, cloud


def scene_miou(pred: np.ndarray, truth: np.ndarray) -> float:
    from mlcore.pointcloud.pipeline import confusion, miou

    present = sorted(set(np.unique(truth[truth >= 0]).tolist()))
    return miou(confusion(pred.astype(np.int64), truth.astype(np.int64)), present)[0]


def encoding_rows(model: Any, scene: Scene, setting: str, folder: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, (file_name, writer, shift) in encodings(scene).items():
        path = folder / file_name
        writer(path)
        labels, cloud = segment_file(model, path, setting)
        error_mm = float(np.abs(cloud.world() - (scene.xyz + shift)).max()) * 1000
        carried = "+".join(a for a, v in (("colour", cloud.rgb), ("intensity", cloud.intensity)) if v is not None)
        rows.append(
            {
                "encoding": name,
                "attributes": carried or "geometry",
                "labels": labels,
                "miou": scene_miou(labels, scene.labels),
                "max_error_mm": error_mm,
                "notes": [f"{what}: {note}" for what, note in cloud.notes],
            }
        )
    # Agreement with the first encoding that carries the same attributes.
    reference: dict[str, np.ndarray] = {}
    for row in rows:
        ref = reference.setdefault(row["attributes"], row["labels"])
        row["agreement"] = float((row["labels"] == ref).mean())
    for row in rows:
        del row["labels"]
    return rows


def attribute_rows(model: Any, scans: int) -> list[dict[str, Any]]:
    """mIoU of the zoo segmenter per SynMix dataset and attribute choice (over ``scans`` validation scans)."""
    from mlcore.pointcloud.datasets import get_dataset, make_scan
    from mlcore.pointcloud.pipeline import confusion, miou
    from mlcore.pointcloud.segment import segment_cloud

    rows = []
    for name in ATTRIBUTE_DATASETS:
        spec = get_dataset(name)
        items = [make_scan(name, i, "val") for i in range(scans)]
        row: dict[str, Any] = {
            "dataset": f"{name}: {spec.title}",
            "kind": spec.kind,
            "carries": "+".join(
                a for a, v in (("colour", items[0].rgb), ("intensity", items[0].intensity)) if v is not None
            ),
        }
        for mode in ATTRIBUTE_MODES:
            if mode != "xyz-only" and not all(a in row["carries"] for a in mode.split("+")):
                continue
            conf = np.zeros((14, 14), np.int64)
            for scan in items:
                result = segment_cloud(
                    model,
                    scan.xyz,
                    scan.rgb if "colour" in mode else None,
                    scan.intensity if "intensity" in mode else None,
                    grid=spec.grid,
                    classes=list(spec.class_ids),
                )
                conf += confusion(result.labels.astype(np.int64), scan.labels.astype(np.int64))
            row[mode] = miou(conf, spec.class_ids)[0]
        rows.append(row)
    return rows


def report(result: dict[str, Any]) -> str:
    lines = [
        "# Point clouds: encoding invariance and attributes",
        "",
        f"Written by `python -m bench pointcloud-encodings --tier {result['tier']}` (bench/pointcloud_encodings.py).",
        "",
        "## Encoding invariance",
        "",
        "The same scene in every encoding, read by `read_cloud` and segmented by the zoo Point-MoE with the "
        "attributes the file carries. *Agreement*: share of points labelled as by the first encoding that carries "
        f"the same attributes (goal ≥ {AGREEMENT_GOAL:.1%}). *Max error*: the largest coordinate difference "
        "between the reader's full-precision coordinates and the scene, in mm (the LAS 1.4 file is at UTM "
        "coordinates, x ≈ 512,000 m, y ≈ 5,400,000 m).",
        "",
    ]
    for scene, rows in result["encodings"].items():
        lines += [f"### {scene}", "", "| encoding | attributes read | agreement | mIoU | max error (mm) |"]
        lines.append("|---|---|---|---|---|")
        for row in rows:
            ok = "" if row["agreement"] >= AGREEMENT_GOAL else " ✗"
            lines.append(
                f"| {row['encoding']} | {row['attributes']} | {row['agreement']:.4f}{ok} | {row['miou']:.3f} "
                f"| {row['max_error_mm']:.3f} |"
            )
        lines.append("")
    lines += [
        "## Attributes",
        "",
        "mIoU of the zoo Point-MoE on SynMix validation scans with the attributes the model is given "
        f"({result['attribute_scans']} scan(s) per dataset; '-' where the scan lacks the attribute).",
        "",
        "| dataset | carries | " + " | ".join(ATTRIBUTE_MODES) + " |",
        "|---|---|" + "---|" * len(ATTRIBUTE_MODES),
    ]
    for row in result["attributes"]:
        cells = [f"{row[m]:.3f}" if m in row else "-" for m in ATTRIBUTE_MODES]
        lines.append(f"| {row['dataset']} | {row['carries']} | " + " | ".join(cells) + " |")
    lines += ["", f"Machine: {result['machine']['platform']}, {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def run(tier: str, results: Path) -> None:
    import tempfile

    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    cfg = TIERS[tier]
    start = time.perf_counter()
    model = load_zoo()
    out: dict[str, Any] = {"tier": tier, "encodings": {}, "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="moelab-encodings-") as tmp:
        for kind, dataset, setting in SCENES:
            for index in range(cfg["scans"]):
                folder = Path(tmp) / f"{kind}{index}"
                folder.mkdir()
                rows = encoding_rows(model, make_scene(dataset, index), setting, folder)
                out["encodings"][f"{kind} {index} (SynMix {dataset} validation scan {index})"] = rows
    out["attribute_scans"] = cfg["attribute_scans"]
    out["attributes"] = attribute_rows(model, cfg["attribute_scans"])
    out["seconds"] = time.perf_counter() - start
    # Stamped (and a quick tier kept apart from a full report) as every study's report is.
    write_results(results, "pointcloud-encodings", report(out), out)
