"""``pointcloud-segment``: label every point of an uploaded scan (or a sample scene) with a PTv3-lite /
Point-MoE segmenter, in bounded memory.

The cloud is read through the validating front door (:func:`mlcore.pointcloud.io.read_cloud`),
grid-sampled, predicted tile by tile with overlap (:mod:`mlcore.pointcloud.segment`) and every
input point gets its voxel's label. Outputs: the labelled PLY (every point, label + label colours,
input colours kept), a downsampled preview PLY for the 3D viewer, a PNG thumbnail, per-class point
counts, expert usage per predicted class (MoE segmenters) and timings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.charts import bar_chart, small_multiples
from mlcore.jobs import Choice, Dataset, Estimate, File, Int, JobContext, JobError, JobSpec, Model, Multi, Seed
from mlcore.pointcloud.io.formats import CLOUD_SUFFIXES
from mlcore.pointcloud.labels import LABELS

CLOUD_FORMATS = ("ply", "pcd", "xyz", "las")
MAX_CLOUD_BYTES = 2 * 2**30
MAX_POINTS = 50_000_000


def _estimate(p: dict[str, Any]) -> Estimate:
    # One tile's activations (measured ≈ 6 KB per voxel for the zoo models, with headroom) plus the
    # whole cloud's arrays (≈ 60 B per point at the 50M-point cap is the worst case, not counted here:
    # the upload cap bounds it at ~2 GiB of file).
    return Estimate(memory_bytes=1 * 2**30 + p["chunk_points"] * 12_000, seconds=60.0)


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Segmented 1,234,567 points in 12.3 s (100,371 points/s); largest class ground (45%); mIoU …"."""
    line = (
        f"Segmented {scalars['points']:,.0f} points in {scalars['segment_seconds']:.1f} s "
        f"({scalars['points_per_second']:,.0f} points/s)"
    )
    counts = {k.removeprefix("count_"): v for k, v in scalars.items() if k.startswith("count_") and v is not None}
    if counts and sum(counts.values()) > 0:
        largest = max(counts, key=counts.__getitem__)
        line += f"; largest class {largest} ({counts[largest] / sum(counts.values()):.0%})"
    if scalars.get("nonfinite_voxel_share"):
        line += f"; **{scalars['nonfinite_voxel_share']:.1%} of voxels overflowed** (their labels are not predictions)"
    if scalars.get("miou_vs_file_labels") is not None:
        line += (
            f"; mIoU {scalars['miou_vs_file_labels']:.3f} against the file's labels "
            f"(accuracy {scalars['accuracy_vs_file_labels']:.1%})"
        )
    return line + "."


spec = JobSpec(
    name="pointcloud-segment",
    title="Segment a point cloud (Point-MoE)",
    summary="Label every point of a scan with a PTv3-lite / Point-MoE segmenter; view it in 3D.",
    version=1,
    queue="gpu",
    soft_time_limit=2 * 3600,
    time_limit=2 * 3600 + 300,
    params=(
        Model(
            name="model",
            accepts=("pointcloud-segmenter",),
            default="zoo:pointmoe-synmix",
            help="A point-cloud segmenter (the zoo's Point-MoE or dense twin, or one trained with pointcloud-train).",
        ),
        File(
            name="cloud",
            formats=CLOUD_FORMATS,
            max_bytes=MAX_CLOUD_BYTES,
            help="PLY (ascii or binary), PCD, XYZ / XYZRGB / PTS or LAS / LAZ; up to 50M points.",
        ),
        Dataset(name="scene", accepts=("pointclouds",), help="Or a sample scene (e.g. zoo:synmix-room)."),
        Choice(
            name="setting",
            default="auto",
            options=("auto", "indoor", "outdoor"),
            help="Grid size: indoor 0.04 m, outdoor 0.1 m; auto picks indoor when the scan spans under 25 m.",
        ),
        Multi(
            name="classes",
            options=LABELS,
            default=[],
            help="Restrict predictions to these classes (an upload has no dataset identity); empty: all.",
        ),
        Int(
            name="chunk_points",
            default=150_000,
            min=2_000,
            max=2_000_000,
            help="Voxels per model call (bounds memory).",
        ),
        Int(
            name="preview_points", default=200_000, min=1_000, max=2_000_000, help="Points in the 3D viewer's preview."
        ),
        Seed(name="seed"),
    ),
    estimate=_estimate,
    guide=(
        "**What you see.** The 3D viewer shows a downsampled preview of the labelled cloud (toggle input colours "
        "and labels); the full labelled PLY holds every input point with a `label` property and label colours. "
        "*Class counts* says how many points got each label. For a Point-MoE segmenter, *expert usage per class* "
        "shows, for the first MoE layer and the last, which expert each class's points were routed to first: "
        "specialised experts show up as bars dominated by one colour; a flat chart means the experts are "
        "interchangeable.\n\n"
        "**The method.** Point-MoE (arXiv 2505.23926, ICLR 2026) keeps a Point Transformer V3 backbone and turns the "
        "attention output projection of every block into a sparse mixture of experts with a top-2 softmax router "
        "that sees only point features, never a dataset id. The paper reports higher mIoU than PTv3 and PPT when "
        "training jointly on indoor and outdoor datasets and in zero-shot transfer. Our zoo models are tiny "
        "PTv3-lite networks trained for a few CPU-minutes on procedural SynMix scenes (rooms seen by depth "
        "cameras and a panorama, streets seen by 32/64-beam LiDARs); see `bench/results/pointcloud.md` for what "
        "our benchmark measured. Expect good results on scans that resemble those: rooms and streets, metric "
        "units, z up.\n\n"
        "**Good looks like** floors, walls, roads and buildings labelled cleanly, with small objects "
        "(chairs, poles, pedestrians) the first to go wrong. If a room comes out as a street, set *setting* "
        "to indoor (the grid size decides the scale the model sees)."
    ),
    # The sample is a room: restricting to the indoor classes shows the subset option and spares the
    # demo the street classes a 0.5M-parameter model confuses with furniture.
    sample={
        "model": "zoo:pointmoe-synmix",
        "scene": "zoo:synmix-room",
        "classes": ["floor", "wall", "ceiling", "table", "chair", "cabinet", "clutter"],
        "preview_points": 50_000,
        "seed": 0,
    },
    summarize=_summarize,
)


