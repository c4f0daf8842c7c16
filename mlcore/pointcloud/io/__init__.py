"""The validating front door for point clouds: every upload is read here, or refused with a
message that names the file, what was wrong and what to do.

``read_cloud(path, max_points=...)`` sniffs the format from the content
(:mod:`~mlcore.pointcloud.io.formats`) and dispatches: PLY to our own numpy reader
(:mod:`~mlcore.pointcloud.io.ply`), PCD / XYZ / XYZRGB / PTS to open3d after our checks
(:mod:`~mlcore.pointcloud.io.checked_open3d`), LAS / LAZ to laspy after our checks
(:mod:`~mlcore.pointcloud.io.las`). ``write_ply`` writes binary little-endian PLY, labelled when
given labels (in double precision for a georeferenced scan); ``write_labelled_las`` writes a LAS or
LAZ with the input's every field, scales, offsets and VLRs, and the classification set.

Every reader returns local float32 coordinates and the float64 ``offset`` that puts them back
where the file had them (:class:`~mlcore.pointcloud.io.cloud.Cloud`), attributes normalised by
meaning (:mod:`~mlcore.pointcloud.io.attributes`), and the file's per-point class field, if any, as
``labels`` with ``label_field`` naming it.
"""

from __future__ import annotations

from pathlib import Path

from mlcore.errors import JobError
from mlcore.pointcloud.io.cloud import MAX_POINTS, Cloud, check_count
from mlcore.pointcloud.io.formats import REFUSED, sniff_cloud, text_cloud_problem
from mlcore.pointcloud.io.ply import read_header, read_ply, write_ply

__all__ = [
    "MAX_POINTS",
    "Cloud",
    "check_count",
    "read_cloud",
    "read_header",
    "sniff_cloud",
    "text_cloud_problem",
    "write_ply",
]


def read_cloud(path: Path, *, max_points: int = MAX_POINTS) -> Cloud:
    """Read any supported point cloud at ``path`` after checking it; raise :class:`JobError` otherwise."""
    path = Path(path)
    if not path.is_file():
        raise JobError(f"{path.name}: no such file.")
    if path.stat().st_size == 0:
        raise JobError(f"{path.name}: the file is empty. Upload a point cloud (PLY, PCD, XYZ, PTS, LAS or LAZ).")
    fmt = sniff_cloud(path)
    if fmt in REFUSED:
        raise JobError(f"{path.name}: {REFUSED[fmt]}")
    if fmt == "ply":
        return read_ply(path, max_points=max_points)
    if fmt in ("las", "laz"):
        from mlcore.pointcloud.io.las import read_las

        return read_las(path, max_points=max_points)
    if fmt in ("pcd", "xyz", "xyzrgb", "pts"):
        from mlcore.pointcloud.io.checked_open3d import read_with_open3d

        return read_with_open3d(path, fmt, max_points=max_points)
    if (problem := text_cloud_problem(path)) is not None:
        raise JobError(f"{path.name}: {problem}")
    raise JobError(
        f"{path.name}: not a point cloud this project reads. Upload PLY (ascii or binary), PCD, "
        "XYZ / XYZRGB / PTS text, LAS or LAZ."
    )
