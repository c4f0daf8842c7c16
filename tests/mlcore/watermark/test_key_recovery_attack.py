"""The key-recovery attack, as a test: an outsider submits random images and solves the answers for
another team's key by least squares. Fed what an outsider sees now (``disclose``), it recovers no
more than chance; fed the old output format (``Match.describe`` rows), it recovers the key, so this
test can fail if the filter is ever bypassed.

The images are decoded once by the zoo's public extractor (``zoo:molm-tiny``, committed): the
attacker has it too, so their decoded bits d are known whatever the output shows, and the only
question is what the answers add. With d and S = Σ_i [d_i = κ_i] for rows naming the key,
S − k/2 = ½ Σ_i x_i s_i with x_i, s_i = ±1: one linear equation per row in the key's signs s.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlcore.watermark.disclosure import disclose_match
from mlcore.watermark.keys import KeyRecord, new_key_bits
from mlcore.watermark.stats import match_images

N_IMAGES = 500
VERDICT_SCORE = {"not detected": 0.0, "inconclusive": 1.0, "detected": 2.0}


@pytest.fixture(scope="module")
def probabilities() -> np.ndarray:
    from mlcore.watermark.verification import cached_extractor, decode
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "manifest.json").is_file():
        pytest.skip("the zoo's molm-tiny checkpoint is not committed")
    rng = np.random.default_rng(19)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(N_IMAGES)]
    return decode(cached_extractor(CHECKPOINT), images)


@pytest.fixture(scope="module")
def platform_keys() -> list[KeyRecord]:
    """Five other teams' keys, as a platform keyring hands them to an outsider's job (``own=False``)."""
    rng = random.Random(1919)
    bits: list[str] = []
    for _ in range(5):
        bits.append(new_key_bits(48, bits, rng=rng))
    return [
        KeyRecord(id=f"k{i}", name=f"campaign {i}", organisation=f"Lab {i}", bits=b, own=False)
        for i, b in enumerate(bits)
    ]


def least_squares_attack(decoded: np.ndarray, rows: Sequence[dict[str, Any]], key_id: str) -> np.ndarray:
    """The attacker's best linear estimate of ``key_id``'s bits (as signs: + for 1, − for 0) from the
    rows a job showed them.

    Rows that name the key with its bits matched give exact equations; without them the best the
    attacker has is a regression of the verdict on their decoded bits (every row, since no row
    says which key it is about). Rows that show decoded bits override the attacker's own.
    """
    x_rows, y = [], []
    for d, row in zip(decoded, rows, strict=True):
        bits = row.get("decoded_bits")
        x = np.array([c == "1" for c in bits], dtype=float) if bits else d.astype(float)
        if row.get("key_id") is not None:
            if row["key_id"] != key_id or row.get("bits_matched") is None:
                continue
            target = row["bits_matched"] - len(x) / 2
        else:
            target = VERDICT_SCORE[row["verdict"]]
        x_rows.append(2 * x - 1)
        y.append(target)
    if not x_rows:
        return np.zeros(decoded.shape[1])
    signs = np.linalg.lstsq(np.array(x_rows), 2 * np.array(y), rcond=None)[0]
    return np.where(np.abs(signs) < 1e-9, 0.0, signs)  # the sign of each key bit; 0 where nothing is known


def recovered(estimate: np.ndarray, key: KeyRecord) -> float:
    """The share of the key's bits the estimate gets right, a bit it leaves undetermined (0) counting
    as a coin flip: a fixed guess must not score by the luck of the key's own balance."""
    signs = np.array([1.0 if c == "1" else -1.0 for c in key.bits])
    return float(np.mean(np.where(estimate == 0, 0.5, np.sign(estimate) == signs)))


def test_what_an_outsider_sees_recovers_no_more_of_a_key_than_chance(probabilities, platform_keys) -> None:
    matches, _ = match_images(probabilities, platform_keys)
    shown = [disclose_match(m, all_own=False) for m in matches]
    decoded = probabilities > 0.5
    for key in platform_keys:
        assert recovered(least_squares_attack(decoded, shown, key.id), key) <= 0.6


def test_the_old_output_format_gives_the_key_away_so_the_attack_is_real(probabilities, platform_keys) -> None:
    matches, _ = match_images(probabilities, platform_keys)
    old = [m.describe() for m in matches]
    decoded = probabilities > 0.5
    rates = [recovered(least_squares_attack(decoded, old, key.id), key) for key in platform_keys]
    assert min(rates) >= 0.9, rates
