"""Segment a whole scan of any size in bounded memory (method card, section 4, "segmentation job").

1. Grid-sample the scan once (one point per voxel; ``inverse`` maps every input point to its voxel).
2. If the voxels exceed ``chunk_points``, cut the xy plane into square tiles; each tile is predicted
   with a margin of ``overlap`` metres of context around it and keeps only the predictions of its
   own (core) voxels, so tile borders see their neighbours. A tile whose window still holds too
   many voxels is split in four, recursively, so memory stays bounded however uneven the density.
3. Carry each voxel's label to every input point through ``inverse``.

Heights are measured from the scan's lowest point and coordinates are in voxel units from the scan's
lowest corner (as in training, :mod:`mlcore.pointcloud.pipeline`) in every window, so a tile border
changes only the context a voxel sees, never its features or its place in the pooling grids. With
the backbone's local patch layout (:class:`~mlcore.pointcloud.ptv3.PTv3Config` ``patch_layout=
"local"``) it changes only the patches near it; with the rank layout one point more or less in a
window reshuffles the patches of every point after it along the curve (see :mod:`~mlcore.pointcloud.ptv3`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from mlcore.heap import HeapTrimmer
from mlcore.pointcloud import presence
from mlcore.pointcloud.datasets import ground_level, point_features
from mlcore.pointcloud.ptv3 import LOCAL_ROOT_BITS, PointBatch, PTv3, restrict_logits

#: Scans whose xy extent stays below this (metres) are treated as indoor (0.04 m grid), else outdoor.
INDOOR_EXTENT = 25.0


@dataclass
class Segmentation:
    labels: np.ndarray  #: [N] int32 class per input point (the model's outputs: SynMix's or a user's classes)
    voxels: int  #: points after grid sampling
    chunks: int  #: model calls
    grid: float
    #: [K, layers, E] how often points predicted as class k had expert e as top-1, per MoE layer
    usage: np.ndarray | None = None
    #: wall-clock seconds per phase, and ``cpu``: this process's CPU seconds for the whole call
    seconds: dict[str, float] = field(default_factory=dict)
    #: voxels whose logits were not all finite (their label is then meaningless)
    nonfinite: int = 0


def choose_grid(xyz: np.ndarray, setting: str = "auto") -> float:
    """0.04 m for rooms, 0.1 m for streets (the training grids); ``auto`` decides from the xy extent."""
    if setting == "indoor":
        return 0.04
    if setting == "outdoor":
        return 0.1
    extent = float(np.max(xyz[:, :2].max(0) - xyz[:, :2].min(0))) if len(xyz) else 0.0
    return 0.04 if extent < INDOOR_EXTENT else 0.1


#: Context around each tile, in voxels (a window that outgrows ``chunk_points`` splits into smaller
#: tiles, each with this margin). With the rank patch layout more context does not bring tiled labels
#: closer to untiled ones; with the local layout it does: on a 10,000-point street sample (SynMix C
#: scenes 0, 1, 2) cut into tiles of half its voxels, the zoo Point-MoE trained 1,200 steps changes
#: 2.1–3.0% / 0.5–1.5% / 0.4–1.1% / 0.5–0.9% of the labels with 16 / 32 / 48 / 64 voxels, its dense
#: twin 2.9–4.3% / 2.4–2.7% / 1.1–1.8% / 0.8–1.4% (the 150-step recipe: 0.3–1.2% at 32). The goal is
#: 1%. On a 2M-point survey street (one thread) 64 voxels take 9.5–11.7 CPU-s against 8.3 at 32
#: (18 tiles against 15), and agree with 32 on 99.99% of the points.
OVERLAP_VOXELS = 64
#: Window coordinates start at the scan's lowest corner shifted by whole multiples of this many voxels
#: (a power of two above the backbone's pooling factor), so a tile's voxels and its pooling grid at
#: every stage are the ones the untiled run would use, while coordinates stay below the backbone's
#: per-axis limit however large the scan. It is the local patch layout's root cube
#: (:data:`~mlcore.pointcloud.ptv3.LOCAL_ROOT_BITS`), so every window also sees the same octree
#: cubes, and a patch far from a window's edge holds the same points as in the untiled run.
WINDOW_ALIGN_VOXELS = 2**LOCAL_ROOT_BITS


#: Coordinates are snapped to this many ticks per metre (10 µm) before voxelisation, and voxels are
#: whole numbers of ticks: two encodings of the same scan (a float32 PLY, a LAS of integer
#: millimetres, a georeferenced double shifted by an offset) differ by float rounding far below a
#: tick, and a point exactly on a voxel border (millimetre data puts one in forty there) lands in
#: the same voxel from every one of them.
TICKS_PER_M = 100_000


def voxelise(xyz: np.ndarray, grid: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept point per voxel, inverse map, int64 ticks of every point from the lowest corner): the
    voxels of :func:`~mlcore.pointcloud.datasets.grid_sample`, computed in whole ticks."""
    if len(xyz) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    local = np.asarray(xyz, np.float64)
    ticks = np.rint((local - local.min(0)) * TICKS_PER_M).astype(np.int64)
    cells = ticks // round(grid * TICKS_PER_M)
    key = (cells[:, 0] << 42) | (cells[:, 1] << 21) | cells[:, 2]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1), ticks


