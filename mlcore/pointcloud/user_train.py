"""Train PTv3-lite / Point-MoE on a user's labelled scans (:mod:`mlcore.pointcloud.user_scans`),
optionally mixed with SynMix, and measure per-class IoU on the held-out scans.

- **Label space.** Alone, the model's classes are the user's. Mixed with SynMix, they are SynMix's
  master classes followed by the user's classes that none of them names (compared without case), so
  a user's "building" and SynMix's "building" share one class embedding.
- **Training** is :func:`mlcore.pointcloud.pipeline.train` with a pool that draws the user's crops
  under the name :data:`USER` (grid-sampled at the user's voxel size, sphere-cropped, rotated about
  z, flipped and scaled as SynMix crops are); the loss of a user crop is restricted to the user's
  classes, that of a SynMix crop to its dataset's. Mixed, half of the crops are the user's.
- **Attribute augmentation is on by default** (:data:`USER_ATTRIBUTE_AUGMENT`, the "balanced"
  preset of :mod:`mlcore.pointcloud.augment`): the scans a user segments later rarely come from the
  scanner and exporter of the training scans (colour missing, intensity at another bit depth or
  gain, a colour cast), and a model that collapses without the attribute it trained with fails
  silently there. It drops attributes from fewer crops than the zoo's "robust" preset, because a
  user's classes may differ only by an attribute (road markings on asphalt) and every dropped crop
  is one they cannot be learnt from: bench/results/pointcloud-attributes.md measures both sides.
- **Heights** of training crops are measured from the scan's ground by the model's rule (its
  ``PTv3Config.ground``), as at inference: a user's crops are small against a whole scan, and
  measured from the crop's own lowest point a crop of ceiling looks like floor.
- **Evaluation** predicts whole held-out scans (in chunks of at most ``chunk`` voxels along x, so
  memory stays bounded), carries each voxel's label to its points and counts IoU per class over all
  held-out points.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlcore.pointcloud import presence
from mlcore.pointcloud.datasets import IGNORE, DatasetSpec, get_dataset, grid_sample, point_features
from mlcore.pointcloud.pipeline import Sample, ScanPool, confusion, save_segmenter, scan_ground
from mlcore.pointcloud.ptv3 import PointBatch, PTv3, restrict_logits
from mlcore.pointcloud.scenes import LABELS
from mlcore.pointcloud.segmenter_classes import read_classes, user_block
from mlcore.pointcloud.sensors import Scan
from mlcore.pointcloud.user_scans import LabelledScan

USER = "user"
#: The attribute augmentation a user's training run gets when its TrainConfig leaves it unset.
USER_ATTRIBUTE_AUGMENT = "balanced"
#: Voxels per model call when predicting a held-out scan.
EVAL_CHUNK = 150_000


@dataclass(frozen=True)
class LabelSpace:
    names: tuple[str, ...]  #: the model's classes, in logit order
    user: tuple[int, ...]  #: the model class of each of the user's classes

    @property
    def user_allowed(self) -> np.ndarray:
        allowed = np.zeros(len(self.names), bool)
        allowed[list(self.user)] = True
        return allowed


def label_space(user_classes: Sequence[str], *, synmix: bool) -> LabelSpace:
    if not synmix:
        return LabelSpace(tuple(user_classes), tuple(range(len(user_classes))))
    names = list(LABELS)
    lowered = [n.lower() for n in names]
    user = []
    for name in user_classes:
        if name.lower() in lowered:
            user.append(lowered.index(name.lower()))
        else:
            names.append(name)
            lowered.append(name.lower())
            user.append(len(names) - 1)
    return LabelSpace(tuple(names), tuple(user))


def as_scan(scan: LabelledScan, space: LabelSpace) -> Scan:
    """The user's scan with its labels in the run's label space."""
    table = np.asarray(space.user, np.int32)
    labels = np.where(scan.labels >= 0, table[np.clip(scan.labels, 0, None)], IGNORE).astype(np.int32)
    return Scan(xyz=scan.xyz, rgb=scan.rgb, intensity=scan.intensity, labels=labels)


def user_spec(voxel: float) -> DatasetSpec:
    """What :func:`~mlcore.pointcloud.pipeline.prepare` needs of the user's "dataset": its grid."""
    return DatasetSpec(USER, "your scans", "indoor", "user", grid=voxel)


