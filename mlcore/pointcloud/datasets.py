"""The "SynMix" datasets (method card, section 4): one master label space, several sensors, conflicting
taxonomies, two held-out zero-shot datasets.

| name | scenes | sensor | taxonomy | role |
|---|---|---|---|---|
| A | rooms 4–7.5 m | fused depth camera, noise 0.004·d² | all indoor classes | seen |
| B | rooms 4–7.5 m | clean panorama, warm colours | coarser: ceiling → wall, cabinet → clutter | seen |
| C | streets | 64-beam LiDAR at 1.8 m | all outdoor classes | seen |
| D | streets | 32-beam LiDAR at 1.8 m | merged: sidewalk → road ("driveable"), no pedestrian | seen |
| E | streets | 128-beam LiDAR at 2.6 m (another mount) | all outdoor classes | zero-shot |
| F | rooms 7–12 m | depth camera, noise 0.012·d² | all indoor classes | zero-shot |

A dataset's labels are master ids restricted to its class subset: merged classes take the id of
the class they merge into, classes it does not annotate become :data:`IGNORE`. Models see only
point features (colour, intensity, height), never the dataset's name; the label set is used only
to restrict the logits in the loss and in evaluation (card, section 2.7).

Scans are generated on the fly and seeded by (dataset, split, index), so every split is
reproducible and the train / validation scenes never coincide.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlcore.pointcloud import scenes, sensors
from mlcore.pointcloud.scenes import INDOOR, LABEL_ID, LABELS, OUTDOOR

IGNORE = -1
#: Feature channels the model sees per point: r, g, b in [0, 1] (0 without colour), intensity
#: (0 without), height above the scan's lowest point in metres.
FEATURES: tuple[str, ...] = ("r", "g", "b", "intensity", "height")


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    title: str
    kind: str  #: "indoor" or "outdoor"
    sensor: str  #: "depth", "panorama" or "lidar"
    sensor_args: dict[str, Any] = field(default_factory=dict)
    scene_args: dict[str, Any] = field(default_factory=dict)
    classes: tuple[str, ...] = ()  #: the master classes this dataset annotates
    merge: dict[str, str] = field(default_factory=dict)  #: master class → the class it is labelled as
    grid: float = 0.04  #: grid-sampling size in metres (card: 0.04 indoors, 0.1 outdoors)
    zero_shot: bool = False

    @property
    def class_ids(self) -> tuple[int, ...]:
        return tuple(LABEL_ID[c] for c in self.classes)

    def remap(self) -> np.ndarray:
        """[len(LABELS)] master id → this dataset's label (a master id in ``classes``, or IGNORE)."""
        table = np.full(len(LABELS), IGNORE, np.int64)
        for name in LABELS:
            target = self.merge.get(name, name)
            if target in self.classes:
                table[LABEL_ID[name]] = LABEL_ID[target]
        return table


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("A", "Rooms, fused depth camera", "indoor", "depth", {"noise_k": 0.004}, classes=INDOOR),
        DatasetSpec(
            "B",
            "Rooms, clean panorama (coarse taxonomy)",
            "indoor",
            "panorama",
            classes=("floor", "wall", "table", "chair", "clutter"),
            merge={"ceiling": "wall", "cabinet": "clutter"},
        ),
        DatasetSpec("C", "Streets, 64-beam LiDAR", "outdoor", "lidar", {"beams": 64}, classes=OUTDOOR, grid=0.1),
        DatasetSpec(
            "D",
            "Streets, 32-beam LiDAR (driveable merged)",
            "outdoor",
            "lidar",
            {"beams": 32, "azimuth_steps": 768, "fov_down": -30.0, "fov_up": 10.0},
            classes=("road", "building", "car", "pole", "vegetation"),
            merge={"sidewalk": "road"},
            grid=0.1,
        ),
        DatasetSpec(
            "E",
            "Streets, 128-beam LiDAR on a taller mount (zero-shot)",
            "outdoor",
            "lidar",
            {"beams": 128, "azimuth_steps": 384, "mount_height": 2.6, "fov_down": -22.0, "fov_up": 2.0},
            classes=OUTDOOR,
            grid=0.1,
            zero_shot=True,
        ),
        DatasetSpec(
            "F",
            "Larger rooms, noisier depth camera (zero-shot)",
            "indoor",
            "depth",
            {"noise_k": 0.012, "views": 6},
            {"size": (7.0, 12.0)},
            classes=INDOOR,
            zero_shot=True,
        ),
    )
}
SEEN: tuple[str, ...] = tuple(n for n, s in DATASETS.items() if not s.zero_shot)
ZERO_SHOT: tuple[str, ...] = tuple(n for n, s in DATASETS.items() if s.zero_shot)


