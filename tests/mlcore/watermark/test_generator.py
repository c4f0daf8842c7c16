import json

import numpy as np
import pytest
import torch

from mlcore.watermark.generator import GeneratorError, from_uint8, load_generator, load_vae, to_uint8
from tests.mlcore.watermark.tiny import write_generator


@pytest.fixture(scope="module")
def generator_dir(tmp_path_factory):
    return write_generator(tmp_path_factory.mktemp("generator"))


def test_a_diffusers_pipeline_folder_loads_unchanged_and_samples_new_latents(generator_dir):
    generator = load_generator(generator_dir, need_unet=True)
    assert generator.image_size == 16
    first = generator.sample_latents(3, seed=0, steps=3)
    assert first.shape == (3, 4, 8, 8)
    assert torch.equal(first, generator.sample_latents(3, seed=0, steps=3))
    assert not torch.equal(first, generator.sample_latents(3, seed=1, steps=3))
    images = generator.decode(first)
    assert images.shape == (3, 3, 16, 16) and images.abs().max() <= 1


def test_a_bare_vae_folder_is_a_generator_that_can_only_decode(generator_dir):
    generator = load_generator(generator_dir / "vae")
    assert generator.unet is None
    with pytest.raises(GeneratorError, match="no latent model"):
        generator.sample_latents(1, seed=0)
    with pytest.raises(GeneratorError, match="cannot sample"):
        load_generator(generator_dir / "vae", need_unet=True)


def test_a_folder_without_a_vae_says_what_is_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel"}))
    with pytest.raises(GeneratorError, match="no AutoencoderKL found"):
        load_vae(tmp_path)


def test_a_unet_without_a_scheduler_is_refused(tmp_path, generator_dir):
    import shutil

    shutil.copytree(generator_dir / "vae", tmp_path / "vae")
    shutil.copytree(generator_dir / "unet", tmp_path / "unet")
    with pytest.raises(GeneratorError, match=r"scheduler_config\.json"):
        load_generator(tmp_path)


def test_uint8_conversion_round_trips():
    pixels = np.random.default_rng(0).integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    assert np.array_equal(to_uint8(from_uint8(pixels)), pixels)