def _cloud_path(inputs: dict[str, Any]) -> Path:
    if "cloud" in inputs:
        cloud = inputs["cloud"]
        return Path(cloud[0] if isinstance(cloud, list) else cloud)
    if "scene" in inputs:
        folder = Path(inputs["scene"])
        if folder.is_file():
            return folder
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in CLOUD_SUFFIXES)
        if not found:
            raise JobError(f"Scene: {folder.name} holds no point cloud ({', '.join(CLOUD_SUFFIXES)}).")
        return found[0]
    raise JobError("Upload a point cloud (cloud) or pick a sample scene (scene), e.g. zoo:synmix-room.")


def usage_rows(usage: Any, layer_names: list[str]) -> list[dict[str, Any]]:
    """Rows (class, layer, expert, fraction) for the classes that got points."""
    rows = []
    for k, name in enumerate(LABELS):
        for li, layer in enumerate(layer_names):
            total = int(usage[k, li].sum())
            if total == 0:
                continue
            for e, count in enumerate(usage[k, li]):
                rows.append(
                    {"class": name, "layer": layer, "expert": f"expert {e}", "fraction": round(int(count) / total, 4)}
                )
    return rows


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import numpy as np

    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.io.ply import write_ply
    from mlcore.pointcloud.pipeline import SegmenterError, load_segmenter
    from mlcore.pointcloud.preview import input_colors, write_preview
    from mlcore.pointcloud.render import palette, render_thumbnail
    from mlcore.pointcloud.segment import choose_grid, segment_cloud

    if "model" not in inputs:
        raise JobError("Pick a segmenter (e.g. zoo:pointmoe-synmix).")
    path = _cloud_path(inputs)
    ctx.progress(0.0, "reading the cloud")
    start = time.perf_counter()
    # A labelled PLY of ours without input colours reads back with rgb=None, so label colours never
    # reach the model as sensor colours.
    cloud = read_cloud(path, max_points=MAX_POINTS)
    read_seconds = time.perf_counter() - start
    try:
        model, config = load_segmenter(Path(inputs["model"]))
    except SegmenterError as exc:
        raise JobError(f"Model: {exc}.") from None
    grid = choose_grid(cloud.xyz, params["setting"])
    classes = [LABELS.index(c) for c in params["classes"]]
    ctx.log(
        f"{path.name}: {len(cloud):,} points"
        + (", colour" if cloud.rgb is not None else "")
        + (", intensity" if cloud.intensity is not None else "")
        + f"; {params['setting']} → grid {grid:g} m; model {config['model']['proj']} projection"
        + (f" ({config['model']['experts']} experts, top-{config['model']['top_k']})" if model.cfg.is_moe else "")
    )

    def on_chunk(done: int, total: int) -> None:
        ctx.raise_if_cancelled()
        ctx.progress(0.05 + 0.8 * done / max(1, total), f"segmenting: {done:,} of {total:,} voxels")

    result = segment_cloud(
        model,
        cloud.xyz,
        cloud.rgb,
        cloud.intensity,
        grid=grid,
        classes=classes,
        chunk_points=params["chunk_points"],
        on_chunk=on_chunk,
    )
    ctx.progress(0.87, "writing the labelled cloud")
    colours = palette(len(LABELS))
    full = ctx.workdir / "labelled.ply"
    write_ply(
        full,
        cloud.xyz,
        rgb=cloud.rgb,
        labels=result.labels,
        label_colors=colours,
        label_names=LABELS,
        intensity=cloud.intensity,
    )
    # The full file can hold millions of points: the viewer gets the preview, the full one downloads.
    ctx.artifact(
        "labelled.ply",
        full,
        "application/x-ply" if len(cloud) <= params["preview_points"] else "application/octet-stream",
    )
    ctx.register("pointclouds", full, {"name": f"{path.stem} labelled", "points": len(cloud)})
    preview_path = ctx.workdir / "preview.ply"
    from mlcore.pointcloud.io.cloud import Cloud

    shown = write_preview(
        preview_path,
        Cloud(xyz=cloud.xyz, rgb=cloud.rgb, intensity=cloud.intensity, labels=result.labels),
        label_names=LABELS,
        label_colors=colours,
        budget=params["preview_points"],
        seed=params["seed"],
    )
    ctx.artifact("preview.ply", preview_path, "application/x-ply")
    ctx.progress(0.93, "rendering the thumbnail")
    thumb_index = np.random.default_rng(params["seed"]).permutation(len(cloud))[:100_000]
    renderer = render_thumbnail(
        cloud.xyz[thumb_index], colours[result.labels[thumb_index]], ctx.workdir / "thumbnail.png"
    )
    ctx.artifact("thumbnail.png", ctx.workdir / "thumbnail.png", "image/png")
    input_thumb = ctx.workdir / "input.png"
    render_thumbnail(cloud.xyz[thumb_index], input_colors(cloud.subset(thumb_index)), input_thumb)
    ctx.artifact("input.png", input_thumb, "image/png")

    counts = np.bincount(result.labels, minlength=len(LABELS))
    count_rows = [{"class": name, "points": int(n)} for name, n in zip(LABELS, counts, strict=True) if n]
    ctx.chart(
        "class_counts",
        bar_chart("Points per predicted class", count_rows, x="class", y="points", x_title="Class", y_title="Points"),
    )
    metrics: dict[str, float] = {
        "points": float(len(cloud)),
        "voxels": float(result.voxels),
        "chunks": float(result.chunks),
        "grid_m": grid,
        "read_seconds": read_seconds,
        "segment_seconds": result.seconds["total"],
        "points_per_second": len(cloud) / max(result.seconds["total"], 1e-9),
        # Voxels whose logits overflowed: their labels are meaningless, so the page must say so.
        "nonfinite_voxel_share": result.nonfinite / max(result.voxels, 1),
    }
    if result.nonfinite:
        ctx.log(
            f"warning: the model's logits overflowed (inf/NaN) on {result.nonfinite:,} of {result.voxels:,} voxels "
            f"({metrics['nonfinite_voxel_share']:.1%}); their labels are not predictions. This scan is far from "
            "the statistics the model's BatchNorm blocks were trained on: a model with LayerNorm blocks does not "
            "overflow."
        )
    for row in count_rows:
        metrics[f"count_{row['class']}"] = float(row["points"])
    if result.usage is not None and result.usage.shape[1]:
        layers = result.usage.shape[1]
        picks = sorted({0, layers - 1})
        names = [f"MoE layer {i + 1} of {layers}" for i in picks]
        rows = usage_rows(result.usage[:, picks], names)
        bars = bar_chart(
            "Expert usage per predicted class (top-1 expert)",
            rows,
            x="class",
            y="fraction",
            x_title="Class",
            y_title="Fraction",
            color="expert",
            color_title="Expert",
        )
        # Vega-Lite's own cell size (20 px per class, 300 px tall), now explicit: facets cannot fit the page.
        ctx.chart("expert_usage", small_multiples(bars, row="layer", width={"step": 20}, height=300))
        usage_path = ctx.workdir / "expert_usage.json"
        usage_path.write_text(json.dumps({"labels": list(LABELS), "usage": result.usage.tolist()}))
        ctx.artifact("expert_usage.json", usage_path, "application/json")
    if cloud.labels is not None and len(cloud.labels) and cloud.labels.min() >= 0 and cloud.labels.max() < len(LABELS):
        # A sample scene carries its ground truth: say how well the prediction agrees with it.
        from mlcore.pointcloud.pipeline import confusion, miou

        present = sorted(set(np.unique(cloud.labels).tolist()))
        score, _ = miou(confusion(result.labels.astype(np.int64), cloud.labels.astype(np.int64)), present)
        metrics["accuracy_vs_file_labels"] = float((result.labels == cloud.labels).mean())
        metrics["miou_vs_file_labels"] = score
    for key, value in metrics.items():
        ctx.metric(key, value)
    ctx.log(
        f"{len(cloud):,} points → {result.voxels:,} voxels in {result.chunks} chunk(s); "
        f"{metrics['points_per_second']:,.0f} points/s; preview {shown:,} points; thumbnail by {renderer}"
        + (
            f"; agreement with the file's labels {metrics['accuracy_vs_file_labels']:.3f}"
            if "accuracy_vs_file_labels" in metrics
            else ""
        )
    )
    ctx.progress(1.0, "done")
    return metrics