def get_dataset(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise KeyError(f"unknown SynMix dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "little")


def make_scan(spec: DatasetSpec | str, index: int, split: str = "train") -> sensors.Scan:
    """Scan ``index`` of a dataset's ``split``: a fresh scene seen through the dataset's sensor,
    labels already mapped to the dataset's taxonomy."""
    spec = get_dataset(spec) if isinstance(spec, str) else spec
    rng = np.random.default_rng(_seed("synmix", spec.name, split, index))
    scene = scenes.room(rng, **spec.scene_args) if spec.kind == "indoor" else scenes.street(rng, **spec.scene_args)
    scan = {"depth": sensors.depth_camera, "panorama": sensors.panorama, "lidar": sensors.lidar}[spec.sensor](
        scene, rng, **spec.sensor_args
    )
    scan.labels = spec.remap()[scan.labels].astype(np.int32)
    return scan


def lidar_at(scene: scenes.Scene, rng: np.random.Generator, x: float, **sensor_args: Any) -> sensors.Scan:
    """One LiDAR scan of a street from a spot at ``x`` along its road (anywhere across the lanes)."""
    _, y0, _, y1 = scene.free_area
    return sensors.lidar(dataclasses.replace(scene, free_area=(x - 0.5, y0, x + 0.5, y1)), rng, **sensor_args)


def make_survey(spec: DatasetSpec | str, index: int, split: str = "train", *, positions: int = 6) -> sensors.Scan:
    """Scan ``index``'s street (the same scene as :func:`make_scan`'s) surveyed as a mobile-mapping van
    does: the dataset's LiDAR fired from ``positions`` spots evenly spaced along the road, the scans
    merged. The same surfaces as one scan, filled in where one scan leaves rings and gaps at range:
    the density of the surveys users upload, which a model trained on single scans labels worse
    (bench/results/pointcloud-density.md)."""
    spec = get_dataset(spec) if isinstance(spec, str) else spec
    if spec.sensor != "lidar":
        raise ValueError(f"dataset {spec.name} is not a LiDAR street: only streets are surveyed")
    rng = np.random.default_rng(_seed("synmix", spec.name, split, index))
    scene = scenes.street(rng, **spec.scene_args)
    reach = 25.0  # the default 70 m street, 10 m clear of its ends
    parts = [lidar_at(scene, rng, float(x), **spec.sensor_args) for x in np.linspace(-reach, reach, positions)]
    labels = spec.remap()[np.concatenate([p.labels for p in parts])].astype(np.int32)
    return sensors.Scan(
        xyz=np.concatenate([p.xyz for p in parts]),
        rgb=None,
        intensity=np.concatenate([p.intensity for p in parts]),
        labels=labels,
    )


#: The share of a scan's points that may lie under its ground before they lift it (``ground_level``).
BELOW_GROUND = 0.005


def ground_level(z: np.ndarray, how: str = "lowest") -> float:
    """Where the height channel starts: the lowest point, or ("robust") the 0.5th percentile of the
    heights, so that outliers under the ground (a lidar's multipath echoes, a depth camera's flying
    pixels) get small negative heights instead of lifting the whole scan. On scans without such
    outliers the two differ by the sensor's noise."""
    if not len(z):
        return 0.0
    return float(np.quantile(z, BELOW_GROUND)) if how == "robust" else float(z.min())


def point_features(
    xyz: np.ndarray, rgb: np.ndarray | None, intensity: np.ndarray | None, *, ground: float | None = None
) -> np.ndarray:
    """[N, len(FEATURES)] float32: colour, intensity and height above ``ground`` (default: the
    lowest point); missing channels are zeros (as in Pointcept's multi-dataset loaders), so the
    router can tell sensors apart only from the data."""
    n = len(xyz)
    feats = np.zeros((n, len(FEATURES)), np.float32)
    if rgb is not None:
        feats[:, :3] = rgb.astype(np.float32) / 255.0
    if intensity is not None:
        feats[:, 3] = intensity
    if n:
        feats[:, 4] = xyz[:, 2] - (xyz[:, 2].min() if ground is None else ground)
    return feats


def crop(xyz: np.ndarray, max_points: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``max_points`` points nearest to a random centre point (the card's sphere crop)."""
    if len(xyz) <= max_points:
        return np.arange(len(xyz))
    centre = xyz[rng.integers(len(xyz))]
    dist = ((xyz - centre) ** 2).sum(1)
    return np.argpartition(dist, max_points)[:max_points]


def grid_sample(xyz: np.ndarray, grid: float) -> tuple[np.ndarray, np.ndarray]:
    """One point per occupied voxel of side ``grid``: (indices of the kept points, inverse) where
    ``inverse[i]`` is the kept point whose voxel holds point i, so predictions on the kept points
    reach every input point."""
    if len(xyz) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cells = np.floor((xyz - xyz.min(0)) / grid).astype(np.int64)
    key = (cells[:, 0] << 42) | (cells[:, 1] << 21) | cells[:, 2]
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)
