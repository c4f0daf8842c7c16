"""Attribute robustness of the point-cloud segmenters, and what attributes are still worth
(issue #22, point 3: "robust must not mean blind").

1. **Robustness on SynMix.** Each segmenter segments the validation scans of every SynMix dataset
   (A–D seen, E and F zero-shot) through ``pointcloud-segment``'s own path
   (:func:`~mlcore.pointcloud.segment.segment_cloud`) with the attributes changed on the same
   geometry: as captured; geometry only; the attribute the scan lacks added (a camera's colour on a
   LiDAR scan: its classes' colours, shaded, with pixel noise; a TLS-style intensity on a camera
   scan: reflectivity 0.4 × incidence × range fall-off, what the SynMix LiDAR gives indoor
   surfaces); the scan's attribute swapped for that one; and the captured attribute re-scaled as
   another sensor or reader would (intensity ×0.5, ×2, γ 0.5, a 12-bit intensity read as 16-bit
   (×1/16), percentile-scaled; colour with a warm and a cool cast, darker ×0.6, γ 0.5, greyscale).
   None of these settings is a training transform with the same parameters
   (:mod:`mlcore.pointcloud.augment` draws its own), and the added colour is class-coloured where
   training only ever added uninformative colour to streets. Goal: |ΔmIoU| ≤ 0.03 against "as
   captured" in every setting.
2. **Robust, not blind.** Two procedural scenes whose classes differ *only* by an attribute, on
   identical geometry: a street surface seen by a LiDAR (asphalt, painted road markings — dashed
   centre line, edge lines, a zebra crossing, a stop line — flush with the asphalt, and the raised
   sidewalk; markings are retro-reflective: intensity only), and rooms seen by an RGB-D camera with
   painted doors flush in the walls (floor, wall, door, ceiling: colour only). Each is trained as a
   user's labelled scans through :mod:`mlcore.pointcloud.user_train` (the ``pointcloud-train`` path,
   attribute augmentation on, its default) twice per seed: on scans with their attribute and on the
   same scans without it. Held-out scans are segmented with the attribute, and (robustness) by the
   attribute-trained model without it. Goal: the attribute raises mIoU by ≥ 0.1, paired by seed
   (the 95% paired t interval of :mod:`bench.verdicts` beside it). The full tier runs 18 seeds
   (enough to judge the painted doors, whose spread needed them) and adds, on its first 5 seeds, the
   same training without attribute augmentation, with the zoo's "robust" preset (attribute dropout)
   and with that preset's dropout drawn per batch instead of per crop ("robust-batch").

``python -m bench pointcloud-attributes --tier quick|full`` writes
``bench/results/pointcloud-attributes.md`` and ``.json``; the full tier caches each segmenter's
part 1 and each training's part 2 in ``bench/cache/pointcloud-attributes.jsonl`` and resumes.
Segmenters measured in part 1: the zoo's ``pointmoe-synmix``, plus any named in
``$MOELAB_BENCH_SEGMENTERS`` (``name=folder;…``; e.g. a candidate trained with attribute
augmentation before it replaces the zoo's, by :mod:`bench.pointcloud_candidates`).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import Store
from bench.common import ZOO_CHECKPOINTS, carry_over, full_tier_cache, last_report, machine, stamp, write_results

NAME = "pointcloud-attributes"
SEGMENTERS_ENV = "MOELAB_BENCH_SEGMENTERS"
#: Largest change of mIoU against "as captured" that counts as robust, and the least gain an
#: attribute must bring where classes differ only by it (issue #22, point 3).
ROOT = Path(__file__).resolve().parents[1]
ROBUST_GOAL = 0.03
GAIN_GOAL = 0.1
DATASETS = ("A", "B", "C", "D", "E", "F")


@dataclass(frozen=True)
class Tier:
    robustness_scans: int  #: validation scans per SynMix dataset
    seeds: int  #: paired seeds of the attribute-only cases
    train_scans: int  #: training scans per case (and held-out: ``heldout_scans``)
    heldout_scans: int
    steps: int
    points: int
    batch_size: int
    #: Further trainings on the scans with their attribute: (row name, ``attribute_augment``, whether the
    #: segmenter keeps BatchNorm statistics per attribute presence, ``TrainConfig.presence_stats``), each
    #: on the first ``extra_seeds`` seeds (they judge no claim; the two trainings compared are on all).
    extra: tuple[tuple[str, str, bool], ...] = ()
    extra_seeds: int = 0

    def training(self) -> dict[str, Any]:
        """What a case's training depends on (the cache key's stamp): scans, steps, crops."""
        return {k: getattr(self, k) for k in ("train_scans", "heldout_scans", "steps", "points", "batch_size")}


#: The full tier trains at the quick tier's scale with more seeds: at 3 seeds the painted-doors
#: comparison's MDE (0.43) was the limit, not the length of training (each run ~25 s on one core).
TIERS = {
    "quick": Tier(
        robustness_scans=1, seeds=3, train_scans=8, heldout_scans=3, steps=150, points=1024, batch_size=4,
    ),
    "full": Tier(
        robustness_scans=4, seeds=18, train_scans=8, heldout_scans=3, steps=150, points=1024, batch_size=4,
        extra=(
            ("not augmented, with attribute", "off", False),
            ("robust preset, with attribute", "robust", False),
            ("robust preset, dropout per batch, with attribute", "robust-batch", False),
            ("robust preset, dropout per batch, BatchNorm stats per presence, with attribute", "robust-batch", True),
            ("30% dropout per batch, BatchNorm stats per presence, with attribute", "batch-30", True),
        ),
        extra_seeds=5,
    ),
}  # fmt: skip


# -- part 1: attribute settings on SynMix scans ---------------------------------------------------

#: Per scan kind (what the sensor captures), the settings measured besides "as captured".
CAMERA_MODES = ("geometry only", "+ intensity", "intensity only", "warm cast", "cool cast", "dark ×0.6", "γ 0.5",
                "grey")  # fmt: skip
LIDAR_MODES = ("geometry only", "+ colour", "colour only", "i ×0.5", "i ×2", "i γ 0.5", "12-bit as 16-bit",
               "percentile")  # fmt: skip


def camera_colour(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 colour a camera registered to a LiDAR would give each point: its class's base colour,
    Lambert-like shading and pixel noise (labels outside the master classes get mid-grey)."""
    from mlcore.pointcloud.scenes import BASE_COLOUR, LABELS

    table = np.array([BASE_COLOUR[name] for name in LABELS] + [(0.5, 0.5, 0.5)], np.float32)
    base = table[np.where(labels >= 0, labels, len(LABELS))]
    shade = rng.uniform(0.55, 1.0, (len(labels), 1)).astype(np.float32)
    rgb = np.clip(base * shade + rng.normal(0, 0.03, base.shape), 0, 1)
    return np.round(rgb * 255).astype(np.uint8)


