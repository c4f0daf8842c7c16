"""PCD (read by open3d) and the text formats (XYZ, XYZRGB, PTS, read by numpy in double precision),
only after our own checks.

open3d's readers trust the file: a PTS whose first line claims more points than it holds comes
back padded with zeros, a short binary PCD fails with a warning on stdout and an empty cloud, and
an ASCII line with a missing value is read as whatever sscanf left there. So every file is first
checked here: a PCD header's fields, sizes, types, ``WIDTH × HEIGHT = POINTS`` and ``POINTS ×
record size`` against the bytes (binary), or the compressed block's sizes (binary_compressed);
text files line by line (the same count of numbers on every line, and the PTS count equal to the
lines). Counts go through the order of :mod:`~mlcore.pointcloud.io.cloud`: invalid first, then
what the header declares against the bytes or rows the file holds, then the limit; a bad text row
is named by its line number in the file. After open3d has read a file, its point count is compared
with the one we expect.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np

from mlcore.errors import JobError
from mlcore.pointcloud.io.attributes import colour_note, unknown_intensity
from mlcore.pointcloud.io.cloud import (
    MAX_HEADER_BYTES,
    Cloud,
    check_count,
    check_rows,
    declared_more_than_held,
    localise,
    parse_count,
)
from mlcore.pointcloud.io.ply import to_uint8_colors

PCD_KEYS = ("FIELDS", "SIZE", "TYPE", "WIDTH", "HEIGHT", "POINTS", "DATA")
PCD_TYPES = {("F", 4), ("F", 8), ("I", 1), ("I", 2), ("I", 4), ("I", 8), ("U", 1), ("U", 2), ("U", 4), ("U", 8)}
TEXT_COLUMNS = {"xyz": (3,), "xyzrgb": (6,), "pts": (3, 4, 6, 7)}
TEXT_NAMES = {"xyz": "x y z", "xyzrgb": "x y z r g b", "pts": "x y z [intensity] [r g b]"}
#: LZF (PCL's binary_compressed) turns at most 3 bytes into 264: no block unpacks to more than
#: ~88 times its size, so a block that claims to is a lie, not a big cloud.
LZF_MAX_RATIO = 88


def _fail(path: Path, what: str) -> JobError:
    return JobError(f"{path.name}: {what} Re-export the cloud (PLY binary is safest) and upload again.")


def _pcd_header(path: Path) -> tuple[dict[str, list[str]], int, int]:
    """The PCD header's keys up to ``DATA``, its length in bytes and in lines."""
    fields: dict[str, list[str]] = {}
    length = lines = 0
    with path.open("rb") as f:
        while length < MAX_HEADER_BYTES:
            raw = f.readline(MAX_HEADER_BYTES - length)
            if not raw:
                raise _fail(path, "the PCD header ends without a DATA line: the file is truncated or not PCD.")
            length += len(raw)
            lines += 1
            line = raw.decode("ascii", errors="replace").strip()
            if not line or line.startswith("#"):
                continue
            key, *values = line.split()
            fields[key] = values
            if key == "DATA":
                return fields, length, lines
    cap = f"{MAX_HEADER_BYTES // 2**20} MiB"
    raise _fail(path, f"the PCD header is longer than the {cap} this reader accepts (no DATA line in its first {cap}).")


def _one(path: Path, fields: dict[str, list[str]], key: str) -> str:
    values = fields[key]
    if len(values) != 1:
        raise _fail(path, f"the PCD header's {key} line holds {len(values)} values; it needs exactly one.")
    return values[0]


