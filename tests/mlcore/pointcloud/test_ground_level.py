"""A few points under the ground (multipath echoes, flying pixels) do not lift a scan's heights."""

import dataclasses
from pathlib import Path

import numpy as np
import torch

from mlcore.pointcloud.datasets import get_dataset, ground_level, make_scan
from mlcore.pointcloud.pipeline import load_segmenter
from mlcore.pointcloud.segment import segment_cloud

ZOO = Path(__file__).resolve().parents[3] / "mlcore" / "zoo" / "checkpoints" / "pointmoe-synmix"


def test_the_robust_ground_ignores_a_few_points_far_under_it_and_the_lowest_does_not() -> None:
    z = np.concatenate([np.random.default_rng(0).normal(0.0, 0.01, 10_000), [-4.0] * 20])
    assert abs(ground_level(z, "robust")) < 0.05
    assert ground_level(z, "lowest") == -4.0


def test_outliers_under_a_street_change_few_labels_with_the_robust_ground() -> None:
    torch.set_num_threads(1)
    model, _ = load_segmenter(ZOO)
    assert model.cfg.ground == "robust"
    spec, scan = get_dataset("C"), make_scan("C", 0, "val")
    rng = np.random.default_rng(0)
    below = scan.xyz[rng.choice(len(scan.xyz), len(scan.xyz) // 500, replace=False)] - [0.0, 0.0, 6.0]
    noisy = np.concatenate([scan.xyz, below])
    intensity = np.concatenate([scan.intensity, scan.intensity[: len(below)]])
    changed, accuracy = {}, {}
    for ground in ("robust", "lowest"):
        model.cfg = dataclasses.replace(model.cfg, ground=ground)
        clean = segment_cloud(model, scan.xyz, None, scan.intensity, grid=spec.grid).labels
        dirty = segment_cloud(model, noisy, None, intensity, grid=spec.grid).labels[: len(scan.xyz)]
        changed[ground] = float((clean != dirty).mean())
        accuracy[ground] = float((clean == scan.labels).mean()), float((dirty == scan.labels).mean())
    # Measured on the zoo's batch-30 recipe trained with heights from the robust ground: 7.6% of the
    # labels change with it (the outliers join patches; point accuracy 0.60 → 0.58), 63% from the
    # lowest point (accuracy → 0.00). Trained from the lowest point, the same recipe changed 15%; the
    # 150-step recipe without augmentation 4.4% and 92%.
    assert changed["robust"] < 0.12 and changed["lowest"] > 0.5, changed
    assert accuracy["robust"][1] > accuracy["robust"][0] - 0.06 and accuracy["lowest"][1] < 0.2, accuracy
