"""Verification through several extractors (the portal's zoo:molm-tiny, zoo:molm-photo-tiles and
zoo:molm-photo): each image's best match over every extractor and key, corrected for the whole search."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from mlcore.watermark.extractor import Extractor
from mlcore.watermark.keys import KeyRecord
from mlcore.watermark.readers import same_bits, verify_all
from mlcore.watermark.stats import binomial_tail
from mlcore.watermark.verification import decode, verify


def _extractor(seed: int, num_bits: int = 48) -> Extractor:
    torch.manual_seed(seed)
    return Extractor(num_bits=num_bits, image_size=32, channels=(8, 8, 8), head_channels=8, hidden=32).eval()


def _image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8))


def _bits(extractor: Extractor, image: Image.Image) -> str:
    return "".join("1" if p > 0.5 else "0" for p in decode(extractor, [image])[0])


def _flip(bits: str, count: int) -> str:
    return "".join(("1" if c == "0" else "0") if i < count else c for i, c in enumerate(bits))


def test_a_mark_only_the_second_extractor_reads_is_detected_and_corrected_for_both() -> None:
    first, second, image = _extractor(0), _extractor(1), _image(3)
    read = _bits(second, image)
    assert _bits(first, image) != read  # the two readers see different bits in the same image
    ring = [
        KeyRecord(id="k", name="photos", organisation="Routing Lab", bits=read),
        KeyRecord(id="o", name="rival", organisation="Other Lab", bits=_flip(read, 48)),
    ]
    (match,), thresholds = verify_all([first, second], [image], ring)
    assert match.verdict == "detected" and match.key is not None and match.key.id == "k"
    assert match.bits_matched == 48
    assert match.p_corrected == pytest.approx(2 * len(ring) * binomial_tail(48, 48))
    assert thresholds.readers == 2
    (alone,), _ = verify(first, [image], ring)
    assert alone.bits_matched < 48  # the first extractor alone would not have found it


def test_one_extractor_gives_exactly_what_verify_gives() -> None:
    extractor, images = _extractor(0), [_image(s) for s in range(4)]
    ring = [KeyRecord(id="k", name="a", organisation="Lab", bits=_flip(_bits(extractor, images[0]), 5))]
    assert verify_all([extractor], images, ring) == verify(extractor, images, ring)


def test_extractors_of_different_key_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="different key lengths"):
        same_bits([_extractor(0), _extractor(1, num_bits=32)])
    with pytest.raises(ValueError, match="no extractor"):
        same_bits([])
