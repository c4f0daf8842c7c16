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
