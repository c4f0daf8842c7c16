import json

import pytest
import torch

from mlcore.data.video import bouncing_digits
from mlcore.video.classifier import as_batch, judge
from mlcore.zoo.lm import verify_manifest
from mlcore.zoo.video import CHECKPOINTS, load_dit, load_judge

LIMITS = {"video-dit-digits": 6 * 2**20, "video-judge": 1 * 2**20}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_committed_video_checkpoint_matches_its_manifest_and_fits_its_budget(name):
    folder = CHECKPOINTS / name
    if not (folder / "manifest.json").is_file():
        pytest.skip(f"{name} is not committed yet: python -m mlcore.zoo train {name}")
    manifest = verify_manifest(folder)
    assert manifest["command"] == f"python -m mlcore.zoo train {name}"
    assert sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) < LIMITS[name]
    assert (folder / "train_log.jsonl").read_text().strip()


def test_the_committed_judge_names_held_out_clips_it_never_saw():
    if not (CHECKPOINTS / "video-judge" / "manifest.json").is_file():
        pytest.skip("the judge is not committed yet")
    data = bouncing_digits(200, split="test", seed=11)
    result = judge(load_judge(), as_batch(data.clips), torch.from_numpy(data.digits), torch.from_numpy(data.directions))
    recorded = json.loads((CHECKPOINTS / "video-judge" / "manifest.json").read_text())["metrics"]
    assert result.direction_accuracy > 0.95
    assert result.digit_accuracy > recorded["digit_accuracy"] - 0.06  # 200 clips: a few points of sampling noise


def test_the_committed_video_model_predicts_a_finite_velocity_in_every_attention_mode():
    folder = CHECKPOINTS / "video-dit-digits"
    if not (folder / "manifest.json").is_file():
        pytest.skip("the video model is not committed yet")
    model = load_dit(folder)
    data = bouncing_digits(2, seed=0)
    x = as_batch(data.clips)
    for mode in ("full", "moga", "local"):
        with torch.no_grad():
            v = model(
                x,
                torch.full((2,), 0.5),
                torch.from_numpy(data.digits),
                torch.from_numpy(data.directions),
                attention=mode,
            )
        assert torch.isfinite(v).all() and v.abs().sum() > 0
