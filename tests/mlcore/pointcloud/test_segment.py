import numpy as np
import pytest
import torch

from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.pipeline import SegmenterError, confusion, load_segmenter, miou, predict_scan, save_segmenter
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
from mlcore.pointcloud.scenes import LABEL_ID
from mlcore.pointcloud.segment import choose_grid, segment_cloud

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 32, "embed_dim": 8}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return PTv3(PTv3Config(proj="moe", **TINY)).eval()


@pytest.fixture(scope="module")
def street():
    return make_scan("D", 1, "val")


def test_chunked_segmentation_labels_every_point_and_agrees_with_one_pass(model, street):
    whole = segment_cloud(model, street.xyz, None, street.intensity, grid=0.1)
    tiled = segment_cloud(model, street.xyz, None, street.intensity, grid=0.1, chunk_points=4000, overlap=4.0)
    assert whole.chunks == 1 and tiled.chunks > 2
    assert len(tiled.labels) == len(street) and whole.voxels == tiled.voxels < len(street)
    # Tiles see 4 m of context around them; only points near tile borders may differ.
    assert (tiled.labels == whole.labels).mean() > 0.9
    assert tiled.usage is not None and tiled.usage.sum() == tiled.voxels * len(model.routed())


def test_predictions_stay_within_the_chosen_classes(model, street):
    chosen = [LABEL_ID["road"], LABEL_ID["building"]]
    result = segment_cloud(model, street.xyz, None, street.intensity, grid=0.1, classes=chosen)
    assert set(np.unique(result.labels).tolist()) <= set(chosen)


def test_the_grid_follows_the_scan_extent_unless_told():
    room = np.random.default_rng(0).uniform(0, 6, (100, 3))
    assert choose_grid(room) == 0.04 and choose_grid(room * 10) == 0.1 and choose_grid(room, "outdoor") == 0.1


def test_miou_averages_the_iou_of_the_classes_that_occur():
    labels = np.array([0, 0, 1, 1, -1])
    pred = np.array([0, 1, 1, 1, 0])
    score, ious = miou(confusion(pred, labels), [0, 1, 2])
    assert ious == {"floor": 0.5, "wall": pytest.approx(2 / 3)} and score == pytest.approx((0.5 + 2 / 3) / 2)


def test_a_saved_segmenter_reloads_and_predicts_the_same_labels(model, tmp_path):
    scan = make_scan("A", 0, "val")
    from mlcore.pointcloud.datasets import get_dataset

    before, _ = predict_scan(model, scan, get_dataset("A"))
    loaded, config = load_segmenter(save_segmenter(model, tmp_path / "seg", card={"note": "test"}))
    after, routing = predict_scan(loaded, scan, get_dataset("A"))
    assert config["card"] == {"note": "test"} and len(routing) == 3
    assert (before == after).mean() > 0.98  # weights are stored in fp16


def test_a_segmenter_with_classes_of_its_own_but_no_training_voxel_is_refused(model, tmp_path):
    folder = save_segmenter(model, tmp_path / "seg")
    text = (folder / "config.json").read_text().replace('"pedestrian"', '"cyclist"')
    (folder / "config.json").write_text(text)
    with pytest.raises(SegmenterError, match=r"classes of its own \(floor, .*\) but not the voxel size"):
        load_segmenter(folder)


def test_a_segmenter_of_another_feature_set_is_refused(model, tmp_path):
    folder = save_segmenter(model, tmp_path / "seg")
    text = (folder / "config.json").read_text().replace('"intensity"', '"reflectance"')
    (folder / "config.json").write_text(text)
    with pytest.raises(SegmenterError, match="another feature set"):
        load_segmenter(folder)
