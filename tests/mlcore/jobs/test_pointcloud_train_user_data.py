"""pointcloud-train on the user's own labelled scans: an upload, a library dataset, mixing with SynMix."""

import json
import zipfile

import numpy as np
import pytest

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.pointcloud.augment import robust_attributes
from mlcore.pointcloud.pipeline import load_segmenter
from mlcore.pointcloud.user_samples import write_cloudcompare_ply, write_las

FAST = {"steps": 2, "batch_size": 1, "points": 256, "eval_every": 0, "architecture": "dense", "seed": 0}


def scans_zip(tmp_path, classes=(2, 6)):
    """Three small labelled scans (two LAS, one PLY) of two layers: ground below, building above."""
    folder = tmp_path / "scans"
    folder.mkdir()
    for i in range(3):
        rng = np.random.default_rng(i)
        xyz = rng.uniform(0, 4, (600, 3)).astype(np.float32)
        ids = np.where(xyz[:, 2] < 2, classes[0], classes[1])
        rgb = np.full((600, 3), 90, np.uint8)
        if i < 2:
            write_las(folder / f"tile-{i}.las", xyz, rgb, ids)
        else:
            write_cloudcompare_ply(folder / f"tile-{i}.ply", xyz, rgb, ids)
    (folder / "classes.json").write_text(json.dumps({str(classes[0]): "ground", str(classes[1]): "building"}))
    archive = tmp_path / "scans.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in folder.iterdir():
            zf.write(path, f"scans/{path.name}")
    return archive


def run(raw, files=None, ctx=None):
    kind = get_kind("pointcloud-train")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_trains_on_an_uploaded_zip_of_scans_and_reports_iou_per_class_on_held_out_scans(tmp_path):
    outcome, ctx = run({}, {"scans": [scans_zip(tmp_path)]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["train_scans"] + scalars["heldout_scans"] == 3 and scalars["heldout_scans"] >= 1
    assert 0 <= scalars["iou_ground"] <= 1 and 0 <= scalars["iou_building"] <= 1
    assert 0 <= scalars["user_miou"] <= 1 and "seen_miou" not in scalars
    assert {row["class"] for row in ctx.charts["class_iou"]["data"]["values"]} == {"ground", "building"}
    config = json.loads((ctx.artifacts["segmenter"].path / "config.json").read_text())
    assert config["labels"] == ["ground", "building"] and config["model"]["num_classes"] == 2
    # pointcloud-segment reads the user's classes, so the segmenter goes to the library with their ids.
    (registered,) = ctx.registrations
    assert registered.kind == "pointcloud-segmenter"
    assert config["user"]["classes"] == ["ground", "building"]
    assert set(config["user"]["codes"]) == {"ground", "building"}


def test_on_the_users_scans_it_trains_balanced_by_default_and_batch_30_when_asked(tmp_path):
    archive = scans_zip(tmp_path)
    outcome, ctx = run({}, {"scans": [archive]})
    assert outcome.status == "succeeded", outcome.traceback
    assert any(line.startswith("attribute robustness balanced:") and "never dropped" in line for line in ctx.lines)
    model, config = load_segmenter(ctx.artifacts["segmenter"].path)
    assert robust_attributes(config) == () and getattr(model, "presence_stats", None) is None
    assert (model.cfg.patch_layout, model.cfg.ground) == ("local", "robust")

    outcome, ctx = run({"attribute_augment": "batch-30"}, {"scans": [archive]})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("dropped (colour from 30%, intensity from 30% of the batches)" in line for line in ctx.lines)
    model, config = load_segmenter(ctx.artifacts["segmenter"].path)
    assert robust_attributes(config) == ("colour", "intensity")
    # The scans carry colour and no intensity: a set for each pattern of what they carry, none with intensity.
    assert sorted(model.presence_stats) == ["colour", "none"]


def test_mixed_with_synmix_the_users_classes_join_the_master_labels(tmp_path):
    raw = {"mix_synmix": True, "datasets": "C", "scenes": 1, "eval_scenes": 1}
    outcome, ctx = run(raw, {"scans": [scans_zip(tmp_path)]})
    assert outcome.status == "succeeded", outcome.traceback
    config = json.loads((ctx.artifacts["segmenter"].path / "config.json").read_text())
    assert config["labels"][-1] == "ground" and config["labels"].count("building") == 1  # shared with SynMix
    assert 0 <= ctx.metrics.scalars["miou_C"] <= 1 and "iou_building" in ctx.metrics.scalars


def test_the_library_sample_runs_the_user_data_path(tmp_path):
    kind = get_kind("pointcloud-train")
    assert kind.spec.sample["scan_set"] == "zoo:labelled-rooms"
    outcome, ctx = run({"scan_set": "zoo:labelled-rooms", "steps": 1})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("names from classes.json" in line for line in ctx.lines)
    assert "iou_furniture" in ctx.metrics.scalars


def test_point_moe_on_the_users_scans_charts_its_expert_usage(tmp_path):
    outcome, ctx = run({"architecture": "moe-proj"}, {"scans": [scans_zip(tmp_path)]})
    assert outcome.status == "succeeded", outcome.traceback
    assert {row["dataset"] for row in ctx.charts["expert_usage"]["data"]["values"]} == {"your scans"}


def test_an_upload_and_a_library_dataset_together_are_refused(tmp_path):
    outcome, _ = run({"scan_set": "zoo:labelled-rooms"}, {"scans": [scans_zip(tmp_path)]})
    assert outcome.status == "failed" and "one way" in outcome.error


@pytest.mark.parametrize(("raw", "needle"), [({"mix_synmix": True}, "mix_synmix"), ({"voxel": 0.1}, "voxel")])
def test_options_for_the_users_scans_without_scans_are_refused(raw, needle):
    outcome, _ = run(raw)
    assert outcome.status == "failed" and needle in outcome.error and "none were given" in outcome.error


def test_a_zip_of_scans_without_labels_is_refused_with_a_sentence(tmp_path):
    folder = tmp_path / "raw"
    folder.mkdir()
    archive = tmp_path / "raw.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(2):
            zf.writestr(f"s{i}.xyz", "\n".join(f"{i + j * 0.01} 0 0" for j in range(100)) + "\n")
    outcome, _ = run({}, {"scans": [archive]})
    assert outcome.status == "failed" and "no per-point labels found" in outcome.error
