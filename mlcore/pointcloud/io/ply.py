"""PLY, read by our own numpy reader and written as binary little endian.

Paul Bourke's PLY format: a text header (``ply``, ``format``, ``element NAME COUNT``,
``property TYPE NAME`` / ``property list COUNT_TYPE ITEM_TYPE NAME``, ``end_header``) followed by
the elements in order, as text lines (``ascii``) or packed records (``binary_little_endian``,
``binary_big_endian``).

The reader trusts nothing in the header: every type must be a PLY type, every count a whole
number some file could hold, the vertex element must have x/y/z scalars, and ``count × record
size`` of every element up to and including the vertices must fit in the bytes that follow the
header *before* an array is allocated, so a file that claims 10^9 vertices in 1 KB is told exactly
that ("declares 1,000,000,000 points × 12 bytes … but holds …") instead of asking for 12 GB (or,
worse, reading uninitialised memory as other readers do), and never told to downsample. A file
with faces is a mesh, and refused as one. The header may be up to
:data:`~mlcore.pointcloud.io.cloud.MAX_HEADER_BYTES` long (legal files carry long comments); an
ASCII body is checked row by row only when it fails to parse, to name the first bad line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlcore.errors import JobError
from mlcore.pointcloud.io.attributes import colour_note, unknown_intensity
from mlcore.pointcloud.io.cloud import (
    MAX_HEADER_BYTES,
    Cloud,
    check_count,
    check_plausible_count,
    check_rows,
    declared_more_than_held,
    localise,
    parse_count,
)

#: PLY scalar types (both spellings of the spec) → numpy type codes.
PLY_TYPES: dict[str, str] = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}  # fmt: skip
FORMATS = {"ascii": "", "binary_little_endian": "<", "binary_big_endian": ">"}
MESH_ELEMENTS = ("face", "tristrips", "edge")

# Attribute names by preference. Our own labelled files keep the input colours as input_*; the
# plain red/green/blue there are the label colours, so a generic viewer shows the segmentation.
_RGB_NAMES = (
    ("input_red", "input_green", "input_blue"),
    ("red", "green", "blue"),
    ("diffuse_red", "diffuse_green", "diffuse_blue"),
    ("r", "g", "b"),
)
_INTENSITY_NAMES = ("intensity", "scalar_intensity", "reflectance", "remission")
_LABEL_NAMES = ("label", "scalar_label", "class", "semantic", "classification")


@dataclass(frozen=True)
class Property:
    name: str
    type: str  # numpy code, e.g. "f4"
    count_type: str | None = None  # set for list properties


@dataclass(frozen=True)
class Element:
    name: str
    count: int
    properties: tuple[Property, ...]

    @property
    def has_lists(self) -> bool:
        return any(p.count_type for p in self.properties)

    @property
    def record_bytes(self) -> int:
        """Bytes per record; for list properties, the least a record can take (an empty list)."""
        return sum(np.dtype(p.count_type or p.type).itemsize for p in self.properties)


@dataclass(frozen=True)
class Header:
    format: str
    elements: tuple[Element, ...]
    comments: tuple[str, ...]
    length: int  # bytes up to and including the end_header line
    lines: int = 0  # lines up to and including the end_header line (the body starts on the next)


def _fail(
    path: Path, what: str, todo: str = "Re-export it as PLY (binary little endian) and upload again."
) -> JobError:
    return JobError(f"{path.name}: {what} {todo}")


def _header_bytes(path: Path) -> tuple[bytes, re.Match[bytes] | None, bool]:
    """The file's first bytes up to its ``end_header`` line, the match, and whether the cap stopped us."""
    end = re.compile(rb"(?:^|\n)end_header[ \t]*\r?\n")
    head = b""
    with path.open("rb") as f:
        while len(head) < MAX_HEADER_BYTES:
            chunk = f.read(min(1 << 20, MAX_HEADER_BYTES - len(head)))
            if not chunk:
                return head, None, False
            # Search only the new bytes and the tail of the old ones that a match could straddle.
            since = max(0, len(head) - 16)
            head += chunk
            if (match := end.search(head, since)) is not None:
                return head, match, False
    return head, None, True


