"""Server-side downsampling for the browser viewer: a cloud of any size becomes a preview of at
most ``budget`` points, so the job page never ships 15M points to a browser.

``voxel`` keeps one point per occupied cell of a grid whose cell size is searched so that the
number of occupied cells is close to the budget, so the preview covers space evenly: a LiDAR
scan's sparse far buildings survive, where random sampling keeps mostly the dense road at the
sensor's feet. The representative of each cell is a
real input point (chosen at random, seeded), never an average, so labels and colours stay exact.
``random`` is a seeded uniform sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

from mlcore.pointcloud.io.cloud import Cloud
from mlcore.pointcloud.io.ply import write_ply

Method = Literal["voxel", "random"]
#: Enough for a recognisable room or street, small enough for a laptop's browser (~3 MB of PLY).
DEFAULT_BUDGET = 200_000


def _cell_keys(xyz: np.ndarray, cell: float) -> np.ndarray:
    """One int64 per point naming its grid cell (row-major over the grid's bounding box)."""
    keys = np.floor((xyz - xyz.min(axis=0)) / cell).astype(np.int64)
    dims = keys.max(axis=0) + 1
    # Single integers sort far faster than unique rows; bisection starts at extent * 1e-6, so
    # the grid stays far below 2^63 cells.
    return keys[:, 0] + dims[0] * (keys[:, 1] + dims[1] * keys[:, 2])


def _count_cells(keys: np.ndarray) -> int:
    ordered = np.sort(keys)
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1


def preview_indices(xyz: np.ndarray, budget: int, *, method: Method = "voxel", seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``budget`` points of ``xyz`` (N, 3) to show."""
    n = len(xyz)
    if budget < 1:
        raise ValueError("budget must be at least 1")
    if n <= budget:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    if method == "random":
        return np.sort(rng.choice(n, size=budget, replace=False))
    if method != "voxel":
        raise ValueError(f"unknown preview method {method!r}; use 'voxel' or 'random'")
    xyz = np.asarray(xyz, dtype=np.float64)
    extent = float(np.max(xyz.max(axis=0) - xyz.min(axis=0)))
    if extent <= 0.0:
        return np.sort(rng.choice(n, size=budget, replace=False))
    # Bisect the cell size in log space: occupied cells fall as cells grow. Stop within 10% of
    # the budget (or after 20 halvings): an exact count would cost many more passes.
    small, large = extent * 1e-6, extent
    for _ in range(20):
        cell = float(np.sqrt(small * large))
        cells = _count_cells(_cell_keys(xyz, cell))
        if cells > budget:
            small = cell
        else:
            large = cell
            if cells >= 0.9 * budget:
                break
    # One random member per cell of the largest grid within budget: shuffle, keep each cell's first.
    order = rng.permutation(n)
    _, first = np.unique(_cell_keys(xyz, large)[order], return_index=True)
    chosen = order[first]
    if len(chosen) > budget:
        chosen = rng.choice(chosen, size=budget, replace=False)
    return np.sort(chosen)


def preview(cloud: Cloud, budget: int = DEFAULT_BUDGET, *, method: Method = "voxel", seed: int = 0) -> Cloud:
    """At most ``budget`` points of ``cloud`` with their attributes (labels included)."""
    if len(cloud) <= budget:
        return cloud
    return cloud.subset(preview_indices(cloud.xyz, budget, method=method, seed=seed))


def input_colors(cloud: Cloud) -> np.ndarray:
    """The colours a person expects for the unlabelled cloud: its RGB, else intensity as grey
    (2nd-98th percentile stretched), else height as a blue-to-yellow ramp."""
    if cloud.rgb is not None:
        return cloud.rgb
    values = cloud.intensity if cloud.intensity is not None and len(cloud) else cloud.xyz[:, 2]
    lo, hi = np.percentile(values, [2, 98]) if len(values) else (0.0, 1.0)
    t = np.clip((values - lo) / max(float(hi - lo), 1e-9), 0.0, 1.0)
    if cloud.intensity is not None:
        grey = np.rint(40 + 200 * t).astype(np.uint8)
        return np.stack([grey, grey, grey], axis=1)
    ramp = np.stack([40 + 210 * t, 80 + 140 * t, 200 - 150 * t], axis=1)
    return np.rint(ramp).astype(np.uint8)


def write_preview(
    path: Path,
    cloud: Cloud,
    *,
    labels: np.ndarray | None = None,
    label_names: list[str] | tuple[str, ...] | None = None,
    label_colors: np.ndarray | None = None,
    budget: int = DEFAULT_BUDGET,
    method: Method = "voxel",
    seed: int = 0,
) -> int:
    """Write the viewer's PLY (the artifact for ``application/x-ply``): at most ``budget`` points,
    label colours and input colours both present, the legend in the header. Returns the count.

    ``labels`` (N,) default to ``cloud.labels``; without any labels the file holds input colours only.
    """
    labels = cloud.labels if labels is None else np.asarray(labels, dtype=np.int32)
    full = Cloud(xyz=cloud.xyz, rgb=input_colors(cloud), intensity=cloud.intensity, labels=labels)
    shown = preview(full, budget, method=method, seed=seed)
    write_ply(
        path,
        shown.xyz,
        rgb=shown.rgb,
        labels=shown.labels,
        label_colors=label_colors,
        label_names=label_names,
    )
    return len(shown)
