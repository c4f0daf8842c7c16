"""A test-only kind for the point-cloud front door and viewer: read an uploaded cloud through
:func:`mlcore.pointcloud.io.read_cloud` (or build a small labelled room), label it, and record the
viewer's preview PLY and a thumbnail, the way ``pointcloud-segment`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlcore.jobs import Choice, File, Int, JobContext, JobSpec, Seed

NAMES = ("floor", "wall", "table", "lamp")

spec = JobSpec(
    name="test-pointcloud",
    title="Show a labelled point cloud",
    summary="Reads an uploaded cloud (or builds a room), labels it by height and records a preview PLY.",
    version=1,
    queue="cpu",
    soft_time_limit=120,
    time_limit=180,
    params=(
        File(name="cloud", formats=("ply", "pcd", "xyz", "las"), max_bytes=50 * 2**20, help="A point cloud."),
        Int(name="points", default=20_000, min=100, max=500_000, help="Points in the built-in room."),
        Int(name="budget", default=50_000, min=100, max=500_000, help="Points in the viewer's preview."),
        Choice(name="renderer", default="numpy", options=("numpy", "auto")),
        Seed(name="seed"),
    ),
    guide="The 3D viewer shows the cloud; toggle between label and input colours.",
    sample={"points": 20_000},
)


def room(points: int, seed: int) -> Any:
    """A 6 m × 4 m room: floor, two walls, a table and a lamp, labelled by construction."""
    import numpy as np

    from mlcore.pointcloud.io import Cloud

    rng = np.random.default_rng(seed)
    share = rng.multinomial(points, [0.45, 0.35, 0.15, 0.05])
    floor = np.column_stack([rng.random(share[0]) * 6, rng.random(share[0]) * 4, np.zeros(share[0])])
    along = rng.random(share[1]) < 0.6
    wall = np.column_stack(
        [
            np.where(along, rng.random(share[1]) * 6, 0.0),
            np.where(along, 4.0, rng.random(share[1]) * 4),
            rng.random(share[1]) * 2.5,
        ]
    )
    table = np.column_stack([2 + rng.random(share[2]) * 1.5, 1.5 + rng.random(share[2]), np.full(share[2], 0.75)])
    direction = rng.normal(size=(share[3], 3))
    lamp = np.array([4.5, 2.5, 1.8]) + 0.2 * direction / np.linalg.norm(direction, axis=1, keepdims=True)
    xyz = np.vstack([floor, wall, table, lamp]).astype(np.float32)
    labels = np.repeat(np.arange(4, dtype=np.int32), share)
    tints = np.array([[150, 120, 90], [225, 220, 210], [110, 70, 40], [250, 240, 160]])
    rgb = np.clip(tints[labels] + rng.normal(0, 12, (points, 3)), 0, 255).astype(np.uint8)
    return Cloud(xyz=xyz, rgb=rgb, labels=labels)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import numpy as np

    from mlcore.pointcloud.io import read_cloud, write_ply
    from mlcore.pointcloud.preview import input_colors, preview_indices, write_preview
    from mlcore.pointcloud.render import palette, render_thumbnail

    ctx.progress(0.0, "reading")
    if "cloud" in inputs:
        # Every check happens here, before anything is recorded: a bad file leaves no artifacts.
        cloud = read_cloud(Path(inputs["cloud"]), max_points=2_000_000)
        ctx.log(f"read {len(cloud):,} points")
    else:
        cloud = room(params["points"], params["seed"])
    if cloud.labels is None:
        z = cloud.xyz[:, 2]
        labels = np.digitize(z, np.quantile(z, [0.25, 0.5, 0.75])).astype(np.int32)
    else:
        labels = np.clip(cloud.labels, 0, len(NAMES) - 1)
    ctx.progress(0.5, "writing the preview")
    shown = write_preview(ctx.workdir / "cloud.ply", cloud, labels=labels, label_names=NAMES, budget=params["budget"])
    ctx.artifact("cloud.ply", ctx.workdir / "cloud.ply", "application/x-ply")
    index = preview_indices(cloud.xyz, 20_000, seed=params["seed"])
    # A plain cloud too (colours only, no labels), as a PLY from elsewhere would be.
    write_ply(ctx.workdir / "input.ply", cloud.xyz[index], rgb=input_colors(cloud)[index])
    ctx.artifact("input.ply", ctx.workdir / "input.ply", "application/x-ply")
    thumb = ctx.workdir / "thumbnail.png"
    used = render_thumbnail(cloud.xyz[index], palette(len(NAMES))[labels[index]], thumb, renderer=params["renderer"])
    ctx.artifact("thumbnail.png", thumb, "image/png")
    ctx.log(f"thumbnail drawn by {used}")
    ctx.metric("points", len(cloud))
    ctx.metric("preview_points", shown)
    ctx.progress(1.0, "done")
    return {"points": len(cloud), "preview_points": shown}
