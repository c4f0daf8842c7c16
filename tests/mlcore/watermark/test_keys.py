"""Watermark keys: random, far apart, and carried in files a job kind can read without Django."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from mlcore.watermark.keys import (
    InvalidKey,
    KeyRecord,
    KeyspaceExhausted,
    check_bits,
    default_min_distance,
    hamming,
    load_key_file,
    load_keyring,
    new_key_bits,
    random_bits,
    write_key_file,
    write_keyring,
)


def test_hamming_counts_the_positions_that_differ() -> None:
    assert hamming("0000", "0000") == 0
    assert hamming("0101", "1010") == 4
    assert hamming("0011", "0110") == 2


def test_hamming_refuses_keys_of_different_lengths() -> None:
    with pytest.raises(InvalidKey, match="different lengths"):
        hamming("01", "011")


def test_a_random_key_has_the_requested_length_and_only_zeros_and_ones() -> None:
    bits = random_bits(48)
    assert len(bits) == 48 and set(bits) <= {"0", "1"}


def test_a_seeded_rng_draws_the_same_key_twice() -> None:
    assert random_bits(48, random.Random(3)) == random_bits(48, random.Random(3))
    assert random_bits(48, random.Random(3)) != random_bits(48, random.Random(4))


def test_the_default_minimum_distance_is_a_quarter_of_the_bits() -> None:
    assert default_min_distance(48) == 12
    assert default_min_distance(64) == 16


def test_every_new_key_keeps_the_minimum_distance_from_all_earlier_keys() -> None:
    rng = random.Random(0)
    keys: list[str] = []
    for _ in range(200):
        keys.append(new_key_bits(48, keys, min_distance=14, rng=rng))
    distances = [hamming(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :]]
    assert min(distances) >= 14


def test_it_redraws_a_key_that_is_too_close_to_an_existing_one() -> None:
    # The first draw of this seed is the existing key itself (distance 0), so it must be redrawn.
    existing = random_bits(32, random.Random(7))
    bits = new_key_bits(32, [existing], min_distance=8, rng=random.Random(7))
    assert bits != existing and hamming(bits, existing) >= 8


def test_it_gives_up_with_a_clear_message_when_no_key_is_far_enough() -> None:
    with pytest.raises(KeyspaceExhausted, match="longer keys or a smaller minimum distance"):
        new_key_bits(16, ["0" * 16, "1" * 16], min_distance=9, rng=random.Random(0), max_tries=200)


def test_keys_of_another_length_do_not_constrain_a_new_key() -> None:
    bits = new_key_bits(16, ["0" * 48], min_distance=16, rng=random.Random(1), max_tries=10_000)
    assert len(bits) == 16


@pytest.mark.parametrize(
    ("bits", "message"),
    [("", "non-empty"), ("01x1" * 8, "only the characters 0 and 1"), ("01" * 4, "between 16 and 1024")],
)
def test_it_rejects_malformed_bits(bits: str, message: str) -> None:
    with pytest.raises(InvalidKey, match=message):
        check_bits(bits)


def test_a_key_file_round_trips(tmp_path: Path) -> None:
    bits = "01" * 24
    path = write_key_file(tmp_path / "key.json", id="7", name="Launch key", bits=bits)
    key = load_key_file(path)
    assert (key.id, key.name, key.bits, key.num_bits) == ("7", "Launch key", bits, 48)


def test_it_names_the_key_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(InvalidKey, match=r"broken\.json: not valid JSON"):
        load_key_file(path)


def test_a_keyring_round_trips_with_revoked_flags(tmp_path: Path) -> None:
    keys = [
        KeyRecord(id="1", name="a", organisation="Routing Lab", bits="0" * 48),
        KeyRecord(id="2", name="b", organisation="Other Lab", bits="1" * 48, revoked=True),
    ]
    assert load_keyring(write_keyring(tmp_path / "ring.json", keys)) == keys


def test_a_keyring_with_keys_of_several_lengths_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    path.write_text(json.dumps({"version": 1, "keys": [{"id": 1, "bits": "0" * 48}, {"id": 2, "bits": "0" * 32}]}))
    with pytest.raises(InvalidKey, match="several lengths"):
        load_keyring(path)


def test_a_keyring_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    path.write_text(json.dumps({"version": 9, "keys": []}))
    with pytest.raises(InvalidKey, match="version 9 is not supported"):
        load_keyring(path)
