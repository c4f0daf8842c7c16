"""A user's labelled scans as one dataset: read, name the classes, check, split by content.

What a user can bring (a folder: an unpacked zip / tar upload, or a ``pointcloud-dataset`` item):

- **LAS / LAZ** with the ``classification`` field. Codes 0 ("never classified") and 1
  ("unclassified") are unlabelled unless the class map names them; the others are named by the
  ASPRS table (LAS 1.4 R15, Table 17) unless a class map says otherwise.
- **PLY / PCD** with a per-point label property: ``label``, ``class``, ``classification``,
  ``scalar_Classification`` (CloudCompare), ``semantic``, ``class_id`` … (any case).
- **Any cloud with a label file beside it**: ``NAME.labels`` next to ``NAME.xyz`` (or ``.ply``, …),
  one integer class id per line, as many lines as points (Semantic3D's layout).
- **A class map**, ``classes.json`` / ``classes.yaml`` anywhere in the folder: ``{"2": "ground",
  "6": "building"}``, ``{"ground": 2}`` or a list of names (index = id). A name of ``null`` or
  ``"ignore"`` makes those points unlabelled. Without a map, PLY files of ours carry their names in
  ``comment moelab label`` lines, LAS files the names of their Classification Lookup VLR (what
  pointcloud-segment writes) or else the ASPRS names, and anything else "class N".

Every refusal is a :class:`~mlcore.errors.JobError` that names the file and what to do: no labels
found, a label count that differs from the point count, ids the map does not name, one class only,
too few labelled points, fewer than two scans (one is held out).

Scans are split into training and held-out **by content**: a scan is held out when the hash of its
points (coordinates to the millimetre and labels) falls below the held-out fraction, so the same
scans split the same way whatever their file names, formats or order.

The label reading is one narrow function, :func:`scan_labels`: today it takes the readers' label
field when they found one and falls back to open3d's attributes for the other property names; once
the readers expose every label property it becomes that field alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlcore.errors import JobError
from mlcore.uploads import files_of, relative_name

#: Per-point label property names, compared case-insensitively (CloudCompare writes scalar fields
#: as ``scalar_<Name>``).
LABEL_PROPERTIES: tuple[str, ...] = (
    "label",
    "labels",
    "class",
    "classification",
    "scalar_classification",
    "scalar_label",
    "scalar_class",
    "semantic",
    "semantic_label",
    "class_id",
    "label_id",
)
LABEL_FILE_SUFFIX = ".labels"
CLASS_MAP_NAMES: tuple[str, ...] = ("classes.json", "classes.yaml", "classes.yml")
IGNORE_NAMES = frozenset({"ignore", "ignored", "unlabelled", "unlabeled"})
#: ASPRS standard classes (LAS 1.4 R15, Table 17); 0 and 1 carry no label.
ASPRS_CLASSES: dict[int, str] = {
    2: "ground",
    3: "low vegetation",
    4: "medium vegetation",
    5: "high vegetation",
    6: "building",
    7: "noise",
    8: "model key-point",
    9: "water",
    10: "rail",
    11: "road surface",
    12: "overlap",
    13: "wire guard",
    14: "wire conductor",
    15: "transmission tower",
    16: "wire connector",
    17: "bridge deck",
    18: "noise",
}
LAS_UNLABELLED = (0, 1)
IGNORE = -1
#: Below this many labelled points a scan says nothing about its classes.
MIN_LABELLED_POINTS = 64
MAX_SCANS = 500
MAX_POINTS_PER_SCAN = 10_000_000
MAX_TOTAL_POINTS = 40_000_000

_LABEL_HELP = (
    "Bring LAS / LAZ with a classification field, PLY / PCD with a per-point label property (label, class, "
    "classification, scalar_Classification …), or NAME.labels beside NAME.xyz with one class id per line."
)


@dataclass(frozen=True)
class LabelledScan:
    """One scan: points, optional colour and intensity, and per point its class index in the set's
    ``class_names`` (:data:`IGNORE` for unlabelled points)."""

    name: str  #: the scan's path inside the dataset
    xyz: np.ndarray  #: [N, 3] float32
    rgb: np.ndarray | None  #: [N, 3] uint8
    intensity: np.ndarray | None  #: [N] float32
    labels: np.ndarray  #: [N] int32
    digest: str  #: sha256 of the points (mm) and labels: the split key

    def __len__(self) -> int:
        return len(self.xyz)

    @property
    def labelled(self) -> int:
        return int((self.labels != IGNORE).sum())


@dataclass(frozen=True)
class ScanSet:
    scans: tuple[LabelledScan, ...]
    class_names: tuple[str, ...]
    #: Where the class names came from ("classes.json", "ASPRS", …), for the log.
    names_from: str
    #: Per class, the lowest id the files give it (the LAS code, the class map's key), so a segmenter
    #: trained on the set can write its predictions back with the user's own numbering.
    class_codes: tuple[int, ...] = ()

    def class_points(self, scans: Iterable[LabelledScan] | None = None) -> np.ndarray:
        """Labelled points per class over ``scans`` (default: all)."""
        counts = np.zeros(len(self.class_names), np.int64)
        for scan in self.scans if scans is None else scans:
            valid = scan.labels[scan.labels != IGNORE]
            counts += np.bincount(valid, minlength=len(self.class_names))
        return counts


# -- the class map ----------------------------------------------------------------------------------


def _parse_map(raw: object, name: str) -> dict[int, str | None]:
    """``{"2": "ground"}``, ``{"ground": 2}`` or ``["unlabelled", "ground"]`` → id → name (None: ignore)."""
    if isinstance(raw, list):
        raw = dict(enumerate(raw))
    if not isinstance(raw, dict) or not raw:
        raise JobError(
            f'{name}: expected a mapping of class ids to names ({{"2": "ground", "6": "building"}}) or a list of '
            "names (index = id)."
        )
    keys_are_ids = all(re.fullmatch(r"-?\d+", str(k).strip()) for k in raw)
    values_are_ids = all(isinstance(v, int) and not isinstance(v, bool) for v in raw.values())
    if not keys_are_ids and values_are_ids:
        raw = {v: k for k, v in raw.items()}
    elif not keys_are_ids:
        bad = next(str(k) for k in raw if not re.fullmatch(r"-?\d+", str(k).strip()))
        raise JobError(f"{name}: {bad!r} is not a class id; keys are whole numbers (the ids in the scans).")
    out: dict[int, str | None] = {}
    for key, value in raw.items():
        if value is not None and not isinstance(value, str):
            raise JobError(f"{name}: class {key} is named {value!r}; names are text (or null to ignore the class).")
        label = None if value is None or value.strip().lower() in IGNORE_NAMES else value.strip()
        if label == "":
            raise JobError(f"{name}: class {key} has an empty name; name it, or write null to ignore it.")
        out[int(str(key).strip())] = label
    return out


def read_class_map(path: Path, root: Path) -> dict[int, str | None]:
    shown = relative_name(path, root)
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as exc:  # json.JSONDecodeError, yaml.YAMLError and their kin
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"{shown}: not valid {path.suffix.lstrip('.').upper()} ({first[:120]}).") from None
    return _parse_map(raw, shown)


def moelab_label_names(path: Path) -> dict[int, str]:
    """Names from a PLY of ours (``comment moelab label ID R G B NAME``)."""
    from mlcore.pointcloud.io import read_header

    names: dict[int, str] = {}
    for comment in read_header(path).comments:
        parts = comment.split(maxsplit=6)
        if len(parts) == 7 and parts[:2] == ["moelab", "label"] and parts[2].isdigit():
            names[int(parts[2])] = parts[6]
    return names


def las_lookup_names(path: Path) -> dict[int, str]:
    """Names from a LAS/LAZ's Classification Lookup VLR (LAS 1.4 R15, section 2.5.3: 256 records of
    a code and 15 ASCII characters), as pointcloud-segment and other software write it, so a file
    labelled with a user's own classes reads back under their names. Read from the raw header (the
    VLRs precede the points, compressed or not): laspy's parser drops characters such as ``/``."""
    import struct

    names: dict[int, str] = {}
    with path.open("rb") as f:
        head = f.read(104)
        if len(head) < 104 or head[:4] != b"LASF":
            return names
        header_size, _, count = struct.unpack_from("<HII", head, 94)
        f.seek(header_size)
        for _ in range(min(count, 1024)):
            vlr = f.read(54)
            if len(vlr) < 54:
                break
            user_id, record_id, length = vlr[2:18].rstrip(b"\0"), *struct.unpack_from("<HH", vlr, 18)
            data = f.read(length)
            if user_id == b"LASF_Spec" and record_id == 0:
                for offset in range(0, len(data) - 15, 16):
                    text = data[offset + 1 : offset + 16].split(b"\0", 1)[0].decode("ascii", "replace").strip()
                    if text:
                        names[data[offset]] = text
                break
    return names


