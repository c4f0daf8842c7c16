"""The card's learned baselines as marked decoders: WOUAF-like modulation and Stable-Signature-like fine-tunes."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlcore.watermark.extractor import Extractor
from mlcore.watermark.generator import Generator
from mlcore.watermark.learned_baselines import (
    BaselineTrainConfig,
    KeyedDecoders,
    KeyModulation,
    finetune_decoder,
    key_string,
    tile_accuracy,
    train_markers,
)
from mlcore.watermark.markers import Markers, routed_convolutions
from mlcore.watermark.residual_train import marked_fields, patch_pool, patch_side
from tests.mlcore.watermark.tiny import tiny_vae


def _latents(n=2, seed=0):
    return torch.randn(n, 4, 8, 8, generator=torch.Generator().manual_seed(seed))


def _key(seed, bits=48):
    return torch.randint(0, 2, (bits,), generator=torch.Generator().manual_seed(seed)).float()


@torch.no_grad()
def _residual(vae, marker, key, z):
    clean = vae.decode(z).sample
    with marker.keyed(key):
        return vae.decode(z).sample - clean


def _modulated() -> tuple:
    """A tiny VAE with a WOUAF-like modulation attached, its mapping drawn from seed 0."""
    vae = tiny_vae()
    torch.manual_seed(0)
    modulation = KeyModulation.for_vae(vae, init_scale=0.5)
    modulation.attach(vae)
    return vae, modulation


def test_a_zero_key_mapping_reproduces_the_frozen_decoder_exactly():
    vae = tiny_vae()
    modulation = KeyModulation.for_vae(vae, init_scale=0.0)
    modulation.attach(vae)
    z = _latents()
    assert torch.equal(_residual(vae, modulation, _key(1), z), torch.zeros(2, 3, 16, 16))


def test_different_keys_give_different_residuals_and_one_key_always_the_same():
    vae, modulation = _modulated()
    z = _latents()
    a, b = _residual(vae, modulation, _key(1), z), _residual(vae, modulation, _key(2), z)
    assert a.abs().mean() > 1e-4 and (a - b).abs().mean() > 0.1 * a.abs().mean()
    assert torch.equal(a, _residual(vae, modulation, _key(1), z))


def test_the_modulation_is_a_per_input_channel_scale_of_the_convolution_weights():
    vae, modulation = _modulated()
    key = _key(3)
    u = modulation.scales(key[None])[0][0]  # the first modulated convolution's scales
    conv = routed_convolutions(vae)[0][1]
    x = torch.randn(1, conv.in_channels, 8, 8)
    with torch.no_grad(), modulation.keyed(key):
        hooked = conv(x)
    explicit = F.conv2d(x, conv.weight * u[None, :, None, None], conv.bias, padding=conv.padding)
    assert torch.allclose(hooked, explicit, atol=1e-5)


def test_a_batch_of_keys_modulates_each_image_by_its_own_key():
    vae, modulation = _modulated()
    z = _latents()
    both = _residual(vae, modulation, torch.stack([_key(1), _key(2)]), z)
    assert torch.allclose(both[1:], _residual(vae, modulation, _key(2), z[1:]), atol=1e-5)


def test_keyed_decoders_swap_in_the_key_s_copy_and_put_the_original_back():
    vae = tiny_vae()
    original = vae.decoder
    tuned = copy.deepcopy(vae.decoder)
    with torch.no_grad():
        tuned.conv_out.bias.add_(0.1)
    decoders = KeyedDecoders(48)
    decoders.add(_key(1), tuned)
    decoders.attach(vae)
    z = _latents()
    residual = _residual(vae, decoders, _key(1), z)
    assert torch.allclose(residual, torch.full_like(residual, 0.1), atol=1e-5)
    assert vae.decoder is original
    # A batch that carries the key in every row is one key; another key has no decoder.
    _residual(vae, decoders, _key(1).expand(2, -1), z)
    with pytest.raises(ValueError, match="no decoder was fine-tuned"):
        _residual(vae, decoders, _key(2), z)
    with pytest.raises(ValueError, match="same key in every row"):
        _residual(vae, decoders, torch.stack([_key(1), _key(2)]), z)
    assert vae.decoder is original


def test_keyed_decoders_round_trip_through_their_folder(tmp_path):
    vae = tiny_vae()
    tuned = copy.deepcopy(vae.decoder)
    with torch.no_grad():
        tuned.conv_out.weight.mul_(1.1)
    decoders = KeyedDecoders(48)
    decoders.add(_key(1), tuned)
    decoders.attach(vae)
    decoders.save(tmp_path / "decoders")
    loaded = KeyedDecoders.load(tmp_path / "decoders", vae)
    assert loaded.keys == [key_string(_key(1))]
    z = _latents()
    assert torch.equal(_residual(vae, decoders, _key(1), z), _residual(vae, loaded, _key(1), z))


def test_a_fine_tuned_decoder_s_marks_read_above_chance_after_a_few_steps():
    torch.set_num_threads(1)
    vae = tiny_vae()
    pool, held = _smooth_pools(vae)
    torch.manual_seed(1)
    # A fixed extractor (Stable Signature's is pre-trained, then frozen): here a random matched filter.
    extractor = Extractor(num_bits=16, image_size=16, channels=(8, 8), head_channels=4, hidden=16, linear_readout=True)
    torch.nn.init.normal_(extractor.readout.weight, std=0.05)
    key = _key(4, bits=16)
    config = BaselineTrainConfig(
        steps=20, patches=4, lr=3e-3, psnr=24.0, psnr_start=24.0, warmup=0, attacks=False, log_every=20
    )
    decoder, rows = finetune_decoder(vae, extractor, key, pool, config)
    decoders = KeyedDecoders(16)
    decoders.add(key, decoder)
    decoders.attach(vae)
    accuracy = tile_accuracy(
        lambda i, k: marked_fields(vae, decoders, held, i, k, 16), extractor, held, key.expand(len(held), -1), psnr=24.0
    )
    assert rows[-1]["train_bits"] > 0.75 and accuracy["tile_none"] > 0.75
    # The extractor is frozen: Stable Signature fine-tunes the decoder alone.
    assert all(not p.requires_grad for p in extractor.parameters())


def _smooth_pools(vae, tile: int = 16):
    """Training and held-out patches of smooth random images (low-frequency colour fields, closer to photos)."""
    side = patch_side(tile)
    g = torch.Generator().manual_seed(0)
    photos = F.interpolate(torch.rand(12, 3, 4, 4, generator=g) * 2 - 1, size=(side, side), mode="bilinear")
    return patch_pool(vae, photos[:8], tile), patch_pool(vae, photos[8:], tile)


def test_molm_markers_train_with_their_extractor_on_the_baselines_harness_and_read_above_chance():
    torch.set_num_threads(1)
    vae = tiny_vae()
    pool, held = _smooth_pools(vae)
    torch.manual_seed(2)
    markers = Markers.for_vae(vae, num_adapters=16, init_scale=0.5, bitwise_init=True)
    markers.attach(vae)
    extractor = Extractor(num_bits=48, image_size=16, channels=(8, 8), head_channels=4, hidden=16, linear_readout=True)
    before = [p.detach().clone() for p in (*markers.parameters(), *extractor.parameters())]
    torch.nn.init.normal_(extractor.readout.weight, std=0.05)
    config = BaselineTrainConfig(
        steps=100, patches=4, lr=1e-2, lr_extractor=1e-2, psnr=24.0, psnr_start=24.0, warmup=0, attacks=False,
        log_every=50,
    )  # fmt: skip
    rows = train_markers(vae, markers, extractor, pool, config)
    keys = torch.randint(0, 2, (len(held), 48), generator=torch.Generator().manual_seed(3)).float()
    accuracy = tile_accuracy(lambda i, k: marked_fields(vae, markers, held, i, k, 16), extractor, held, keys, psnr=24.0)
    # 768 held-out bits: 0.55 is ~3 standard errors above chance (a random tiny VAE learns slowly).
    assert rows[-1]["step"] == 100 and accuracy["tile_none"] > 0.55
    after = [*markers.parameters(), *extractor.parameters()]
    assert sum(not torch.equal(a, b) for a, b in zip(before, after, strict=True)) == len(before)  # both sides train


def test_molm_markers_with_the_bias_shift_are_refused_by_the_baselines_harness():
    vae = tiny_vae()
    pool, _ = _smooth_pools(vae)
    markers = Markers.for_vae(vae, num_adapters=16, init_scale=0.5, shift_scale=0.5)
    extractor = Extractor(num_bits=48, image_size=16, channels=(8, 8), head_channels=4, hidden=16)
    with pytest.raises(ValueError, match="without the bias shift"):
        train_markers(vae, markers, extractor, pool, BaselineTrainConfig(steps=1))


def test_a_modulated_bundle_marks_a_photo_through_the_embed_path():
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.image_io import SourceImage
    from mlcore.watermark.pipeline import Bundle

    vae, modulation = _modulated()
    # 32-pixel tiles (the zoo's): a photo's working grid then holds ~150 of them, not ~1,000.
    extractor = Extractor(num_bits=48, image_size=32, channels=(8, 8), head_channels=4, hidden=16).eval()
    bundle = Bundle(generator=Generator(vae=vae), markers=modulation, extractor=extractor)
    pixels = np.full((90, 120, 3), 128, np.uint8)
    marked = mark_image(bundle, SourceImage(name="a.png", format="PNG", pixels=pixels), _key(1), target_psnr=38.0)
    difference = marked.image.pixels.astype(float) - pixels
    assert marked.image.pixels.shape == pixels.shape and 0 < np.sqrt((difference**2).mean()) < 8