def read_header(path: Path) -> Header:
    """Parse and check the header of ``path``; raise a :class:`JobError` naming what is wrong."""
    with path.open("rb") as f:
        first = f.read(5)
    if not first.startswith((b"ply\n", b"ply\r")):
        raise _fail(path, "is not a PLY file (it does not start with 'ply').")
    head, match, capped = _header_bytes(path)
    if match is None:
        if capped:
            cap = f"{MAX_HEADER_BYTES // 2**20} MiB"
            raise _fail(
                path,
                f"the PLY header is longer than the {cap} this reader accepts (no 'end_header' line in its "
                f"first {cap}).",
                "Shorten its comments, or re-export it as PLY (binary little endian), and upload again.",
            )
        raise _fail(path, "the PLY header has no 'end_header' line: the file is truncated or not PLY.")
    text = head[: match.start()].decode("ascii", errors="replace")
    lines = text.splitlines()[1:]
    fmt: str | None = None
    comments: list[str] = []
    elements: list[tuple[str, int, list[Property]]] = []
    for number, raw in enumerate(lines, start=2):
        words = raw.split()
        if not words:
            continue
        keyword = words[0]
        if keyword in ("comment", "obj_info"):
            comments.append(raw.partition(" ")[2])
        elif keyword == "format":
            if len(words) != 3 or words[1] not in FORMATS:
                raise _fail(
                    path,
                    f"header line {number} names an unknown format {raw.strip()!r} "
                    "(expected ascii, binary_little_endian or binary_big_endian).",
                )
            if words[2] != "1.0":
                raise _fail(path, f"header line {number}: PLY version {words[2]!r} is not supported (only 1.0).")
            fmt = words[1]
        elif keyword == "element":
            if len(words) != 3:
                raise _fail(path, f"header line {number} is not 'element NAME COUNT': {raw.strip()[:60]!r}.")
            where = f"header line {number}: the count of element {words[1][:30]!r}"
            elements.append((words[1], parse_count(path, words[2], where), []))
        elif keyword == "property":
            if not elements:
                raise _fail(path, f"header line {number} declares a property before any element.")
            if len(words) == 5 and words[1] == "list":
                count_type, item_type = PLY_TYPES.get(words[2]), PLY_TYPES.get(words[3])
                if count_type is None or item_type is None or count_type[0] == "f":
                    raise _fail(path, f"header line {number} has a list property with bad types: {raw.strip()[:60]!r}.")
                elements[-1][2].append(Property(words[4], item_type, count_type))
            elif len(words) == 3 and words[1] in PLY_TYPES:
                elements[-1][2].append(Property(words[2], PLY_TYPES[words[1]]))
            else:
                raise _fail(path, f"header line {number} has an unknown property type: {raw.strip()[:60]!r}.")
        else:
            raise _fail(path, f"header line {number} is not a PLY header line: {raw.strip()[:60]!r}.")
    if fmt is None:
        raise _fail(path, "has no 'format' line in its header.")
    header = Header(
        format=fmt,
        elements=tuple(Element(name, count, tuple(props)) for name, count, props in elements),
        comments=tuple(comments),
        length=match.end(),
        lines=head[: match.end()].count(b"\n"),
    )
    for element in header.elements:
        # With the properties known, a count whose records no file could hold is invalid.
        check_plausible_count(
            path, element.count, f"the count of element {element.name[:30]!r}", record_bytes=element.record_bytes
        )
    return header