def _described(path: Path) -> dict[int, str]:
    """The lookup's names of classified codes: 0 and 1 stay unlabelled (a writer may name code 1 by
    the several classes it lumped there, which is no class to learn)."""
    return {code: name for code, name in las_lookup_names(path).items() if code not in LAS_UNLABELLED}


# -- labels of one scan ----------------------------------------------------------------------------


def _label_file(path: Path, points: int, root: Path) -> np.ndarray:
    shown = relative_name(path, root)
    values: list[int] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            word = raw.strip()
            if not word:
                continue
            if not re.fullmatch(rb"-?\d+", word.split()[0]):
                text = word.decode("utf-8", "replace")[:40]
                raise JobError(f"{shown}: line {number} is {text!r}; a label file holds one whole class id per line.")
            values.append(int(word.split()[0]))
            if len(values) > points:
                break
    if len(values) != points:
        more = "more" if len(values) > points else f"{len(values):,}"
        raise JobError(
            f"{shown}: holds {more} labels for a cloud of {points:,} points; write one label per point, in the "
            "cloud's order."
        )
    return np.asarray(values, np.int64)


def _open3d_labels(path: Path, fmt: str, points: int) -> tuple[np.ndarray, str] | None:
    """A label-like attribute open3d finds in a PLY or PCD (after the reader checked the file)."""
    import tempfile

    import open3d as o3d

    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)
    with tempfile.TemporaryDirectory(prefix="moelab-labels-") as tmp:
        named = Path(tmp) / f"cloud.{fmt}"  # open3d goes by the extension
        named.symlink_to(path.resolve())
        cloud = o3d.t.io.read_point_cloud(str(named), format=fmt)
    attributes = {name.lower(): name for name in cloud.point}
    for want in LABEL_PROPERTIES:
        if want in attributes:
            values = cloud.point[attributes[want]].numpy().reshape(-1)
            if len(values) == points:
                return values, attributes[want]
    return None