def tls_intensity(xyz: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An intensity for a camera scan as the SynMix LiDAR would measure indoor surfaces:
    reflectivity 0.4 × (0.3 + 0.7·cos θ) × exp(−d / 80 m) + noise, θ drawn per point (no normals),
    d from a scanner at the scan's centre, 1.5 m up."""
    centre = np.array([*xyz[:, :2].mean(0), xyz[:, 2].min() + 1.5])
    d = np.linalg.norm(xyz - centre, axis=1)
    value = 0.4 * (0.3 + 0.7 * rng.uniform(0.2, 1.0, len(xyz))) * np.exp(-d / 80.0)
    return np.clip(value + rng.normal(0, 0.03, len(xyz)), 0, 1).astype(np.float32)


def _colour(rgb: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    return np.round(np.clip(fn(rgb.astype(np.float32) / 255.0), 0, 1) * 255).astype(np.uint8)


def attribute_settings(scan: Any, index: int) -> dict[str, tuple[np.ndarray | None, np.ndarray | None]]:
    """Setting → (rgb, intensity) for one SynMix scan: "as captured" and :data:`CAMERA_MODES` or
    :data:`LIDAR_MODES`, whichever the scan's sensor is (it carries colour or intensity)."""
    from mlcore.pointcloud import augment

    rng = np.random.default_rng(1000 + index)  # the added attributes: the same for every segmenter
    out: dict[str, tuple[np.ndarray | None, np.ndarray | None]] = {"as captured": (scan.rgb, scan.intensity)}
    if scan.rgb is not None:
        rgb, added = scan.rgb, tls_intensity(scan.xyz, rng)
        out |= {
            "geometry only": (None, None),
            "+ intensity": (rgb, added),
            "intensity only": (None, added),
            "warm cast": (_colour(rgb, lambda c: augment.gain(c, np.array([1.2, 1.0, 0.75], np.float32))), None),
            "cool cast": (_colour(rgb, lambda c: augment.gain(c, np.array([0.8, 0.95, 1.25], np.float32))), None),
            "dark ×0.6": (_colour(rgb, lambda c: augment.gain(c, 0.6)), None),
            "γ 0.5": (_colour(rgb, lambda c: augment.gamma(c, 0.5)), None),
            "grey": (_colour(rgb, augment.greyscale), None),
        }
    else:
        inten, added = scan.intensity, camera_colour(scan.labels, rng)
        out |= {
            "geometry only": (None, None),
            "+ colour": (added, inten),
            "colour only": (added, None),
            "i ×0.5": (None, augment.gain(inten, 0.5)),
            "i ×2": (None, augment.gain(inten, 2.0)),
            "i γ 0.5": (None, augment.gamma(inten, 0.5)),
            "12-bit as 16-bit": (None, augment.gain(inten, 4095 / 65535)),
            "percentile": (None, augment.percentile_scale(inten)),
        }
    return out


def robustness_rows(model: Any, scans: int) -> list[dict[str, Any]]:
    """Per SynMix dataset: mIoU in every attribute setting over ``scans`` validation scans, the
    largest |Δ| against "as captured" and which setting gave it."""
    from mlcore.pointcloud.datasets import get_dataset, make_scan
    from mlcore.pointcloud.pipeline import confusion, miou
    from mlcore.pointcloud.scenes import LABELS
    from mlcore.pointcloud.segment import segment_cloud

    rows = []
    for name in DATASETS:
        spec = get_dataset(name)
        confs: dict[str, np.ndarray] = {}
        carries = ""
        for index in range(scans):
            scan = make_scan(name, index, "val")
            carries = "colour" if scan.rgb is not None else "intensity"
            for setting, (rgb, intensity) in attribute_settings(scan, index).items():
                result = segment_cloud(model, scan.xyz, rgb, intensity, grid=spec.grid, classes=list(spec.class_ids))
                conf = confusion(result.labels.astype(np.int64), scan.labels.astype(np.int64), len(LABELS))
                confs[setting] = confs.get(setting, 0) + conf
        values = {s: miou(c, spec.class_ids)[0] for s, c in confs.items()}
        deltas = {s: v - values["as captured"] for s, v in values.items() if s != "as captured"}
        worst = max(deltas, key=lambda s: abs(deltas[s]))
        rows.append(
            {
                "dataset": name,
                "title": spec.title,
                "zero_shot": spec.zero_shot,
                "carries": carries,
                "scans": scans,
                "miou": values,
                "max_abs_delta": abs(deltas[worst]),
                "worst": worst,
            }
        )
    return rows


def fingerprint(folder: Path) -> str:
    """A short digest of a saved segmenter's weights and, when it keeps them, its statistics per
    presence (the same weights read other statistics): cached rows follow the model, not its folder."""
    from mlcore.pointcloud.pipeline import PRESENCE_FILE

    digest = hashlib.sha256((folder / "model.safetensors").read_bytes())
    if (folder / PRESENCE_FILE).is_file():
        digest.update((folder / PRESENCE_FILE).read_bytes())
    return digest.hexdigest()[:12]


def segmenters() -> dict[str, Path]:
    """The zoo Point-MoE and the folders named in ``$MOELAB_BENCH_SEGMENTERS``."""
    found = {"zoo pointmoe-synmix": ZOO_CHECKPOINTS / "pointmoe-synmix"}
    for item in filter(None, (s.strip() for s in os.environ.get(SEGMENTERS_ENV, "").split(";"))):
        name, _, folder = item.partition("=")
        if not folder:
            raise ValueError(f"{SEGMENTERS_ENV}: {item!r} is not name=folder")
        found[name.strip()] = Path(folder.strip())
    return found


# -- part 2: classes that differ only by an attribute ---------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    classes: tuple[str, ...]
    attribute: str  #: "colour" or "intensity": what the sensor records
    voxel: float
    #: the classes that geometry cannot tell from their neighbour: only the attribute can
    attribute_only: tuple[str, ...]
    make: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]]


