"""PCD and the text formats (XYZ, XYZRGB, PTS), read by open3d only after our own checks.

open3d's readers trust the file: a PTS whose first line claims more points than it holds comes
back padded with zeros, a short binary PCD fails with a warning on stdout and an empty cloud, and
an ASCII line with a missing value is read as whatever sscanf left there. So every file is first
checked here: a PCD header's fields, sizes, types, ``WIDTH × HEIGHT = POINTS`` and ``POINTS ×
record size`` against the bytes (binary), or the compressed block's sizes (binary_compressed);
text files line by line (the same count of numbers on every line, and the PTS count equal to the
lines). After open3d has read a file, its point count is compared with the one we expect.
"""

from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

import numpy as np

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io.cloud import Cloud, check_count
from mlcore.pointcloud.io.ply import to_uint8_colors

PCD_KEYS = ("FIELDS", "SIZE", "TYPE", "WIDTH", "HEIGHT", "POINTS", "DATA")
PCD_TYPES = {("F", 4), ("F", 8), ("I", 1), ("I", 2), ("I", 4), ("I", 8), ("U", 1), ("U", 2), ("U", 4), ("U", 8)}
_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)"
TEXT_COLUMNS = {"xyz": (3,), "xyzrgb": (6,), "pts": (3, 4, 6, 7)}


def _fail(path: Path, what: str) -> JobError:
    return JobError(f"{path.name}: {what} Re-export the cloud (PLY binary is safest) and upload again.")