def scan_labels(path: Path, cloud: object, *, fmt: str, root: Path) -> tuple[np.ndarray, str] | None:
    """Per-point label codes of the scan at ``path`` (read as ``cloud``) and where they came from,
    or ``None``: a ``NAME.labels`` file beside it first, then the reader's label field, then (PLY,
    PCD) any other label-like property. The one place that knows where labels live."""
    points = len(cloud.xyz)  # type: ignore[attr-defined]
    beside = path.with_suffix(LABEL_FILE_SUFFIX)
    if beside.is_file():
        return _label_file(beside, points, root), relative_name(beside, root)
    labels = getattr(cloud, "labels", None)
    if labels is not None:
        return np.asarray(labels, np.int64), "classification" if fmt in ("las", "laz") else "label property"
    if fmt in ("ply", "pcd"):
        found = _open3d_labels(path, fmt, points)
        if found is not None:
            values, name = found
            if values.dtype.kind == "f" and (
                not np.isfinite(values).all() or not np.array_equal(values, np.round(values))
            ):
                raise JobError(
                    f"{relative_name(path, root)}: its {name} property holds fractional or non-finite values; "
                    "labels are whole class ids."
                )
            return values.astype(np.int64), f"{name} property"
    return None


def content_digest(xyz: np.ndarray, labels: np.ndarray) -> str:
    """sha256 of the coordinates in millimetres and the labels: the same scan hashes the same in any format."""
    digest = hashlib.sha256()
    digest.update(np.round(xyz.astype(np.float64) * 1000).astype("<i8").tobytes())
    digest.update(labels.astype("<i4").tobytes())
    return digest.hexdigest()


# -- the whole set ----------------------------------------------------------------------------------


def find_scans(root: Path) -> list[Path]:
    from mlcore.pointcloud.io.formats import CLOUD_SUFFIXES

    return [p for p in files_of(root) if p.suffix.lower() in CLOUD_SUFFIXES and not p.name.startswith("._")]


def find_class_map(root: Path) -> Path | None:
    found = [p for p in files_of(root) if p.name.lower() in CLASS_MAP_NAMES]
    if len(found) > 1:
        names = ", ".join(relative_name(p, root) for p in found)
        raise JobError(f"The dataset holds several class maps ({names}); keep one.")
    return found[0] if found else None


