import io

import numpy as np
import pytest
import torch
from PIL import Image

from mlcore.data.images import image_crops
from mlcore.watermark.augment import AUGMENTATIONS, jpeg_differentiable, quality_tables, random_distortion
from mlcore.watermark.generator import from_uint8


@pytest.fixture(scope="module")
def crops():
    return image_crops(6, 32, seed=3, split="test")


@pytest.mark.parametrize("quality", [90, 50, 20])
def test_the_differentiable_jpeg_stays_close_to_pillows_codec(crops, quality):
    x = from_uint8(crops)
    real = []
    for pixels in crops:
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=quality, subsampling=0)
        real.append(np.asarray(Image.open(buffer)))
    gap_to_codec = (jpeg_differentiable(x, quality) - from_uint8(np.stack(real))).abs().mean()
    distortion = (from_uint8(np.stack(real)) - x).abs().mean()
    assert gap_to_codec < 0.5 * distortion  # the rest is the codec's own rounding to 8 bits


def test_lower_quality_means_coarser_quantisation():
    assert (quality_tables(10) >= quality_tables(50)).all() and (quality_tables(50) >= quality_tables(95)).all()


def test_every_training_distortion_passes_gradients(crops):
    g = torch.Generator().manual_seed(0)
    for name, augmentation in AUGMENTATIONS.items():
        x = from_uint8(crops).requires_grad_(True)
        out = augmentation(x, 1.0, g)
        assert out.shape == x.shape, name
        out.sum().backward()
        assert x.grad is not None and x.grad.abs().sum() > 0, name


def test_no_distortion_at_zero_strength(crops):
    x = from_uint8(crops)
    assert torch.equal(random_distortion(x, strength=0.0, p=1.0, g=torch.Generator()), x)