def check_pcd(path: Path, max_points: int) -> int:
    """Check a PCD header against the file; return the number of points it holds."""
    size = path.stat().st_size
    fields, length, header_lines = _pcd_header(path)
    missing = [k for k in PCD_KEYS if k not in fields]
    if missing:
        raise _fail(path, f"the PCD header lacks {', '.join(missing)}.")
    names, sizes, types = fields["FIELDS"], fields["SIZE"], fields["TYPE"]
    counts = fields.get("COUNT", ["1"] * len(names))
    if not (len(names) == len(sizes) == len(types) == len(counts)):
        raise _fail(
            path,
            f"the PCD header lists {len(names)} FIELDS but {len(sizes)} "
            f"SIZE, {len(types)} TYPE and {len(counts)} COUNT values.",
        )
    for name, t, s, c in zip(names, types, sizes, counts, strict=True):
        if (t, int(s) if s.isdigit() else -1) not in PCD_TYPES or not c.isdigit() or int(c) < 1 or len(c) > 9:
            raise _fail(path, f"the PCD field {name!r} has an invalid TYPE/SIZE/COUNT {t}/{s}/{c}.")
    sizes_i, counts_i = [int(s) for s in sizes], [int(c) for c in counts]
    if not {"x", "y", "z"} <= set(names):
        raise _fail(path, "the PCD file has no x, y and z fields.")
    record = sum(s * c for s, c in zip(sizes_i, counts_i, strict=True))
    width = parse_count(path, _one(path, fields, "WIDTH"), "the PCD header's WIDTH")
    height = parse_count(path, _one(path, fields, "HEIGHT"), "the PCD header's HEIGHT")
    points = parse_count(path, _one(path, fields, "POINTS"), "the PCD header's POINTS", record_bytes=record)
    if width * height != points:
        raise _fail(path, f"the PCD header says WIDTH {width} × HEIGHT {height} but POINTS {points}: it lies.")
    mode = fields["DATA"][0] if fields["DATA"] else ""
    body = size - length
    if mode == "binary":
        if points * record > body:
            raise declared_more_than_held(
                path,
                f"{points:,} points × {record} bytes = {points * record:,} bytes",
                f"{body:,} bytes after its header",
            )
    elif mode == "binary_compressed":
        _check_compressed_block(path, points, record, start=length, body=body)
    elif mode == "ascii":
        # The lines are counted before any limit is mentioned, so a lying POINTS is called a lie.
        check_rows(
            path,
            start=length,
            first_line=header_lines + 1,
            widths=(sum(counts_i),),
            expected=points,
            names=" ".join(n if c == 1 else f"{n}×{c}" for n, c in zip(names, counts_i, strict=True))[:60],
        )
    else:
        raise _fail(path, f"the PCD DATA mode {mode!r} is not ascii, binary or binary_compressed.")
    check_count(path, points, max_points)
    return points


def _check_compressed_block(path: Path, points: int, record: int, *, start: int, body: int) -> None:
    """PCL's binary_compressed body: ``<compressed size u32> <uncompressed size u32>`` then LZF data."""
    with path.open("rb") as f:
        f.seek(start)
        block = f.read(8)
    if len(block) < 8:
        raise declared_more_than_held(
            path,
            f"{points:,} points in a compressed block",
            f"{body:,} bytes after its header, not even the block's sizes",
        )
    compressed, uncompressed = struct.unpack("<II", block)
    if compressed + 8 > body:
        raise declared_more_than_held(
            path, f"a compressed block of {compressed:,} bytes", f"{body - 8:,} bytes after the block's sizes"
        )
    if uncompressed != points * record:
        raise _fail(
            path,
            f"the header declares {points:,} points × {record} bytes = {points * record:,} bytes, but its "
            f"compressed block says it unpacks to {uncompressed:,}: the header lies.",
        )
    if uncompressed > compressed * LZF_MAX_RATIO:
        raise declared_more_than_held(
            path,
            f"{points:,} points × {record} bytes = {uncompressed:,} bytes",
            f"a compressed block of {compressed:,} bytes, which cannot unpack to more than "
            f"{compressed * LZF_MAX_RATIO:,} (LZF expands at most {LZF_MAX_RATIO}×)",
        )


def check_text(path: Path, fmt: str, max_points: int) -> int:
    """Check an XYZ / XYZRGB / PTS file line by line; return its number of points."""
    start = 0
    expected: int | None = None
    if fmt == "pts":
        with path.open("rb") as f:
            first = f.readline(64)
        expected = parse_count(path, first.strip().decode("ascii", "replace"), "the PTS point count on line 1")
        start = len(first)
    # Every row is checked, and counted, before any limit is mentioned: a PTS count that the
    # lines do not hold is called a lie, not "too many points".
    rows, _ = check_rows(
        path,
        start=start,
        first_line=2 if fmt == "pts" else 1,
        widths=TEXT_COLUMNS[fmt],
        expected=expected,
        names=TEXT_NAMES[fmt],
    )
    check_count(path, rows, max_points)
    return rows