def read_scan_set(
    root: Path,
    *,
    max_points_per_scan: int = MAX_POINTS_PER_SCAN,
    log: Callable[[str], None] | None = None,
) -> ScanSet:
    """Read every labelled scan under ``root`` into one :class:`ScanSet`, or refuse with what to fix."""
    from mlcore.pointcloud.io import read_cloud
    from mlcore.pointcloud.io.formats import sniff_cloud

    say = log or (lambda line: None)
    paths = find_scans(root)
    if not paths:
        raise JobError("The dataset holds no point clouds (.las, .laz, .ply, .pcd, .xyz, .pts). " + _LABEL_HELP)
    if len(paths) > MAX_SCANS:
        raise JobError(f"The dataset holds {len(paths):,} scans; at most {MAX_SCANS} are read. Merge or drop some.")
    map_path = find_class_map(root)
    class_map = read_class_map(map_path, root) if map_path is not None else None
    raw: list[tuple[str, object, np.ndarray, dict[int, str | None], str]] = []
    total = 0
    for path in paths:
        shown = relative_name(path, root)
        cloud = read_cloud(path, max_points=max_points_per_scan)
        total += len(cloud.xyz)
        if total > MAX_TOTAL_POINTS:
            raise JobError(
                f"The scans hold more than {MAX_TOTAL_POINTS:,} points together; downsample them (e.g. a 2-5 cm "
                "voxel grid) or bring fewer."
            )
        fmt = sniff_cloud(path) or ""
        found = scan_labels(path, cloud, fmt=fmt, root=root)
        if found is None:
            why = (
                "its classification field is 0 or 1 (unclassified) everywhere"
                if fmt in ("las", "laz")
                else "it has no label property and no label file beside it"
            )
            raise JobError(f"{shown}: no per-point labels found ({why}). {_LABEL_HELP}")
        codes, source = found
        if class_map is not None:
            names, names_from = dict(class_map), relative_name(map_path, root)  # type: ignore[arg-type]
            if fmt in ("las", "laz"):
                for code in LAS_UNLABELLED:
                    names.setdefault(code, None)
        elif fmt in ("las", "laz") and (described := _described(path)):
            names = {**dict.fromkeys(LAS_UNLABELLED), **ASPRS_CLASSES, **described}
            names_from = "its Classification Lookup (the ASPRS names for codes it does not describe)"
        elif fmt in ("las", "laz"):
            names, names_from = {**dict.fromkeys(LAS_UNLABELLED), **ASPRS_CLASSES}, "the ASPRS classes"
        elif fmt == "ply" and (ours := moelab_label_names(path)):
            names, names_from = dict(ours), "the PLY's label comments"
        else:
            present = np.unique(codes)
            names, names_from = {int(c): f"class {int(c)}" for c in present if c >= 0}, "the ids themselves"
            names.update({int(c): None for c in present if c < 0})
        say(f"{shown}: {len(codes):,} points, labels from its {source}, names from {names_from}")
        raw.append((shown, cloud, codes, names, names_from))
    class_names: list[str] = []
    codes_of: dict[int, int] = {}
    scans: list[LabelledScan] = []
    for shown, cloud, codes, names, names_from in raw:
        present = [int(c) for c in np.unique(codes)]
        missing = [c for c in present if c not in names]
        if missing:
            listed = ", ".join(str(c) for c in missing[:10]) + (" …" if len(missing) > 10 else "")
            raise JobError(
                f"{shown}: class ids {listed} are not in {names_from}. Add them to the class map (a name, or null "
                "to leave those points unlabelled)."
            )
        table = {}
        for code in present:
            name = names[code]
            if name is None:
                table[code] = IGNORE
                continue
            if name not in class_names:
                class_names.append(name)
            table[code] = class_names.index(name)
            codes_of[table[code]] = min(code, codes_of.get(table[code], code))
        lookup = np.vectorize(table.__getitem__, otypes=[np.int32])
        labels = lookup(codes) if len(codes) else np.zeros(0, np.int32)
        xyz = cloud.xyz  # type: ignore[attr-defined]
        scan = LabelledScan(
            shown,
            xyz,
            cloud.rgb,  # type: ignore[attr-defined]
            cloud.intensity,  # type: ignore[attr-defined]
            labels.astype(np.int32),
            content_digest(xyz, labels),
        )
        if scan.labelled < MIN_LABELLED_POINTS:
            raise JobError(
                f"{shown}: only {scan.labelled:,} labelled points; a scan needs at least {MIN_LABELLED_POINTS} to "
                "train or test on. Drop it or label more of it."
            )
        scans.append(scan)
    if len(scans) < 2:
        raise JobError(
            "The dataset holds one scan; bring at least two, so that one can be held out to measure the IoU "
            "(or cut a large scan into tiles)."
        )
    used = [n for n, c in zip(class_names, ScanSet(tuple(scans), tuple(class_names), "").class_points()) if c]
    if len(used) < 2:
        only = used[0] if used else "none"
        raise JobError(
            f"Every labelled point is of one class ({only}); a segmenter needs at least two classes to tell apart."
        )
    names_from = ", ".join(sorted({entry[4] for entry in raw}))
    return ScanSet(tuple(scans), tuple(class_names), names_from, tuple(codes_of[i] for i in range(len(class_names))))


def _unit(digest: str) -> float:
    return int(digest[:15], 16) / 16**15


def split_by_content(scans: Iterable[LabelledScan], holdout: float) -> tuple[list[LabelledScan], list[LabelledScan]]:
    """(training, held-out): a scan is held out when its content hash, read as a number in [0, 1),
    is below ``holdout``; at least one scan lands on each side (the lowest hash is held out, the
    highest trained on), so the split depends on the scans alone, never on names or order."""
    ordered = sorted(scans, key=lambda s: s.digest)
    held = [s for s in ordered if _unit(s.digest) < holdout]
    if not held:
        held = ordered[:1]
    if len(held) == len(ordered):
        held = held[:-1]
    held_ids = {id(s) for s in held}
    return [s for s in ordered if id(s) not in held_ids], held
