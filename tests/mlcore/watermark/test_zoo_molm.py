"""The committed ``molm-tiny`` checkpoint: verified, small, loadable, and as good as its card says."""

import json
import shutil

import numpy as np
import pytest
import torch

from mlcore.jobs import JobError
from mlcore.zoo import molm

pytestmark = pytest.mark.skipif(
    not (molm.CHECKPOINT / "manifest.json").is_file(), reason="molm-tiny not trained: python -m mlcore.zoo.molm train"
)


def test_the_checkpoint_matches_its_manifest_and_stays_under_8_mb():
    manifest = molm.verify()
    assert manifest["command"] == "python -m mlcore.zoo.molm train"
    size = sum(p.stat().st_size for p in molm.CHECKPOINT.rglob("*") if p.is_file())
    assert size < 8 * 2**20


def test_an_altered_file_is_reported_with_the_command_that_rebuilds_it(tmp_path, monkeypatch):
    copy = tmp_path / "molm"
    shutil.copytree(molm.CHECKPOINT, copy)
    weights = copy / "extractor" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    monkeypatch.setattr(molm, "CHECKPOINT", copy)
    with pytest.raises(JobError, match=r"retrain with `python -m mlcore\.zoo\.molm train`"):
        molm.build_molm_tiny(tmp_path / "target")


def test_the_zoo_generator_reads_fresh_keys_as_well_as_its_card_records(tmp_path):
    from mlcore.watermark.calibration import bit_accuracy
    from mlcore.watermark.pipeline import decode_under_keys, load_bundle, read_bits

    molm.build_molm_tiny(tmp_path)
    bundle = load_bundle(tmp_path, need_unet=True)
    card = json.loads((tmp_path / "card.json").read_text())
    assert bundle.num_bits == card["num_bits"] >= 48
    latents = bundle.generator.sample_latents(64, seed=0, steps=5)
    keys = bundle.markers.random_keys(64, torch.Generator().manual_seed(0))
    marked = decode_under_keys(bundle, latents, keys)
    clean = decode_under_keys(bundle, latents, None)
    # No regression against the figure the recipe recorded (held-out crops there, sampled latents here).
    recorded = card["figures"]["bit_accuracy"]
    assert bit_accuracy(read_bits(bundle.extractor, marked), keys.numpy()) >= recorded - 0.05
    # Unwatermarked images match a random key about half the time.
    assert abs(bit_accuracy(read_bits(bundle.extractor, clean), keys.numpy()) - 0.5) < 0.08
    assert np.abs(marked.astype(int) - clean).mean() > 0  # the mark is there
