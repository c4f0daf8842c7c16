"""``pointcloud-segment``: label every point of an uploaded scan (or a sample scene) with a PTv3-lite /
Point-MoE segmenter, in bounded memory.

The cloud is read through the validating front door (:func:`mlcore.pointcloud.io.read_cloud`:
local float32 coordinates beside a float64 offset, attributes normalised by meaning), grid-sampled,
predicted tile by tile with overlap (:mod:`mlcore.pointcloud.segment`) and every input point gets
its voxel's label. Only the attributes the ``attributes`` parameter names reach the model, and only
the classes of the scene kind (indoor / outdoor) unless the user picks others. Outputs: the
labelled PLY in double precision (every point at its input coordinates, label + label colours,
input colours kept), a labelled LAS / LAZ for a LAS / LAZ input (the input's every field, scales,
offsets and VLRs, ASPRS classification set), a downsampled preview PLY for the 3D viewer, a PNG
thumbnail with a legend, per-class point counts (fine and coarse), expert usage per predicted
class (MoE segmenters) and timings.

A segmenter ``pointcloud-train`` taught on the user's own scans predicts the user's classes
(:mod:`mlcore.pointcloud.segmenter_classes` reads them): every output names them, the LAS gets the
ids the user's files gave them, the grid is the voxel it was trained at and ``attributes=auto``
gives it what its training scans held. The coarse taxonomy and the ASPRS codes are defined on the
SynMix classes, so they are left out, and SynMix grids or classes it never learnt are refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlcore.charts import bar_chart, small_multiples
from mlcore.jobs import (
    Choice,
    Comparison,
    Dataset,
    Estimate,
    File,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Multi,
    Seed,
)
from mlcore.pointcloud.io.formats import CLOUD_SUFFIXES
from mlcore.pointcloud.labels import COARSE, COARSE_OF, LABELS, scene_labels
from mlcore.pointcloud.segmenter_classes import USER_ATTRIBUTES, SegmenterClasses

#: The ``attributes`` choices: which of the file's attributes reach the model.
ATTRIBUTE_CHOICES = ("auto", "xyz-only", "colour", "intensity", "colour+intensity")
#: What ``auto`` uses, per scene kind: the attributes on which the zoo segmenter's mIoU was measured
#: not to fall (bench/results/pointcloud-encodings.md, attribute table).
#: The zoo model (trained to do without either, "batch-30") gives geometry alone mIoU 0.32 on the
#: sample room and 0.42 on the street; colour indoors 0.66, intensity outdoors 0.43. The other
#: attribute it only ever saw synthesised there: on SynMix validation it lowers rooms' mIoU
#: (bench/results/pointcloud-attributes.md, part 1, "+ intensity").
AUTO_ATTRIBUTES: dict[str, tuple[str, ...]] = {"indoor": ("colour",), "outdoor": ("intensity",)}

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
    lacking = [a for a in ("colour", "intensity") if scalars.get(f"missing_{a}")]
    if lacking:
        line += f"; **the file has no {' or '.join(lacking)}, which the segmenter always trained with** (less reliable)"
    if scalars.get("nonfinite_voxel_share"):
        line += f"; **{scalars['nonfinite_voxel_share']:.1%} of voxels overflowed** (their labels are not predictions)"
    if scalars.get("miou_vs_file_labels") is not None:
        line += (
            f"; mIoU {scalars['miou_vs_file_labels']:.3f} against the file's labels "
            f"(accuracy {scalars['accuracy_vs_file_labels']:.1%})"
        )
    if scalars.get("coarse_miou_vs_file_labels") is not None:
        line += f"; coarse mIoU {scalars['coarse_miou_vs_file_labels']:.3f}"
    return line + "."


spec = JobSpec(
    name="pointcloud-segment",
    metrics=(
        Metric(
            key="miou_vs_file_labels",
            label="mIoU against the file's labels",
            better="higher",
            description="Mean intersection over union with the labels stored in the uploaded file.",
        ),
        Metric(
            key="accuracy_vs_file_labels",
            label="Point accuracy",
            unit="%",
            better="higher",
            description="Share of points whose predicted class matches the file's label.",
        ),
        Metric(
            key="segment_seconds",
            label="Segmentation time",
            unit="s",
            better="lower",
            description="Wall-clock seconds to segment the whole cloud on the worker.",
            beside="points_per_second",
        ),
        Metric(
            key="points_per_second",
            label="Throughput",
            unit="points/s",
            better="higher",
            description="Points segmented per wall-clock second.",
        ),
        Metric(key="points", label="Points", description="Points in the cloud."),
    ),
    comparison=Comparison.none(
        "Segments one cloud with one model; pointcloud-train compares Point-MoE with a dense model."
    ),
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
            help="A point-cloud segmenter: the zoo's Point-MoE or dense twin, or one trained with pointcloud-train "
            "(on SynMix or on your own scans and classes).",
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
        Choice(
            name="attributes",
            default="auto",
            options=ATTRIBUTE_CHOICES,
            help="Which of the file's attributes the model sees besides geometry. auto: those it was measured to "
            "use well (colour indoors, intensity outdoors); the others: what they name, when the file has it.",
        ),
        Multi(
            name="classes",
            options=LABELS,
            default=[],
            help="Restrict predictions to these classes (an upload has no dataset identity); empty: the classes "
            "of the scene kind (indoor: floor … clutter; outdoor: road … pedestrian), or your own for a segmenter "
            "trained on them. Pick classes to allow others.",
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
        "to indoor (the grid size decides the scale the model sees).\n\n"
        "**A segmenter of your own classes.** One that pointcloud-train taught on your labelled scans predicts "
        "your classes: the labels, legend, class counts, expert usage and the labelled PLY name them, and a LAS / "
        "LAZ output gets the ids your training files gave them (named in its classification lookup; the exact "
        "class also in `moelab_class`). A file that carries labels is compared with them by those ids (a PLY of "
        "ours: by class name). It segments at the voxel size it was trained at (*setting* auto) and, with "
        "*attributes* auto, sees what its training scans held. The coarse classes and ASPRS codes belong to the "
        "SynMix classes and are not used; *classes* and the indoor / outdoor grids apply only to SynMix classes "
        "it also learnt (trained with mix_synmix). A segmenter whose class list is missing or does not match its "
        "outputs is refused with what to do."
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


def usage_rows(usage: Any, layer_names: list[str], names: Sequence[str] = LABELS) -> list[dict[str, Any]]:
    """Rows (class, layer, expert, fraction) for the classes (``names``, the model's) that got points."""
    rows = []
    for k, name in enumerate(names):
        for li, layer in enumerate(layer_names):
            total = int(usage[k, li].sum())
            if total == 0:
                continue
            for e, count in enumerate(usage[k, li]):
                rows.append(
                    {"class": name, "layer": layer, "expert": f"expert {e}", "fraction": round(int(count) / total, 4)}
                )
    return rows


def held_attributes(cloud: Any) -> dict[str, bool]:
    """Which of the attributes the model can see a read cloud holds."""
    return {"colour": cloud.rgb is not None, "intensity": cloud.intensity is not None}


def segment_read_cloud(
    model: Any, cloud: Any, used: tuple[str, ...], *, grid: float, classes: list[int], chunk_points: int, **kwargs: Any
) -> Any:
    """:func:`~mlcore.pointcloud.segment.segment_cloud` on a read cloud with only the attributes ``used``."""
    from mlcore.pointcloud.segment import segment_cloud

    return segment_cloud(
        model,
        cloud.xyz,
        cloud.rgb if "colour" in used else None,
        cloud.intensity if "intensity" in used else None,
        grid=grid,
        classes=classes,
        chunk_points=chunk_points,
        **kwargs,
    )


def chosen_attributes(setting: str, kind: str, trained: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The attributes (``colour``, ``intensity``) the ``attributes`` choice asks for on a scene of
    ``kind``; ``auto`` for a segmenter of the user's classes: ``trained``, those its training scans held."""
    if setting == "auto":
        return trained if trained is not None else AUTO_ATTRIBUTES.get(kind, ())
    if setting == "xyz-only":
        return ()
    return tuple(setting.split("+"))


def unprepared_attributes(missing: Sequence[str], robust: tuple[str, ...] | None) -> list[str]:
    """Of the attributes the segmenter asked for and the file lacks, those its training never left
    out (``robust``: :func:`~mlcore.pointcloud.augment.robust_attributes`)."""
    return [a for a in missing if a not in (robust or ())]


def missing_attribute_warning(attributes: Sequence[str]) -> str:
    """The log's warning for a file without attributes the segmenter always trained with. Why loud:
    without them such a model does not fall back to geometry, it mislabels (the zoo segmenter's mIoU
    on SynMix validation scans falls by half or more; a user segmenter trained on painted doors with
    colour labels colourless rooms almost entirely wrong, bench/results/pointcloud-attributes.md)."""
    names = " and ".join(attributes)
    return (
        f"warning: this segmenter was trained on scans with {names} and never without; the file holds no "
        f"{names}, so expect far less reliable labels than on scans that do. Segment a file that keeps the "
        f"{names}, or train a segmenter for such scans with pointcloud-train on labelled scans without it."
    )


def coarse_miou(pred: Any, truth: Any) -> tuple[float, dict[str, float]]:
    """mIoU over the coarse classes present, from coarse ids (−1: no coarse class, not counted)."""
    import numpy as np

    valid = truth >= 0
    k = len(COARSE)
    conf = np.bincount(truth[valid] * k + np.clip(pred[valid], 0, k - 1), minlength=k * k).reshape(k, k)
    ious: dict[str, float] = {}
    for c in sorted(set(truth[valid].tolist())):
        union = conf[c].sum() + conf[:, c].sum() - conf[c, c]
        ious[COARSE[c]] = float(conf[c, c] / union) if union else 0.0
    return (float(np.mean(list(ious.values()))) if ious else 0.0), ious


def segmenting_grid(xyz: Any, setting: str, classes: SegmenterClasses) -> tuple[float, str]:
    """(grid, scene kind) for the ``setting``: a SynMix segmenter's indoor / outdoor grids; one of the
    user's classes segments at the voxel it was trained at (kind ``yours``), and takes a SynMix grid
    only when SynMix was mixed into its training."""
    from mlcore.pointcloud.segment import choose_grid

    if classes.voxel is None:
        grid = choose_grid(xyz, setting)
        return grid, "indoor" if grid < 0.07 else "outdoor"
    if setting == "auto":
        return classes.voxel, "yours"
    if not classes.synmix:
        raise JobError(
            f"setting: {setting} picks a SynMix grid, but this segmenter was trained on your scans alone at "
            f"{classes.voxel:g} m; leave setting at auto to segment at that voxel size."
        )
    grid = choose_grid(xyz, setting)
    return grid, setting


def allowed_classes(picked: list[str], classes: SegmenterClasses, kind: str) -> tuple[list[int], str]:
    """The outputs predictions may take, and a log line when they are a default: the picked
    classes; else a SynMix segmenter's classes of the scene kind, or the user's own classes."""
    if picked:
        missing = [name for name in picked if classes.index(name) is None]
        if missing:
            raise JobError(
                f"classes: this segmenter does not know {', '.join(missing)} (its classes: "
                f"{', '.join(classes.names)}); leave classes empty to use "
                + ("the scene kind's classes." if not classes.user_trained else "the classes it was trained on.")
            )
        return [i for i in (classes.index(name) for name in picked) if i is not None], ""
    if not classes.user_trained:
        return (
            [LABELS.index(c) for c in scene_labels(kind)],
            f"classes: the {kind} set ({', '.join(scene_labels(kind))}); pick classes to allow others",
        )
    return list(classes.own), f"classes: yours ({', '.join(classes.names[i] for i in classes.own)})"


def own_truth(cloud: Any, path: Path, classes: SegmenterClasses) -> tuple[Any, str]:
    """The file's labels as the segmenter's classes (−1: not counted), and how they were matched, for
    a segmenter of the user's classes: a PLY of ours by its class names, anything else by the ids
    the user's training files gave the classes. (None, why not) when nothing matches."""
    import numpy as np

    from mlcore.pointcloud.user_scans import LAS_UNLABELLED, moelab_label_names

    labels = cloud.labels
    named = moelab_label_names(path) if cloud.format == "ply" else {}
    if named:
        table = {code: k for code, name in named.items() if (k := classes.index(name)) is not None}
        how = "by class name (the file's label comments)"
    elif classes.codes:
        table = {code: k for k, code in sorted(classes.codes.items(), reverse=True)}
        how = "by class id, as your training files numbered the classes"
    else:
        return None, (
            "the file's labels are not compared: this segmenter does not record the ids its training files gave "
            "its classes (retrain it with pointcloud-train to get them)"
        )
    uniq, inverse = np.unique(labels, return_inverse=True)
    unlabelled = set(LAS_UNLABELLED) if cloud.format in ("las", "laz") else set()
    unknown = [int(c) for c in uniq if int(c) not in table and int(c) not in unlabelled and c >= 0]
    mapped = np.array([table.get(int(c), -1) for c in uniq], np.int64)[inverse.reshape(-1)]
    if not (mapped >= 0).any():
        return None, (
            f"the file's labels ({', '.join(str(int(c)) for c in uniq[:10])}) match none of the segmenter's classes "
            f"{how}; no agreement measured"
        )
    shown = ", ".join(str(c) for c in unknown[:10]) + (" …" if len(unknown) > 10 else "")
    return mapped, f"compared with the file's labels {how}" + (
        f"; ids {shown} are none of its classes and not counted" if unknown else ""
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import numpy as np

    from mlcore.jobs.pointcloud_train.user_scans import metric_name
    from mlcore.pointcloud.augment import robust_attributes
    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.io.cloud import Cloud
    from mlcore.pointcloud.io.ply import write_ply
    from mlcore.pointcloud.labels import ASPRS_COARSE
    from mlcore.pointcloud.pipeline import load_segmenter
    from mlcore.pointcloud.preview import input_colors, write_preview
    from mlcore.pointcloud.render import palette, render_thumbnail
    from mlcore.pointcloud.segmenter_classes import SegmenterError, read_classes

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
        classes = read_classes(config, model.cfg.num_classes)
    except SegmenterError as exc:
        raise JobError(f"Model: {exc}.") from None
    names = classes.names
    own = classes.user_trained
    grid, kind = segmenting_grid(cloud.xyz, params["setting"], classes)
    allowed, default_note = allowed_classes(params["classes"], classes, kind)
    for what, note in cloud.notes:
        ctx.log(f"read {what}: {note}")
    if cloud.offset.any():
        ctx.log(
            "georeferenced coordinates: offset "
            + ", ".join(f"{v:,.3f}" for v in cloud.offset)
            + " m subtracted in double precision before the model; the outputs keep the input coordinates"
        )
    if own:
        ctx.log(
            f"the segmenter knows your classes ({', '.join(names)}), trained at {classes.voxel:g} m"
            + (f" with SynMix {', '.join(classes.synmix)}" if classes.synmix else "")
            + ": coarse classes and ASPRS codes, defined on SynMix's classes, are not used"
        )
    trained = (USER_ATTRIBUTES if classes.attributes is None else classes.attributes) if own else None
    wanted = chosen_attributes(params["attributes"], kind, trained)
    available = held_attributes(cloud)
    used = tuple(a for a in wanted if available[a])
    missing = [a for a in wanted if not available[a]]
    unprepared = unprepared_attributes(missing, robust_attributes(config))
    if missing:
        ctx.log(f"attributes: asked for {' and '.join(missing)}, which the file does not hold; left out")
    if unprepared:
        ctx.log(missing_attribute_warning(unprepared))
    ignored = [a for a, present in available.items() if present and a not in used]
    ctx.log(
        f"attributes used: geometry{''.join(' + ' + a for a in used)}"
        + (f" (the file's {' and '.join(ignored)} not used: attributes={params['attributes']})" if ignored else "")
    )
    if default_note:
        ctx.log(default_note)
    where = f"grid {grid:g} m (the voxel it was trained at)" if kind == "yours" else f"{kind}, grid {grid:g} m"
    ctx.log(
        f"{path.name}: {len(cloud):,} points"
        + (", colour" if cloud.rgb is not None else "")
        + (", intensity" if cloud.intensity is not None else "")
        + f"; {params['setting']} → {where}; model {config['model']['proj']} projection"
        + (f" ({config['model']['experts']} experts, top-{config['model']['top_k']})" if model.cfg.is_moe else "")
    )

    def on_chunk(done: int, total: int) -> None:
        ctx.raise_if_cancelled()
        ctx.progress(0.05 + 0.8 * done / max(1, total), f"segmenting: {done:,} of {total:,} voxels")

    result = segment_read_cloud(
        model, cloud, used, grid=grid, classes=allowed, chunk_points=params["chunk_points"], on_chunk=on_chunk
    )
    ctx.progress(0.87, "writing the labelled cloud")
    colours = palette(len(names))
    full = ctx.workdir / "labelled.ply"
    write_ply(
        full,
        cloud.xyz,
        rgb=cloud.rgb,
        labels=result.labels,
        label_colors=colours,
        label_names=names,
        intensity=cloud.intensity,
        offset=cloud.offset,
        double=True,
        comments=[f"moelab attributes geometry{''.join(' ' + a for a in used)}"],
    )
    # The full file can hold millions of points: the viewer gets the preview, the full one downloads;
    # a georeferenced one too (a browser's float32 would lose its centimetres).
    viewable = len(cloud) <= params["preview_points"] and not cloud.offset.any()
    ctx.artifact("labelled.ply", full, "application/x-ply" if viewable else "application/octet-stream")
    ctx.register("pointclouds", full, {"name": f"{path.stem} labelled", "points": len(cloud)})
    if cloud.format in ("las", "laz"):
        _write_las(ctx, path, cloud.format, result.labels, classes)
    preview_path = ctx.workdir / "preview.ply"
    shown = write_preview(
        preview_path,
        Cloud(xyz=cloud.xyz, rgb=cloud.rgb, intensity=cloud.intensity, labels=result.labels),
        label_names=names,
        label_colors=colours,
        budget=params["preview_points"],
        seed=params["seed"],
    )
    ctx.artifact("preview.ply", preview_path, "application/x-ply")
    ctx.progress(0.93, "rendering the thumbnail")
    thumb_index = np.random.default_rng(params["seed"]).permutation(len(cloud))[:100_000]
    present = np.unique(result.labels)
    legend = [(names[k], tuple(int(v) for v in colours[k])) for k in present]
    renderer = render_thumbnail(
        cloud.xyz[thumb_index], colours[result.labels[thumb_index]], ctx.workdir / "thumbnail.png", legend=legend
    )
    ctx.artifact("thumbnail.png", ctx.workdir / "thumbnail.png", "image/png")
    input_thumb = ctx.workdir / "input.png"
    render_thumbnail(cloud.xyz[thumb_index], input_colors(cloud.subset(thumb_index)), input_thumb)
    ctx.artifact("input.png", input_thumb, "image/png")

    counts = np.bincount(result.labels, minlength=len(names))
    count_rows = [
        {"class": name, "points": int(n), **({} if own else {"coarse class": COARSE_OF[name]})}
        for name, n in zip(names, counts, strict=True)
        if n
    ]
    coloured = {} if own else {"color": "coarse class", "color_title": "Coarse class"}
    ctx.chart(
        "class_counts",
        bar_chart(
            "Points per predicted class",
            count_rows,
            x="class",
            y="points",
            x_title="Class",
            y_title="Points",
            **coloured,
        ),
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
        "file_has_colour": float(available["colour"]),
        "file_has_intensity": float(available["intensity"]),
        "used_colour": float("colour" in used),
        "used_intensity": float("intensity" in used),
        # An attribute the segmenter always had and the file lacks: the summary must say so.
        "missing_colour": float("colour" in unprepared),
        "missing_intensity": float("intensity" in unprepared),
    }
    if result.nonfinite:
        ctx.log(
            f"warning: the model's logits overflowed (inf/NaN) on {result.nonfinite:,} of {result.voxels:,} voxels "
            f"({metrics['nonfinite_voxel_share']:.1%}); their labels are not predictions. This scan is far from "
            "the statistics the model's BatchNorm blocks were trained on: a model with LayerNorm blocks does not "
            "overflow."
        )
    taken: set[str] = set()
    for name, n in zip(names, counts, strict=True):
        key = metric_name(name, taken, prefix="count_")
        if n:
            metrics[key] = float(n)
    if result.usage is not None and result.usage.shape[1]:
        layers = result.usage.shape[1]
        picks = sorted({0, layers - 1})
        layer_names = [f"MoE layer {i + 1} of {layers}" for i in picks]
        rows = usage_rows(result.usage[:, picks], layer_names, names)
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
        usage_path.write_text(json.dumps({"labels": list(names), "usage": result.usage.tolist()}))
        ctx.artifact("expert_usage.json", usage_path, "application/json")
    if own:
        _compare_own(ctx, cloud, path, classes, result.labels, metrics)
    elif cloud.labels is not None:
        coarse_of_label = np.array([COARSE.index(COARSE_OF[name]) for name in LABELS])
        pred_coarse = coarse_of_label[result.labels]
        if cloud.label_field == "classification":
            # LAS classification holds ASPRS codes, another taxonomy: compare on the coarse classes.
            table = np.full(256, -1, np.int64)
            for code, coarse in ASPRS_COARSE.items():
                table[code] = COARSE.index(coarse)
            truth = table[np.clip(cloud.labels, 0, 255)]
            if (truth >= 0).any():
                score, _ = coarse_miou(pred_coarse, truth)
                metrics["coarse_miou_vs_file_labels"] = score
                ctx.log(f"coarse mIoU {score:.3f} against the file's ASPRS classification (mapped to coarse classes)")
        elif len(cloud.labels) and cloud.labels.min() >= 0 and cloud.labels.max() < len(LABELS):
            # A sample scene carries its ground truth: say how well the prediction agrees with it.
            from mlcore.pointcloud.pipeline import confusion, miou

            truth_ids = sorted(set(np.unique(cloud.labels).tolist()))
            score, _ = miou(confusion(result.labels.astype(np.int64), cloud.labels.astype(np.int64)), truth_ids)
            metrics["accuracy_vs_file_labels"] = float((result.labels == cloud.labels).mean())
            metrics["miou_vs_file_labels"] = score
            metrics["coarse_miou_vs_file_labels"], _ = coarse_miou(pred_coarse, coarse_of_label[cloud.labels])
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


def _write_las(ctx: JobContext, path: Path, fmt: str, labels: Any, classes: SegmenterClasses) -> None:
    """The labelled LAS / LAZ: ASPRS codes for a SynMix segmenter, the ids the user's files gave the
    classes for one of the user's own (named in the file's classification lookup)."""
    import laspy

    from mlcore.pointcloud.io.las_out import own_codes, write_labelled_las

    target = ctx.workdir / f"labelled.{fmt}"
    if not classes.user_trained:
        las_path, codes = write_labelled_las(path, target, labels)
        ctx.log(
            f"{las_path.name}: the input's fields, scales, offsets and VLRs, with ASPRS classification "
            + ", ".join(f"{code}: {count:,}" for code, count in sorted(codes.items()))
        )
        ctx.artifact(las_path.name, las_path, "application/octet-stream")
        return
    with laspy.open(str(path)) as reader:
        point_format = reader.header.point_format.id
    table, moved = own_codes(classes.codes, len(classes.names), point_format)
    las_path, codes = write_labelled_las(path, target, labels, names=classes.names, codes=table)
    ctx.artifact(las_path.name, las_path, "application/octet-stream")
    named = {int(table[k]): name for k, name in reversed(list(enumerate(classes.names)))}
    ctx.log(
        f"{las_path.name}: the input's fields, scales, offsets and VLRs, with your classes' codes "
        + ", ".join(f"{code} {named.get(code, '?')}: {count:,}" for code, count in sorted(codes.items()))
        + " (the file's classification lookup names them; moelab_class holds the exact class)"
    )
    if moved:
        ctx.log(
            f"point format {point_format} cannot hold the ids your files gave "
            + ", ".join(f"{classes.names[k]} ({classes.codes[k]})" for k in moved)
            + ": they are written as "
            + ", ".join(str(int(table[k])) for k in moved)
        )
    if not classes.codes:
        ctx.log(
            "the segmenter records no ids of its classes (trained before they were saved): the classification holds "
            "new codes (1, unclassified, where the point format has no user range); moelab_class the exact class"
        )


def _compare_own(
    ctx: JobContext, cloud: Any, path: Path, classes: SegmenterClasses, pred: Any, metrics: dict[str, float]
) -> None:
    """Agreement with the file's labels in the user's classes (no coarse taxonomy: it is SynMix's)."""
    import numpy as np

    from mlcore.pointcloud.pipeline import confusion
    from mlcore.pointcloud.user_train import class_iou

    if cloud.labels is None or not len(cloud.labels):
        return
    truth, note = own_truth(cloud, path, classes)
    ctx.log(note)
    if truth is None:
        return
    counted = truth >= 0
    k = len(classes.names)
    conf = confusion(pred.astype(np.int64), truth, k)
    ious = class_iou(conf, sorted(set(truth[counted].tolist())), classes.names)
    metrics["accuracy_vs_file_labels"] = float((pred[counted] == truth[counted]).mean())
    metrics["miou_vs_file_labels"] = float(np.mean(list(ious.values()))) if ious else 0.0
    ctx.log(
        f"mIoU {metrics['miou_vs_file_labels']:.3f} against the file's labels on {int(counted.sum()):,} points ("
        + ", ".join(f"{name} {value:.3f}" for name, value in ious.items())
        + ")"
    )