def _thin(xyz: np.ndarray, sensor: np.ndarray, near: float, rng: np.random.Generator) -> np.ndarray:
    """Keep points with probability min(1, (near / range)²): a scanner's density fall-off."""
    r = np.linalg.norm(xyz - sensor, axis=1)
    return rng.random(len(xyz)) < np.minimum(1.0, (near / np.maximum(r, 1e-6)) ** 2)


def street_surface(rng: np.random.Generator) -> tuple[np.ndarray, None, np.ndarray, np.ndarray]:
    """A 30 m street seen by a LiDAR 1.8 m up: asphalt (0), painted markings flush with it (1) — edge
    lines, a dashed centre line, a zebra crossing, a stop line — and raised sidewalks with their kerb
    (2). Intensity = reflectivity × (0.3 + 0.7·cos θ) × exp(−r / 80 m) + noise; the paint is
    retro-reflective (0.55–0.75, worn in places), asphalt 0.08–0.16, sidewalk 0.3–0.4. No colour."""
    half = rng.uniform(3.5, 5.5)
    walk = rng.uniform(2.0, 3.0)
    sensor = np.array([rng.uniform(-6, 6), rng.uniform(-half + 1.5, half - 1.5), 1.8])
    n = 160_000
    x = rng.uniform(-15, 15, n)
    y = rng.uniform(-half - walk, half + walk, n)
    on_walk = np.abs(y) > half
    z = np.where(on_walk, 0.15, 0.0)
    kerb_n = 6000  # the kerb's vertical faces
    kx, ky, kz = rng.uniform(-15, 15, kerb_n), np.sign(rng.uniform(-1, 1, kerb_n)) * half, rng.uniform(0, 0.15, kerb_n)
    xyz = np.concatenate([np.stack([x, y, z], 1), np.stack([kx, ky, kz], 1)])
    labels = np.concatenate([np.where(on_walk, 2, 0), np.full(kerb_n, 2)])
    road = labels == 0
    px, py = xyz[:, 0], xyz[:, 1]
    marking = np.abs(np.abs(py) - (half - 0.3)) < 0.075  # edge lines
    phase = rng.uniform(0, 8)
    marking |= (np.abs(py) < 0.075) & (((px + phase) % 8.0) < 3.0)  # dashed centre line
    zebra = rng.uniform(-10, 6)
    marking |= (px > zebra) & (px < zebra + 3.0) & ((np.abs(py) % 1.0) < 0.5) & (np.abs(py) < half - 0.6)
    stop = zebra - rng.uniform(1.5, 3.0)
    marking |= (px > stop - 0.3) & (px < stop) & (py > 0.2) & (py < half - 0.6)
    labels = np.where(road & marking, 1, labels)
    keep = _thin(xyz, sensor, 5.0, rng) & (rng.random(len(xyz)) > 0.1)
    xyz, labels = xyz[keep], labels[keep]
    refl = np.array([rng.uniform(0.08, 0.16), rng.uniform(0.55, 0.75), rng.uniform(0.3, 0.4)])[labels]
    refl = np.where(labels == 1, refl * rng.uniform(0.6, 1.0, len(labels)), refl)  # worn paint
    ray = xyz - sensor
    r = np.linalg.norm(ray, axis=1)
    normal_z = np.where((labels == 2) & (xyz[:, 2] < 0.149) & (xyz[:, 2] > 0.001), 0.0, 1.0)
    cos = np.abs(ray[:, 2] * normal_z) / r + (1 - normal_z) * np.abs(ray[:, 1]) / r
    intensity = np.clip(refl * (0.3 + 0.7 * cos) * np.exp(-r / 80) + rng.normal(0, 0.03, len(r)), 0, 1)
    xyz = xyz + rng.normal(0, 0.01, xyz.shape) * (r / 20 + 0.5)[:, None]
    return xyz.astype(np.float32), None, intensity.astype(np.float32), labels.astype(np.int32)


