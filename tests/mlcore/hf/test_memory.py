"""Memory plans read from safetensors headers alone: kinds that hold the whole model refuse a model
the worker cannot fit with both figures, before any weight is read."""

from pathlib import Path

import pytest

from mlcore.hf import HFModelError
from mlcore.hf.memory import check_whole_fits, memory_needs
from mlcore.zoo.committed import CHECKPOINTS

ZOO_LM = CHECKPOINTS / "moe-lm-tiny"


def test_a_kind_that_trains_through_the_model_refuses_one_the_worker_cannot_hold() -> None:
    weights = memory_needs(ZOO_LM, load_bytes=4, activations=0, working=0).weights
    with pytest.raises(HFModelError, match=r"Distillation holds the whole model in memory: about .* this worker has"):
        check_whole_fits(ZOO_LM, device="cpu", what="Distillation", batch_tokens=512, available=weights // 2)
    check_whole_fits(ZOO_LM, device="cpu", what="Distillation", batch_tokens=512, available=weights + (4 << 30))


def test_the_needs_follow_the_load_dtype_not_the_file(tmp_path: Path) -> None:
    # The zoo's float16 files are computed in float32: twice their bytes on disk.
    on_disk = sum(p.stat().st_size for p in ZOO_LM.glob("*.safetensors"))
    computed = memory_needs(ZOO_LM, load_bytes=4, activations=0, working=0).weights
    assert 1.9 * on_disk < computed < 2.05 * on_disk


@pytest.mark.parametrize(
    ("extra", "per_token"),
    [({}, 32 * 4), ({"hc_mult": 4}, 4 * 32 * 4), ({"index_topk": 16}, 32 * 4 + 16 * 8)],
)
def test_carried_activations_count_every_residual_stream_and_the_indexers_top_k(
    tmp_path: Path, extra: dict, per_token: int
) -> None:
    import json

    from mlcore.hf.memory import _needs

    folder = tmp_path / "model"
    folder.mkdir()
    for path in ZOO_LM.glob("*.safetensors"):
        (folder / path.name).symlink_to(path)
    config = json.loads((ZOO_LM / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 32, **extra}))
    _, needs = _needs(folder, tokens=1000, batch_tokens=0, whole_copies=1)
    _, plain = _needs(folder, tokens=0, batch_tokens=0, whole_copies=1)
    assert needs.layer_by_layer - plain.layer_by_layer == 1000 * per_token


def test_a_compact_checkpoints_layers_count_at_the_size_they_load_widened_to(tmp_path: Path) -> None:
    import json

    folder = tmp_path / "compact"
    folder.mkdir()
    for path in ZOO_LM.glob("*.safetensors"):
        (folder / path.name).symlink_to(path)
    config = json.loads((ZOO_LM / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    full = memory_needs(folder, load_bytes=4, activations=0, working=0)
    experts = config["num_local_experts"]
    (folder / "config.json").write_text(json.dumps({**config, "moelab_stored_experts": {"1": experts // 4}}))
    compact = memory_needs(folder, load_bytes=4, activations=0, working=0)
    assert compact.largest_layer == 4 * full.largest_layer
    assert compact.weights > full.weights