#: Per-point class fields a PCD may carry, by preference (open3d names each attribute after its field).
PCD_LABEL_FIELDS = ("label", "labels", "class", "classification", "semantic")


def read_text(path: Path, fmt: str, *, max_points: int) -> Cloud:
    """Check an XYZ / XYZRGB / PTS file, then parse it with numpy in float64.

    open3d's tensor reader parses text coordinates as float32, which quantises a UTM easting to
    3 cm and a northing to 50 cm; numpy's parser keeps every digit the file holds.
    """
    expected = check_text(path, fmt, max_points)
    with path.open("rb") as f:
        if fmt == "pts":
            f.readline()
        values = np.fromfile(f, dtype=np.float64, sep=" ")
    width = len(values) // expected if expected else 0
    if width * expected != len(values) or width not in TEXT_COLUMNS[fmt]:
        raise _fail(path, f"its {expected:,} rows do not hold the same count of numbers each.")
    table = values.reshape(expected, width)
    xyz, offset = localise([table[:, 0], table[:, 1], table[:, 2]])
    notes: list[tuple[str, str]] = [("coordinates", f"{fmt.upper()} text, read in double precision")]
    intensity = rgb = None
    if fmt == "pts" and width in (4, 7):
        intensity, note = unknown_intensity(table[:, 3], "PTS intensity")
        notes.append(("intensity", note))
    if width >= 6:
        colours = table[:, width - 3 :]
        notes.append(("colour", colour_note(colours, f"{fmt.upper()} colour")))
        rgb = to_uint8_colors(colours)
    return Cloud(xyz=xyz, rgb=rgb, intensity=intensity, offset=offset, format=fmt, notes=tuple(notes)).checked(path)


def read_with_open3d(path: Path, fmt: str, *, max_points: int) -> Cloud:
    """Check ``path`` as ``fmt`` (pcd, xyz, xyzrgb, pts); read PCD with open3d's tensor IO (which
    keeps a double field double) and the text formats with numpy (:func:`read_text`)."""
    if fmt != "pcd":
        return read_text(path, fmt, max_points=max_points)
    expected = check_pcd(path, max_points)
    import open3d as o3d

    # open3d reports failures as warnings on stdout; we report them ourselves below.
    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)
    with tempfile.TemporaryDirectory(prefix="moelab-cloud-") as tmp:
        # open3d's readers go by the file name's extension even when told the format.
        named = Path(tmp) / f"cloud.{fmt}"
        named.symlink_to(path.resolve())
        cloud = o3d.t.io.read_point_cloud(str(named), format=fmt, remove_nan_points=False, remove_infinite_points=False)
    attributes = dict(cloud.point.items()) if "positions" in cloud.point else {}
    positions = attributes["positions"].numpy() if "positions" in attributes else np.zeros((0, 3), np.float32)
    if len(positions) != expected:
        raise _fail(
            path, f"open3d read {len(positions):,} of the {expected:,} points the file declares: it is corrupt."
        )
    xyz, offset = localise([positions[:, 0], positions[:, 1], positions[:, 2]])
    notes: list[tuple[str, str]] = [("coordinates", f"PCD, {positions.dtype}")]
    colors = attributes.get("colors")
    rgb = None
    if colors is not None:
        # open3d unpacks PCD's packed rgb into floats in [0, 1].
        notes.append(("colour", colour_note(colors.numpy(), "PCD colour")))
        rgb = to_uint8_colors(colors.numpy())
    raw_intensity = attributes.get("intensity", attributes.get("intensities"))
    intensity = None
    if raw_intensity is not None:
        intensity, note = unknown_intensity(raw_intensity.numpy().reshape(-1), "PCD intensity")
        notes.append(("intensity", note))
    label_at = next((name for name in PCD_LABEL_FIELDS if name in attributes), None)
    labels = None
    if label_at is not None:
        values = attributes[label_at].numpy().reshape(-1)
        if values.dtype.kind == "f" and not (np.isfinite(values).all() and np.array_equal(values, np.round(values))):
            raise _fail(path, f"its {label_at} field holds values that are not whole class ids.")
        labels = values.astype(np.int32)
    return Cloud(
        xyz=xyz,
        rgb=rgb,
        intensity=intensity,
        labels=labels,
        offset=offset,
        label_field=label_at,
        format="pcd",
        notes=tuple(notes),
    ).checked(path)