#: Door paints: all far from the off-white walls in colour, some close in brightness.
DOOR_PAINTS = ((0.45, 0.30, 0.18), (0.30, 0.38, 0.55), (0.20, 0.40, 0.25), (0.62, 0.20, 0.18), (0.55, 0.55, 0.58))


def room_with_doors(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, None, np.ndarray]:
    """A room seen by an RGB-D camera from near its centre: floor (0), walls (1), 1–3 painted doors
    flush in the walls (2: same plane, same geometry), ceiling (3). Colour = surface colour ×
    (0.45 + 0.55·Lambert, light from above) + pixel noise; depth noise 0.004·d² along the ray. No
    intensity."""
    w, d, h = rng.uniform(4, 7), rng.uniform(4, 7), rng.uniform(2.6, 3.0)
    sensor = np.array([rng.uniform(1.2, w - 1.2), rng.uniform(1.2, d - 1.2), 1.5])
    wall_colour = np.clip(np.array([0.85, 0.84, 0.80]) + rng.normal(0, 0.03, 3), 0, 1)
    colours = {
        0: np.clip(np.array([0.50, 0.40, 0.30]) + rng.normal(0, 0.06, 3), 0, 1),
        1: wall_colour,
        3: np.clip(np.array([0.92, 0.92, 0.92]) + rng.normal(0, 0.02, 3), 0, 1),
    }
    parts: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    normals: list[np.ndarray] = []
    density = 4000  # points per m² before the fall-off
    for z, label in ((0.0, 0), (h, 3)):
        n = int(w * d * density)
        parts.append(np.stack([rng.uniform(0, w, n), rng.uniform(0, d, n), np.full(n, z)], 1))
        labels.append(np.full(n, label))
        normals.append(np.tile([0.0, 0.0, 1.0], (n, 1)))
    doors = []
    walls = [(0, 0.0, w), (0, d, w), (1, 0.0, d), (1, w, d)]  # (axis along, fixed coordinate, length)
    for _ in range(int(rng.integers(1, 4))):
        wall = int(rng.integers(4))
        axis, _, length = walls[wall]
        width = rng.uniform(0.8, 1.0)
        start = rng.uniform(0.3, length - width - 0.3)
        doors.append(
            (wall, start, start + width, rng.uniform(2.0, 2.1), DOOR_PAINTS[int(rng.integers(len(DOOR_PAINTS)))])
        )
    door_colours: list[np.ndarray] = []
    for wall, (axis, fixed, length) in enumerate(walls):
        n = int(length * h * density)
        along, up = rng.uniform(0, length, n), rng.uniform(0, h, n)
        pts = np.zeros((n, 3))
        pts[:, axis], pts[:, 1 - axis], pts[:, 2] = along, fixed, up
        lab = np.ones(n, int)
        paint = np.tile(wall_colour, (n, 1))
        for door_wall, a, b, top, colour in doors:
            inside = (door_wall == wall) & (along >= a) & (along <= b) & (up <= top)
            lab[inside] = 2
            paint[inside] = np.clip(np.array(colour) + rng.normal(0, 0.04, 3), 0, 1)
        normal = np.zeros(3)
        normal[1 - axis] = 1.0
        parts.append(pts)
        labels.append(lab)
        normals.append(np.tile(normal, (n, 1)))
        door_colours.append(paint)
    xyz = np.concatenate(parts)
    label = np.concatenate(labels)
    normal = np.concatenate(normals)
    surface = np.concatenate(
        [np.tile(colours[0], (len(labels[0]), 1)), np.tile(colours[3], (len(labels[1]), 1)), *door_colours]
    )
    keep = _thin(xyz, sensor, 1.2, rng)
    xyz, label, normal, surface = xyz[keep], label[keep], normal[keep], surface[keep]
    ray = xyz - sensor
    r = np.linalg.norm(ray, axis=1)
    xyz = xyz + ray / r[:, None] * (rng.normal(0, 1, len(r)) * 0.004 * r**2)[:, None]
    light = np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])
    shade = 0.45 + 0.55 * np.abs(normal @ light)
    rgb = np.clip(surface * shade[:, None] + rng.normal(0, 0.03, surface.shape), 0, 1)
    return xyz.astype(np.float32), np.round(rgb * 255).astype(np.uint8), None, label.astype(np.int32)


