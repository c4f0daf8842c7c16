"""The molm-embed recipe: a cached residual pool, an exact resume, and a loadable markers folder."""

import json

import pytest
import torch

from mlcore.data.images import image_crops
from mlcore.watermark.embed_train import EmbedTrainConfig, finetune_extractor, residual_pool
from mlcore.watermark.generator import from_uint8
from mlcore.watermark.pipeline import load_bundle
from mlcore.zoo import molm_embed
from mlcore.zoo.molm import CHECKPOINT as MOLM

pytestmark = pytest.mark.skipif(not (MOLM / "manifest.json").is_file(), reason="molm-tiny is not committed")

CONFIG = EmbedTrainConfig(steps=4, batch_size=8, eval_every=2)


@pytest.fixture(scope="module")
def bundle():
    torch.set_num_threads(1)
    return load_bundle(MOLM)


@pytest.fixture(scope="module")
def pools(bundle, tmp_path_factory):
    cache = tmp_path_factory.mktemp("pool")
    photos = from_uint8(image_crops(12, 32, seed=3, split="train"))
    held = from_uint8(image_crops(6, 32, seed=4, split="test"))
    pool = residual_pool(bundle, photos, seed=0, cache=cache / "train", chunk=8)
    test = residual_pool(bundle, held, seed=1, cache=cache / "held", chunk=8)
    return cache, photos, pool, test


def test_a_cached_pool_is_reused_chunk_by_chunk_and_never_for_other_tiles(bundle, pools, monkeypatch):
    cache, photos, pool, _ = pools
    assert sorted(p.name for p in (cache / "train").iterdir()) == ["chunk-000000.pt", "chunk-000008.pt"]

    def no_vae(*args, **kwargs):
        raise AssertionError("the VAE ran although the pool is cached")

    monkeypatch.setattr("mlcore.watermark.embed_train.tile_residuals", no_vae)
    again = residual_pool(bundle, photos, seed=0, cache=cache / "train", chunk=8)
    assert torch.equal(again.residuals, pool.residuals) and torch.equal(again.keys, pool.keys)
    with pytest.raises(AssertionError, match="the VAE ran"):
        residual_pool(bundle, photos.flip(0), seed=0, cache=cache / "train", chunk=8)


def test_a_run_stopped_midway_and_resumed_ends_with_the_same_extractor(pools):
    _, _, pool, test = pools
    whole = load_bundle(MOLM)
    finetune_extractor(whole, CONFIG, pool=pool, test=test, log=lambda row: None)

    class Killed(Exception):
        pass

    saved = {}

    def save_then_die(step, optimizer, history):
        saved.update(
            extractor={k: v.clone() for k, v in first.extractor.state_dict().items()},
            optimizer=optimizer.state_dict(),
            step=step,
            history=list(history),
        )
        raise Killed

    first = load_bundle(MOLM)
    with pytest.raises(Killed):
        finetune_extractor(
            first, CONFIG, pool=pool, test=test, log=lambda row: None, on_checkpoint=save_then_die, checkpoint_every=2
        )
    assert saved["step"] == 2
    resumed = load_bundle(MOLM)
    resumed.extractor.load_state_dict(saved["extractor"])
    history = finetune_extractor(
        resumed,
        CONFIG,
        pool=pool,
        test=test,
        log=lambda row: None,
        start_step=saved["step"],
        optimizer_state=saved["optimizer"],
        history=saved["history"],
    )
    assert [row["step"] for row in history] == [2, 4]
    for name, value in whole.extractor.state_dict().items():
        assert torch.allclose(value, resumed.extractor.state_dict()[name], atol=1e-6), name


def test_the_recipe_resumes_from_its_state_and_exports_a_verified_markers_folder(tmp_path, monkeypatch):
    recipe = molm_embed.EmbedRecipe(
        train_tiles=8, held_tiles=4, training=CONFIG, checkpoint_every=2, readback_photos=1, readback_psnr=30.0
    )
    monkeypatch.setattr("mlcore.watermark.embed_train.held_out_photos", _one_small_photo)
    workdir, target = tmp_path / "work", tmp_path / "out"
    with pytest.raises(molm_embed.OutOfTime):
        molm_embed.train(workdir, target, recipe=recipe, deadline=0.0)  # spent: stops once the pool is cached
    assert (workdir / "pool-train" / "chunk-000000.pt").is_file() and not (workdir / "state.pt").exists()
    out = molm_embed.train(workdir, target, recipe=recipe)
    assert torch.load(workdir / "state.pt", weights_only=False)["step"] == CONFIG.steps
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "python -m mlcore.zoo train molm-embed"
    assert {"extractor/config.json", "markers/config.json", "RECIPE.md", "embed_train_log.jsonl"} <= set(
        manifest["files"]
    )
    card = json.loads((out / "card.json").read_text())
    readback = card["embed_training"]["photo_readback"]
    assert set(readback["bit_accuracy"]) == {"shipped", "fine-tuned"} and readback["n"] == 1
    assert "## Held-out tiles" in (out / "RECIPE.md").read_text()
    assert load_bundle(out).extractor.num_bits == 48


def _one_small_photo(n, *, seed, low=256, high=384):
    from mlcore.data.images import split_photos

    photo = next(p.pixels for p in split_photos("test") if min(p.pixels.shape[:2]) >= 96)
    return [photo[:96, :112].copy()]
