import numpy as np
import pytest

from mlcore.data.images import TEST_PHOTOS, build_image_crops, image_crops, photos, split_photos


def test_the_offline_photos_load_without_network_as_rgb_uint8():
    every = photos()
    assert len(every) > 250  # ~22 photos, 200 faces, 64 digits
    kinds = {p.name.split("_")[0] for p in every}
    assert {"lfw", "digit", "china.jpg", "astronaut.png"} <= kinds
    assert all(p.pixels.dtype == np.uint8 and p.pixels.ndim == 3 and p.pixels.shape[2] == 3 for p in every)


def test_the_splits_share_no_photo_and_hold_out_the_test_photos():
    train = {p.name for p in split_photos("train")}
    test = {p.name for p in split_photos("test")}
    assert not train & test
    assert TEST_PHOTOS & {p.name for p in photos()} <= test
    assert any(n.startswith("lfw_") for n in test) and any(n.startswith("lfw_") for n in train)


def test_crops_are_seeded_sized_and_varied():
    first = image_crops(16, 32, seed=1)
    assert first.shape == (16, 32, 32, 3) and first.dtype == np.uint8
    assert np.array_equal(first, image_crops(16, 32, seed=1))
    assert not np.array_equal(first, image_crops(16, 32, seed=2))
    assert len({crop.tobytes() for crop in first}) == 16


def test_an_unknown_split_is_refused():
    with pytest.raises(ValueError, match="unknown split"):
        image_crops(1, split="validation")


def test_the_dataset_builder_writes_pngs_per_split(tmp_path):
    build_image_crops(tmp_path)
    assert len(list((tmp_path / "train").glob("*.png"))) == 2048
    assert len(list((tmp_path / "test").glob("*.png"))) == 512