CASES = {
    case.name: case
    for case in (
        Case(
            "road-markings",
            "Street surface, LiDAR: painted markings flush with the asphalt (intensity)",
            ("asphalt", "road marking", "sidewalk"),
            "intensity",
            0.05,
            ("road marking",),
            street_surface,
        ),
        Case(
            "painted-doors",
            "Rooms, RGB-D camera: painted doors flush in the walls (colour)",
            ("floor", "wall", "door", "ceiling"),
            "colour",
            0.04,
            ("door",),
            room_with_doors,
        ),
    )
}


def case_scans(case: Case, count: int, split: str) -> list[Any]:
    """``count`` scans of a case, seeded by (case, split, index): train and held-out never coincide."""
    from mlcore.pointcloud.sensors import Scan

    out = []
    for index in range(count):
        key = hashlib.sha256(f"attribute-case/{case.name}/{split}/{index}".encode()).digest()[:8]
        xyz, rgb, intensity, labels = case.make(np.random.default_rng(int.from_bytes(key, "little")))
        out.append(Scan(xyz=xyz, rgb=rgb, intensity=intensity, labels=labels))
    return out


def without_attributes(scans: Sequence[Any]) -> list[Any]:
    from mlcore.pointcloud.sensors import Scan

    return [Scan(xyz=s.xyz, rgb=None, intensity=None, labels=s.labels) for s in scans]


