"""Tiny random diffusers models (built from configs, no weights downloaded) for the MOLM tests.

A 16×16 AutoencoderKL whose decoder has 6 ResNet blocks (12 routed convolutions: 48 bits at P = 16),
a latent UNet2DModel and a DDIM scheduler, saved like a diffusers pipeline folder, plus untrained
markers and an extractor: a complete watermark-markers directory in well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

TINY_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2,
    block_out_channels=(8, 8),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
    sample_size=16,
)
TINY_UNET = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(8, 16),
    layers_per_block=1,
    down_block_types=("DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D"),
    norm_num_groups=4,
)


def tiny_vae(seed: int = 0):
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(**TINY_VAE).eval().requires_grad_(False)


def write_generator(folder: Path, *, seed: int = 0, unet: bool = True) -> Path:
    """A diffusers-style generator folder: vae/ (+ unet/ and scheduler/)."""
    from diffusers import DDIMScheduler, UNet2DModel

    tiny_vae(seed).save_pretrained(folder / "vae")
    if unet:
        torch.manual_seed(seed)
        UNet2DModel(**TINY_UNET).save_pretrained(folder / "unet")
        DDIMScheduler(num_train_timesteps=1000).save_pretrained(folder / "scheduler")
    return folder


def write_bundle(folder: Path, *, seed: int = 0, init_scale: float = 0.5) -> Path:
    """A complete watermark-markers directory with untrained (but key-dependent) markers."""
    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.generator import load_vae
    from mlcore.watermark.markers import Markers

    write_generator(folder, seed=seed)
    vae = load_vae(folder)
    torch.manual_seed(seed)
    markers = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=init_scale)
    markers.save_pretrained(folder / "markers")
    Extractor(num_bits=markers.num_bits, image_size=16, channels=(8, 8), head_channels=4, hidden=16).save_pretrained(
        folder / "extractor"
    )
    (folder / "card.json").write_text(json.dumps({"num_bits": markers.num_bits, "P": 16}))
    return folder
