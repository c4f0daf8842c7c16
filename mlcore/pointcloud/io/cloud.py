"""The one in-memory point cloud every reader returns, and the checks every reader shares.

A reader never hands an unchecked array to the rest of the project, and refuses a file with the
message that names its real fault, in this order:

1. a count that is no count at all (negative, not a whole number, or more points than any file
   could hold) is called invalid (:func:`parse_count`, :func:`check_plausible_count`);
2. a count that the file's bytes (binary) or lines (text) cannot hold is reported as exactly that,
   "declares 1,000,000,000 points × 12 bytes … but holds 300 bytes" (:func:`declared_more_than_held`),
   so a 300-byte file is never told to downsample;
3. only then is a real count checked against the limits (:func:`check_count`), still before
   anything is allocated;
4. text bodies are checked row by row, and the first bad row is named by its line number in the
   file (:func:`check_rows`); coordinates are checked for NaN/inf after reading
   (:meth:`Cloud.checked`).

Every failure is a :class:`JobError` that names the file (never its folder), says what was wrong and
what to do.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlcore.errors import JobError

#: The hard ceiling for any upload, whatever a job asks for: 50M points is ~600 MB of float32
#: coordinates alone, and the segmenter chunks anything larger than its budget anyway.
MAX_POINTS = 50_000_000

#: The most bytes a file can have anywhere (a signed 64-bit file offset): a count whose points would
#: take more than this is not a size at all, and is called invalid rather than "too many".
MAX_FILE_BYTES = 2**63 - 1

#: How much of a text header (PLY, PCD) a reader takes before giving up on finding its end. Legal
#: files carry long comment blocks (scanner metadata, provenance, a 1 MB comment), so the cap is
#: generous; it exists only so that a file without an end of header is not read whole into memory.
MAX_HEADER_BYTES = 16 * 2**20

# A number as the text formats write it (what float() accepts, less Python's underscores).
_NUMBER = rb"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)"


#: A cloud whose every coordinate lies within this many metres of the origin keeps its coordinates
#: (float32 holds them to 0.06 mm); farther out, a whole-metre offset is subtracted in float64 first.
NEAR_ORIGIN_M = 1024.0


def choose_offset(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The per-scan offset (float64, (3,)) for a cloud whose finite coordinates span ``lo``..``hi``:
    zero near the origin, else the bounding box minimum rounded down to whole metres.

    float32 keeps about 7 significant digits: x ≈ 512,000 m is quantised to 3 cm, y ≈ 5,400,000 m to
    50 cm. Subtracting a whole-metre offset in float64 first is exact, and leaves local coordinates
    that float32 holds to well under a millimetre for any scan up to 8 km across.
    """
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    if max(float(np.abs(lo).max(initial=0.0)), float(np.abs(hi).max(initial=0.0))) <= NEAR_ORIGIN_M:
        return np.zeros(3)
    return np.floor(lo)


