"""The molm-photo recipe: an exact resume, and the committed markers folder the embed job marks photos with."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from mlcore.zoo import molm_photo
from mlcore.zoo.molm import CHECKPOINT as MOLM

pytestmark = pytest.mark.skipif(not (MOLM / "manifest.json").is_file(), reason="molm-tiny is not committed")

TINY = replace(
    molm_photo.RECIPE,
    train_patches=12,
    held_patches=4,
    eval_every=4,
    export_photos=1,
    training=replace(molm_photo.RECIPE.training, steps=8, patches=2, log_every=2),
)


def _weights(folder):
    from mlcore.watermark.pipeline import load_bundle

    bundle = load_bundle(folder)
    return {
        **{f"markers.{k}": v for k, v in bundle.markers.state_dict().items()},
        **{f"extractor.{k}": v for k, v in bundle.extractor.state_dict().items()},
    }


def test_a_run_stopped_by_its_budget_resumes_to_the_same_markers_as_one_that_never_stopped(tmp_path):
    torch.set_num_threads(1)
    whole = molm_photo.train(tmp_path / "whole", tmp_path / "whole-out", recipe=TINY)
    with pytest.raises(molm_photo.OutOfTime, match="stopped at step 2 of 8"):
        # A budget already spent: the first logged step is saved, then the command stops.
        molm_photo.train(
            tmp_path / "parts", tmp_path / "parts-out", recipe=TINY, cpu_deadline=time.process_time() + 1e-3
        )
    parts = molm_photo.train(tmp_path / "parts", tmp_path / "parts-out", recipe=TINY)
    a, b = _weights(whole), _weights(parts)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    card = (parts / "card.json").read_text()
    assert '"embed_grid_offset": "random-search"' in card and '"shift_scale": 0.0' in card


needs_checkpoint = pytest.mark.skipif(
    not (molm_photo.CHECKPOINT / "manifest.json").is_file(), reason="molm-photo is not committed"
)


@needs_checkpoint
def test_the_committed_photo_markers_have_no_shift_and_read_at_a_secret_phase(tmp_path):
    from mlcore.catalog import materialize
    from mlcore.watermark.embed import offset_mode
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo.registry import zoo_model

    bundle = load_bundle(materialize(zoo_model("molm-photo")))
    assert not bundle.markers.has_shift and bundle.num_bits == 48
    assert offset_mode(bundle.extractor) == "random-search"
    training = bundle.card["embed_training"]
    assert training["command"] == "python -m mlcore.zoo train molm-photo"
    assert training["held_out_patches"][-1]["step"] == molm_photo.RECIPE.training.steps


@needs_checkpoint
def test_a_tampered_photo_checkpoint_is_refused_with_the_command_that_rebuilds_it(tmp_path, monkeypatch):
    import shutil

    from mlcore.errors import JobError

    copy = tmp_path / "molm-photo"
    shutil.copytree(molm_photo.CHECKPOINT, copy)
    weights = copy / "extractor" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    monkeypatch.setattr(molm_photo, "CHECKPOINT", copy)
    with pytest.raises(
        JobError, match=r"extractor/diffusion_pytorch_model\.safetensors is missing or altered.*train molm-photo"
    ):
        molm_photo.build_molm_photo(tmp_path / "out")


@needs_checkpoint
def test_the_shipped_photo_markers_are_read_on_marked_photos_and_not_on_clean_ones():
    import numpy as np

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.embed_train import held_out_photos
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.watermark.stats import threshold_bits
    from mlcore.watermark.verification import decode, open_image

    torch.set_num_threads(1)
    bundle = load_bundle(molm_photo.CHECKPOINT)
    rng = np.random.default_rng(0)
    marked, clean = [], []
    for i, pixels in enumerate(held_out_photos(6, seed=31)):  # photos the markers never trained on
        key = rng.integers(0, 2, 48)
        source = image_io.SourceImage(name="a.png", format="PNG", pixels=pixels)
        key_t = torch.from_numpy(key).float()
        out = mark_image(bundle, source, key_t, target_psnr=38.0, offset_rng=np.random.default_rng(i))
        for data, into in ((image_io.encode(out.image), marked), (image_io.encode(source), clean)):
            into.append(int(((decode(bundle.extractor, [open_image(data)])[0] > 0.5) == key).sum()))
    assert np.mean(marked) >= 0.65 * 48 and np.mean(clean) <= 0.6 * 48
    # Half the marks reach the portal's threshold for one key at its default 0.1 % false-positive rate (a
    # clean photo does so once in ~1,500; here 4 of the 6 marks do, with a margin for another CPU's rounding).
    assert sum(m >= threshold_bits(48, 1, 1e-3) for m in marked) >= 3
