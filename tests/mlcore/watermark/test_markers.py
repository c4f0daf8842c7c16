import numpy as np
import pytest
import torch

from mlcore.watermark.markers import Markers, bits_to_symbols, parse_key, routed_convolutions, symbols_to_bits
from tests.mlcore.watermark.tiny import TINY_VAE, tiny_vae


@pytest.fixture(scope="module")
def vae_and_markers():
    vae = tiny_vae()
    torch.manual_seed(1)
    markers = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=0.5)
    markers.attach(vae)
    return vae, markers


def test_it_routes_conv1_and_conv2_of_every_decoder_resnet_block():
    names = [name for name, _ in routed_convolutions(tiny_vae())]
    # mid block: 2 ResNet blocks; each of 2 up blocks: layers_per_block + 1 = 2.
    assert len(names) == 2 * (2 + 2 * 2)
    assert names[0] == "decoder.mid_block.resnets.0.conv1"
    assert names[-1] == "decoder.up_blocks.1.resnets.1.conv2"


def test_the_bits_split_exactly_into_symbols_most_significant_first():
    bits = torch.tensor([[1, 0, 1, 1, 0, 0, 0, 1]])
    assert bits_to_symbols(bits, 4).tolist() == [[11, 1]]
    random = torch.randint(0, 2, (5, 48)).float()
    assert torch.equal(symbols_to_bits(bits_to_symbols(random, 4), 4), random)


def test_it_refuses_bits_that_do_not_split_into_symbols():
    with pytest.raises(ValueError, match="3-bit symbols"):
        bits_to_symbols(torch.ones(1, 10), 3)


def test_the_tiny_decoder_carries_48_bits_at_sixteen_adapters(vae_and_markers):
    _, markers = vae_and_markers
    assert markers.num_bits == 12 * 4


def test_adapters_off_reproduce_the_frozen_decoder_exactly(vae_and_markers):
    vae, markers = vae_and_markers
    z = torch.randn(3, 4, 8, 8)
    plain = tiny_vae().decode(z).sample
    assert torch.equal(vae.decode(z).sample, plain)
    with markers.keyed(markers.random_keys(3)):
        assert not torch.allclose(vae.decode(z).sample, plain)
    assert torch.equal(vae.decode(z).sample, plain)  # and off again after the block


def test_a_key_always_selects_the_same_adapters(vae_and_markers):
    vae, markers = vae_and_markers
    z = torch.randn(2, 4, 8, 8)
    key = markers.random_keys(1, torch.Generator().manual_seed(3))[0]
    other = 1 - key
    with markers.keyed(key):
        first = vae.decode(z).sample
    with markers.keyed(key):
        again = vae.decode(z).sample
    with markers.keyed(other):
        different = vae.decode(z).sample
    assert torch.equal(first, again)
    assert not torch.allclose(first, different)


def test_per_image_keys_match_one_key_at_a_time(vae_and_markers):
    vae, markers = vae_and_markers
    z = torch.randn(2, 4, 8, 8)
    keys = markers.random_keys(2, torch.Generator().manual_seed(5))
    with markers.keyed(keys):
        batch = vae.decode(z).sample
    for i in range(2):
        with markers.keyed(keys[i]):
            assert torch.allclose(vae.decode(z[i : i + 1]).sample, batch[i : i + 1], atol=1e-5)


def test_it_rejects_a_key_of_the_wrong_length(vae_and_markers):
    _, markers = vae_and_markers
    with pytest.raises(ValueError, match="32 bits but these markers carry 48"), markers.keyed(torch.ones(32)):
        pass


def test_markers_refuse_a_decoder_with_another_layout():
    from diffusers import AutoencoderKL

    markers = Markers.for_vae(tiny_vae(), num_adapters=4)
    other = AutoencoderKL(**{**TINY_VAE, "layers_per_block": 2})
    with pytest.raises(ValueError, match="train markers for it"):
        markers.attach(other)


def test_the_number_of_adapters_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        Markers.for_vae(tiny_vae(), num_adapters=6)


def test_parse_key_names_what_is_wrong():
    assert parse_key("0110", 4).tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="0s and 1s"):
        parse_key("01x0", 4)
    with pytest.raises(ValueError, match="3 bits but these markers carry 4"):
        parse_key("010", 4)


