"""The viewer's preview: at most the budget, real points with their exact labels and colours,
seeded, and thin structures kept by the voxel method."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlcore.pointcloud.io import Cloud, read_cloud, read_header
from mlcore.pointcloud.preview import input_colors, preview, preview_indices, write_preview
from mlcore.pointcloud.render import palette


def floor_and_pole(seed: int = 0) -> Cloud:
    """A dense 20 m × 20 m floor (label 0) and a thin 3 m pole (label 1) with 1% of the points."""
    rng = np.random.default_rng(seed)
    floor = np.column_stack([rng.random((99_000, 2)) * 20, np.zeros(99_000)])
    pole = np.column_stack([np.full((1_000, 2), 10.0) + rng.normal(0, 0.02, (1_000, 2)), rng.random(1_000) * 3])
    xyz = np.vstack([floor, pole]).astype(np.float32)
    labels = np.r_[np.zeros(99_000), np.ones(1_000)].astype(np.int32)
    rgb = rng.integers(0, 256, (100_000, 3), dtype=np.uint8)
    return Cloud(xyz=xyz, rgb=rgb, labels=labels)


@pytest.mark.parametrize("method", ["voxel", "random"])
def test_a_preview_keeps_at_most_the_budget_of_real_points(method: str) -> None:
    cloud = floor_and_pole()
    shown = preview(cloud, 5_000, method=method, seed=3)
    assert 4_000 <= len(shown) <= 5_000
    index = preview_indices(cloud.xyz, 5_000, method=method, seed=3)
    np.testing.assert_array_equal(shown.xyz, cloud.xyz[index])
    np.testing.assert_array_equal(shown.labels, cloud.labels[index])
    np.testing.assert_array_equal(shown.rgb, cloud.rgb[index])
    np.testing.assert_array_equal(index, preview_indices(cloud.xyz, 5_000, method=method, seed=3))
    assert len(np.unique(index)) == len(index)


def near_and_far(seed: int = 0) -> Cloud:
    """A LiDAR-like density: 95% of the points within 2 m of the sensor (label 0), 5% spread
    over the 40 m × 40 m around it (label 1)."""
    rng = np.random.default_rng(seed)
    near = np.column_stack([rng.normal(0, 1.0, (95_000, 2)), np.zeros(95_000)])
    far = np.column_stack([rng.random((5_000, 2)) * 40 - 20, rng.random(5_000)])
    labels = np.r_[np.zeros(95_000), np.ones(5_000)].astype(np.int32)
    return Cloud(xyz=np.vstack([near, far]).astype(np.float32), labels=labels)


def test_the_voxel_preview_keeps_sparse_far_regions_that_random_sampling_thins_out() -> None:
    cloud = near_and_far()
    voxel = preview(cloud, 2_000, method="voxel").labels
    random = preview(cloud, 2_000, method="random").labels
    assert (voxel == 1).sum() > 5 * (random == 1).sum()


def test_a_small_cloud_is_shown_whole() -> None:
    cloud = Cloud(xyz=np.zeros((10, 3), np.float32))
    assert preview(cloud, 100) is cloud
    np.testing.assert_array_equal(preview_indices(cloud.xyz, 4, seed=1), np.sort(preview_indices(cloud.xyz, 4, seed=1)))
    assert len(preview_indices(cloud.xyz, 4)) == 4  # all points in one place: random fallback


def test_without_rgb_intensity_is_grey_and_otherwise_height_is_a_ramp() -> None:
    xyz = np.column_stack([np.zeros(50), np.zeros(50), np.linspace(0, 1, 50)]).astype(np.float32)
    grey = input_colors(Cloud(xyz=xyz, intensity=np.linspace(0, 1, 50).astype(np.float32)))
    assert (grey[:, 0] == grey[:, 1]).all() and grey[0, 0] < grey[-1, 0]
    ramp = input_colors(Cloud(xyz=xyz))
    assert ramp[0, 2] > ramp[-1, 2] and ramp[0, 0] < ramp[-1, 0]


def test_the_viewer_ply_holds_both_colourings_and_the_legend(tmp_path: Path) -> None:
    cloud = floor_and_pole()
    predicted = (cloud.labels * 2).astype(np.int32)  # labels 0 and 2
    count = write_preview(
        tmp_path / "p.ply", cloud, labels=predicted, label_names=["floor", "wall", "pole"], budget=3_000
    )
    assert count <= 3_000
    back = read_cloud(tmp_path / "p.ply", max_points=10_000)
    assert len(back) == count and set(back.labels.tolist()) == {0, 2}
    header = read_header(tmp_path / "p.ply")
    names = [p.name for p in header.elements[0].properties]
    assert names == ["x", "y", "z", "red", "green", "blue", "input_red", "input_green", "input_blue", "label"]
    legend = [c for c in header.comments if c.startswith("moelab label")]
    r, g, b = palette(3)[2]
    assert legend == [
        f"moelab label 0 {palette(3)[0][0]} {palette(3)[0][1]} {palette(3)[0][2]} floor",
        f"moelab label 1 {palette(3)[1][0]} {palette(3)[1][1]} {palette(3)[1][2]} wall",
        f"moelab label 2 {r} {g} {b} pole",
    ]
