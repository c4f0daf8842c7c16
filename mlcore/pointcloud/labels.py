"""The master label space of the SynMix scenes and segmenters. Plain strings, no numpy: the
``pointcloud-*`` job specs import it in the web process."""

from __future__ import annotations

#: Every dataset labels a subset (and may merge classes), see :mod:`mlcore.pointcloud.datasets`.
LABELS: tuple[str, ...] = (
    "floor",
    "wall",
    "ceiling",
    "table",
    "chair",
    "cabinet",
    "clutter",
    "road",
    "sidewalk",
    "building",
    "car",
    "pole",
    "vegetation",
    "pedestrian",
)

#: The classes of each kind of scene: an indoor scan gets no street class unless the user asks.
INDOOR_LABELS: tuple[str, ...] = ("floor", "wall", "ceiling", "table", "chair", "cabinet", "clutter")
OUTDOOR_LABELS: tuple[str, ...] = ("road", "sidewalk", "building", "car", "pole", "vegetation", "pedestrian")

#: The canonical coarse taxonomy every dataset's classes map onto, so scans labelled by different
#: taxonomies (SynMix datasets, ASPRS LAS codes) can be compared class for class.
COARSE: tuple[str, ...] = ("ground", "wall/building", "furniture/vehicle", "pole/thin", "other")

#: Master label → coarse class.
COARSE_OF: dict[str, str] = {
    "floor": "ground",
    "road": "ground",
    "sidewalk": "ground",
    "wall": "wall/building",
    "ceiling": "wall/building",
    "building": "wall/building",
    "table": "furniture/vehicle",
    "chair": "furniture/vehicle",
    "cabinet": "furniture/vehicle",
    "car": "furniture/vehicle",
    "pole": "pole/thin",
    "clutter": "other",
    "vegetation": "other",
    "pedestrian": "other",
}

#: Each SynMix dataset's classes → coarse. A merged class maps as what it holds: B's "wall" holds
#: ceilings (both wall/building), B's "clutter" holds cabinets (clutter is mostly small objects:
#: other), D's "road" is the driveable surface with the sidewalks (both ground).
DATASET_COARSE: dict[str, dict[str, str]] = {
    "A": {c: COARSE_OF[c] for c in INDOOR_LABELS},
    "B": {"floor": "ground", "wall": "wall/building", "table": "furniture/vehicle", "chair": "furniture/vehicle",
          "clutter": "other"},
    "C": {c: COARSE_OF[c] for c in OUTDOOR_LABELS},
    "D": {"road": "ground", "building": "wall/building", "car": "furniture/vehicle", "pole": "pole/thin",
          "vegetation": "other"},
    "E": {c: COARSE_OF[c] for c in OUTDOOR_LABELS},
    "F": {c: COARSE_OF[c] for c in INDOOR_LABELS},
}  # fmt: skip

#: ASPRS LAS classification codes (LAS 1.4 R15, Table 17) a reader may meet, with their names.
ASPRS_NAMES: dict[int, str] = {
    0: "created, never classified", 1: "unclassified", 2: "ground", 3: "low vegetation",
    4: "medium vegetation", 5: "high vegetation", 6: "building", 7: "low point (noise)", 8: "model key point",
    9: "water", 10: "rail", 11: "road surface", 12: "overlap", 13: "wire guard", 14: "wire conductor",
    15: "transmission tower", 16: "wire-structure connector", 17: "bridge deck", 18: "high noise",
    19: "overhead structure", 20: "ignored ground", 21: "snow", 22: "temporal exclusion",
}  # fmt: skip
#: ASPRS code → coarse class; codes not listed (unclassified, noise, overlap, ...) carry none.
ASPRS_COARSE: dict[int, str] = {
    2: "ground", 3: "other", 4: "other", 5: "other", 6: "wall/building", 9: "ground", 10: "ground",
    11: "ground", 13: "pole/thin", 14: "pole/thin", 15: "pole/thin", 16: "pole/thin", 17: "ground",
    19: "wall/building", 20: "ground", 21: "ground",
}  # fmt: skip
#: Master label → the ASPRS code that means it. Classes the standard has no code for (furniture,
#: cars, poles, pedestrians, clutter) get a user-definable code 64 + label id in point formats 6-10,
#: and 1 (unclassified) in formats 0-5, whose 5-bit field has no user range; the exact class is kept
#: beside it in an extra-bytes field either way (:mod:`mlcore.pointcloud.io.las_out`).
ASPRS_CODE: dict[str, int] = {
    "floor": 2, "road": 11, "sidewalk": 2, "wall": 6, "ceiling": 6, "building": 6, "vegetation": 5,
}  # fmt: skip
#: The first user-definable ASPRS code (point formats 6-10).
ASPRS_USER_CODES = 64


def coarse_name(label: str) -> str:
    """The coarse class of a master label."""
    return COARSE_OF[label]


def scene_labels(kind: str) -> tuple[str, ...]:
    """The master labels an ``indoor`` or ``outdoor`` scan may get; every label for anything else."""
    return {"indoor": INDOOR_LABELS, "outdoor": OUTDOOR_LABELS}.get(kind, LABELS)
