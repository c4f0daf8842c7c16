"""BatchNorm statistics per attribute presence: estimated once trained, kept with the segmenter, and
read for exactly the attributes a scan carries; a segmenter without them reads as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mlcore.pointcloud import pipeline, presence
from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.pipeline import SegmenterError, TrainConfig, load_segmenter, save_segmenter, train
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
from mlcore.pointcloud.segment import segment_cloud

TINY = PTv3Config(channels=(16, 32), depths=(1, 1), dec_depths=(1,), patch=16, proj="moe", experts=2, top_k=1)


@pytest.fixture(scope="module")
def trained() -> PTv3:
    """A tiny model trained two steps on colour rooms (A) and intensity streets (C), statistics kept."""
    cfg = TrainConfig(steps=2, batch_size=2, points=256, scenes=1, datasets=("A", "C"), presence_stats=True)
    cfg = TrainConfig(**{**cfg.to_dict(), "presence_crops": 8})
    torch.manual_seed(0)
    model = PTv3(TINY)
    train(model, cfg, pool=pipeline.ScanPool(("A", "C"), 1))
    return model


def _buffers(model: PTv3) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k}


def test_a_set_is_kept_for_every_pattern_of_attributes_the_training_crops_carry(trained):
    # Rooms carry colour, streets intensity: a batch that kept both held both, though no crop does.
    assert sorted(trained.presence_stats) == ["colour", "colour+intensity", "intensity", "none"]
    presence.check(trained, trained.presence_stats)
    colour, none = trained.presence_stats["colour"], trained.presence_stats["none"]
    embedding = next(k for k in colour if k.endswith("running_mean"))
    assert not torch.allclose(colour[embedding], none[embedding])  # colour moves the embedding's statistics


def test_calibration_leaves_the_model_as_it_found_it(trained):
    before = _buffers(trained)
    crops = [
        pipeline.prepare(
            make_scan("A", 0), pipeline.get_dataset("A"), points=128, rng=np.random.default_rng(i), augment=False
        )[0]
        for i in range(3)
    ]

    def forward(samples):
        trained(pipeline.collate(samples)[0])

    stats = presence.calibrate(trained, crops, forward, batch_size=2)
    assert sorted(stats) == ["colour", "none"]  # no crop carries intensity: no set reads with it
    after = _buffers(trained)
    assert all(torch.equal(before[k], after[k]) for k in before) and not trained.training


def test_a_pattern_is_estimated_over_the_whole_mixture_as_a_batch_that_kept_those_attributes(trained):
    def crop(name: str, seed: int):
        spec = pipeline.get_dataset(name)
        return pipeline.prepare(make_scan(name, 0), spec, points=128, rng=np.random.default_rng(seed), augment=False)[0]

    def forward(samples):
        trained(pipeline.collate(samples)[0])

    rooms, streets = [crop("A", 0), crop("A", 1)], [crop("C", 2), crop("C", 3)]
    mixed = [rooms[0], streets[0], rooms[1], streets[1]]
    stats = presence.calibrate(trained, mixed, forward, batch_size=2)
    # "intensity": the rooms without their colour beside the streets with their intensity, as a
    # training batch that dropped colour and kept intensity — not the streets alone.
    by_hand = presence.calibrate(trained, [presence.reduced(c, ("intensity",)) for c in mixed], forward, batch_size=2)
    streets_only = presence.calibrate(trained, streets, forward, batch_size=2)
    embedding = next(k for k in stats["intensity"] if k.endswith("running_mean"))
    assert torch.equal(stats["intensity"][embedding], by_hand["intensity"][embedding])
    assert not torch.allclose(stats["intensity"][embedding], streets_only["intensity"][embedding])


def test_a_scan_is_read_with_the_statistics_of_the_attributes_it_carries(trained):
    scan = make_scan("A", 1, "val")
    grid = 0.04
    with_colour = segment_cloud(trained, scan.xyz, scan.rgb, grid=grid).labels
    without = segment_cloud(trained, scan.xyz, None, grid=grid).labels
    # By hand: the same model with the buffers of each pattern swapped in, and no presence sets.
    stats, before = trained.presence_stats, _buffers(trained)
    try:
        del trained.presence_stats
        for pattern, rgb, expected in (("colour", scan.rgb, with_colour), ("none", None, without)):
            norms = presence.batchnorms(trained)
            for name, m in norms.items():
                m.running_mean.copy_(stats[pattern][f"{name}.running_mean"])
                m.running_var.copy_(stats[pattern][f"{name}.running_var"])
            np.testing.assert_array_equal(segment_cloud(trained, scan.xyz, rgb, grid=grid).labels, expected)
    finally:
        trained.load_state_dict({**trained.state_dict(), **before})
        trained.presence_stats = stats
    assert all(torch.equal(v, _buffers(trained)[k]) for k, v in before.items())


def test_a_model_without_presence_statistics_reads_exactly_as_before():
    torch.manual_seed(1)
    model = PTv3(TINY).eval()
    before = _buffers(model)
    with presence.statistics(model, "colour"):
        assert all(torch.equal(v, _buffers(model)[k]) for k, v in before.items())


def test_the_sets_are_saved_with_the_segmenter_and_a_missing_file_is_refused(trained, tmp_path):
    folder = save_segmenter(trained, tmp_path / "seg")
    config = json.loads((folder / "config.json").read_text())
    assert config["presence_stats"] == ["colour", "colour+intensity", "intensity", "none"]
    loaded, _ = load_segmenter(folder)
    for pattern, tensors in trained.presence_stats.items():
        for key, tensor in tensors.items():
            torch.testing.assert_close(loaded.presence_stats[pattern][key], tensor, rtol=0, atol=0)
    (folder / pipeline.PRESENCE_FILE).unlink()
    with pytest.raises(SegmenterError, match=r"presence_stats\.safetensors is missing"):
        load_segmenter(folder)


def test_a_set_of_other_shapes_is_refused(trained, tmp_path):
    from safetensors.torch import save_file

    folder = save_segmenter(trained, tmp_path / "seg")
    flat = {f"none/{k}": v[:-1].contiguous() for k, v in trained.presence_stats["none"].items()}
    flat |= {f"{p}/{k}": v for p in ("colour", "intensity") for k, v in trained.presence_stats[p].items()}
    save_file(flat, str(folder / pipeline.PRESENCE_FILE))
    with pytest.raises(SegmenterError, match="does not match the segmenter"):
        load_segmenter(folder)


def test_the_pattern_of_a_scan_names_the_attributes_it_carries():
    rgb = np.zeros((5, 3), np.uint8)
    assert presence.pattern_for(None, None) == "none"
    assert presence.pattern_for(rgb, None) == "none"  # all zeros: absent, as point_features encodes it
    rgb[2] = 9
    assert presence.pattern_for(rgb, np.ones(5)) == "colour+intensity"
    assert presence.pattern_for(None, np.ones(5)) == "intensity"
