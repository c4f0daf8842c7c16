"""The family's scans: a scene from :mod:`~bench.heldout_scenes.rooms` or
:mod:`~bench.heldout_scenes.streets` seen by one of :mod:`~bench.heldout_scenes.scanners`, coloured
by :mod:`~bench.heldout_scenes.appearance` and labelled per point with SynMix's master classes.

Each scan is named in ``parameters.json`` with its kind, sensor and seed. The scene, the sensor and
the colours draw from three separate streams of that seed, so a scan is the same on every machine
and a change to one stage leaves the others' draws alone.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from bench.heldout_scenes import appearance, rooms, scanners, streets
from bench.heldout_scenes.params import parameters
from mlcore.pointcloud.labels import COARSE, COARSE_OF, INDOOR_LABELS, LABELS, OUTDOOR_LABELS

#: The coarse classes every scan of a kind holds.
DECLARED_COARSE: dict[str, tuple[str, ...]] = {
    "room": ("ground", "wall/building", "furniture/vehicle", "other"),
    "street": ("ground", "wall/building", "furniture/vehicle", "pole/thin", "other"),
}
#: The fine classes a scan of each kind may carry (SynMix's indoor / outdoor sets).
KIND_LABELS: dict[str, tuple[str, ...]] = {"room": INDOOR_LABELS, "street": OUTDOOR_LABELS}
#: Which sensors sample surfaces and which cast rays.
SURFACE_SAMPLED = ("surface",)
RAY_CAST = ("tls", "lidar")
#: Master label id → coarse id.
COARSE_ID = np.array([COARSE.index(COARSE_OF[name]) for name in LABELS], np.int64)


@dataclass(frozen=True)
class HeldoutScan:
    name: str
    kind: str  #: "room" or "street"
    sensor: str  #: "surface", "tls" or "lidar"
    xyz: np.ndarray  #: [N, 3] float64, millimetre multiples (a scanner's export)
    rgb: np.ndarray  #: [N, 3] uint8
    intensity: np.ndarray  #: [N] float32, multiples of 1/65535 (16-bit, as LAS stores it)
    labels: np.ndarray  #: [N] int32 master label ids (:data:`mlcore.pointcloud.labels.LABELS`)

    @property
    def setting(self) -> str:
        """The SynMix scene kind: ``indoor`` for rooms, ``outdoor`` for streets."""
        return "indoor" if self.kind == "room" else "outdoor"

    @property
    def coarse(self) -> np.ndarray:
        return COARSE_ID[self.labels]

    def __len__(self) -> int:
        return len(self.xyz)


def specs() -> dict[str, dict]:
    """Scan name → its entry in ``parameters.json`` (kind, sensor, seed)."""
    return {entry["name"]: entry for entry in parameters()["scans"]}


def tier_scans(tier: str) -> list[str]:
    return list(parameters()["tiers"][tier]["scans"])


@functools.lru_cache(maxsize=4)
def make_scan(name: str) -> HeldoutScan:
    """The held-out scan ``name`` (deterministic: the same arrays on every call and machine)."""
    spec = specs()[name]
    scene_rng, sensor_rng, colour_rng = (np.random.default_rng([spec["seed"], stream]) for stream in range(3))
    world = rooms.room(scene_rng) if spec["kind"] == "room" else streets.street(scene_rng)
    sensor = {
        ("room", "surface"): scanners.surface_room,
        ("room", "tls"): scanners.tls,
        ("street", "surface"): scanners.surface_street,
        ("street", "lidar"): scanners.lidar,
    }[spec["kind"], spec["sensor"]]
    capture = sensor(world, sensor_rng)
    rgb = appearance.colour(world, colour_rng, capture.xyz, capture.normal, capture.part)
    label_id = np.array([LABELS.index(p.label) for p in world.parts], np.int32)
    xyz = np.round(capture.xyz, 3)
    strength = (np.rint(capture.intensity.astype(np.float64) * 65535) / 65535).astype(np.float32)
    for array in (xyz, rgb, strength):
        array.setflags(write=False)
    labels = label_id[capture.part]
    labels.setflags(write=False)
    return HeldoutScan(name, spec["kind"], spec["sensor"], xyz, rgb, strength, labels)