def _vertex_element(path: Path, header: Header) -> tuple[int, Element]:
    """The vertex element and its index, after the cloud-not-mesh checks."""
    faces = [e for e in header.elements if e.name in MESH_ELEMENTS and e.count > 0]
    if faces:
        raise JobError(
            f"{path.name}: this is a mesh ({faces[0].count:,} {faces[0].name} records), not a point cloud. "
            "Sample points from its surface (e.g. CloudCompare: Edit > Mesh > Sample points, or "
            "open3d's sample_points_uniformly) and upload the cloud."
        )
    found = [(i, e) for i, e in enumerate(header.elements) if e.name == "vertex"]
    if not found:
        raise _fail(path, "has no 'vertex' element, so it holds no points.")
    index, vertex = found[0]
    names = {p.name for p in vertex.properties}
    missing = [axis for axis in "xyz" if axis not in names]
    if missing:
        raise _fail(path, f"the vertex element has no {'/'.join(missing)} property.")
    if vertex.has_lists:
        raise _fail(path, "the vertex element has list properties, which a point cloud does not use.")
    return index, vertex


def _check_sizes(path: Path, header: Header, index: int, size: int) -> int:
    """Check every element's ``count × record size`` against the file size; return the vertex offset."""
    body = size - header.length
    vertex = header.elements[index]
    if header.format == "ascii":
        # A text value takes at least one character and one separator.
        least = sum(e.count * 2 * len(e.properties) for e in header.elements[: index + 1])
        if least > body:
            others = " (with the elements before them)" if index else ""
            raise declared_more_than_held(
                path,
                f"{vertex.count:,} points of {len(vertex.properties)} values{others}, at least {least:,} bytes of text",
                f"{body:,} bytes after its header",
            )
        return header.length
    offset = header.length
    for element in header.elements[:index]:
        if element.has_lists and element.count:
            raise _fail(
                path,
                f"the element {element.name!r} with list properties comes before "
                "the vertices; this reader does not support that layout.",
            )
        offset += element.count * element.record_bytes
    needed = offset + vertex.count * vertex.record_bytes
    # Later elements need at least their minimal records too (their lists may only grow them).
    needed_all = needed + sum(e.count * e.record_bytes for e in header.elements[index + 1 :])
    if needed_all > size:
        points = vertex.count * vertex.record_bytes
        elements = needed_all - header.length
        others = f" ({elements:,} with its other elements)" if elements > points else ""
        raise declared_more_than_held(
            path,
            f"{vertex.count:,} points × {vertex.record_bytes} bytes = {points:,} bytes{others}",
            f"{body:,} bytes after its header",
        )
    if not any(e.has_lists for e in header.elements) and size - needed_all >= max(vertex.record_bytes, 1):
        raise _fail(
            path,
            f"the header declares {vertex.count:,} points × {vertex.record_bytes} bytes, but "
            f"{size - needed_all:,} more bytes follow the last element it declares: its vertex count is wrong.",
        )
    return offset


def _column(table: np.ndarray, names: dict[str, int], want: tuple[str, ...]) -> list[np.ndarray] | None:
    if all(n in names for n in want):
        return [table[f"p{names[n]}"] if table.dtype.names else table[:, names[n]] for n in want]
    return None


def read_ply(path: Path, *, max_points: int) -> Cloud:
    """Read a PLY point cloud (ascii, binary little or big endian) after checking its header."""
    header = read_header(path)
    index, vertex = _vertex_element(path, header)
    offset = _check_sizes(path, header, index, path.stat().st_size)
    check_count(path, vertex.count, max_points)
    names = {p.name.lower(): i for i, p in enumerate(vertex.properties)}
    if header.format == "ascii":
        table = _read_ascii(path, header, index)
    else:
        endian = FORMATS[header.format]
        dtype = np.dtype([(f"p{i}", endian + p.type) for i, p in enumerate(vertex.properties)])
        table = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(vertex.count,))
    x, y, z = _column(table, names, ("x", "y", "z")) or []
    # Local coordinates from the file's own precision (a double PLY keeps its millimetres).
    xyz, offset = localise([x, y, z])
    coord_type = {p.name.lower(): p.type for p in vertex.properties}["x"]
    coord_name = {"f8": "double", "f4": "float"}.get(coord_type, coord_type)
    notes: list[tuple[str, str]] = [("coordinates", f"PLY {header.format}, {coord_name}")]
    rgb_names = _RGB_NAMES
    if any(c.startswith("moelab label") for c in header.comments) and "input_red" not in names:
        # Our labelled file without input colours: its red/green/blue are label colours, which
        # must not come back as the sensor's colours (a model would read them as features).
        rgb_names = ()
    rgb = next((c for want in rgb_names if (c := _column(table, names, want))), None)
    intensity_at = next((want for want in _INTENSITY_NAMES if want in names), None)
    intensity = None
    if intensity_at is not None:
        intensity, note = unknown_intensity(np.array(_column(table, names, (intensity_at,))[0]), intensity_at)
        notes.append(("intensity", note))
    label_at = next((want for want in _LABEL_NAMES if want in names), None)
    labels = None if label_at is None else _column(table, names, (label_at,))[0]
    rgb_array = None
    if rgb is not None:
        stacked = np.stack(rgb, axis=1)
        notes.append(("colour", colour_note(stacked, "PLY colour")))
        rgb_array = to_uint8_colors(stacked)
    del table, x, y, z, rgb  # release the memory map before returning
    cloud = Cloud(
        xyz=xyz,
        rgb=rgb_array,
        intensity=intensity,
        labels=None if labels is None else _to_labels(path, np.asarray(labels)),
        offset=offset,
        label_field=label_at,
        format="ply",
        notes=tuple(notes),
    )
    return cloud.checked(path)


