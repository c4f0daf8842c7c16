import json

import numpy as np
import pytest
import torch

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.pointcloud.io import read_cloud, write_ply
from mlcore.pointcloud.pipeline import save_segmenter
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
from mlcore.pointcloud.scenes import LABEL_ID, LABELS

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 32, "embed_dim": 8}


@pytest.fixture(scope="module")
def segmenter(tmp_path_factory):
    """A small untrained Point-MoE segmenter: the job's plumbing does not need a good model."""
    torch.manual_seed(0)
    return save_segmenter(PTv3(PTv3Config(proj="moe", **TINY)), tmp_path_factory.mktemp("seg") / "tiny")


def run(raw, files=None, ctx=None):
    kind = get_kind("pointcloud-segment")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {"seed": 0, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_labels_every_point_of_the_sample_room_and_writes_the_viewer_files(segmenter, tmp_path):
    outcome, ctx = run(
        {"model": str(segmenter), "scene": "zoo:synmix-room", "preview_points": 3000, "chunk_points": 4000}
    )
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["chunks"] > 1  # the room exceeds 4000 voxels: it went through the chunked path
    full = read_cloud(ctx.artifacts["labelled.ply"].path, max_points=10**6)
    assert len(full) == scalars["points"] and full.labels is not None and full.labels.max() < len(LABELS)
    preview = ctx.artifacts["preview.ply"]
    assert preview.media_type == "application/x-ply" and len(read_cloud(preview.path, max_points=10**6)) <= 3000
    assert ctx.artifacts["labelled.ply"].media_type == "application/octet-stream"  # too big for the viewer
    assert ctx.artifacts["thumbnail.png"].path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = {row["class"]: row["points"] for row in ctx.charts["class_counts"]["data"]["values"]}
    assert sum(counts.values()) == scalars["points"]
    usage = ctx.charts["expert_usage"]["data"]["values"]
    assert {row["expert"] for row in usage} <= {f"expert {e}" for e in range(4)}
    assert 0 <= scalars["accuracy_vs_file_labels"] <= 1 and scalars["points_per_second"] > 0
    assert json.loads(ctx.artifacts["expert_usage.json"].path.read_text())["labels"] == list(LABELS)
    # The labelled cloud is offered to the team library, where later jobs can take it.
    (registered,) = ctx.registrations
    assert registered.kind == "pointclouds" and registered.path == ctx.artifacts["labelled.ply"].path


def test_an_uploaded_lidar_cloud_restricted_to_two_classes_gets_only_those(segmenter, tmp_path):
    rng = np.random.default_rng(0)
    xyz = rng.uniform(0, 60, (3000, 3)).astype(np.float32)
    path = write_ply(tmp_path / "scan.ply", xyz, intensity=rng.random(3000).astype(np.float32))
    outcome, ctx = run({"model": str(segmenter), "classes": "road,car"}, {"cloud": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    labels = read_cloud(ctx.artifacts["labelled.ply"].path, max_points=10**6).labels
    assert set(np.unique(labels).tolist()) <= {LABEL_ID["road"], LABEL_ID["car"]}
    assert ctx.metrics.scalars["grid_m"] == 0.1  # 60 m across: a street
    assert ctx.artifacts["labelled.ply"].media_type == "application/x-ply"


def test_a_truncated_ply_is_refused_with_its_name_and_nothing_is_kept(segmenter, tmp_path):
    path = write_ply(tmp_path / "cut.ply", np.random.default_rng(0).random((500, 3)).astype(np.float32))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    outcome, ctx = run({"model": str(segmenter)}, {"cloud": [path]})
    assert outcome.status == "failed" and "cut.ply" in outcome.error
    assert not ctx.artifacts


def test_nan_coordinates_are_refused(segmenter, tmp_path):
    xyz = np.random.default_rng(0).random((100, 3)).astype(np.float32)
    xyz[5, 1] = np.nan
    path = write_ply(tmp_path / "nan.ply", xyz)
    outcome, ctx = run({"model": str(segmenter)}, {"cloud": [path]})
    assert outcome.status == "failed" and "nan.ply" in outcome.error and not ctx.artifacts


def test_a_model_folder_that_is_not_a_segmenter_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    outcome, ctx = run({"model": str(tmp_path), "scene": "zoo:synmix-room"})
    assert outcome.status == "failed" and "Model" in outcome.error and "format" in outcome.error
    assert not ctx.artifacts


def test_without_a_cloud_or_a_scene_it_says_what_to_give(segmenter):
    outcome, _ = run({"model": str(segmenter)})
    assert outcome.status == "failed" and "Upload a point cloud" in outcome.error


def test_the_try_with_a_sample_button_segments_the_sample_room_with_the_zoo_point_moe():
    outcome, ctx = run(dict(get_kind("pointcloud-segment").spec.sample))
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["grid_m"] == 0.04 and scalars["chunks"] == 1
    # The zoo model was trained on rooms like this one (dataset A): far better than chance.
    assert scalars["miou_vs_file_labels"] > 0.4 and scalars["accuracy_vs_file_labels"] > 0.6
    assert scalars["count_floor"] > 0 and scalars["count_wall"] > 0


def test_a_room_without_the_colour_the_segmenter_always_had_is_segmented_with_a_loud_warning(segmenter, tmp_path):
    rng = np.random.default_rng(0)
    xyz = rng.uniform(0, 5, (3000, 3)).astype(np.float32)
    bare = write_ply(tmp_path / "bare.ply", xyz)
    outcome, ctx = run({"model": str(segmenter)}, {"cloud": [bare]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["missing_colour"] == 1.0 and ctx.metrics.scalars["missing_intensity"] == 0.0
    assert any(line.startswith("warning: this segmenter was trained on scans with colour") for line in ctx.lines)
    summary = get_kind("pointcloud-segment").spec.summarize(ctx.metrics.scalars)
    assert "the file has no colour, which the segmenter always trained with" in summary


def test_a_room_with_its_colour_gets_no_missing_attribute_warning(segmenter, tmp_path):
    rng = np.random.default_rng(0)
    xyz = rng.uniform(0, 5, (3000, 3)).astype(np.float32)
    coloured = write_ply(tmp_path / "coloured.ply", xyz, rgb=rng.integers(0, 256, (3000, 3)).astype(np.uint8))
    outcome, ctx = run({"model": str(segmenter)}, {"cloud": [coloured]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["missing_colour"] == 0.0
    assert not any(line.startswith("warning: this segmenter") for line in ctx.lines)
    assert "which the segmenter always trained with" not in get_kind("pointcloud-segment").spec.summarize(
        ctx.metrics.scalars
    )