def _pad(allowed: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros(k, bool)
    out[: len(allowed)] = allowed
    return out


class UserPool(ScanPool):
    """Crops of the user's training scans (name :data:`USER`), and of SynMix datasets when mixed."""

    def __init__(
        self, scans: Sequence[Scan], space: LabelSpace, voxel: float, synmix: Sequence[str] = (), scenes: int = 1
    ) -> None:
        super().__init__(synmix, scenes)
        self.user_scans = list(scans)
        self.space = space
        self.spec = user_spec(voxel)

    def draw(self, name: str, rng: np.random.Generator, points: int, ground: str | None = None) -> Sample:
        if name != USER:
            sample = super().draw(name, rng, points, ground)
            sample.allowed = _pad(sample.allowed, len(self.space.names))
            return sample
        i = int(rng.integers(len(self.user_scans)))
        sample = self.crop_of(USER, i, self.user_scans[i], self.spec, rng, points, ground)
        sample.allowed = self.space.user_allowed
        return sample


def mix(synmix: Sequence[str]) -> tuple[str, ...]:
    """The names :func:`~mlcore.pointcloud.pipeline.train` draws crops from: the user's as often as
    all SynMix datasets together."""
    return (USER,) * max(1, len(synmix)) + tuple(synmix)


@torch.no_grad()
def predict(model: PTv3, scan: Scan, allowed: np.ndarray, voxel: float, *, device: Any = "cpu") -> np.ndarray:
    """The restricted prediction for every point of a whole scan, heights from the whole scan's
    ground (:func:`~mlcore.pointcloud.pipeline.scan_ground`) in every chunk."""
    model.eval()
    keep, inverse = grid_sample(scan.xyz, voxel)
    ground = scan_ground(scan, keep, model.cfg.ground)
    vox = scan.xyz[keep].astype(np.float64)
    rgb = None if scan.rgb is None else scan.rgb[keep]
    intensity = None if scan.intensity is None else scan.intensity[keep]
    order = np.argsort(vox[:, 0], kind="stable")
    pred = np.zeros(len(vox), np.int64)
    mask = torch.from_numpy(allowed).to(device)
    with presence.statistics(model, presence.pattern_for(rgb, intensity)):
        for start in range(0, len(order), EVAL_CHUNK):
            idx = order[start : start + EVAL_CHUNK]
            xyz = vox[idx]
            feat = point_features(
                xyz, None if rgb is None else rgb[idx], None if intensity is None else intensity[idx], ground=ground
            )
            coord = torch.from_numpy(((xyz - xyz.min(0)) / voxel).astype(np.float32))
            points = PointBatch(
                coord.to(device),
                torch.from_numpy(feat).to(device),
                torch.zeros(len(idx), dtype=torch.long, device=device),
            )
            logits = model(points)
            pred[idx] = restrict_logits(logits, mask.expand(len(idx), -1)).argmax(-1).cpu().numpy()
    return pred[inverse]


def class_iou(conf: np.ndarray, classes: Sequence[int], names: Sequence[str]) -> dict[str, float]:
    """IoU of each of ``classes`` that occurs in the labels or the predictions."""
    ious = {}
    for c in classes:
        inter = conf[c, c]
        union = conf[c, :].sum() + conf[:, c].sum() - inter
        if union > 0:
            ious[names[c]] = float(inter / union)
    return ious


def evaluate(
    model: PTv3, scans: Sequence[Scan], space: LabelSpace, voxel: float, *, device: Any = "cpu"
) -> dict[str, Any]:
    """Per-class IoU over the user's classes on ``scans``, their mean, and point accuracy."""
    k = len(space.names)
    conf = np.zeros((k, k), np.int64)
    allowed = space.user_allowed
    for scan in scans:
        conf += confusion(predict(model, scan, allowed, voxel, device=device), scan.labels.astype(np.int64), k)
    ious = class_iou(conf, space.user, space.names)
    labelled = conf.sum()
    return {
        "iou": ious,
        "miou": float(np.mean(list(ious.values()))) if ious else 0.0,
        "accuracy": float(np.trace(conf) / labelled) if labelled else 0.0,
        "points": int(labelled),
    }


def evaluate_synmix(
    model: PTv3, names: Sequence[str], space: LabelSpace, scans: int, *, device: Any = "cpu"
) -> dict[str, float]:
    """mIoU per mixed-in SynMix dataset on its validation scans, with this run's label space."""
    from mlcore.pointcloud.datasets import make_scan

    out = {}
    for name in names:
        spec = get_dataset(name)
        allowed = _pad(np.isin(np.arange(len(LABELS)), spec.class_ids), len(space.names))
        k = len(space.names)
        conf = np.zeros((k, k), np.int64)
        for i in range(scans):
            scan = make_scan(spec, i, "val")
            conf += confusion(predict(model, scan, allowed, spec.grid, device=device), scan.labels.astype(np.int64), k)
        ious = class_iou(conf, spec.class_ids, space.names)
        out[name] = float(np.mean(list(ious.values()))) if ious else 0.0
    return out


def save_user_segmenter(
    model: PTv3,
    folder: Path,
    space: LabelSpace,
    voxel: float,
    card: dict[str, Any],
    *,
    codes: Sequence[int] = (),
    attributes: Sequence[str] = (),
    synmix: Sequence[str] = (),
    attribute_augment: str | None = None,
) -> Path:
    """The segmenter folder of :func:`~mlcore.pointcloud.pipeline.save_segmenter`, with this run's
    classes as its labels, the user's voxel size as its grid and the ``user`` block that
    ``pointcloud-segment`` reads (:mod:`mlcore.pointcloud.segmenter_classes`): the user's classes
    under the model's names, the id the user's files gave each (``codes``, in the order of
    ``space.user``), the attributes the training scans held and the SynMix datasets mixed in.
    ``attribute_augment``: the run's ``TrainConfig.attribute_augment``, kept in the card so
    :func:`~mlcore.pointcloud.augment.robust_attributes` can tell what the model does without."""
    if model.cfg.num_classes != len(space.names):
        raise ValueError(f"a head of {model.cfg.num_classes} classes for {len(space.names)} class names")
    own = [space.names[i] for i in space.user]
    if attribute_augment is not None:
        card = {**card, "attribute_augment": attribute_augment}
    save_segmenter(model, folder, card=card)
    config = json.loads((folder / "config.json").read_text())
    config["labels"] = list(space.names)
    config["grids"] = {**config["grids"], USER: voxel}
    config["user"] = user_block(own, dict(zip(own, codes, strict=False)), voxel, tuple(attributes), tuple(synmix))
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    read_classes(config, model.cfg.num_classes)  # what pointcloud-segment will read back, checked now
    return folder


def replace_datasets(cfg: Any, names: tuple[str, ...]) -> Any:
    """``cfg`` (a :class:`~mlcore.pointcloud.pipeline.TrainConfig`) drawing from ``names``, with the
    pipeline's SynMix evaluation off (the job evaluates the user's held-out scans itself), attribute
    augmentation :data:`USER_ATTRIBUTE_AUGMENT` and heights above the scan's ground (as
    :func:`predict` and ``pointcloud-segment`` measure them) unless ``cfg`` names others."""
    augment = cfg.attribute_augment if cfg.attribute_augment is not None else USER_ATTRIBUTE_AUGMENT
    height = cfg.height if cfg.height is not None else "scan"
    return dataclasses.replace(cfg, datasets=names, eval_every=0, attribute_augment=augment, height=height)
