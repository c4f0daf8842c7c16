import json

import pytest
import torch

from mlcore.hf import adapt, load_model
from mlcore.jobs import JobError
from mlcore.zoo.committed import CHECKPOINTS, committed
from mlcore.zoo.lm import sha256_of
from mlcore.zoo.registry import MODELS

SIZE_LIMIT = 20 * 2**20


@pytest.mark.parametrize("name", [item.name for item in MODELS if item.kind == "hf-moe-lm"])
def test_a_committed_language_model_matches_its_manifest_and_loads(name):
    folder = CHECKPOINTS / name
    if not (folder / "manifest.json").exists():
        pytest.skip(f"{name} is not committed yet: python -m mlcore.zoo train {name}")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert committed(name) == folder
    for file, digest in manifest["files"].items():
        assert sha256_of(folder / file) == digest
    assert sum(p.stat().st_size for p in folder.iterdir()) < SIZE_LIMIT
    model = load_model(folder)
    adapter = adapt(model)
    recipe = manifest["recipe"]
    assert [info.num_experts for info in adapter.layers] == [recipe["num_experts"]] * recipe["num_layers"]
    assert manifest["command"].startswith(f"python -m mlcore.zoo train {name}")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
    assert torch.isfinite(logits).all()


def test_every_committed_checkpoint_stays_under_20_mb() -> None:
    for folder in (p for p in CHECKPOINTS.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        assert size < SIZE_LIMIT, f"{folder.name} is {size / 2**20:.1f} MB"


def test_the_committed_checkpoints_stay_under_50_mb_together():
    total = sum(p.stat().st_size for p in CHECKPOINTS.rglob("*") if p.is_file()) if CHECKPOINTS.exists() else 0
    assert total < 50 * 2**20


def test_a_missing_checkpoint_says_how_to_train_it():
    with pytest.raises(JobError, match=r"python -m mlcore\.zoo train no-such-model"):
        committed("no-such-model")


def test_no_committed_checkpoint_carries_a_path_of_the_machine_that_trained_it() -> None:
    # A config is copied into what users download; "_name_or_path" is where diffusers / transformers
    # loaded a component from, which says nothing true on any other machine.
    for path in (p for p in CHECKPOINTS.rglob("*.json") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        assert '"_name_or_path"' not in text, f"{path.relative_to(CHECKPOINTS)} records where it was loaded from"
        for root in ("/work/", "/home/", "/tmp/", "/root/"):
            assert root not in text, f"{path.relative_to(CHECKPOINTS)} names a local path under {root}"