def train_case(
    case: Case, train_scans: Sequence[Any], tier: Tier, seed: int, *, augment: str | None, presence: bool = False
) -> tuple[Any, float]:
    """A Point-MoE (the job's default moe-proj layout) trained on a case's scans through the
    ``pointcloud-train`` user path: label space, :class:`~mlcore.pointcloud.user_train.UserPool`,
    :func:`~mlcore.pointcloud.user_train.replace_datasets` (``augment`` None: the user default;
    ``presence``: BatchNorm statistics kept per attribute presence)."""
    import torch

    from mlcore.pointcloud.pipeline import TrainConfig, train
    from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
    from mlcore.pointcloud.user_train import UserPool, label_space, mix, replace_datasets

    space = label_space(case.classes, synmix=False)
    cfg = TrainConfig(
        steps=tier.steps,
        batch_size=tier.batch_size,
        points=tier.points,
        scenes=1,
        seed=seed,
        eval_every=0,
        attribute_augment=augment,
        presence_stats=presence,
    )
    cfg = replace_datasets(cfg, mix(()))
    torch.manual_seed(seed)
    model = PTv3(PTv3Config(num_classes=len(space.names), proj="moe", proj_ratio=1.0, experts=4, top_k=2))
    result = train(model, cfg, pool=UserPool(train_scans, space, case.voxel))
    return model, result.seconds


def run_key(case: Case, tier: Tier, training: str, augment: str | None, seed: int, presence: bool = False) -> str:
    """The cache key of one training and its held-out reads: what it was trained on and how, so a
    changed preset or tier never reuses a stale run."""
    from mlcore.pointcloud import augment as aug
    from mlcore.pointcloud.pipeline import TrainConfig
    from mlcore.pointcloud.user_train import USER_ATTRIBUTE_AUGMENT

    preset = aug.preset(augment or USER_ATTRIBUTE_AUGMENT)
    settings: dict[str, Any] = {"tier": tier.training(), "augment": None if preset is None else preset.to_dict()}
    if presence:  # only when kept: the keys of the runs before it existed stay what they were
        settings["presence"] = {"crops": TrainConfig.presence_crops}
    return f"case/{case.name}/{training}/{stamp(settings)}/seed{seed}"


def case_runs(case: Case, tier: Tier, cache: Store | None = None) -> list[dict[str, Any]]:
    """Per seed and training: held-out mIoU (and per-class IoU) with and without the attribute."""
    from mlcore.pointcloud.user_train import evaluate, label_space

    space = label_space(case.classes, synmix=False)
    train_scans = case_scans(case, tier.train_scans, "train")
    held = case_scans(case, tier.heldout_scans, "heldout")
    trainings: list[tuple[str, str | None, bool, int, bool]] = [
        ("augmented, with attribute", None, False, tier.seeds, False),
        ("augmented, geometry only", None, True, tier.seeds, False),
    ]
    trainings += [(name, augment, False, tier.extra_seeds or tier.seeds, kept) for name, augment, kept in tier.extra]
    runs = []
    for seed in range(tier.seeds):
        for training, augment, blind, seeds, kept in trainings:
            if seed >= seeds:
                continue
            key = run_key(case, tier, training, augment, seed, kept)
            cached = cache.get(key) if cache is not None else None
            if cached is not None:
                runs.append(cached)
                continue
            scans = without_attributes(train_scans) if blind else train_scans
            model, seconds = train_case(case, scans, tier, seed, augment=augment, presence=kept)
            row: dict[str, Any] = {"case": case.name, "seed": seed, "training": training, "train_seconds": seconds}
            settings = [("geometry only", without_attributes(held))]
            if not blind:
                settings.insert(0, ("with attribute", held))
            for setting, scans_in in settings:
                ev = evaluate(model, scans_in, space, case.voxel)
                row[setting] = {"miou": ev["miou"], "iou": ev["iou"], "points": ev["points"]}
            runs.append(row)
            if cache is not None:
                cache.put(key, row)
            print(
                f"[pointcloud-attributes] {case.name} seed {seed} {training}: "
                + ", ".join(f"{s} {row[s]['miou']:.3f}" for s, _ in settings)
                + f" ({seconds:.0f} s)",
                flush=True,
            )
    return runs