@torch.inference_mode()
def _predict(
    model: PTv3, coord: np.ndarray, feat: np.ndarray, allowed: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(label, logits all finite, top-1 expert per MoE layer) per voxel of one window, from its
    voxel-unit coordinates. Inference mode makes the model take its fused path
    (:meth:`~mlcore.pointcloud.ptv3.Block._forward_inference`)."""
    points = PointBatch(torch.from_numpy(coord), torch.from_numpy(feat), torch.zeros(len(coord), dtype=torch.long))
    logits = model(points)
    finite = torch.isfinite(logits).all(-1).numpy()
    pred = restrict_logits(logits, allowed.expand(len(coord), -1)).argmax(-1).numpy()
    routing = [r.numpy() for r in model.point_routing()] if model.cfg.is_moe else []
    return pred, finite, routing


def segment_cloud(
    model: PTv3,
    xyz: np.ndarray,
    rgb: np.ndarray | None = None,
    intensity: np.ndarray | None = None,
    *,
    grid: float,
    classes: list[int] | None = None,
    chunk_points: int = 150_000,
    overlap: float | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
) -> Segmentation:
    """Labels for every point of a cloud. ``classes`` restricts the predictions to a subset of the
    model's classes (uploads have no dataset identity: the full taxonomy or the user's subset).
    ``overlap`` defaults to :data:`OVERLAP_VOXELS` voxels of context. ``on_chunk(done_voxels, total_voxels)`` reports
    progress (and may raise to cancel).

    Tiles see what the untiled run sees: features (height above the scan's ground, colour,
    intensity) are computed once for the whole scan, and each window's voxel coordinates are the
    scan's own, shifted by a multiple of :data:`WINDOW_ALIGN_VOXELS`, so only the context beyond a
    tile's margin differs."""
    model.eval()
    t0, cpu0 = time.perf_counter(), time.process_time()
    k = model.cfg.num_classes
    if classes and not all(0 <= c < k for c in classes):
        raise ValueError(f"classes {classes} outside the model's {k} outputs")
    allowed = torch.zeros(k, dtype=torch.bool)
    allowed[classes if classes else list(range(k))] = True
    keep, inverse, ticks = voxelise(xyz, grid)
    step = round(grid * TICKS_PER_M)
    vox = ticks[keep].astype(np.float64) / TICKS_PER_M  # metres from the scan's lowest corner
    feats = point_features(
        vox,
        None if rgb is None else rgb[keep],
        None if intensity is None else intensity[keep],
        ground=ground_level(vox[:, 2], model.cfg.ground),
    )
    vox_ticks = ticks[keep]
    align = WINDOW_ALIGN_VOXELS * step
    t1 = time.perf_counter()
    margin = overlap if overlap is not None else OVERLAP_VOXELS * grid
    labels = np.zeros(len(vox), np.int32)
    layers = len(model.routed())
    usage = np.zeros((k, layers, model.cfg.experts), np.int64) if layers else None
    chunks = 0
    done = 0
    nonfinite = 0
    trim = HeapTrimmer()

    def run(window: np.ndarray, core: np.ndarray) -> None:
        nonlocal chunks, done, nonfinite
        w = vox_ticks[window]
        anchor = (w.min(0) // align) * align
        coord = ((w - anchor) / step).astype(np.float32)
        pred, finite, routing = _predict(model, coord, feats[window], allowed)
        labels[window[core]] = pred[core]
        nonfinite += int((~finite[core]).sum())
        if usage is not None:
            # One bincount over (class, layer, expert) cells instead of np.add.at (a slow scatter).
            experts = model.cfg.experts
            counts = usage.reshape(-1)
            for layer, ids in enumerate(routing):
                cell = (pred[core].astype(np.int64) * layers + layer) * experts + ids[core]
                counts += np.bincount(cell, minlength=counts.size)
        chunks += 1
        done += int(core.sum())
        trim()
        if on_chunk is not None:
            on_chunk(done, len(vox))

    def tile(x0: float, y0: float, size: float, members: np.ndarray) -> None:
        """Predict the voxels of one square tile (``members`` indexes ``vox`` near it)."""
        p = vox[members]
        inside = (
            (p[:, 0] >= x0 - margin)
            & (p[:, 0] < x0 + size + margin)
            & (p[:, 1] >= y0 - margin)
            & (p[:, 1] < y0 + size + margin)
        )
        window = members[inside]
        core = (
            (vox[window, 0] >= x0)
            & (vox[window, 0] < x0 + size)
            & (vox[window, 1] >= y0)
            & (vox[window, 1] < y0 + size)
        )
        if not core.any():
            return
        if len(window) > chunk_points and size > 4 * grid:
            half = size / 2
            for dx in (0.0, half):
                for dy in (0.0, half):
                    tile(x0 + dx, y0 + dy, half, window)
            return
        run(window, core)

    # The BatchNorm statistics of the attributes this scan carries, when the segmenter keeps them per pattern.
    with presence.statistics(model, presence.pattern_of(feats)):
        if len(vox) <= chunk_points:
            run(np.arange(len(vox)), np.ones(len(vox), bool))
        else:
            lo, hi = vox[:, :2].min(0), vox[:, :2].max(0) + 1e-6
            size = float(max(hi - lo)) * min(1.0, np.sqrt(0.5 * chunk_points / len(vox)))
            for x0 in np.arange(lo[0], hi[0], size):
                for y0 in np.arange(lo[1], hi[1], size):
                    near = np.flatnonzero(
                        (vox[:, 0] >= x0 - margin)
                        & (vox[:, 0] < x0 + size + margin)
                        & (vox[:, 1] >= y0 - margin)
                        & (vox[:, 1] < y0 + size + margin)
                    )
                    if len(near):
                        tile(float(x0), float(y0), size, near)
    t2 = time.perf_counter()
    out = labels[inverse]
    return Segmentation(
        labels=out,
        voxels=len(vox),
        chunks=chunks,
        grid=grid,
        usage=usage,
        seconds={
            "grid_sampling": t1 - t0,
            "model": t2 - t1,
            "total": time.perf_counter() - t0,
            "cpu": time.process_time() - cpu0,
        },
        nonfinite=nonfinite,
    )