def localise(columns: list[np.ndarray] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float32 (N, 3) local coordinates, float64 (3,) offset) from three coordinate columns of any
    float type: the offset is chosen from the finite values (:func:`choose_offset`) and subtracted in
    float64 before the cast, one column at a time so a 50M-point cloud needs no (N, 3) float64 copy."""
    cols = [np.asarray(c) for c in (columns.T if isinstance(columns, np.ndarray) and columns.ndim == 2 else columns)]
    lo = np.zeros(3)
    hi = np.zeros(3)
    for k, col in enumerate(cols):
        finite = col[np.isfinite(col)]
        if finite.size:
            lo[k], hi[k] = float(finite.min()), float(finite.max())
    offset = choose_offset(lo, hi)
    xyz = np.empty((len(cols[0]), 3), np.float32)
    for k, col in enumerate(cols):
        xyz[:, k] = col.astype(np.float64) - offset[k] if offset[k] else col
    return xyz, offset


@dataclass(frozen=True)
class Cloud:
    """Points with optional per-point attributes, all of length ``N``.

    ``xyz`` float32 (N, 3) **local** coordinates: the point's position in the file is
    ``xyz + offset`` (computed in float64 by :meth:`world`); ``offset`` float64 (3,) is zero for a
    cloud near the origin (:func:`choose_offset`). ``rgb`` uint8 (N, 3); ``intensity`` float32 (N,)
    in [0, 1], normalised by the reader by what the file's field means (``notes`` says how);
    ``labels`` int32 (N,): the file's own per-point class field, as the file numbers it, when it has
    one: ``label_field`` names it (``"classification"`` for LAS, whose values are ASPRS codes;
    ``"label"``, ``"class"``, ... for PLY and PCD properties). ``format`` is the detailed format the
    reader found (``ply``, ``las``, ``laz``, ``pcd``, ``xyz``, ...); ``notes``: (attribute, what was
    read and how it was scaled) pairs, for the job's log.
    """

    xyz: np.ndarray
    rgb: np.ndarray | None = None
    intensity: np.ndarray | None = None
    labels: np.ndarray | None = None
    offset: np.ndarray = field(default_factory=lambda: np.zeros(3))
    label_field: str | None = None
    format: str | None = None
    notes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        n = len(self.xyz)
        if self.xyz.dtype != np.float32 or self.xyz.ndim != 2 or self.xyz.shape[1] != 3:
            raise ValueError(f"Cloud.xyz must be float32 (N, 3), got {self.xyz.dtype} {self.xyz.shape}")
        for name, dtype, width in (("rgb", np.uint8, 3), ("intensity", np.float32, None), ("labels", np.int32, None)):
            value = getattr(self, name)
            if value is None:
                continue
            shape = (n, width) if width else (n,)
            if value.dtype != dtype or value.shape != shape:
                raise ValueError(f"Cloud.{name} must be {np.dtype(dtype)} {shape}, got {value.dtype} {value.shape}")
        offset = np.asarray(self.offset, dtype=np.float64).reshape(3)
        object.__setattr__(self, "offset", offset)
        if self.labels is not None and self.label_field is None:
            object.__setattr__(self, "label_field", "label")

    def __len__(self) -> int:
        return len(self.xyz)

    def world(self) -> np.ndarray:
        """float64 (N, 3): the coordinates as the file holds them (``xyz + offset``)."""
        return self.xyz.astype(np.float64) + self.offset

    def replace(self, **changes: object) -> Cloud:
        """A copy with some fields changed (e.g. ``rgb=None`` to leave colour out)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def subset(self, index: np.ndarray) -> Cloud:
        """The points at ``index`` (an integer array or a boolean mask), with their attributes."""

        def pick(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else np.ascontiguousarray(values[index])

        xyz = np.ascontiguousarray(self.xyz[index])
        return dataclasses.replace(
            self, xyz=xyz, rgb=pick(self.rgb), intensity=pick(self.intensity), labels=pick(self.labels)
        )

    def checked(self, path: Path) -> Cloud:
        """Return ``self`` if every coordinate is finite, else raise a :class:`JobError`."""
        finite = np.isfinite(self.xyz).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise JobError(
                f"{path.name}: {len(bad)} of {len(self)} points have NaN or infinite coordinates "
                f"(the first is point {int(bad[0])}). Remove them (e.g. CloudCompare: Edit > Scalar fields > "
                "Filter, or drop invalid returns in the exporter) and upload again."
            )
        if self.intensity is not None and not np.isfinite(self.intensity).all():
            raise JobError(f"{path.name}: the intensity attribute holds NaN or infinite values; fix or drop it.")
        return self


def invalid_count(path: Path, where: str, raw: str | int, why: str) -> JobError:
    """``where`` (e.g. "the header's POINTS") holds ``raw``, which is not a point count because ``why``."""
    shown = raw if isinstance(raw, int) else repr(raw if len(raw) <= 40 else raw[:37] + "...")
    return JobError(f"{path.name}: {where} is {shown}, which is invalid: {why}. Re-export the file and upload again.")


def parse_count(path: Path, raw: str, where: str, *, record_bytes: int = 1) -> int:
    """A count written as text in a header, or a :class:`JobError` that calls it invalid.

    ``record_bytes`` is the least each item takes in the file, so a count that no file could hold
    (``18446744073709551615`` vertices) is refused as invalid here, not as "too many" later.
    """
    if not re.fullmatch(r"\d+", raw):
        raise invalid_count(path, where, raw, "a count is a whole number, 0 or more")
    if len(raw) > 20:  # past 2**64 whatever the digits; also keeps int() far from its digit limit
        raise invalid_count(path, where, raw, "that many points would take more bytes than any file can hold")
    count = int(raw)
    check_plausible_count(path, count, where, record_bytes=record_bytes)
    return count


def check_plausible_count(path: Path, count: int, where: str, *, record_bytes: int = 1) -> None:
    """Refuse a count read from a binary field that is negative or beyond any file's size, as invalid."""
    if count < 0:
        raise invalid_count(path, where, count, "a count is a whole number, 0 or more")
    if count * max(record_bytes, 1) > MAX_FILE_BYTES:
        raise invalid_count(path, where, count, "that many points would take more bytes than any file can hold")


def declared_more_than_held(path: Path, declared: str, held: str) -> JobError:
    """The header declares more than the file holds: say both, before any limit is mentioned."""
    return JobError(
        f"{path.name}: the header declares {declared}, but the file holds {held}: "
        "the file is truncated or its header lies. Re-export it and upload again."
    )


def check_count(path: Path, count: int, max_points: int) -> None:
    """Refuse an empty cloud or one above the limit, before a single point is allocated.

    Call it only after the count is known to be valid and held by the file (see the module
    docstring): the limit message tells the user to downsample, which is wrong for a file that lies.
    """
    limit = min(max_points, MAX_POINTS)
    if count <= 0:
        raise JobError(f"{path.name}: the file holds no points. Upload a cloud with at least one point.")
    if count > limit:
        raise JobError(
            f"{path.name}: {count:,} points is more than the limit of {limit:,}. "
            "Downsample it first (e.g. a 1-5 cm voxel grid) or split the scan into tiles."
        )


def _shown(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return text if len(text) <= 60 else text[:57] + "..."


def check_rows(
    path: Path,
    *,
    start: int,
    first_line: int,
    widths: tuple[int, ...],
    expected: int | None,
    names: str = "",
    skip: int = 0,
    more_allowed: bool = False,
) -> tuple[int, int]:
    """Check the text rows of a cloud from byte ``start`` (which is line ``first_line`` of the file).

    Every non-empty row must hold the same count of numbers, one of ``widths`` (``names`` says what
    they are, e.g. "x y z"); after ``skip`` rows of other elements (ASCII PLY), ``expected`` rows are
    needed, and more are refused unless ``more_allowed``. The first bad row is named by its line
    number in the file, so a user can go straight to it. Returns (rows, width).
    """
    what = f" ({names})" if names else ""
    width = 0
    pattern: re.Pattern[bytes] | None = None
    rows = 0
    with path.open("rb") as f:
        f.seek(start)
        for number, raw in enumerate(f, start=first_line):
            if not raw.strip():
                continue
            if skip:
                skip -= 1
                continue
            if expected is not None and rows == expected:
                if more_allowed:
                    break
                raise JobError(
                    f"{path.name}: line {number}: the header declares {expected:,} points, but the file holds more "
                    f"rows ({_shown(raw)!r} is one too many): its point count is wrong. Re-export it and upload again."
                )
            if pattern is None:
                width = len(raw.split())
                if width not in widths:
                    want = " or ".join(f"{w}" for w in widths)
                    raise JobError(
                        f"{path.name}: line {number}: expected {want} numbers{what}, got {_shown(raw)!r}. "
                        "Remove header and comment lines, keep one point per line, and upload again."
                    )
                pattern = re.compile(rb"\s*" + _NUMBER + rb"(?:\s+" + _NUMBER + rb"){%d}\s*" % (width - 1), re.I)
            if not pattern.fullmatch(raw):
                raise JobError(
                    f"{path.name}: line {number}: expected {width} numbers{what}, got {_shown(raw)!r}. "
                    "Fix or remove that line (every point on its own line, numbers separated by spaces) "
                    "and upload again."
                )
            rows += 1
    if expected is not None and rows < expected:
        raise declared_more_than_held(path, f"{expected:,} points", f"{rows:,} rows of points")
    return rows, width
