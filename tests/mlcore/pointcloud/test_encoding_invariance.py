"""The same scene in every encoding gets the same labels from the zoo segmenter; tiling changes few
labels; thumbnails carry a legend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open3d")
pytest.importorskip("laspy")

from bench.pointcloud_encodings import (
    AGREEMENT_GOAL,
    Scene,
    encoding_rows,
    load_zoo,
    make_scene,
)


@pytest.fixture(scope="module")
def zoo():
    import torch

    torch.manual_seed(0)
    return load_zoo()


def small(scene: Scene, n: int, seed: int = 0) -> Scene:
    keep = np.sort(np.random.default_rng(seed).choice(len(scene.xyz), size=min(n, len(scene.xyz)), replace=False))
    return Scene(
        scene.xyz[keep],
        None if scene.rgb is None else scene.rgb[keep],
        None if scene.intensity is None else scene.intensity[keep],
        scene.labels[keep],
    )


def test_encodings_carrying_the_same_attributes_give_the_same_labels(zoo, tmp_path: Path) -> None:
    rows = encoding_rows(zoo, small(make_scene("A", 0), 2500), "indoor", tmp_path)
    assert len(rows) == 10  # the room has colour, no intensity: every encoding but none of an intensity-only kind
    by_name = {row["encoding"]: row for row in rows}
    assert by_name["XYZ (numpy)"]["attributes"] == "geometry"
    assert by_name["LAS 1.2 pf3 16-bit RGB (laspy)"]["attributes"] == "colour"
    for row in rows:
        assert row["agreement"] >= AGREEMENT_GOAL, row
        assert row["max_error_mm"] <= 1.0, row  # the UTM-placed LAS 1.4 too


#: The share of this 10,000-point sample's labels that may change when it is cut into tiles of half its
#: voxels, by the zoo checkpoint's patch layout. Measured: the shipped checkpoint (rank layout, whose
#: patches differ wherever a window holds other points) changes 7.5% (4.8% of the whole street);
#: the same recipe with ``patch_layout="local"`` changes 0.8% (0.2% of the whole street) with seed 0.
#: The goal is 1%; once the zoo is retrained with the local layout this test holds it to that.
TILING_BOUND = {"rank": 0.08, "local": 0.01}


def test_tiling_changes_few_labels_on_a_scan_that_fits_whole(zoo) -> None:
    from mlcore.pointcloud.segment import segment_cloud

    scene = small(make_scene("C", 0), 10_000)
    xyz = scene.xyz.astype(np.float32)
    whole = segment_cloud(zoo, xyz, None, scene.intensity, grid=0.1)
    tiled = segment_cloud(zoo, xyz, None, scene.intensity, grid=0.1, chunk_points=whole.voxels // 2)
    assert whole.chunks == 1 and tiled.chunks > 1
    assert (whole.labels != tiled.labels).mean() <= TILING_BOUND[zoo.cfg.patch_layout]


def test_a_thumbnail_with_a_legend_shows_each_class_colour_exactly(tmp_path: Path) -> None:
    from PIL import Image

    from mlcore.pointcloud.render import render_thumbnail

    xyz = np.random.default_rng(0).random((500, 3))
    colours = np.full((500, 3), 200, np.uint8)
    legend = [("floor", (230, 25, 75)), ("wall", (60, 180, 75))]
    render_thumbnail(xyz, colours, tmp_path / "t.png", renderer="numpy", size=(200, 150), legend=legend)
    image = Image.open(tmp_path / "t.png").convert("RGB")
    assert image.width > 200
    panel = {tuple(int(v) for v in px) for px in np.asarray(image)[:, 200:].reshape(-1, 3)}
    assert (230, 25, 75) in panel and (60, 180, 75) in panel
