"""Which point-cloud format a file is, from its first bytes (never its name).

Standard library only: :mod:`mlcore.sniff` calls :func:`upload_format` for every upload in
the web process, which must stay light.

=========  ==========================================================  ============
format     recognised by                                                upload name
=========  ==========================================================  ============
ply        ``ply`` on the first line                                    ply
pcd        ``# .PCD`` first, or a ``VERSION`` line, then ``FIELDS``     pcd
las / laz  the ``LASF`` signature; LAZ sets bit 7 of the point format   las
xyz        whitespace-separated lines of 3 numbers                     xyz
xyzrgb     ... of 6 numbers (x y z r g b)                              xyz
pts        a point count alone on the first line, then 4 or 7 numbers  xyz
e57        the ``ASTM-E57`` signature (recognised only to be refused)   e57
=========  ==========================================================  ============
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

#: Upload format names (what ``File(formats=...)`` lists) for each detailed format.
UPLOAD_NAMES = {
    "ply": "ply", "pcd": "pcd", "las": "las", "laz": "las", "xyz": "xyz", "xyzrgb": "xyz", "pts": "xyz", "e57": "e57",
}  # fmt: skip
#: Formats recognised only so that the refusal can name them and say how to convert them.
REFUSED = {
    "e57": "E57 (ASTM E2807) is not read here. Convert it to LAZ or PLY, e.g. `pdal translate scan.e57 "
    "scan.laz` or CloudCompare (File > Save as LAS/LAZ or PLY), and upload that.",
}
#: The file names a folder's point clouds go by: how the point-cloud jobs and the library's
#: ``pointclouds`` check find the clouds in a scene folder.
CLOUD_SUFFIXES = (".ply", ".pcd", ".xyz", ".xyzrgb", ".pts", ".las", ".laz")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
LAS_POINT_FORMAT_OFFSET = 104


def cloud_format(head: bytes) -> str | None:
    """The detailed format of a file whose first bytes (up to 4 KiB) are ``head``, or ``None``."""
    if head.startswith((b"ply\n", b"ply\r\n")):
        return "ply"
    if head.startswith(b"# .PCD"):
        # PCL's own first line: enough on its own, as comments may push FIELDS past the window.
        return "pcd"
    if head.startswith(b"ASTM-E57"):
        return "e57"
    if head.startswith(b"LASF"):
        compressed = len(head) > LAS_POINT_FORMAT_OFFSET and head[LAS_POINT_FORMAT_OFFSET] & 0x80
        return "laz" if compressed else "las"
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        # A PCD header is ASCII even when the data after it is binary.
        text = head[: head.find(b"DATA")].decode("ascii", errors="replace") if b"DATA" in head else ""
        return "pcd" if _is_pcd_header(text) else None
    if _is_pcd_header(text):
        return "pcd"
    return _text_format(text)


def _is_pcd_header(text: str) -> bool:
    keys = [line.split()[0] for line in text.splitlines()[:12] if line.strip() and not line.startswith("#")]
    return (text.startswith("# .PCD") or (keys[:1] == ["VERSION"])) and "FIELDS" in keys


def _text_format(text: str) -> str | None:
    lines = [words for line in text.splitlines() if (words := line.split())]
    if len(lines) > 1:
        # The last line may be cut by the 4 KiB window, or by a truncated upload: name the
        # format from the others, and let the reader's line check report a cut last line.
        lines = lines[:-1]
    if not lines or not all(_NUMBER.match(w) for words in lines for w in words):
        return None
    if len(lines[0]) == 1 and lines[0][0].isdigit():
        rest = {len(words) for words in lines[1:]}
        return "pts" if rest and rest <= {3, 4, 6, 7} else None
    widths = {len(words) for words in lines}
    if widths == {3}:
        return "xyz"
    if widths == {6}:
        return "xyzrgb"
    return None


def upload_format(head: bytes) -> str | None:
    """The name :mod:`mlcore.sniff` reports (``ply``, ``pcd``, ``las`` or ``xyz``), or ``None``."""
    found = cloud_format(head)
    return UPLOAD_NAMES.get(found) if found else None


#: How much of a text file :func:`text_cloud_problem` looks at (it runs only to explain a refusal).
TEXT_PROBE_BYTES = 64 * 1024
_SEPARATED = re.compile(r"\s*[,;]\s*|\s+")


def _numbers(words: list[str]) -> bool:
    return bool(words) and all(_NUMBER.match(w) for w in words)


def text_cloud_problem(path: Path) -> str | None:
    """Why a text file that looks like an XYZ / XYZRGB / PTS cloud is not one we read, or ``None``.

    Sniffing calls a text file with a header line, a stray word or comma-separated values plain
    "txt" (or "csv"); told only that, a user cannot see what to fix. A file "looks like" a cloud
    when at least two of its first lines hold 3 or more numbers and such lines are at least half of
    them. The answer names the first line that is not a row of numbers, with its number and text,
    or says why the rows themselves are not a format we read (commas; a count of columns that is
    neither XYZ nor XYZRGB).
    """
    with path.open("rb") as f:
        head = f.read(TEXT_PROBE_BYTES)
        cut = bool(f.read(1))
    if b"\0" in head:
        return None  # binary, not text
    lines = head.decode("utf-8", errors="replace").splitlines()
    if cut and lines:
        lines = lines[:-1]  # possibly cut by the window; the reader checks the whole file
    split = [(n, line.strip(), [w for w in _SEPARATED.split(line.strip()) if w]) for n, line in enumerate(lines, 1)]
    split = [row for row in split if row[1]]
    numeric = [(n, line) for n, line, words in split if len(words) >= 3 and _numbers(words)]
    if len(numeric) < 2 or 2 * len(numeric) < len(split):
        return None
    number, line = numeric[0]
    if re.search(r"[,;]", line):
        return (
            f"looks like a point cloud of comma- or semicolon-separated values (line {number}: {line[:60]!r}), "
            "but the XYZ text this reader takes separates numbers with spaces. Replace the separators with "
            "spaces (or export XYZ / PLY) and upload again."
        )
    split = [(n, line, line.split()) for n, line, _ in split]
    widths = Counter(len(words) for _, _, words in split if len(words) >= 3 and _numbers(words))
    width = widths.most_common(1)[0][0]
    pts = len(split[0][2]) == 1
    if pts and not split[0][2][0].isdigit():
        return (
            f"looks like a PTS point cloud, but its first line, the point count, is {split[0][1][:40]!r}, which is "
            "invalid: a count is a whole number, 0 or more. Write the number of points there and upload again."
        )
    for number, line, words in split[1:] if pts else split:
        if len(words) != width or not _numbers(words):
            return (
                f"looks like a point cloud of {width} numbers per line, but line {number} is not: "
                f"expected {width} numbers, got {line[:60]!r}. Remove header and comment lines (every "
                "line one point, its numbers separated by spaces) and upload again."
            )
    if pts and width not in (3, 4, 6, 7):
        return f"looks like a PTS point cloud, but its lines hold {width} numbers; PTS lines hold 3, 4, 6 or 7."
    if not pts and width not in (3, 6):
        return (
            f"holds lines of {width} numbers; the text clouds this reader takes are XYZ (3 numbers per line: "
            "x y z), XYZRGB (6: x y z r g b) or PTS (a line with the point count, then 4 or 7 numbers per line). "
            "Keep those columns (or export PLY, which names its columns) and upload again."
        )
    return None


def sniff_cloud(path: Path) -> str | None:
    """The detailed format of ``path`` (``ply``, ``pcd``, ``las``, ``laz``, ``xyz``, ``xyzrgb``, ``pts``)."""
    with path.open("rb") as f:
        return cloud_format(f.read(4096))
