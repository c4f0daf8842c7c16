"""A MoNE checkpoint stores its kept experts only: its files meet issue #21's size goal, the report
says what they hold, and checkpoints written before (every expert stored, novices zeroed) still
load with the same numbers."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.compress.report import sizes
from mlcore.hf import HFModelError, MoEAdapter, adapt, layer_by_layer, load_model
from mlcore.hf.checkpoint import SIDECAR, STORED_FIELD, mark_config, weight_files
from mlcore.hf.novices import clear_novices
from mlcore.uploads import safetensors_header
from tests.mlcore.hf.conftest import build, logits, token_ids


def with_novices(model: Any) -> MoEAdapter:
    """Experts 1 and 6 of every MoE layer become novices: a quarter of the experts, as MoNE at 0.25."""
    adapter = adapt(model)
    generator = torch.Generator().manual_seed(3)
    hidden = adapter.layers[0].hidden
    adapter.replace_with_novices(
        {info.index: {e: torch.randn(hidden, generator=generator) for e in (1, 6)} for info in adapter.layers}
    )
    return adapter


def tensor_bytes(folder: Path) -> int:
    """The bytes of the tensors in the weight shards and the sidecar (from their headers)."""
    files = [*weight_files(folder), folder / SIDECAR]
    return sum(
        entry["data_offsets"][1] - entry["data_offsets"][0]
        for file in files
        for name, entry in safetensors_header(file).items()
        if name != "__metadata__"
    )


def test_a_mone_checkpoint_is_at_most_its_non_expert_kept_expert_and_novice_bytes_plus_one_percent(
    tmp_path: Path,
) -> None:
    model = build("olmoe", hidden_size=64, intermediate_size=256)
    experts = [p for info in adapt(model).layers for p in info.experts.parameters(recurse=False)]
    expert_bytes = sum(p.nbytes for p in experts)
    other = sum(p.nbytes for p in model.parameters()) - expert_bytes
    adapter = with_novices(model)
    novice_bytes = sum(v.nbytes for layer in adapter.novices.values() for v in layer.values())
    bound = other + expert_bytes * 6 // 8 + novice_bytes
    adapter.save(tmp_path)
    on_disk = sum(f.stat().st_size for f in tmp_path.glob("*.safetensors"))
    assert on_disk <= bound * 1.01
    # Stored with the novices' zeroed weights (the layout before), it would miss the goal.
    assert other + expert_bytes > bound * 1.01
    reported = sizes(model, adapter)
    assert reported["bytes_stored"] == tensor_bytes(tmp_path)
    assert reported["bytes_stored"] <= bound * 1.01
    assert reported["parameters_stored"] == (other + expert_bytes * 6 // 8 + novice_bytes) // 4


def legacy_checkpoint(model: Any, adapter: MoEAdapter, path: Path) -> Path:
    """The checkpoint MoE Lab wrote before the compact layout: every expert stored (novices zeroed,
    GPT-OSS's novice biases c_e), a version-1 sidecar without kept ids, and the config marked with
    shipped code, except for GPT-OSS, whose stock weights alone held its novices."""
    from safetensors.torch import save_file

    full = copy.deepcopy(model)
    for info in adapt(full).layers:
        clear_novices(info.experts)
    full.save_pretrained(path)
    tensors = {}
    for index, vectors in adapter.novices.items():
        tensors[f"layers.{index}.novice_ids"] = torch.tensor(sorted(vectors), dtype=torch.int64)
        tensors[f"layers.{index}.novice_vectors"] = torch.stack([vectors[e] for e in sorted(vectors)])
    metadata = {"format": "moelab-hf-experts", "version": "1", "model_type": adapter.arch}
    save_file(tensors, path / SIDECAR, metadata=metadata)
    if adapter.arch != "gpt_oss":
        modules = {str(info.index): f"{info.name}.experts" for info in adapter.layers}
        mark_config(path, adapter.arch, modules)
    return path


@pytest.mark.parametrize("arch", ["olmoe", "gpt_oss", "qwen2_moe"])
def test_a_checkpoint_that_stores_every_expert_still_loads_with_the_same_numbers(arch: str, tmp_path: Path) -> None:
    model = build(arch)
    adapter = with_novices(model)
    ids = token_ids(length=16)
    evaluated = logits(model, ids)
    legacy = legacy_checkpoint(model, adapter, tmp_path / "legacy")
    assert STORED_FIELD not in json.loads((legacy / "config.json").read_text())
    loaded = load_model(legacy)
    torch.testing.assert_close(logits(loaded, ids), evaluated, rtol=0, atol=0)
    with layer_by_layer(legacy) as streamed:
        torch.testing.assert_close(logits(streamed, ids), evaluated, rtol=0, atol=1e-6)
    # Saved again, it is written compact, with the same numbers.
    adapt(loaded).save(tmp_path / "again")
    assert set(json.loads((tmp_path / "again" / "config.json").read_text())[STORED_FIELD].values()) == {6}
    torch.testing.assert_close(logits(load_model(tmp_path / "again"), ids), evaluated, rtol=0, atol=0)


def test_it_refuses_a_compact_checkpoint_whose_config_and_sidecar_disagree(tmp_path: Path) -> None:
    adapter = with_novices(build("mixtral"))
    adapter.save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[STORED_FIELD]["0"] = 7
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        HFModelError, match=r"config\.json says 7 experts are stored, moelab_experts\.safetensors lists 6"
    ):
        load_model(tmp_path)


def test_removing_experts_after_novices_keeps_the_compact_layout_right(tmp_path: Path) -> None:
    model = build("qwen3_moe")
    adapter = with_novices(model)
    adapter.remove_experts({info.index: [0, 1, 2, 3, 4, 6] for info in adapter.layers})
    # Novices 1 and 6 are now experts 1 and 5 of six; four experts are stored per layer.
    assert {tuple(sorted(v)) for v in adapter.novices.values()} == {(1, 5)}
    adapter.save(tmp_path)
    assert set(json.loads((tmp_path / "config.json").read_text())[STORED_FIELD].values()) == {4}
    torch.testing.assert_close(logits(load_model(tmp_path), token_ids()), logits(model, token_ids()), rtol=0, atol=0)
