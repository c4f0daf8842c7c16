"""A labelled LAS / LAZ from a LAS / LAZ input: the input file itself, every point record kept as
it was (its integer coordinates, scales and offsets, every standard and extra field, its VLRs and
EVLRs, so its coordinate reference system), with three things set:

- ``classification``: the ASPRS code of each point's class (:data:`~mlcore.pointcloud.labels.ASPRS_CODE`);
  classes the standard has no code for get a user-definable code (64 + class id) in point formats
  6-10, and 1 "unclassified" in formats 0-5, whose 5-bit field has no user range. A segmenter of the
  user's own classes has no ASPRS meaning: the caller passes ``codes``, the ids the user's files gave
  its classes (:func:`own_codes`), and the lookup names them by the user's class names;
- an extra-bytes field ``moelab_class`` (uint8): the exact class id, so nothing is lost to that mapping;
- a Classification Lookup VLR (LASF_Spec, record 0) naming every code the file uses.

The output is LAZ (compressed with lazrs) when the target's name ends in ``.laz``, else LAS; it
appears whole or not at all (written beside, then renamed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from mlcore.pointcloud.labels import ASPRS_CODE, ASPRS_NAMES, ASPRS_USER_CODES, LABELS

#: The extra-bytes field that keeps the exact class id beside the ASPRS code.
CLASS_FIELD = "moelab_class"
#: The Classification Lookup VLR of LAS 1.4 (R15, section 2.5.3): 256 records of a code and 15 characters.
LOOKUP_USER_ID = "LASF_Spec"
LOOKUP_RECORD_ID = 0


def asprs_codes(labels: np.ndarray, point_format: int, names: Sequence[str] = LABELS) -> np.ndarray:
    """uint8 ASPRS classification codes for master ``labels`` in a file of ``point_format``."""
    table = np.ones(len(names), np.uint8)
    for k, name in enumerate(names):
        if name in ASPRS_CODE:
            table[k] = ASPRS_CODE[name]
        elif point_format >= 6 and ASPRS_USER_CODES + k <= 255:
            table[k] = ASPRS_USER_CODES + k
    return table[np.asarray(labels, np.int64)]


def own_codes(known: Mapping[int, int], count: int, point_format: int) -> tuple[np.ndarray, list[int]]:
    """uint8 codes for ``count`` classes of a user's own taxonomy: the id the user's files gave a class
    (``known``: class → id) where this point format holds it (0-31 in formats 0-5, 0-255 in 6-10) and
    no earlier class took it; else a free user-definable code (64 up, formats 6-10), else 1
    (unclassified). Also the classes whose own id could not be kept (for the log)."""
    top = 255 if point_format >= 6 else 31
    table = np.ones(count, np.uint8)
    taken: set[int] = set()
    wanted = {k: c for k, c in known.items() if 0 <= c <= top}
    reserved = set(wanted.values())
    free = (c for c in range(ASPRS_USER_CODES, 256) if c not in reserved) if point_format >= 6 else iter(())
    moved = []
    for k in range(count):
        code = wanted.get(k)
        if code is None or code in taken:
            code = next(free, 1)
            if k in known:
                moved.append(k)
        table[k] = code
        if code != 1:
            taken.add(code)
    return table, moved


def _lookup_vlr(codes: np.ndarray, labels: np.ndarray, names: Sequence[str], *, own: bool = False) -> object:
    """The Classification Lookup VLR: each code the file uses, named by the classes mapped to it
    (``own``: by those names always; else standard codes by their ASPRS names)."""
    import laspy

    named: dict[int, list[str]] = {}
    for code, label in sorted(set(zip(codes.tolist(), labels.tolist(), strict=True))):
        named.setdefault(code, []).append(names[label])
    data = bytearray()
    for code in range(256):
        if code in named:
            standard = not own and code < ASPRS_USER_CODES and code != 1
            text = ASPRS_NAMES.get(code, "") if standard else "/".join(named[code])
            data += bytes([code]) + text.encode("ascii", "replace")[:15].ljust(15, b"\0")
        else:
            data += bytes([code]) + b"\0" * 15
    return laspy.VLR(LOOKUP_USER_ID, LOOKUP_RECORD_ID, "Classification lookup", bytes(data))


def write_labelled_las(
    source: Path,
    target: Path,
    labels: np.ndarray,
    *,
    names: Sequence[str] = LABELS,
    codes: np.ndarray | None = None,
) -> tuple[Path, dict[int, int]]:
    """Write ``source`` (a LAS or LAZ file) to ``target`` with each point's class set (see the module
    docstring): ``names`` are the classes ``labels`` index, ``codes`` (one per class) the
    classification to write for each, by default its ASPRS code. Returns the path and the count of
    points per code."""
    import laspy

    target = Path(target)
    las = laspy.read(str(source))
    labels = np.asarray(labels, np.int64)
    if labels.shape != (len(las.points),):
        raise ValueError(f"{len(labels)} labels for {len(las.points)} points")
    point_format = las.header.point_format.id
    table = None if codes is None else np.asarray(codes, np.uint8)
    if table is not None and len(table) != len(names):
        raise ValueError(f"{len(table)} codes for {len(names)} classes")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
        raise ValueError(f"labels outside the {len(names)} classes")
    codes = asprs_codes(labels, point_format, names) if table is None else table[labels]
    las.classification = codes
    if CLASS_FIELD not in las.point_format.dimension_names:
        las.add_extra_dim(laspy.ExtraBytesParams(name=CLASS_FIELD, type=np.uint8, description="MoE Lab class id"))
    las[CLASS_FIELD] = labels.astype(np.uint8)
    las.vlrs = [v for v in las.vlrs if not (v.user_id == LOOKUP_USER_ID and v.record_id == LOOKUP_RECORD_ID)]
    las.vlrs.append(_lookup_vlr(codes, labels, names, own=table is not None))
    partial = target.with_name(f".{target.name}.partial")
    try:
        # A file object: given a path, laspy goes by its extension and ignores do_compress.
        with partial.open("wb") as f:
            las.write(f, do_compress=target.suffix.lower() == ".laz")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    values, counts = np.unique(codes, return_counts=True)
    return target, {int(v): int(c) for v, c in zip(values, counts, strict=True)}