def _read_ascii(path: Path, header: Header, index: int) -> np.ndarray:
    vertex = header.elements[index]
    skip = sum(e.count for e in header.elements[:index])
    last = index == len(header.elements) - 1
    with path.open("rb") as f:
        f.seek(header.length)
        for _ in range(skip):
            f.readline()
        try:
            # One row more than declared when the vertices end the file, to notice an undercount.
            table = np.loadtxt(f, dtype=np.float64, max_rows=vertex.count + last, ndmin=2, comments=None)
        except ValueError:
            table = None
    if table is None or table.shape != (vertex.count, len(vertex.properties)):
        # Something is wrong with the text: find the first bad row and name its line.
        check_rows(
            path,
            start=header.length,
            first_line=header.lines + 1,
            widths=(len(vertex.properties),),
            expected=vertex.count,
            names=" ".join(p.name for p in vertex.properties)[:60],
            skip=skip,
            more_allowed=not last,
        )
        raise _fail(
            path,
            f"the header declares {vertex.count:,} points of {len(vertex.properties)} values, but the text "
            "does not read as that many rows of numbers.",
        )
    return table


def to_uint8_colors(rgb: np.ndarray) -> np.ndarray:
    """Colours as uint8: floats in [0, 1] are scaled, 16-bit values are shifted to 8 bits."""
    rgb = np.asarray(rgb)
    if rgb.dtype.kind == "f":
        rgb = np.nan_to_num(rgb.astype(np.float64), nan=0.0)
        if rgb.size and rgb.max() <= 1.0:
            rgb = rgb * 255.0
        return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    if rgb.size and rgb.max() > 255:
        return (rgb.astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
    return rgb.clip(0, 255).astype(np.uint8)


def _to_labels(path: Path, labels: np.ndarray) -> np.ndarray:
    if labels.dtype.kind == "f" and not np.isfinite(labels).all():
        bad = int(np.flatnonzero(~np.isfinite(labels))[0])
        raise _fail(
            path, f"its label property holds NaN or infinite values (the first at point {bad}).", "Fix or drop it."
        )
    if labels.dtype.kind == "f" and not np.array_equal(labels, np.round(labels)):
        raise _fail(
            path, "its label property holds fractional values; labels must be whole class ids.", "Round or drop it."
        )
    if labels.size and (labels.min() < -(2**31) or labels.max() >= 2**31):
        raise _fail(path, "its label property holds values outside 32-bit integers.", "Renumber the classes.")
    return labels.astype(np.int32)


def write_ply(
    path: Path,
    xyz: np.ndarray,
    *,
    rgb: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    label_colors: np.ndarray | None = None,
    label_names: list[str] | tuple[str, ...] | None = None,
    intensity: np.ndarray | None = None,
    offset: np.ndarray | None = None,
    double: bool = False,
    comments: list[str] | tuple[str, ...] = (),
) -> Path:
    """Write a binary little-endian PLY cloud; with ``labels``, a labelled one.

    Coordinates are ``xyz + offset``: float32 by default; with ``double`` (or a non-zero ``offset``,
    a georeferenced scan) float64, computed in float64, so the file holds the input's coordinates to
    well under a millimetre. ``comments`` are extra header comment lines.

    With ``labels``: a ``label`` int property, ``red/green/blue`` = the label's colour from
    ``label_colors`` (K, 3) uint8 (default :func:`mlcore.pointcloud.render.palette`), so any
    viewer shows the segmentation, and the input colours (if ``rgb`` is given) kept as
    ``input_red/input_green/input_blue``. The legend travels in the header as
    ``comment moelab label ID R G B NAME`` lines (our viewer reads them). Without labels,
    ``rgb`` becomes ``red/green/blue``. The file appears whole or not at all (written beside, then
    renamed).
    """
    path = Path(path)
    shift = np.zeros(3) if offset is None else np.asarray(offset, dtype=np.float64).reshape(3)
    double = double or bool(shift.any())
    coord = "<f8" if double else "<f4"
    xyz = np.asarray(xyz)
    n = len(xyz)
    fields: list[tuple[str, str, np.ndarray]] = [
        (axis, coord, xyz[:, k].astype(np.float64) + shift[k] if double else xyz[:, k].astype(np.float32))
        for k, axis in enumerate("xyz")
    ]
    legend: list[str] = []
    if labels is not None:
        labels = np.asarray(labels).astype(np.int32)
        if labels.shape != (n,) or (n and labels.min() < 0):
            raise ValueError("labels must be (N,) non-negative class ids")
        count = max(int(labels.max()) + 1 if n else 0, len(label_names or ()))
        if label_colors is None:
            from mlcore.pointcloud.render import palette

            label_colors = palette(count)
        label_colors = np.asarray(label_colors, dtype=np.uint8)
        if label_colors.shape[0] < count:
            raise ValueError(f"label_colors has {label_colors.shape[0]} rows for {count} labels")
        colors = label_colors[labels]
        fields += [("red", "u1", colors[:, 0]), ("green", "u1", colors[:, 1]), ("blue", "u1", colors[:, 2])]
        if rgb is not None:
            rgb = np.asarray(rgb, dtype=np.uint8)
            fields += [
                ("input_red", "u1", rgb[:, 0]),
                ("input_green", "u1", rgb[:, 1]),
                ("input_blue", "u1", rgb[:, 2]),
            ]
        fields.append(("label", "<i4", labels))
        present = set(np.unique(labels).tolist())
        for k in range(count):
            if k in present or label_names:
                name = label_names[k] if label_names and k < len(label_names) else f"class {k}"
                r, g, b = (int(v) for v in label_colors[k])
                legend.append(f"moelab label {k} {r} {g} {b} {' '.join(str(name).split())}")
    elif rgb is not None:
        rgb = np.asarray(rgb, dtype=np.uint8)
        fields += [("red", "u1", rgb[:, 0]), ("green", "u1", rgb[:, 1]), ("blue", "u1", rgb[:, 2])]
    if intensity is not None:
        fields.append(("intensity", "<f4", np.asarray(intensity, dtype=np.float32)))
    table = np.empty(n, dtype=np.dtype([(name, code) for name, code, _ in fields]))
    for name, _, values in fields:
        if len(values) != n:
            raise ValueError(f"{name} has {len(values)} values for {n} points")
        table[name] = values
    ply_names = {"<f4": "float", "<f8": "double", "u1": "uchar", "<i4": "int"}
    header = ["ply", "format binary_little_endian 1.0", "comment written by MoE Lab"]
    header += [f"comment {' '.join(str(c).split())}" for c in comments]
    header += [f"comment {c}" for c in legend]
    header.append(f"element vertex {n}")
    header += [f"property {ply_names[code]} {name}" for name, code, _ in fields]
    header.append("end_header")
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("wb") as f:
            f.write(("\n".join(header) + "\n").encode("ascii"))
            f.write(table.tobytes())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
