"""LAS / LAZ (ASPRS LAS 1.0-1.4) through laspy, after our own checks of the header.

Before laspy reads a single point we check, from the public header block itself: the version, the
header size, the point data format (0-10 are defined by the specification; the two high bits mark
LAZ compression) and the record length against that format's minimum. Then the point count, in
the order of :mod:`~mlcore.pointcloud.io.cloud`: a count no file could hold is invalid; a count the
file's bytes cannot hold is reported as that (uncompressed: ``offset + count × record length``
against the file size; LAZ: every chunk starts with one uncompressed record, so ``chunks × record
length`` is the least the point data takes); only then the limits.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from mlcore.errors import JobError
from mlcore.pointcloud.io.attributes import las_colour, las_intensity
from mlcore.pointcloud.io.cloud import (
    Cloud,
    check_count,
    check_plausible_count,
    choose_offset,
    declared_more_than_held,
)

#: Minimum record length of each point data record format (LAS 1.4 R15, Tables 7-28).
RECORD_BYTES = {0: 20, 1: 28, 2: 26, 3: 34, 4: 57, 5: 63, 6: 30, 7: 36, 8: 38, 9: 59, 10: 67}
WITH_RGB = {2, 3, 5, 7, 8, 10}
#: The laszip VLR (user id "laszip encoded", record 22204) keeps its chunk size at this offset;
#: 0xFFFFFFFF means variable-sized chunks, whose sizes only the chunk table knows.
LASZIP_CHUNK_SIZE_OFFSET = 12
VARIABLE_CHUNKS = 0xFFFFFFFF


def _scrubbed(exc: Exception, path: Path) -> str:
    """A library's error text without the file's folder (a worker's temporary directory)."""
    return str(exc).replace(str(path.resolve().parent), "").replace(str(path.parent), "")


def _laz_chunk_size(header: object) -> int | None:
    for vlr in getattr(header, "vlrs", ()):
        data = getattr(vlr, "record_data", b"")
        if getattr(vlr, "record_id", None) == 22204 and len(data) >= LASZIP_CHUNK_SIZE_OFFSET + 4:
            (size,) = struct.unpack_from("<I", data, LASZIP_CHUNK_SIZE_OFFSET)
            return size if 0 < size < VARIABLE_CHUNKS else None
    return None


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
    (header_size, offset) = struct.unpack_from("<HI", head, 94)
    format_byte = head[104]
    (record,) = struct.unpack_from("<H", head, 105)
    point_format = format_byte & 0x3F
    compressed = bool(format_byte & 0x80)
    if version[0] != 1 or version[1] > 4:
        raise JobError(
            f"{path.name}: LAS version {version[0]}.{version[1]} is not "
            "supported (1.0-1.4 are). Convert it with PDAL or LAStools."
        )
    if header_size < 227 or offset < header_size:
        raise JobError(
            f"{path.name}: the LAS header says it is {header_size} bytes long and the points start at byte "
            f"{offset:,}; a header is at least 227 bytes and the points come after it, so the header is corrupt. "
            "Re-export the file."
        )
    if point_format not in RECORD_BYTES:
        raise JobError(
            f"{path.name}: point data record format {point_format} is not one the LAS specification defines "
            "(0-10). Convert it to format 3 or 7 (e.g. `pdal translate in.las out.las --writers.las.dataformat_id=3`)."
        )
    if record < RECORD_BYTES[point_format]:
        raise JobError(
            f"{path.name}: the header's point record length {record} is shorter than "
            f"format {point_format} needs ({RECORD_BYTES[point_format]}); the header lies. Re-export the file."
        )
    try:
        reader = laspy.open(path)
    except Exception as exc:  # laspy raises several types for a broken header; all mean the same to a user
        raise JobError(
            f"{path.name}: laspy cannot read this LAS header ({_scrubbed(exc, path)}). Re-export the file."
        ) from None
    with reader:
        header = reader.header
        count = int(header.point_count)
        check_plausible_count(path, count, "the header's point count", record_bytes=record)
        body = size - offset
        if not compressed and count * record > body:
            raise declared_more_than_held(
                path,
                f"{count:,} points × {record} bytes = {count * record:,} bytes",
                f"{max(body, 0):,} bytes after its header (byte {offset:,} on)",
            )
        chunk = _laz_chunk_size(header) if compressed else None
        if chunk is not None and math.ceil(count / chunk) * record > body:
            least = math.ceil(count / chunk) * record
            raise declared_more_than_held(
                path,
                f"{count:,} points, compressed in chunks of {chunk:,} that each start with one uncompressed "
                f"{record}-byte record, so at least {least:,} bytes",
                f"{max(body, 0):,} bytes of point data",
            )
        check_count(path, count, max_points)
        try:
            points = reader.read_points(count)
        except Exception as exc:  # lazrs and laspy raise their own types for corrupt data
            what = "LAZ" if compressed else "LAS"
            raise JobError(
                f"{path.name}: the {what} point data cannot be read ({_scrubbed(exc, path)}); "
                "the file is truncated or corrupt."
            ) from None
    if len(points) != count:
        raise declared_more_than_held(path, f"{count:,} points", f"{len(points):,} that could be read")
    xyz, offset = las_local_xyz(points, header)
    notes: list[tuple[str, str]] = [
        (
            "coordinates",
            f"LAS {version[0]}.{version[1]} point format {point_format}, scales "
            f"{', '.join(f'{s:g}' for s in header.scales)}, offsets {', '.join(f'{o:.3f}' for o in header.offsets)}",
        )
    ]
    # Every record of these formats has the fields; all zeros means the scanner recorded none.
    rgb = None
    if point_format in WITH_RGB:
        channels = np.stack([np.asarray(points.red), np.asarray(points.green), np.asarray(points.blue)], axis=1)
        if channels.any():
            rgb, note = las_colour(channels)
            notes.append(("colour", note))
        else:
            notes.append(("colour", "LAS colour fields all zero: read as no colour"))
    intensity = None
    raw_intensity = np.asarray(points.intensity)
    if raw_intensity.any():
        intensity, note = las_intensity(raw_intensity)
        notes.append(("intensity", note))
    else:
        notes.append(("intensity", "LAS intensity all zero: read as no intensity"))
    classification = np.asarray(points.classification, dtype=np.int32)
    # 0 "created, never classified" and 1 "unclassified" carry no labels.
    labels = classification if classification.size and classification.max() > 1 else None
    return Cloud(
        xyz=xyz,
        rgb=rgb,
        intensity=intensity,
        labels=labels,
        offset=offset,
        label_field="classification" if labels is not None else None,
        format="laz" if compressed else "las",
        notes=tuple(notes),
    ).checked(path)


def las_local_xyz(points: object, header: object) -> tuple[np.ndarray, np.ndarray]:
    """float32 local coordinates and the float64 offset, from the integer records.

    x = X · scale + header offset; with the per-scan offset of :func:`choose_offset` (a whole metre)
    the local coordinate is X · scale + (header offset − offset), computed in float64 before the cast,
    so a UTM-sized scan keeps its millimetres.
    """
    scales = np.asarray(header.scales, np.float64)  # type: ignore[attr-defined]
    offsets = np.asarray(header.offsets, np.float64)  # type: ignore[attr-defined]
    raw = [np.asarray(getattr(points, axis)) for axis in ("X", "Y", "Z")]
    lo = np.array([r.min() if r.size else 0 for r in raw], np.float64) * scales + offsets
    hi = np.array([r.max() if r.size else 0 for r in raw], np.float64) * scales + offsets
    offset = choose_offset(np.minimum(lo, hi), np.maximum(lo, hi))
    xyz = np.empty((len(raw[0]), 3), np.float32)
    for k in range(3):
        xyz[:, k] = raw[k].astype(np.float64) * scales[k] + (offsets[k] - offset[k])
    return xyz, offset