def check_pcd(path: Path, max_points: int) -> int:
    """Check a PCD header against the file; return the number of points it holds."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(64 * 1024)
    fields: dict[str, list[str]] = {}
    length = 0
    for raw in head.split(b"\n"):
        length += len(raw) + 1
        line = raw.decode("ascii", errors="replace").strip()
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        fields[key] = values
        if key == "DATA":
            break
    else:
        raise _fail(path, "the PCD header has no DATA line in its first 64 KiB: it is truncated.")
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
    try:
        sizes_i = [int(s) for s in sizes]
        counts_i = [int(c) for c in counts]
        width, height, points = int(fields["WIDTH"][0]), int(fields["HEIGHT"][0]), int(fields["POINTS"][0])
    except (ValueError, IndexError):
        raise _fail(path, "the PCD header's SIZE, COUNT, WIDTH, HEIGHT or POINTS is not an integer.") from None
    for name, t, s, c in zip(names, types, sizes_i, counts_i, strict=True):
        if (t, s) not in PCD_TYPES or c < 1:
            raise _fail(path, f"the PCD field {name!r} has an invalid TYPE/SIZE/COUNT {t}/{s}/{c}.")
    if not {"x", "y", "z"} <= set(names):
        raise _fail(path, "the PCD file has no x, y and z fields.")
    if width * height != points:
        raise _fail(path, f"the PCD header says WIDTH {width} × HEIGHT {height} but POINTS {points}: it lies.")
    check_count(path, points, max_points)
    record = sum(s * c for s, c in zip(sizes_i, counts_i, strict=True))
    mode = fields["DATA"][0] if fields["DATA"] else ""
    body = size - length
    if mode == "binary":
        if points * record > body:
            raise _fail(
                path,
                f"the header promises {points:,} points × {record} bytes = {points * record:,} bytes, but only "
                f"{body:,} bytes follow it: the file is truncated or its header lies.",
            )
    elif mode == "binary_compressed":
        block = head[length : length + 8]
        if len(block) < 8:
            raise _fail(path, "the compressed PCD block is missing: the file is truncated.")
        compressed, uncompressed = struct.unpack("<II", block)
        if uncompressed != points * record or compressed + 8 > body:
            raise _fail(
                path,
                f"the compressed block claims {compressed:,} → {uncompressed:,} bytes, but {points:,} points × "
                f"{record} bytes need {points * record:,} and {body - 8:,} bytes follow: truncated or lying.",
            )
    elif mode == "ascii":
        _check_lines(path, sum(counts_i), points, start=length, what="PCD")
    else:
        raise _fail(path, f"the PCD DATA mode {mode!r} is not ascii, binary or binary_compressed.")
    return points


def _check_lines(path: Path, columns: int | tuple[int, ...], expected: int | None, *, start: int, what: str) -> int:
    """Every non-empty line from byte ``start`` holds the same allowed count of numbers."""
    allowed = (columns,) if isinstance(columns, int) else columns
    width: int | None = None
    pattern: re.Pattern[bytes] | None = None
    lines = 0
    with path.open("rb") as f:
        f.seek(start)
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            if pattern is None:
                width = len(raw.split())
                if width not in allowed:
                    raise _fail(
                        path,
                        f"{what} data line {number} has {width} values; expected {' or '.join(map(str, allowed))}.",
                    )
                pattern = re.compile(rf"\s*{_NUM}(?:\s+{_NUM}){{{width - 1}}}\s*".encode(), re.IGNORECASE)
            if not pattern.fullmatch(raw):
                raise _fail(
                    path,
                    f"{what} data line {number} is not {width} numbers: "
                    f"{raw[:80].decode('ascii', 'replace').strip()!r}.",
                )
            lines += 1
            if expected is not None and lines > expected:
                raise _fail(path, f"the header promises {expected:,} points but the file holds more lines: it lies.")
    if expected is not None and lines != expected:
        raise _fail(
            path, f"the header promises {expected:,} points but the file holds {lines:,}: it is truncated or lies."
        )
    return width or 0


def check_text(path: Path, fmt: str, max_points: int) -> int:
    """Check an XYZ / XYZRGB / PTS file line by line; return its number of points."""
    start = 0
    expected: int | None = None
    if fmt == "pts":
        with path.open("rb") as f:
            first = f.readline()
        try:
            expected = int(first.strip())
        except ValueError:
            raise _fail(path, "the first line of a PTS file must be the point count.") from None
        check_count(path, expected, max_points)
        start = len(first)
    count = _count_lines(path, start)
    check_count(path, count, max_points)
    _check_lines(path, TEXT_COLUMNS[fmt], expected if expected is not None else count, start=start, what=fmt.upper())
    return count


def _count_lines(path: Path, start: int) -> int:
    count = 0
    with path.open("rb") as f:
        f.seek(start)
        for raw in f:
            count += bool(raw.strip())
    return count


def read_with_open3d(path: Path, fmt: str, *, max_points: int) -> Cloud:
    """Check ``path`` as ``fmt`` (pcd, xyz, xyzrgb, pts), then read it with open3d's tensor IO."""
    expected = check_pcd(path, max_points) if fmt == "pcd" else check_text(path, fmt, max_points)
    import open3d as o3d

    # open3d reports failures as warnings on stdout; we report them ourselves below.
    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)
    with tempfile.TemporaryDirectory(prefix="moelab-cloud-") as tmp:
        # open3d's text readers go by the file name's extension even when told the format.
        named = Path(tmp) / f"cloud.{fmt}"
        named.symlink_to(path.resolve())
        cloud = o3d.t.io.read_point_cloud(str(named), format=fmt, remove_nan_points=False, remove_infinite_points=False)
    attributes = dict(cloud.point.items()) if "positions" in cloud.point else {}
    positions = attributes["positions"].numpy() if "positions" in attributes else np.zeros((0, 3), np.float32)
    if len(positions) != expected:
        raise _fail(
            path, f"open3d read {len(positions):,} of the {expected:,} points the file declares: it is corrupt."
        )
    colors = attributes.get("colors")
    intensity = attributes.get("intensity", attributes.get("intensities"))
    labels = attributes.get("label", attributes.get("labels"))
    return Cloud(
        xyz=np.ascontiguousarray(positions, dtype=np.float32),
        rgb=None if colors is None else to_uint8_colors(colors.numpy()),
        intensity=None if intensity is None else intensity.numpy().reshape(-1).astype(np.float32),
        labels=None if labels is None else labels.numpy().reshape(-1).astype(np.int32),
    ).checked(path)
