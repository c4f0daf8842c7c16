"""The verification statistics: exact binomial tails, the correction for the number of keys
searched, and the three verdicts at the configured false-positive rates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlcore.watermark.keys import InvalidKey, KeyRecord
from mlcore.watermark.stats import Thresholds, binomial_tail, corrected_p, match_images, threshold_bits


def _probs(bits: str) -> np.ndarray:
    """Extractor outputs that decode to ``bits`` (confident, but not 0/1)."""
    return np.array([[0.9 if c == "1" else 0.1 for c in bits]])


def _flip(bits: str, count: int) -> str:
    return "".join(("1" if c == "0" else "0") if i < count else c for i, c in enumerate(bits))


KEY_A = "01" * 24
KEY_B = "0011" * 12
RING = [
    KeyRecord(id="a", name="launch", organisation="Routing Lab", bits=KEY_A),
    KeyRecord(id="b", name="old", organisation="Other Lab", bits=KEY_B, revoked=True),
]


def test_the_binomial_tail_is_exact() -> None:
    assert binomial_tail(2, 3) == 0.5
    assert binomial_tail(3, 3) == 0.125
    assert binomial_tail(48, 48) == 2.0**-48
    assert binomial_tail(36, 48) == 100_946_732_307 / 2**48  # sum of C(48, k) for k = 36..48
    assert binomial_tail(0, 48) == 1.0
    assert binomial_tail(49, 48) == 0.0


def test_the_correction_multiplies_by_the_number_of_keys_and_caps_at_one() -> None:
    assert corrected_p(1e-4, 10) == pytest.approx(1e-3)
    assert corrected_p(0.2, 10) == 1.0
    assert corrected_p(0.03, 0) == 0.03


def test_the_thresholds_match_the_method_card() -> None:
    # The MOLM paper (§2): 28 bits give τ = 21 at FPR 1e-2 and 23 at 1e-3, and cannot reach 1e-9;
    # 48 bits give τ = 36 at 1e-3.
    assert threshold_bits(28, 1, 1e-2) == 21
    assert threshold_bits(28, 1, 1e-3) == 23
    assert threshold_bits(28, 1, 1e-9) is None
    assert threshold_bits(48, 1, 1e-3) == 36


def test_more_keys_searched_need_more_matching_bits() -> None:
    assert threshold_bits(48, 1000, 1e-3) == 41
    assert Thresholds.for_keyring(48, 1000).describe() == {
        "num_bits": 48,
        "num_keys": 1000,
        "fpr": 1e-3,
        "suspicious_fpr": 1e-2,
        "detect_bits": 41,
        "suspicious_bits": threshold_bits(48, 1000, 1e-2),
        "readers": 1,
    }


def test_keys_read_by_several_extractors_are_corrected_for_every_pair_searched() -> None:
    # 500 keys through 2 extractors is a search over 1000 pairs: the threshold of 1000 keys.
    assert Thresholds.for_keyring(48, 500, readers=2).detect_bits == threshold_bits(48, 1000, 1e-3)
    (one,), _ = match_images(_probs(_flip(KEY_A, 8)), RING)
    (three,), thresholds = match_images(_probs(_flip(KEY_A, 8)), RING, readers=3)
    assert three.p_value == one.p_value
    assert three.p_corrected == pytest.approx(3 * len(RING) * one.p_value)
    assert thresholds.readers == 3 and thresholds.num_keys == len(RING)
    with pytest.raises(ValueError, match="at least one reader"):
        Thresholds.for_keyring(48, 1, readers=0)


def test_an_image_carrying_a_key_is_detected_and_attributed() -> None:
    (match,), thresholds = match_images(_probs(_flip(KEY_A, 3)), RING)
    assert match.verdict == "detected"
    assert match.key is RING[0] and match.organisation == "Routing Lab"
    assert match.bits_matched == 45
    assert match.p_value == binomial_tail(45, 48)
    assert match.p_corrected == 2 * binomial_tail(45, 48)
    assert match.confidence == "very high"
    assert thresholds.num_keys == 2


def test_a_match_between_the_two_thresholds_is_inconclusive() -> None:
    # 2 keys: detect at p_N ≤ 1e-3 needs 36 bits; suspicious at 1e-2 needs 34.
    thresholds = Thresholds.for_keyring(48, 2)
    assert (thresholds.detect_bits, thresholds.suspicious_bits) == (36, 34)
    (match,), _ = match_images(_probs(_flip(KEY_A, 48 - 35)), RING)
    assert match.bits_matched == 35
    assert match.verdict == "inconclusive" and match.confidence == "low"
    assert match.organisation is None


def test_an_image_near_chance_is_not_detected() -> None:
    (match,), _ = match_images(_probs(_flip(KEY_A, 24)), RING)
    assert match.verdict == "not detected"
    assert match.confidence == "none"


def test_a_revoked_key_still_matches_and_says_so() -> None:
    (match,), _ = match_images(_probs(KEY_B), RING)
    assert match.verdict == "detected"
    assert match.key is RING[1] and match.describe()["revoked"] is True


def test_a_tie_prefers_the_active_key() -> None:
    ring = [RING[1], KeyRecord(id="c", name="copy", organisation="Routing Lab", bits=KEY_B)]
    (match,), _ = match_images(_probs(KEY_B), ring)
    assert match.key is ring[1]


def test_an_empty_keyring_detects_nothing() -> None:
    (match,), thresholds = match_images(_probs(KEY_A), [])
    assert (match.verdict, match.key, match.p_corrected) == ("not detected", None, 1.0)
    assert thresholds.num_keys == 0


def test_the_decoded_bits_are_the_outputs_above_one_half() -> None:
    probabilities = np.full((1, 48), 0.2)
    probabilities[0, :3] = 0.51
    (match,), _ = match_images(probabilities, RING)
    assert match.decoded_bits == "111" + "0" * 45


def test_it_matches_a_batch_row_by_row() -> None:
    matches, _ = match_images(np.vstack([_probs(KEY_A), _probs(KEY_B)]), RING)
    assert [m.key.id for m in matches if m.key] == ["a", "b"]


def test_keys_of_another_length_than_the_extractor_are_refused() -> None:
    with pytest.raises(InvalidKey, match="reads 32 bits"):
        match_images(np.full((1, 32), 0.9), RING)


def test_the_description_never_contains_the_key_bits() -> None:
    (match,), _ = match_images(_probs(_flip(KEY_A, 1)), RING)
    assert KEY_A not in str(match.describe())
    assert math.isclose(match.describe()["p_value"], binomial_tail(47, 48))
