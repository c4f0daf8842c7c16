"""The dataset kinds: each one's declaration and its check, read as that kind's jobs read it.

Images decode with Pillow, point clouds through :func:`mlcore.pointcloud.io.read_cloud`, graphs
through :func:`mlcore.data.graphs.read_graphs` (``graphs.json``), traces through
``RoutingTrace.load``, and text must be text. The watermark keyring is declared here too: jobs
accept it, but it is every key registered on the platform, never an item of a team's library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlcore import sniff
from mlcore.errors import JobError
from mlcore.items.cards import one_or_all
from mlcore.items.kind import ItemKind, PlatformReference
from mlcore.uploads import files_of, relative_name

ARCHIVES = sniff.ARCHIVES
#: Files whose records a text card counts, by sniffed format.
TEXT_FORMATS = ("txt", "csv", "json", "jsonl")


def _text(root: Path) -> dict[str, Any]:
    """Records are non-empty lines; every file must be text (a binary file is not a corpus)."""
    records = 0
    for path in files_of(root):
        fmt = sniff.sniff(path)
        if fmt not in TEXT_FORMATS:
            found = f"a {fmt} file" if fmt else "binary data"
            name = relative_name(path, root)
            raise JobError(f"{name} is {found}, not text; a text dataset holds .txt, .json, .jsonl or .csv.")
        with path.open("rb") as f:
            records += sum(1 for line in f if line.strip())
    return {"records": records}


def _images(root: Path) -> dict[str, Any]:
    """Every file named like an image must decode as one; records are the images."""
    from PIL import Image

    from mlcore.watermark.verification import IMAGE_SUFFIXES, image_files

    images = image_files([root])
    if not images:
        raise JobError(f"The item holds no images ({', '.join(IMAGE_SUFFIXES)}).")
    for path in images:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as exc:  # PIL raises many types (incl. DecompressionBombError) for bad files
            raise JobError(f"{relative_name(path, root)} is not a readable image ({type(exc).__name__}).") from None
    return {"records": len(images)}


def _pointclouds(root: Path) -> dict[str, Any]:
    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.io.formats import CLOUD_SUFFIXES

    # Found by name, as the jobs that take a scene find them.
    clouds = [p for p in files_of(root) if p.suffix.lower() in CLOUD_SUFFIXES]
    if not clouds:
        raise JobError(f"The item holds no point clouds ({', '.join(CLOUD_SUFFIXES)}).")
    points = sum(len(read_cloud(path).xyz) for path in clouds)
    return {"records": len(clouds), "points": points}


def _pointcloud_dataset(root: Path) -> dict[str, Any]:
    """Labelled scans, read, named and checked as ``pointcloud-train`` reads them."""
    from mlcore.pointcloud.user_scans import read_scan_set

    scan_set = read_scan_set(root)
    return {
        "records": len(scan_set.scans),
        "points": sum(len(scan) for scan in scan_set.scans),
        "classes": list(scan_set.class_names),
        "class_names_from": scan_set.names_from,
    }


def _video_clips(root: Path) -> dict[str, Any]:
    """Clips decoded as ``video-train`` decodes them (the first frame of each, at a small size)."""
    from mlcore.video.user_clips import read_clip_set

    clips = read_clip_set(root, frames=1, size=8)
    return {"records": len(clips.names), "classes": list(clips.class_names)}


def _graphs(root: Path) -> dict[str, Any]:
    from mlcore.data.graphs import read_graphs

    graphset = read_graphs(root)  # what graph jobs read: graphs.json in the item's folder
    return {"records": len(graphset.graphs), "classes": graphset.num_classes}


def _routing_trace(root: Path) -> dict[str, Any]:
    from mlcore.moe.traces import RoutingTrace

    paths = [p for p in files_of(root) if sniff.sniff(p) == "safetensors"]
    if not paths:
        raise JobError("The item holds no routing trace (a moelab-routing-trace safetensors file).")
    traces = [RoutingTrace.load(path) for path in paths]
    meta = traces[0].metadata
    return {
        "records": sum(trace.num_tokens for trace in traces),
        "model": meta.model,
        "layers": len(meta.layers),
        "experts_per_layer": one_or_all(list(meta.num_experts)),
        "top_k": one_or_all(list(meta.top_k)),
    }


TEXT = ItemKind(
    name="text",
    category="dataset",
    title="Text corpus",
    summary="Text files (.txt, .json, .jsonl, .csv); records are non-empty lines.",
    formats=(*TEXT_FORMATS, *ARCHIVES),
    check=_text,
)
IMAGES = ItemKind(
    name="images",
    category="dataset",
    title="Images",
    summary="PNG, JPEG or WebP images, each of which must decode.",
    formats=("png", "jpeg", "webp", *ARCHIVES),
    check=_images,
)
POINTCLOUDS = ItemKind(
    name="pointclouds",
    category="dataset",
    title="Point clouds",
    summary="PLY, PCD, XYZ / XYZRGB / PTS or LAS / LAZ scans, read as the point-cloud jobs read them.",
    formats=("ply", "pcd", "xyz", "las", *ARCHIVES),
    check=_pointclouds,
)
POINTCLOUD_DATASET = ItemKind(
    name="pointcloud-dataset",
    category="dataset",
    title="Labelled point-cloud scans",
    summary="Two or more labelled scans (LAS / LAZ classification, PLY / PCD label property, or NAME.labels "
    "beside NAME.xyz) with an optional classes.json / classes.yaml naming the class ids.",
    formats=ARCHIVES,
    check=_pointcloud_dataset,
)
VIDEO_CLIPS = ItemKind(
    name="video-clips",
    category="dataset",
    title="Video clips",
    summary="Two or more clips (MP4 / MOV / WebM / MKV / GIF, or folders of PNG / JPEG frames); one folder per "
    "class labels them.",
    formats=ARCHIVES,
    check=_video_clips,
)
GRAPHS = ItemKind(
    name="graphs",
    category="dataset",
    title="Graphs",
    summary="A graphs.json of labelled graphs, as the graph jobs read it.",
    formats=("json", *ARCHIVES),
    check=_graphs,
)
ROUTING_TRACE = ItemKind(
    name="routing-trace",
    category="dataset",
    title="Routing trace",
    summary="Per-token expert choices of an MoE model (the moelab-routing-trace safetensors format).",
    formats=("safetensors", *ARCHIVES),
    check=_routing_trace,
)
#: Every watermark key registered on the platform: built for the job by the platform's resolver
#: (``keyring:platform``), or a keyring JSON file in ``moelab run``; never a library item.
WATERMARK_KEYRING = ItemKind(
    name="watermark-keyring",
    category="dataset",
    title="Watermark keyring",
    summary="The watermark keys a verification searches: every key registered on the platform.",
    formats=("json",),
    platform_references=(PlatformReference("keyring:platform", "Every registered key (the platform's keyring)"),),
)
