"""Joint training on the embed path: markers without the shift, the attack layer, patches, resume, the recipe."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mlcore.watermark import embed
from mlcore.watermark.extractor import Extractor
from mlcore.watermark.markers import Markers
from mlcore.watermark.residual_attacks import jpeg, jpeg_real, quantise, random_attacks, rescale
from mlcore.watermark.residual_train import (
    ResidualTrainConfig,
    blend_tiles,
    cut_tiles,
    extractor_for_residuals,
    forged,
    forged_vote_loss,
    patch_pool,
    patch_side,
    rms,
    step_keys,
    target_rms,
    tile_origins,
    train_jointly,
)
from tests.mlcore.watermark.tiny import tiny_vae

CONFIG = ResidualTrainConfig(steps=4, patches=4, forge_group=2, eval_every=2, checkpoint_every=2, psnr_start=30.0)


@pytest.fixture(scope="module")
def vae_and_pools():
    torch.set_num_threads(1)
    vae = tiny_vae()
    g = torch.Generator().manual_seed(0)
    side = patch_side(16)
    pool = patch_pool(vae, torch.rand(6, 3, side, side, generator=g) * 2 - 1, 16)
    held = patch_pool(vae, torch.rand(4, 3, side, side, generator=g) * 2 - 1, 16)
    return vae, pool, held


def _markers(vae, seed=1, **kwargs):
    torch.manual_seed(seed)
    markers = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=0.5, **kwargs)
    markers.attach(vae)
    return markers


def _extractor(seed=2):
    torch.manual_seed(seed)
    return Extractor(num_bits=48, image_size=16, channels=(8, 8), head_channels=4, hidden=16)


def test_a_zero_shift_scale_means_no_shift_parameters_at_all():
    vae = tiny_vae()
    assert not Markers.for_vae(vae, num_adapters=16, rank=2, shift_scale=0.0).has_shift
    assert not Markers.for_vae(vae, num_adapters=16, rank=2).has_shift
    assert Markers.for_vae(vae, num_adapters=16, rank=2, shift_scale=0.5).has_shift


def test_without_shift_keeps_the_adapters_and_drops_only_the_shift(tmp_path):
    vae = tiny_vae()
    shifted = _markers(vae, shift_scale=0.5)
    plain = shifted.without_shift()
    assert not plain.has_shift and plain.config.shift_scale == 0.0
    for a, b in zip(shifted.up, plain.up, strict=True):
        assert torch.equal(a, b)
    # The same adapters with the shifts zeroed give the same decode as the copy without them.
    shifted.detach()
    plain.attach(vae)
    z = torch.randn(2, 4, 8, 8)
    key = plain.random_keys(2, torch.Generator().manual_seed(0))
    with torch.no_grad(), plain.keyed(key):
        without = vae.decode(z).sample
    plain.detach()
    for shift in shifted.shift:
        shift.data.zero_()
    shifted.attach(vae)
    with torch.no_grad(), shifted.keyed(key):
        zeroed = vae.decode(z).sample
    assert torch.allclose(without, zeroed, atol=1e-6)
    plain.save_pretrained(tmp_path / "plain")
    assert not Markers.from_pretrained(tmp_path / "plain").has_shift


def test_the_zoo_markers_still_load_with_their_shift():
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "markers" / "config.json").is_file():
        pytest.skip("molm-tiny is not committed")
    markers = Markers.from_pretrained(CHECKPOINT / "markers")
    assert markers.has_shift and len(markers.shift) == len(markers.config.slots)


def test_patch_tiles_sit_where_the_embed_grid_puts_them():
    side = patch_side(32)
    assert side == 56
    assert tile_origins(32) == embed.Grid(side, side, 32, whole=False).origins()
    patches = torch.arange(2 * 3 * side * side, dtype=torch.float32).reshape(2, 3, side, side)
    tiles = cut_tiles(patches, 32)
    assert tiles.shape == (8, 3, 32, 32)
    assert torch.equal(tiles[5], patches[1, :, 0:32, 24:56])


def test_blending_matches_the_embed_paths_working_residual(monkeypatch):
    side, tile = patch_side(32), 32
    residuals = torch.randn(4, 3, tile, tile)
    monkeypatch.setattr(embed, "tile_residuals", lambda bundle, tiles, key: residuals)
    bundle = SimpleNamespace(extractor=SimpleNamespace(image_size=tile))
    expected = embed.working_residual(bundle, torch.zeros(1, 3, side, side), torch.zeros(48))
    assert torch.allclose(blend_tiles(residuals, tile), expected, atol=1e-5)


def test_the_jpeg_attack_has_the_real_value_and_a_gradient():
    x = (torch.rand(2, 3, 24, 24, generator=torch.Generator().manual_seed(0)) * 2 - 1).requires_grad_(True)
    out = jpeg(x, 75)
    assert torch.allclose(out, jpeg_real(x, 75), atol=1e-6)
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_quantising_rounds_to_8_bits_and_passes_the_gradient():
    x = torch.tensor([0.1234, -0.5], requires_grad=True)
    q = quantise(x)
    assert torch.allclose((q + 1) * 127.5, ((q + 1) * 127.5).round(), atol=1e-4)
    q.sum().backward()
    assert torch.equal(x.grad, torch.ones(2))


def test_rescaling_keeps_the_size_and_loses_detail():
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    half = rescale(x, 0.5)
    assert half.shape == x.shape and not torch.allclose(half, x, atol=0.05)
    attacked = random_attacks(x.repeat(4, 1, 1, 1), np.random.default_rng(0))
    assert attacked.shape == (4, 3, 32, 32)


def test_the_first_forge_group_shares_a_key_and_the_rest_do_not():
    keys = step_keys(ResidualTrainConfig(patches=6, forge_group=3), 48, torch.Generator().manual_seed(0))
    assert keys.shape == (6, 48)
    assert torch.equal(keys[0], keys[2]) and not torch.equal(keys[3], keys[4])


def test_a_forged_patch_is_the_mean_mark_at_a_real_marks_energy():
    fields = torch.randn(4, 3, 8, 8) * 0.01
    photos = torch.zeros(2, 3, 8, 8)
    out = forged(fields, photos, scale_to=0.02)
    mean = fields.mean(0)
    expected = mean * (0.02 / rms(mean))
    assert torch.allclose(out[1], quantise(expected), atol=1e-6)
    assert math.isclose(target_rms(38.0), 2 * 10 ** (-1.9), rel_tol=1e-9)


def test_the_forged_vote_loss_counts_only_a_leaning_towards_the_forged_key():
    key = torch.tensor([1.0, 0.0, 1.0, 0.0])
    towards = torch.tensor([[0.2, -0.2, 0.2, -0.2], [0.0, 0.0, 0.0, 0.0]])
    assert math.isclose(forged_vote_loss(towards, key).item(), 0.1, rel_tol=1e-6)
    assert forged_vote_loss(-towards, key).item() == 0.0
    # Tiles that disagree cancel in the vote, as they do in the reader's mean over tiles.
    assert forged_vote_loss(torch.cat([towards[:1], -towards[:1]]), key).item() == 0.0


def test_it_refuses_markers_that_still_carry_the_shift(vae_and_pools):
    vae, pool, held = vae_and_pools
    markers = _markers(vae, shift_scale=0.5)
    try:
        with pytest.raises(ValueError, match="without the bias shift"):
            train_jointly(vae, markers, _extractor(), pool, held, CONFIG, log=lambda row: None)
    finally:
        markers.detach()


def test_a_run_stopped_midway_and_resumed_ends_with_the_same_markers_and_extractor(vae_and_pools):
    vae, pool, held = vae_and_pools

    def run(markers, extractor, **kwargs):
        try:
            return train_jointly(vae, markers, extractor, pool, held, CONFIG, log=lambda row: None, **kwargs)
        finally:
            markers.detach()

    whole = (_markers(vae), _extractor())
    history = run(*whole)
    assert [row["step"] for row in history] == [2, 4]
    assert {"tile_none", "tile_jpeg75", "tile_resize05", "forgery_vote_bits", "clean_leaning"} <= set(history[0])

    saved = {}

    def save(step, optimizer, rows):
        saved.update(
            markers={k: v.clone() for k, v in first[0].state_dict().items()},
            extractor={k: v.clone() for k, v in first[1].state_dict().items()},
            optimizer=optimizer.state_dict(),
            step=step,
            history=list(rows),
        )

    first = (_markers(vae), _extractor())
    stop_after = iter([False, True])
    run(*first, on_checkpoint=save, out_of_time=lambda: next(stop_after))
    assert saved["step"] == 2
    resumed = (_markers(vae), _extractor())
    resumed[0].load_state_dict(saved["markers"])
    resumed[1].load_state_dict(saved["extractor"])
    again = run(*resumed, start_step=2, optimizer_state=saved["optimizer"], history=saved["history"])
    assert [row["step"] for row in again] == [2, 4]
    for a, b in ((whole[0], resumed[0]), (whole[1], resumed[1])):
        for name, value in a.state_dict().items():
            assert torch.allclose(value, b.state_dict()[name], atol=1e-5), name


def test_the_residual_extractor_keeps_the_cnn_and_drops_the_template_readout():
    base = Extractor(num_bits=48, image_size=16, channels=(8, 8), head_channels=4, hidden=16, linear_readout=True)
    extractor = extractor_for_residuals(base)
    assert extractor.readout is None
    x = torch.rand(2, 3, 16, 16)
    base.eval(), extractor.eval()
    with torch.no_grad():
        nn_part = base.head(base.features(x))
        assert torch.allclose(extractor(x), nn_part, atol=1e-6)


def test_the_recipe_resumes_and_exports_a_markers_folder_without_the_shift(tmp_path, monkeypatch):
    from dataclasses import replace

    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo import molm_residual
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "manifest.json").is_file():
        pytest.skip("molm-tiny is not committed")
    monkeypatch.setattr("mlcore.watermark.embed_train.held_out_photos", _one_small_photo)
    recipe = _tiny_recipe(molm_residual.RECIPE, replace(CONFIG, steps=2, patches=2, forge_group=2))
    workdir, target = tmp_path / "work", tmp_path / "out"
    with pytest.raises(molm_residual.OutOfTime):
        molm_residual.train(workdir, target, recipe=recipe, deadline=0.0)  # spent: stops once the pool is cached
    assert (workdir / "pool.pt").is_file() and not (workdir / "state.pt").exists()
    out = molm_residual.train(workdir, target, recipe=recipe)
    assert torch.load(workdir / "state.pt", weights_only=False)["step"] == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "python -m mlcore.zoo train molm-residual"
    assert {"markers/config.json", "extractor/config.json", "RECIPE.md", "residual_train_log.jsonl"} <= set(
        manifest["files"]
    )
    card = json.loads((out / "card.json").read_text())
    assert card["training"]["shift_scale"] == 0.0 and card["residual_training"]["photo_readback"]["n"] == 1
    # The default variant (bootstrap) keeps molm-tiny's linear read-out; the markers lose their shift.
    assert card["training"]["linear_readout"] is True
    bundle = load_bundle(out)
    assert not bundle.markers.has_shift and bundle.extractor.readout is not None


def _tiny_recipe(base, training):
    """A molm-residual recipe shrunk to seconds: four patches each way, one exported photo, ``training``."""
    from dataclasses import replace

    return replace(
        base,
        train_patches=4,
        held_patches=4,
        readback_photos=0,
        export_photos=1,
        readback_psnr=30.0,
        training=training,
    )


def _one_small_photo(n, *, seed, low=256, high=384):
    from mlcore.data.images import split_photos

    photo = next(p.pixels for p in split_photos("test") if min(p.pixels.shape[:2]) >= 96)
    return [photo[:96, :112].copy()]


def test_the_random_offset_recipe_records_the_option_where_the_portal_reads_it(tmp_path, monkeypatch):
    from dataclasses import replace

    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo import molm_residual
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "manifest.json").is_file():
        pytest.skip("molm-tiny is not committed")
    monkeypatch.setattr("mlcore.watermark.embed_train.held_out_photos", _one_small_photo)
    variant = molm_residual.VARIANTS["random-offset"]
    training = replace(variant.training, steps=1, patches=2, forge_group=2, eval_every=1, checkpoint_every=1)
    recipe = _tiny_recipe(variant, training)
    out = molm_residual.train(tmp_path / "work", tmp_path / "out", recipe=recipe)
    bundle = load_bundle(out)
    assert embed.offset_mode(bundle.extractor) == "random" and bundle.extractor.readout is None
    assert json.loads((out / "card.json").read_text())["training"]["embed_grid_offset"] == "random"
    # Its photo read-back is its own reader's: a fixed-grid export of the same work folder measures again.
    assert (tmp_path / "work" / "readback-random.json").is_file()
    assert not (tmp_path / "work" / "readback.json").exists()
    # The bootstrap recipe's bundles keep the fixed grid.
    assert molm_residual.RECIPE.grid_offset is None
    assert molm_residual.VARIANTS["random-offset-search"].grid_offset == "random-search"
