"""Attribute augmentation in training: off unless asked for (recipes and caches reproduce), on for a
user's scans by default, recorded in the saved segmenter, and saved segmenters unchanged by it."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mlcore.pointcloud import augment, pipeline
from mlcore.pointcloud.augment import robust_attributes
from mlcore.pointcloud.datasets import get_dataset, grid_sample, make_scan
from mlcore.pointcloud.pipeline import TrainConfig, confusion, load_segmenter, miou, scan_ground, train
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
from mlcore.pointcloud.segment import segment_cloud
from mlcore.pointcloud.user_train import USER_ATTRIBUTE_AUGMENT, label_space, replace_datasets, save_user_segmenter

ROOT = Path(__file__).resolve().parents[3]
TINY = PTv3Config(channels=(16, 32), depths=(1, 1), dec_depths=(1,), patch=16, proj="moe", experts=2, top_k=1)


@pytest.fixture(scope="module")
def pool() -> pipeline.ScanPool:
    return pipeline.ScanPool(("A", "C"), 1)


def tiny_run(
    monkeypatch: pytest.MonkeyPatch, pool: pipeline.ScanPool, attribute_augment: str | None
) -> tuple[list[float], int]:
    """Losses of a 2-step run and how many crops went through the augmentation."""
    calls = []
    original = augment.augment_features

    def counted(*args: object, **kwargs: object) -> np.ndarray:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(augment, "augment_features", counted)
    cfg = TrainConfig(
        steps=2, batch_size=2, points=256, scenes=1, datasets=("A", "C"), attribute_augment=attribute_augment
    )
    torch.manual_seed(0)
    result = train(PTv3(TINY), cfg, pool=pool)
    return [loss for _, loss in result.loss], len(calls)


def test_training_leaves_attributes_alone_unless_augmentation_is_asked_for(monkeypatch, pool):
    unset, unset_calls = tiny_run(monkeypatch, pool, None)
    off, off_calls = tiny_run(monkeypatch, pool, "off")
    robust, robust_calls = tiny_run(monkeypatch, pool, "robust")
    assert unset_calls == off_calls == 0  # not a single random number drawn for it: the data is as before
    assert unset == off
    assert robust_calls == 2 * 2  # every crop of every step
    assert robust != off


def test_dropout_per_batch_drops_an_attribute_from_all_of_a_steps_crops_or_from_none(monkeypatch, pool):
    kept: list[bool] = []
    original = augment.augment_features

    def recorded(*args: object, **kwargs: object) -> np.ndarray:
        out = original(*args, **kwargs)
        kept.append(augment.present(out)["colour"])
        return out

    monkeypatch.setattr(augment, "augment_features", recorded)
    batch = 3
    cfg = TrainConfig(
        steps=8, batch_size=batch, points=128, scenes=1, datasets=("A",), attribute_augment="robust-batch"
    )
    train(PTv3(TINY), cfg, pool=pool)
    steps = [set(kept[i : i + batch]) for i in range(0, len(kept), batch)]
    assert all(len(step) == 1 for step in steps)  # dataset A carries colour: the batch's draw decides alone
    assert {True, False} == set().union(*steps)


def test_an_unknown_height_reference_stops_training_before_it_starts(pool):
    cfg = TrainConfig(steps=1, batch_size=1, points=256, scenes=1, datasets=("A",), height="floor")
    with pytest.raises(ValueError, match="height must be one of crop, scan"):
        train(PTv3(TINY), cfg, pool=pool)


def test_an_unknown_augmentation_name_stops_training_before_it_starts(pool):
    cfg = TrainConfig(steps=1, batch_size=1, points=256, scenes=1, datasets=("A",), attribute_augment="strong")
    with pytest.raises(ValueError, match="unknown attribute augmentation"):
        train(PTv3(TINY), cfg, pool=pool)


def test_a_users_run_is_augmented_and_measures_heights_from_the_scan_unless_its_config_says_otherwise():
    cfg = TrainConfig(scenes=1)
    user = replace_datasets(cfg, ("user",))
    assert user.attribute_augment == USER_ATTRIBUTE_AUGMENT == "balanced" and user.height == "scan"
    own = dataclasses.replace(cfg, attribute_augment="off", height="crop")
    assert (replace_datasets(own, ("user",)).attribute_augment, replace_datasets(own, ("user",)).height) == (
        "off",
        "crop",
    )


def test_scan_heights_start_at_the_scans_ground_by_the_models_rule(monkeypatch, pool):
    seen: list[np.ndarray] = []
    original = pipeline.collate

    def spy(samples, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.extend(s.feat[:, 4].copy() for s in samples)
        return original(samples, *args, **kwargs)

    monkeypatch.setattr(pipeline, "collate", spy)
    runs = (("crop", "lowest"), ("scan", "lowest"), ("scan", "robust"))
    for height, ground in runs:
        cfg = TrainConfig(steps=1, batch_size=2, points=256, scenes=1, datasets=("A", "C"), height=height)
        torch.manual_seed(0)
        train(PTv3(dataclasses.replace(TINY, ground=ground)), cfg, pool=pool)
    by_crop, by_lowest, by_robust = (seen[2 * i : 2 * i + 2] for i in range(len(runs)))
    # Every run draws the same crops (the height rule draws no random numbers): per crop, the three
    # channels differ by a constant, the crop's lowest point above each ground.
    drops = {}
    for name, scan in ((n, pool.scans[n][0]) for n in ("A", "C")):
        keep = grid_sample(scan.xyz, get_dataset(name).grid)[0]
        drops[name] = scan_ground(scan, keep, "lowest") - scan_ground(scan, keep, "robust")
    for crop, lowest, robust in zip(by_crop, by_lowest, by_robust, strict=True):
        assert crop.min() == 0.0  # measured from the crop's own lowest point
        rise = lowest.min()
        assert rise >= 0.0  # no kept point lies under the scan's lowest
        np.testing.assert_allclose(lowest, crop + rise, atol=1e-5)
        assert any(np.allclose(robust, lowest + drop, atol=1e-5) for drop in drops.values())
    assert all(drop < 0 for drop in drops.values())  # the robust ground lies above the lowest point


def test_prepare_measures_heights_from_the_ground_it_is_given_or_from_the_crops_lowest_point():
    from mlcore.pointcloud.pipeline import prepare
    from mlcore.pointcloud.sensors import Scan

    # One point on the floor far away, three on a shelf 2 m up; labels name the points.
    xyz = np.array([[0, 0, 0.0], [5, 5, 2.0], [5.1, 5, 2.1], [5, 5.1, 2.2]], np.float32)
    scan = Scan(xyz, None, None, np.arange(4, dtype=np.int32))
    for seed in range(6):
        own, _ = prepare(scan, get_dataset("A"), points=3, rng=np.random.default_rng(seed), augment=False)
        taken = xyz[own.labels, 2]
        np.testing.assert_allclose(own.feat[:, 4], taken - taken.min(), atol=1e-6)
        floor, _ = prepare(
            scan, get_dataset("A"), points=3, rng=np.random.default_rng(seed), augment=False, ground=-1.0
        )
        np.testing.assert_array_equal(floor.labels, own.labels)
        np.testing.assert_allclose(floor.feat[:, 4], taken + 1.0, atol=1e-6)
    keep = grid_sample(xyz, get_dataset("A").grid)[0]
    assert scan_ground(scan, keep, "lowest") == 0.0


def test_the_user_segmenter_records_its_augmentation_for_pointcloud_segment(tmp_path):
    space = label_space(["asphalt", "road marking"], synmix=False)
    model = PTv3(dataclasses.replace(TINY, num_classes=2))
    folder = save_user_segmenter(
        model, tmp_path / "seg", space, 0.05, {}, attributes=["intensity"], attribute_augment="robust"
    )
    config = json.loads((folder / "config.json").read_text())
    assert config["card"]["attribute_augment"] == "robust"
    assert robust_attributes(config) == ("colour", "intensity")
    plain = save_user_segmenter(model, tmp_path / "plain", space, 0.05, {}, attributes=["intensity"])
    assert robust_attributes(json.loads((plain / "config.json").read_text())) is None


def test_the_committed_zoo_segmenter_gives_the_numbers_its_encodings_benchmark_recorded():
    # bench/results/pointcloud-encodings.json: dataset A, validation scan 0, with colour and geometry only.
    recorded = json.loads((ROOT / "bench/results/pointcloud-encodings.json").read_text())["attributes"][0]
    torch.set_num_threads(1)
    model, config = load_segmenter(ROOT / "mlcore/zoo/checkpoints/pointmoe-synmix")
    assert config["features"] == ["r", "g", "b", "intensity", "height"] and model.cfg.in_channels == 5
    spec, scan = get_dataset("A"), make_scan("A", 0, "val")
    for rgb, key in ((scan.rgb, "colour"), (None, "xyz-only")):
        result = segment_cloud(model, scan.xyz, rgb, None, grid=spec.grid, classes=list(spec.class_ids))
        value = miou(confusion(result.labels.astype(np.int64), scan.labels.astype(np.int64)), spec.class_ids)[0]
        assert value == pytest.approx(recorded[key], abs=1e-9)