def case_verdicts(case: Case, runs: list[dict[str, Any]]) -> list[Any]:
    """Paired by seed: the attribute-trained model with its attribute against the geometry-trained
    model (the gain of using it), and against itself without the attribute."""
    from bench.verdicts import Claim, judge

    def values(training: str, setting: str) -> list[float]:
        return [r[setting]["miou"] for r in sorted(runs, key=lambda r: r["seed"]) if r["training"] == training]

    with_attr = values("augmented, with attribute", "with attribute")
    seconds = statistics.fmean(r["train_seconds"] for r in runs)
    claim = Claim(
        f"{case.name}: using the {case.attribute} raises held-out mIoU",
        "mIoU",
        GAIN_GOAL,
        "issue #22 point 3 (goal ≥ 0.1)",
        ceiling=1.0,
    )
    return [
        judge(
            claim,
            ("with attribute (augmented training)", with_attr),
            ("geometry-trained model", values("augmented, geometry only", "geometry only")),
            seconds_per_run=seconds,
        ),
        judge(
            claim,
            ("with attribute (augmented training)", with_attr),
            ("same model, attribute withheld", values("augmented, with attribute", "geometry only")),
            seconds_per_run=seconds,
            runs_per_seed=1,
        ),
    ]


# -- report -----------------------------------------------------------------------------------------


