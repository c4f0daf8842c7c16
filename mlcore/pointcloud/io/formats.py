"""Which point-cloud format a file is, from its first bytes (never its name).

Standard library only: :mod:`mlcore.jobs.sniff` calls :func:`upload_format` for every upload in
the web process, which must stay light.

=========  ==========================================================  ============
format     recognised by                                                upload name
=========  ==========================================================  ============
ply        ``ply`` on the first line                                    ply
pcd        a ``# .PCD`` comment or a ``VERSION`` line, then ``FIELDS``  pcd
las / laz  the ``LASF`` signature; LAZ sets bit 7 of the point format   las
xyz        whitespace-separated lines of 3 numbers                     xyz
xyzrgb     ... of 6 numbers (x y z r g b)                              xyz
pts        a point count alone on the first line, then 4 or 7 numbers  xyz
=========  ==========================================================  ============
"""

from __future__ import annotations

import re
from pathlib import Path

#: Upload format names (what ``File(formats=...)`` lists) for each detailed format.
UPLOAD_NAMES = {"ply": "ply", "pcd": "pcd", "las": "las", "laz": "las", "xyz": "xyz", "xyzrgb": "xyz", "pts": "xyz"}
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(nan|inf|infinity)$", re.IGNORECASE)
LAS_POINT_FORMAT_OFFSET = 104


def cloud_format(head: bytes) -> str | None:
    """The detailed format of a file whose first bytes (up to 4 KiB) are ``head``, or ``None``."""
    if head.startswith((b"ply\n", b"ply\r\n")):
        return "ply"
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
    """The name :mod:`mlcore.jobs.sniff` reports (``ply``, ``pcd``, ``las`` or ``xyz``), or ``None``."""
    found = cloud_format(head)
    return UPLOAD_NAMES.get(found) if found else None


def sniff_cloud(path: Path) -> str | None:
    """The detailed format of ``path`` (``ply``, ``pcd``, ``las``, ``laz``, ``xyz``, ``xyzrgb``, ``pts``)."""
    with path.open("rb") as f:
        return cloud_format(f.read(4096))
