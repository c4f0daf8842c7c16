"""Attribute augmentation: each transform does what its docstring says, dropped attributes look
exactly like missing ones at inference, and training with it off is training as before."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mlcore.pointcloud import augment
from mlcore.pointcloud.augment import COLOUR, INTENSITY, AttributeAugment, augment_features
from mlcore.pointcloud.datasets import point_features

ROOT = Path(__file__).resolve().parents[3]
NEVER = dict.fromkeys(f.name for f in dataclasses.fields(AttributeAugment) if isinstance(f.default, float))


def only(**probabilities: float) -> AttributeAugment:
    """An augmentation that applies exactly the named transforms (probability 0 for the rest)."""
    return AttributeAugment(**{name: 0.0 for name in NEVER} | probabilities)


def crop(rgb: bool = True, intensity: bool = True, n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xyz = rng.uniform(0, 4, (n, 3)).astype(np.float32)
    colour = rng.integers(20, 235, (n, 3)).astype(np.uint8) if rgb else None
    inten = rng.uniform(0.05, 0.9, n).astype(np.float32) if intensity else None
    return point_features(xyz, colour, inten), xyz


def test_a_dropped_attribute_is_encoded_exactly_as_a_missing_one_at_inference():
    rng = np.random.default_rng(0)
    xyz = rng.uniform(0, 4, (300, 3)).astype(np.float32)
    rgb = rng.integers(0, 255, (300, 3)).astype(np.uint8)
    inten = rng.uniform(0.1, 0.9, 300).astype(np.float32)
    feat = point_features(xyz, rgb, inten)
    dropped = augment_features(feat, xyz, rng, only(drop_colour=1.0, drop_intensity=1.0))
    np.testing.assert_array_equal(dropped, point_features(xyz, None, None))
    colour_only = augment_features(feat, xyz, rng, only(drop_intensity=1.0))
    np.testing.assert_array_equal(colour_only, point_features(xyz, rgb, None))


def test_a_batch_draw_decides_for_every_crop_of_the_step_and_a_crop_draw_draws_nothing_for_the_batch():
    rng = np.random.default_rng(0)
    assert augment.batch_keeps(rng, AttributeAugment()) is None
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    feat, xyz = crop()
    batch = dataclasses.replace(only(drop_colour=0.5, drop_intensity=0.5), dropout_unit="batch")
    draws = [augment.batch_keeps(rng, batch) for _ in range(40)]
    assert {d["colour"] for d in draws} == {True, False}
    for keeps in draws[:8]:
        outs = [augment_features(feat, xyz, rng, batch, keeps) for _ in range(3)]
        for out in outs:  # the draw, not the crop's own coin, decides
            assert augment.present(out) == keeps


def test_an_unknown_dropout_unit_is_refused():
    with pytest.raises(ValueError, match="dropout_unit must be 'crop' or 'batch'"):
        augment.batch_keeps(np.random.default_rng(0), AttributeAugment(dropout_unit="scan"))


def test_it_never_replaces_a_dropped_attribute_with_a_synthetic_one():
    feat, xyz = crop(rgb=True, intensity=False)
    out = augment_features(feat, xyz, np.random.default_rng(1), only(drop_colour=1.0, add_colour=1.0))
    assert not out[:, COLOUR].any()


def test_it_synthesises_only_the_attributes_a_crop_never_had():
    feat, xyz = crop(rgb=True, intensity=False)
    out = augment_features(feat, xyz, np.random.default_rng(2), only(add_colour=1.0, add_intensity=1.0))
    np.testing.assert_array_equal(out[:, COLOUR], feat[:, COLOUR])  # colour was there: kept as it is
    assert out[:, INTENSITY].any() and (out[:, INTENSITY] >= 0).all() and (out[:, INTENSITY] <= 1).all()


def test_height_is_never_touched_and_the_input_is_not_modified():
    feat, xyz = crop()
    before = feat.copy()
    out = augment_features(feat, xyz, np.random.default_rng(3), AttributeAugment())
    np.testing.assert_array_equal(feat, before)
    np.testing.assert_array_equal(out[:, 4], feat[:, 4])


def test_every_augmented_crop_stays_in_the_feature_range_and_colour_stays_8_bit():
    rng = np.random.default_rng(4)
    for seed in range(40):
        feat, xyz = crop(rgb=seed % 3 != 0, intensity=seed % 3 != 1, seed=seed)
        out = augment_features(feat, xyz, rng, AttributeAugment())
        assert (out[:, :4] >= 0).all() and (out[:, :4] <= 1).all()
        np.testing.assert_allclose(out[:, COLOUR] * 255, np.round(out[:, COLOUR] * 255), atol=1e-3)


def test_presence_is_read_from_all_zero_channels():
    feat, _ = crop(rgb=True, intensity=False)
    assert augment.present(feat) == {"colour": True, "intensity": False}
    feat, _ = crop(rgb=False, intensity=True)
    assert augment.present(feat) == {"colour": False, "intensity": True}


def test_gain_saturates_at_full_scale_and_gamma_keeps_the_ends():
    values = np.array([0.0, 0.25, 0.5, 1.0], np.float32)
    np.testing.assert_allclose(augment.gain(values, 3.0), [0.0, 0.75, 1.0, 1.0])
    np.testing.assert_allclose(augment.gamma(values, 0.5), [0.0, 0.5, np.sqrt(0.5), 1.0], rtol=1e-6)


def test_percentile_scaling_maps_the_1st_and_99th_percentiles_onto_0_and_1():
    values = np.linspace(100.0, 200.0, 1001, dtype=np.float32)
    out = augment.percentile_scale(values)
    assert out.min() == 0.0 and out.max() == 1.0
    np.testing.assert_allclose(out[500], 0.5, atol=1e-6)
    np.testing.assert_array_equal(augment.percentile_scale(np.full(10, 0.3, np.float32)), np.full(10, 0.5))


def test_scan_level_rescaling_is_one_affine_map_and_leaves_a_dim_crop_dim():
    asphalt = np.full(100, 0.07, np.float32)  # a crop of plain asphalt: no paint in it
    out = augment.rescale(asphalt, 0.02, 0.5)
    np.testing.assert_allclose(out, (0.07 - 0.02) / 0.48, rtol=1e-6)
    assert out.max() < 0.2  # per-crop percentile scaling would have stretched it to [0, 1]
    np.testing.assert_array_equal(augment.rescale(np.array([0.0, 0.9], np.float32), 0.02, 0.5), [0.0, 1.0])


def test_the_balanced_preset_drops_less_than_the_robust_one():
    robust, balanced = augment.preset("robust"), augment.preset("balanced")
    assert robust is not None and balanced is not None
    assert balanced.drop_colour < robust.drop_colour and balanced.drop_intensity < robust.drop_intensity
    assert augment.preset("off") is None


def test_quantising_to_8_bits_leaves_multiples_of_one_255th():
    out = augment.quantise(np.array([0.0, 0.1234, 0.5, 1.0], np.float32))
    np.testing.assert_allclose(out * 255, np.round(out * 255), atol=1e-4)
    assert out[0] == 0.0 and out[-1] == 1.0


def test_greyscale_gives_three_equal_channels_of_the_luma():
    rgb = np.array([[1.0, 0.0, 0.0], [0.2, 0.4, 0.6]], np.float32)
    grey = augment.greyscale(rgb)
    assert (grey[:, 0] == grey[:, 1]).all() and (grey[:, 1] == grey[:, 2]).all()
    np.testing.assert_allclose(grey[0, 0], 0.299, rtol=1e-6)


def test_range_falloff_changes_intensity_smoothly_and_never_past_full_scale():
    rng = np.random.default_rng(5)
    xyz = np.stack([np.linspace(0, 10, 200), np.zeros(200), np.zeros(200)], 1)
    values = np.full(200, 0.5, np.float32)
    out = augment.falloff(values, xyz, rng)
    assert (out >= 0).all() and (out <= 1).all()
    assert np.abs(np.diff(out)).max() < 0.02  # a gradient across the crop, not noise


def test_a_colour_cast_scales_each_channel_by_its_own_gain():
    feat, xyz = crop(rgb=True, intensity=False)
    out = augment_features(feat, xyz, np.random.default_rng(6), only(colour_cast=1.0))
    ratio = np.median(out[:, COLOUR] / np.maximum(feat[:, COLOUR], 1e-3), axis=0)
    assert np.ptp(ratio) > 0.01  # the channels moved by different factors
    assert ((ratio > 0.65) & (ratio < 1.45)).all()


def test_the_smooth_field_is_smooth():
    rng = np.random.default_rng(7)
    xyz = np.stack([np.linspace(0, 1, 400), np.zeros(400), np.zeros(400)], 1)
    field = augment.smooth_field(xyz, rng, 3)
    assert field.shape == (400, 3) and (field >= 0).all() and (field <= 1).all()
    assert np.abs(np.diff(field, axis=0)).max() < 0.05


def test_an_unknown_preset_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="off, robust, balanced"):
        augment.preset("strong")


def test_robust_attributes_reads_the_zoo_card_and_the_user_card():
    zoo = {"card": {"recipe": {"train": {"attribute_augment": "robust"}}}}
    assert augment.robust_attributes(zoo) == ("colour", "intensity")
    assert augment.robust_attributes({"card": {"attribute_augment": "robust"}}) == ("colour", "intensity")
    # "balanced" re-maps attributes but never drops them: the model is not robust to their absence.
    assert augment.robust_attributes({"card": {"attribute_augment": "balanced"}}) == ()
    assert augment.robust_attributes({"card": {"recipe": {"train": {"attribute_augment": "off"}}}}) is None
    assert augment.robust_attributes({"card": {"attribute_augment": "unheard-of"}}) is None
    committed = json.loads((ROOT / "mlcore/zoo/checkpoints/pointmoe-synmix/config.json").read_text())
    assert augment.robust_attributes(committed) == ("colour", "intensity")  # the recipe's "batch-30"
    assert augment.dropped("batch-30") == ("colour", "intensity") and augment.dropped("off") == ()
