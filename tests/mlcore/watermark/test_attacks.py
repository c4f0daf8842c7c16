import numpy as np
import pytest

from mlcore.data.images import image_crops
from mlcore.watermark import attacks as A


@pytest.fixture(scope="module")
def crops():
    return image_crops(4, 32, seed=5, split="test")


def test_every_distortion_keeps_the_shape_and_dtype(crops):
    rng = np.random.default_rng(0)
    for attack in A.distortions():
        out = attack.apply(crops, rng)
        assert out.shape == crops.shape and out.dtype == np.uint8, attack.name


def test_harsher_jpeg_changes_the_image_more(crops):
    rng = np.random.default_rng(0)
    attacks = {a.name: a for a in A.distortions()}
    error = {q: np.abs(attacks[f"jpeg-{q}"].apply(crops, rng).astype(float) - crops).mean() for q in (90, 10)}
    assert error[10] > 2 * error[90] > 0


def test_averaging_recovers_an_additive_pattern_and_removal_undoes_it():
    rng = np.random.default_rng(0)
    pattern = rng.normal(0, 6, (32, 32, 3))
    clean = image_crops(400, 32, seed=1, split="train")
    other = image_crops(400, 32, seed=2, split="train")
    marked = np.clip(np.round(other + pattern), 0, 255).astype(np.uint8)
    estimate = A.averaging_pattern(marked, clean)
    assert np.corrcoef(estimate.ravel(), pattern.ravel())[0, 1] > 0.5
    forged = A.forge(clean[:10], estimate)
    assert np.corrcoef((forged.astype(float) - clean[:10]).mean(0).ravel(), pattern.ravel())[0, 1] > 0.5


def test_the_query_attack_lowers_the_score_within_its_budget(crops):
    target = np.random.default_rng(1).normal(size=(32, 32, 3)).astype(np.float32)

    def score(pixels: np.ndarray) -> np.ndarray:  # a linear "detector" the attack can only query
        return (pixels.astype(np.float32) / 255 * target).mean(axis=(1, 2, 3))

    attacked, used = A.query_attack(score, crops, epsilon=8 / 255, queries=60, samples=5, seed=0)
    assert used <= 60
    assert (score(attacked) < score(crops)).all()
    assert np.abs(attacked.astype(int) - crops).max() <= 9  # 8/255 plus rounding