def test_markers_round_trip_through_save_pretrained(tmp_path, vae_and_markers):
    vae, markers = vae_and_markers
    markers.save_pretrained(tmp_path)
    loaded = Markers.from_pretrained(tmp_path)
    loaded.attach(tiny_vae())
    z = torch.randn(1, 4, 8, 8)
    key = np.ones(48, dtype=np.float32)
    with markers.keyed(key):
        expected = vae.decode(z).sample
    fresh = tiny_vae()
    loaded.attach(fresh)
    with loaded.keyed(key):
        assert torch.allclose(fresh.decode(z).sample, expected, atol=1e-6)


def test_bitwise_initialisation_gives_each_key_bit_one_signed_direction():
    markers = Markers.for_vae(tiny_vae(), num_adapters=16, rank=2, init_scale=1.0, bitwise_init=True)
    up, down = markers.up[0].detach(), markers.down[0].detach()
    assert torch.equal(down[0], down[15])  # one shared A per slot at the start
    assert torch.allclose(up[0], -up[15])  # symbol 0000 and 1111: every sign flipped
    # Symbols 0b1000 and 0b0000 differ in the first bit only: their difference is that bit's direction, twice.
    assert torch.allclose((up[8] - up[0]) / 2, (up[15] - up[7]) / 2, atol=1e-6)


def _signed_bit_deltas(vae, markers, bit: int, n: int = 24) -> torch.Tensor:
    """Per image, D(z | bit = 0) − D(z | bit = 1) for random keys, flattened and unit-normed."""
    torch.manual_seed(3)
    z = torch.randn(n, 4, 4, 4)
    keys = markers.random_keys(n, torch.Generator().manual_seed(4))
    on, off = keys.clone(), keys.clone()
    on[:, bit], off[:, bit] = 1, 0
    with torch.no_grad():
        with markers.keyed(off):
            a = vae.decode(z).sample
        with markers.keyed(on):
            b = vae.decode(z).sample
    flat = (a - b).flatten(1)
    return flat / flat.norm(dim=1, keepdim=True)


def _mean_cross_image_cosine(deltas: torch.Tensor) -> float:
    cos = deltas @ deltas.T
    return cos[~torch.eye(len(deltas), dtype=torch.bool)].mean().item()


def test_bias_shifts_make_a_key_bit_change_images_the_same_way_whatever_their_content():
    # Why: a weight-only LoRA perturbation B·A·x scales with the content x, so one
    # bit's effect on the image points a different way for every image (cosine ≈ 0.02 on the zoo VAE)
    # and the extractor has no shared pattern to learn; a bias shift Δb_s adds a shared component.
    vae = tiny_vae()
    torch.manual_seed(1)
    weight_only = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=1.0, bitwise_init=True)
    weight_only.attach(vae)
    content_bound = _mean_cross_image_cosine(_signed_bit_deltas(vae, weight_only, bit=45))
    weight_only.detach()
    torch.manual_seed(1)
    shifted = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=0.0, bitwise_init=True, shift_scale=1.0)
    shifted.attach(vae)
    shared = _mean_cross_image_cosine(_signed_bit_deltas(vae, shifted, bit=45))
    shifted.detach()
    assert shared > 0.3
    assert shared > content_bound + 0.2


def test_markers_with_bias_shifts_round_trip_through_save_pretrained(tmp_path):
    vae = tiny_vae()
    torch.manual_seed(2)
    markers = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=0.1, bitwise_init=True, shift_scale=0.5)
    markers.save_pretrained(tmp_path)
    loaded = Markers.from_pretrained(tmp_path)
    assert len(loaded.shift) == len(markers.shift) == 12
    for a, b in zip(loaded.shift, markers.shift, strict=True):
        assert torch.equal(a, b)
    markers.attach(vae)
    with markers.keyed(torch.zeros(48)), torch.no_grad():
        expected = vae.decode(torch.ones(1, 4, 4, 4)).sample
    markers.detach()
    loaded.attach(vae)
    with loaded.keyed(torch.zeros(48)), torch.no_grad():
        assert torch.allclose(vae.decode(torch.ones(1, 4, 4, 4)).sample, expected, atol=1e-6)
    loaded.detach()
