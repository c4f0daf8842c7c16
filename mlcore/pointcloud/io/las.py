"""LAS / LAZ (ASPRS LAS 1.0-1.4) through laspy, after our own checks of the header.

laspy parses the public header block; before it reads a single point we check the point data
format (0-10 are defined by the specification; the two high bits mark LAZ compression), the
record length against that format's minimum, the point count against the limits, and for
uncompressed files ``offset + count × record length`` against the file size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io.cloud import Cloud, check_count

#: Minimum record length of each point data record format (LAS 1.4 R15, Tables 7-28).
RECORD_BYTES = {0: 20, 1: 28, 2: 26, 3: 34, 4: 57, 5: 63, 6: 30, 7: 36, 8: 38, 9: 59, 10: 67}
WITH_RGB = {2, 3, 5, 7, 8, 10}


def read_las(path: Path, *, max_points: int) -> Cloud:
    """Read a LAS or LAZ file; classification becomes ``labels`` when it holds real classes."""
    import laspy

    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(375)
    if len(head) < 227:
        raise JobError(
            f"{path.name}: the LAS header is truncated ({len(head)} bytes; it needs at least 227). Re-export the file."
        )
    version = (head[24], head[25])
    format_byte = head[104]
    point_format = format_byte & 0x3F
    compressed = bool(format_byte & 0x80)
    if version[0] != 1 or version[1] > 4:
        raise JobError(
            f"{path.name}: LAS version {version[0]}.{version[1]} is not "
            "supported (1.0-1.4 are). Convert it with PDAL or LAStools."
        )
    if point_format not in RECORD_BYTES:
        raise JobError(
            f"{path.name}: point data record format {point_format} is not one the LAS specification defines "
            "(0-10). Convert it to format 3 or 7 (e.g. `pdal translate in.las out.las --writers.las.dataformat_id=3`)."
        )
    try:
        reader = laspy.open(path)
    except Exception as exc:  # laspy raises several types for a broken header; all mean the same to a user
        raise JobError(f"{path.name}: laspy cannot read this LAS header ({exc}). Re-export the file.") from None
    with reader:
        header = reader.header
        count = int(header.point_count)
        record = int(header.point_format.size)
        check_count(path, count, max_points)
        if record < RECORD_BYTES[point_format]:
            raise JobError(
                f"{path.name}: the header's point record length {record} is shorter than "
                f"format {point_format} needs ({RECORD_BYTES[point_format]}); the header lies."
            )
        if not compressed and int(header.offset_to_point_data) + count * record > size:
            raise JobError(
                f"{path.name}: the header promises {count:,} points × {record} bytes after byte "
                f"{int(header.offset_to_point_data):,}, but the file has "
                f"{size:,} bytes: it is truncated or its header lies."
            )
        try:
            points = reader.read_points(count)
        except Exception as exc:  # lazrs and laspy raise their own types for corrupt data
            what = "LAZ" if compressed else "LAS"
            raise JobError(
                f"{path.name}: the {what} point data cannot be read ({exc}); the file is truncated or corrupt."
            ) from None
    if len(points) != count:
        raise JobError(
            f"{path.name}: the header promises {count:,} points but only "
            f"{len(points):,} could be read: the file is truncated."
        )
    xyz = np.stack([np.asarray(points.x), np.asarray(points.y), np.asarray(points.z)], axis=1)
    # Cloud keeps float32 (about 7 significant digits): georeferenced scans far from the origin
    # lose millimetres, which segmentation at centimetre grids does not notice.
    rgb = None
    if point_format in WITH_RGB:
        channels = np.stack([np.asarray(points.red), np.asarray(points.green), np.asarray(points.blue)], axis=1)
        rgb = (channels >> 8).astype(np.uint8) if channels.max(initial=0) > 255 else channels.astype(np.uint8)
    intensity = np.asarray(points.intensity, dtype=np.float32)
    classification = np.asarray(points.classification, dtype=np.int32)
    # 0 "created, never classified" and 1 "unclassified" carry no labels.
    labels = classification if classification.size and classification.max() > 1 else None
    return Cloud(xyz=xyz.astype(np.float32), rgb=rgb, intensity=intensity, labels=labels).checked(path)
