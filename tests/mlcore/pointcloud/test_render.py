"""Thumbnails: label colours land in the PNG exactly, from open3d offscreen or the numpy fallback,
and the function says which one drew."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlcore.pointcloud import render
from mlcore.pointcloud.render import palette, render_thumbnail


def labelled_blocks(n: int = 6000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    xyz = rng.random((n, 3)).astype(np.float32) * [4.0, 2.0, 1.0]
    labels = np.minimum((xyz[:, 0]).astype(np.int32), 3)
    return xyz, labels


def colours_in(path: Path) -> set[tuple[int, int, int]]:
    image = np.asarray(Image.open(path).convert("RGB")).reshape(-1, 3)
    return {tuple(int(v) for v in c) for c in np.unique(image, axis=0)}


def test_the_palette_is_fixed_distinct_and_grows_past_twenty() -> None:
    colors = palette(40)
    assert colors.dtype == np.uint8 and colors.shape == (40, 3)
    assert len({tuple(c) for c in colors.tolist()}) == 40
    np.testing.assert_array_equal(palette(5), colors[:5])
    assert (255, 255, 255) not in {tuple(c) for c in colors.tolist()}  # invisible on the background


def test_the_numpy_renderer_draws_every_label_colour_exactly(tmp_path: Path) -> None:
    xyz, labels = labelled_blocks()
    used = render_thumbnail(xyz, palette(4)[labels], tmp_path / "t.png", renderer="numpy", size=(320, 240))
    assert used == "numpy"
    found = colours_in(tmp_path / "t.png")
    assert {tuple(c) for c in palette(4).tolist()} | {render.BACKGROUND} == found


def test_open3d_renders_offscreen_with_exact_label_colours(tmp_path: Path) -> None:
    pytest.importorskip("open3d")
    xyz, labels = labelled_blocks()
    used = render_thumbnail(xyz, palette(4)[labels], tmp_path / "t.png", renderer="auto", size=(320, 240))
    if used != "open3d":
        pytest.skip("no offscreen device here (install libvulkan1 and mesa-vulkan-drivers)")
    found = colours_in(tmp_path / "t.png")
    # Post-processing off: no tone mapping or anti-aliasing may shift a label colour.
    assert {tuple(c) for c in palette(4).tolist()} <= found
    assert render.BACKGROUND in found


def test_a_failing_offscreen_renderer_falls_back_to_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render.sys, "executable", str(tmp_path / "no-such-python"))
    xyz, labels = labelled_blocks(500)
    assert render_thumbnail(xyz, palette(4)[labels], tmp_path / "t.png", size=(160, 120)) == "numpy"
    assert Image.open(tmp_path / "t.png").size == (160, 120)
    with pytest.raises(RuntimeError, match="open3d could not render"):
        render_thumbnail(xyz, palette(4)[labels], tmp_path / "u.png", renderer="open3d")


def test_it_refuses_colours_that_do_not_match_the_points(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="colors"):
        render_thumbnail(np.zeros((3, 3)), np.zeros((2, 3), np.uint8), tmp_path / "t.png")
