"""Label colours and PNG thumbnails of point clouds, for job lists, the results page and PDFs.

:func:`render_thumbnail` renders offscreen with open3d (Filament on Vulkan; on a machine without a
GPU, Mesa's llvmpipe) with post-processing off and the unlit shader, so a label's colour lands
in the PNG exactly as :func:`palette` defines it. The renderer runs in a child process: a crash
or a hang in a graphics driver must not take the worker down, and a child that fails or times
out is replaced by a small numpy z-buffer splatter drawn with Pillow (same camera, same exact
colours, no dependency beyond numpy and Pillow). The return value says which one drew the image.
"""

from __future__ import annotations

import colorsys
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

Renderer = Literal["open3d", "numpy"]
BACKGROUND = (255, 255, 255)
#: Seen from above and to the side, z up: the view a person first turns a scan to.
VIEW_DIRECTION = np.array([1.0, -1.25, 0.95])
FIELD_OF_VIEW_DEG = 50.0
OPEN3D_TIMEOUT_S = 90

# Twenty colours far apart for people, including the common colour-blind kinds (Kelly's
# "maximum contrast" list, reordered so the first few are the most distinct; white and near-white
# left out because the thumbnail background is white).
_KELLY = (
    (230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
    (220, 190, 255), (170, 110, 40), (255, 225, 25), (128, 0, 0), (170, 255, 195),
    (128, 128, 0), (255, 215, 180), (0, 0, 128), (128, 128, 128), (0, 0, 0),
)  # fmt: skip


def palette(n: int) -> np.ndarray:
    """``n`` label colours, uint8 (n, 3): a fixed list of 20, then golden-ratio hues (distinct)."""
    colors = list(_KELLY[:n])
    for k in range(len(colors), n):
        hue = (k * 0.618033988749895) % 1.0
        r, g, b = colorsys.hsv_to_rgb(hue, 0.65 + 0.35 * (k % 2), 0.95 - 0.3 * ((k // 2) % 2))
        colors.append((round(r * 255), round(g * 255), round(b * 255)))
    return np.asarray(colors, dtype=np.uint8).reshape(n, 3)


def _camera(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Look-at centre, eye position and up vector framing the whole cloud."""
    lo, hi = xyz.min(axis=0), xyz.max(axis=0)
    center = (lo + hi) / 2.0
    radius = max(float(np.linalg.norm(hi - lo)) / 2.0, 1e-6)
    direction = VIEW_DIRECTION / np.linalg.norm(VIEW_DIRECTION)
    distance = radius / np.tan(np.radians(FIELD_OF_VIEW_DEG / 2.0)) * 1.05
    return center, center + direction * distance, np.array([0.0, 0.0, 1.0])


def render_thumbnail(
    xyz: np.ndarray,
    colors: np.ndarray,
    path: Path,
    *,
    size: tuple[int, int] = (640, 480),
    point_size: float = 3.0,
    renderer: Literal["auto", "open3d", "numpy"] = "auto",
    legend: Sequence[tuple[str, tuple[int, int, int]]] = (),
) -> Renderer:
    """Render ``xyz`` (N, 3) with per-point uint8 ``colors`` (N, 3) to a PNG at ``path``.

    ``renderer="auto"`` tries open3d offscreen and falls back to numpy; the one used is returned.
    ``legend``: (class name, colour) pairs, drawn as swatches in a panel right of the image
    (:func:`add_legend`), so a thumbnail read alone says which colour is which class.
    """
    xyz = np.ascontiguousarray(xyz, dtype=np.float64)
    colors = np.ascontiguousarray(colors, dtype=np.uint8)
    if xyz.ndim != 2 or xyz.shape[1] != 3 or colors.shape != xyz.shape or not len(xyz):
        raise ValueError(
            f"render_thumbnail needs xyz (N, 3) and colors (N, 3) with N > 0, got {xyz.shape}, {colors.shape}"
        )
    path = Path(path)
    used: Renderer
    if renderer in ("auto", "open3d") and _render_open3d_in_child(xyz, colors, path, size, point_size):
        used = "open3d"
    elif renderer == "open3d":
        raise RuntimeError("open3d could not render offscreen here (no Vulkan/EGL device?)")
    else:
        render_numpy(xyz, colors, path, size=size, point_size=point_size)
        used = "numpy"
    if legend:
        add_legend(path, legend)
    return used


#: Legend panel layout, in pixels.
LEGEND_SWATCH = 14
LEGEND_ROW = 20
LEGEND_MARGIN = 10


def add_legend(path: Path, legend: Sequence[tuple[str, tuple[int, int, int]]]) -> None:
    """Widen the PNG at ``path`` by a white panel listing each class's colour swatch and name, in
    exactly the colours the points are drawn in."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.open(path).convert("RGB")
    font = ImageFont.load_default()
    draw = ImageDraw.Draw(image)
    width = max(int(draw.textlength(name, font=font)) for name, _ in legend) + LEGEND_SWATCH + 3 * LEGEND_MARGIN
    rows = max(1, (image.height - 2 * LEGEND_MARGIN) // LEGEND_ROW)
    columns = -(-len(legend) // rows)
    canvas = Image.new("RGB", (image.width + width * columns, image.height), BACKGROUND)
    canvas.paste(image, (0, 0))
    draw = ImageDraw.Draw(canvas)
    for i, (name, rgb) in enumerate(legend):
        x = image.width + (i // rows) * width + LEGEND_MARGIN
        y = LEGEND_MARGIN + (i % rows) * LEGEND_ROW
        draw.rectangle([x, y, x + LEGEND_SWATCH - 1, y + LEGEND_SWATCH - 1], fill=tuple(rgb), outline=(90, 90, 90))
        draw.text((x + LEGEND_SWATCH + LEGEND_MARGIN // 2, y + 1), name, fill=(20, 20, 20), font=font)
    canvas.save(path, format="PNG")


def _render_open3d_in_child(
    xyz: np.ndarray, colors: np.ndarray, path: Path, size: tuple[int, int], point_size: float
) -> bool:
    with tempfile.TemporaryDirectory(prefix="moelab-render-") as tmp:
        scene = Path(tmp) / "scene.npz"
        out = Path(tmp) / "out.png"
        np.savez(scene, xyz=xyz, colors=colors, size=np.array(size), point_size=np.array(point_size))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "mlcore.pointcloud.render", str(scene), str(out)],
                capture_output=True,
                timeout=OPEN3D_TIMEOUT_S,
                env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
            )
        except (subprocess.TimeoutExpired, OSError):
            return False
        if done.returncode != 0 or not out.is_file():
            return False
        shutil.move(out, path)
        return True


def _render_open3d(scene: Path, out: Path) -> None:
    """The child process: one offscreen frame, post-processing off so colours stay exact."""
    import open3d as o3d

    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)
    data = np.load(scene)
    xyz, colors = data["xyz"], data["colors"]
    width, height = (int(v) for v in data["size"])
    renderer = o3d.visualization.rendering.OffscreenRenderer(width, height)
    renderer.scene.set_background([c / 255.0 for c in BACKGROUND] + [1.0])
    renderer.scene.view.set_post_processing(False)  # no tone mapping, no FXAA: exact label colours
    material = o3d.visualization.rendering.MaterialRecord()
    material.shader = "defaultUnlit"
    material.point_size = float(data["point_size"])
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(xyz))
    cloud.colors = o3d.utility.Vector3dVector(colors / 255.0)
    renderer.scene.add_geometry("cloud", cloud, material)
    center, eye, up = _camera(xyz)
    renderer.setup_camera(FIELD_OF_VIEW_DEG, center, eye, up)
    o3d.io.write_image(str(out), renderer.render_to_image())


def render_numpy(
    xyz: np.ndarray, colors: np.ndarray, path: Path, *, size: tuple[int, int] = (640, 480), point_size: float = 3.0
) -> None:
    """Pinhole projection with the same camera, square splats and a z-buffer."""
    from PIL import Image

    width, height = size
    center, eye, up = _camera(xyz)
    forward = (center - eye) / np.linalg.norm(center - eye)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    true_up = np.cross(right, forward)
    rel = xyz - eye
    depth = rel @ forward
    keep = depth > 1e-9
    focal = (height / 2.0) / np.tan(np.radians(FIELD_OF_VIEW_DEG / 2.0))
    u = (width / 2.0 + focal * (rel[keep] @ right) / depth[keep]).astype(np.int64)
    v = (height / 2.0 - focal * (rel[keep] @ true_up) / depth[keep]).astype(np.int64)
    cols, depth = colors[keep], depth[keep]
    half = max(round(point_size) // 2, 0)
    offsets = [(du, dv) for du in range(-half, half + 1) for dv in range(-half, half + 1)]
    uu = np.concatenate([u + du for du, _ in offsets])
    vv = np.concatenate([v + dv for _, dv in offsets])
    inside = (uu >= 0) & (uu < width) & (vv >= 0) & (vv < height)
    pixel = (vv * width + uu)[inside]
    z = np.tile(depth, len(offsets))[inside]
    which = np.tile(np.arange(len(depth)), len(offsets))[inside]
    # A z-buffer: per pixel, the nearest splat wins (sort by pixel, then depth; keep the first).
    order = np.lexsort((z, pixel))
    first = np.unique(pixel[order], return_index=True)[1]
    image = np.empty((height * width, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    image[pixel[order][first]] = cols[which[order][first]]
    image = image.reshape(height, width, 3)
    Image.fromarray(image).save(path, format="PNG")


if __name__ == "__main__":
    _render_open3d(Path(sys.argv[1]), Path(sys.argv[2]))
