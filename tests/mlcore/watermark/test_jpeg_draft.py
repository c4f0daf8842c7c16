"""A large JPEG is decoded reduced by libjpeg (the extractor reads small images; a 4-megapixel
photo is a portal check's largest cost), yet every byte is still read: truncation still fails."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from mlcore.watermark.verification import JPEG_DRAFT_SIDE, BadImage, open_image


def jpeg(side: int) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (side // 40, side // 40, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).resize((side, side), Image.Resampling.BICUBIC).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def test_a_4_megapixel_jpeg_is_decoded_at_a_reduced_scale_no_smaller_than_the_draft_side() -> None:
    image = open_image(jpeg(2000))
    assert image.mode == "RGB" and image.size == (500, 500)
    assert min(image.size) >= JPEG_DRAFT_SIDE


def test_a_jpeg_under_twice_the_draft_side_is_decoded_whole() -> None:
    assert open_image(jpeg(400)).size == (400, 400)


def test_a_truncated_large_jpeg_is_still_refused() -> None:
    data = jpeg(2000)
    with pytest.raises(BadImage, match="truncated or corrupt"):
        open_image(data[: len(data) // 2], name="half.jpg")