def _mean_sd(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "–"
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"


def _verdict_lines(case: Case, runs: list[dict[str, Any]]) -> tuple[list[str], list[Any]]:
    """One bullet per comparison of :func:`case_verdicts`: the gain, its interval and the goal."""
    verdicts = case_verdicts(case, runs)
    lines = []
    for v in verdicts:
        low, high = v.interval
        lines.append(
            f"- {v.method} vs {v.baseline}: mean gain {v.pairs.mean:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}] over "
            f"{v.pairs.n} seeds; goal ≥ {GAIN_GOAL}: **{'met' if v.pairs.mean >= GAIN_GOAL else 'missed'}**"
            + (f" (the whole interval is above {GAIN_GOAL})" if low >= GAIN_GOAL else "")
            + "."
        )
    return lines, verdicts


def report(result: dict[str, Any]) -> str:
    from bench.verdicts import section
    from mlcore.pointcloud.user_train import USER_ATTRIBUTE_AUGMENT

    tier = result["tier"]
    lines = [
        "# Point clouds: attribute robustness, and attributes that matter",
        "",
        f"Written by `python -m bench pointcloud-attributes --tier {tier['name']}` (bench/pointcloud_attributes.py); "
        "issue #22 point 3.",
        "",
        "## 1. Robustness: the same geometry, other attributes",
        "",
        f"mIoU on SynMix validation scans ({tier['robustness_scans']} per dataset, indices 0–"
        f"{tier['robustness_scans'] - 1}; E, F zero-shot), segmented by `segment_cloud` as `pointcloud-segment` does. "
        f"*max |Δ|*: the largest change against *as captured* (goal ≤ {ROBUST_GOAL}). Settings are fixed, not "
        "drawn from the training augmentation; added attributes are seeded per scan (the same for every segmenter).",
        "",
    ]
    for name, rows in result["robustness"].items():
        lines += [f"### {name}", ""]
        info = result.get("segmenters", {}).get(name, {})
        if info.get("command"):
            lines += [f"Trained by `{info['command']}`.", ""]
        if info.get("carried_over"):
            lines += [
                f"Carried over from the report written {info['carried_over']}: this segmenter's folder "
                f"({info.get('folder')}) is not on this machine (candidates live in the gitignored var/).",
                "",
            ]
        for kind, modes in (("colour", CAMERA_MODES), ("intensity", LIDAR_MODES)):
            mine = [r for r in rows if r["carries"] == kind]
            if not mine:
                continue
            header = ("as captured", *modes)
            lines += [
                f"Scans that carry {kind} ({'camera' if kind == 'colour' else 'LiDAR'}):",
                "",
                "| dataset | " + " | ".join(header) + " | max abs Δ (setting) |",
                "|---|" + "---|" * (len(header) + 1),
            ]
            for r in mine:
                ok = "" if r["max_abs_delta"] <= ROBUST_GOAL else " ✗"
                cells = [f"{r['miou'][m]:.3f}" for m in header]
                lines.append(
                    f"| {r['dataset']}{' (zero-shot)' if r['zero_shot'] else ''} | "
                    + " | ".join(cells)
                    + f" | {r['max_abs_delta']:.3f}{ok} ({r['worst']}) |"
                )
            lines.append("")
        worst = max(rows, key=lambda r: r["max_abs_delta"])
        met = "met" if worst["max_abs_delta"] <= ROBUST_GOAL else "missed"
        lines += [
            f"Largest |Δ| over all datasets and settings: **{worst['max_abs_delta']:.3f}** ({worst['dataset']}, "
            f"{worst['worst']}); goal ≤ {ROBUST_GOAL}: **{met}**.",
            "",
        ]
    lines += [
        "## 2. Robust, not blind: classes that differ only by an attribute",
        "",
        f"Trained as a user's labelled scans (`user_train`, Point-MoE moe-proj, {tier['steps']} steps × "
        f"{tier['batch_size']} crops × {tier['points']} points, {tier['train_scans']} training scans, "
        f"{tier['heldout_scans']} held-out scans per case, seeds 0–{tier['seeds'] - 1}); held-out mIoU mean ± sd over "
        f"seeds (n = seeds). *Augmented*: the user path's default attribute augmentation "
        f"(`{USER_ATTRIBUTE_AUGMENT}`, `mlcore/pointcloud/augment.py`)"
        + (
            f"; the trainings after the first two (another `attribute_augment`) on seeds 0–{tier['extra_seeds'] - 1}"
            " only: they judge no claim."
            if tier.get("extra") and tier.get("extra_seeds")
            else "."
        ),
        "",
    ]
    verdicts = []
    for case_name, runs in result["cases"].items():
        case = CASES[case_name]
        lines += [f"### {case.title}", "", f"Classes: {', '.join(case.classes)}; voxel {case.voxel} m.", ""]
        lines += ["| training | held-out scans | n | mIoU | " + " | ".join(f"IoU {c}" for c in case.classes) + " |"]
        lines.append("|---|---|---|---|" + "---|" * len(case.classes))
        for training in dict.fromkeys(r["training"] for r in runs):
            mine = [r for r in runs if r["training"] == training]
            for setting in ("with attribute", "geometry only"):
                if setting not in mine[0]:
                    continue
                ious = [_mean_sd([r[setting]["iou"].get(c, 0.0) for r in mine]) for c in case.classes]
                lines.append(
                    f"| {training} | {setting} | {len(mine)} | {_mean_sd([r[setting]['miou'] for r in mine])} | "
                    + " | ".join(ious)
                    + " |"
                )
        lines.append("")
        case_lines, judged = _verdict_lines(case, runs)
        lines += case_lines
        verdicts += judged
        lines.append("")
    lines += section("Verdicts", verdicts, level="###")
    lines += [
        "",
        f"Machine: {result['machine']['platform']}, {result['machine'].get('torch_threads')} torch thread(s); "
        f"{result['seconds']:.0f} s in all ({result['train_seconds']:.0f} s of training).",
        "",
    ]
    return "\n".join(lines)


def carry_robustness(out: dict[str, Any], previous: Path, tier_name: str) -> None:
    """Part 1's rows of segmenters the last report of this tier measured but this run cannot (their
    folders are not here), marked as carried over, so a run on another machine keeps them."""
    last = last_report(previous, tier_name)
    if last is None:
        return
    rows = last.get("robustness") or {}
    info = {name: (last.get("segmenters") or {}).get(name, {}) for name in rows}
    carried = carry_over(info, out["robustness"], last.get("written_at") or "earlier")
    out["robustness"].update({name: rows[name] for name in carried})
    out.setdefault("segmenters", {}).update(carried)


def run(tier_name: str, results: Path) -> None:
    import torch

    from bench.verdicts import as_json
    from mlcore.pointcloud.pipeline import load_segmenter

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tier = TIERS[tier_name]
    start = time.perf_counter()
    out: dict[str, Any] = {
        "tier": {"name": tier_name, **tier.__dict__},
        "machine": machine(),
        "robustness": {},
        "cases": {},
        "verdicts": {},
    }
    cache = full_tier_cache(Store.named(NAME), tier_name)
    for name, folder in segmenters().items():
        model, config = load_segmenter(folder)
        print(f"[pointcloud-attributes] robustness of {name} ({folder})", flush=True)
        key = f"robustness/{fingerprint(folder)}/{tier.robustness_scans}"
        rows = cache.get(key) if cache is not None else None
        if rows is None:
            rows = robustness_rows(model, tier.robustness_scans)
            if cache is not None:
                cache.put(key, rows)
        out["robustness"][name] = rows
        card = config.get("card") or {}
        out.setdefault("segmenters", {})[name] = {
            "folder": str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder),
            "command": card.get("command"),
            "train": (card.get("recipe") or {}).get("train"),
        }
    carry_robustness(out, results / "pointcloud-attributes.json", tier_name)
    for case in CASES.values():
        runs = case_runs(case, tier, cache)
        out["cases"][case.name] = runs
        out["verdicts"][case.name] = as_json(case_verdicts(case, runs))
    out["train_seconds"] = sum(r["train_seconds"] for runs in out["cases"].values() for r in runs)
    out["seconds"] = time.perf_counter() - start
    # Stamped (and a quick tier kept apart from a full report) as every study's report is.
    write_results(results, "pointcloud-attributes", report(out), out)
