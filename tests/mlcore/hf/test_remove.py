"""Removing experts: slice where a stock config can hold the result, mask where it cannot."""

from pathlib import Path

import pytest
import torch

from mlcore.hf import HFModelError, adapt, load_model, tiny_config
from tests.mlcore.hf.conftest import ARCHS, build, logits, token_ids

KEEP = [0, 2, 3, 5, 7]


@pytest.mark.parametrize("arch", ARCHS)
def test_removed_experts_are_sliced_saved_and_reloaded_with_identical_logits(arch: str, tmp_path: Path) -> None:
    model = build(arch)
    ids = token_ids()
    before = logits(model, ids)
    adapter = adapt(model)
    router_rows = {info.index: info.router.weight[KEEP].clone() for info in adapter.layers}
    adapter.remove_experts({info.index: KEEP for info in adapter.layers})
    spec_field = adapter.spec.experts_field
    assert getattr(model.config, spec_field) == len(KEEP)
    assert adapter.masks == {}
    for info in adapter.layers:
        assert info.num_experts == len(KEEP)
        assert info.experts.gate_up_proj.shape[0] == info.experts.down_proj.shape[0] == len(KEEP)
        assert torch.equal(info.router.weight, router_rows[info.index])
    pruned = logits(model, ids)
    assert not torch.allclose(pruned, before)

    adapter.save(tmp_path)
    assert not (tmp_path / "moelab_experts.safetensors").exists()
    reloaded = load_model(tmp_path)
    assert getattr(reloaded.config, spec_field) == len(KEEP)
    torch.testing.assert_close(logits(reloaded, ids), pruned, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_mask_routes_exactly_like_slicing(arch: str) -> None:
    ids = token_ids()
    sliced, masked = build(arch), build(arch)
    adapt(sliced).remove_experts({info.index: KEEP for info in adapt(sliced).layers})
    adapter = adapt(masked)
    adapter.mask_experts({info.index: KEEP for info in adapter.layers})
    assert sorted(adapter.masks) == [info.index for info in adapter.layers]
    torch.testing.assert_close(logits(masked, ids), logits(sliced, ids), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_uneven_counts_per_layer_are_masked_recorded_and_reloaded(arch: str, tmp_path: Path) -> None:
    model = build(arch)
    adapter = adapt(model)
    first, second = (info.index for info in adapter.layers)
    adapter.remove_experts({first: [1, 4, 6], second: KEEP})
    assert getattr(model.config, adapter.spec.experts_field) == 8
    assert all(info.experts.gate_up_proj.shape[0] == 8 for info in adapter.layers)
    assert adapter.masks[first].tolist() == [i not in (1, 4, 6) for i in range(8)]
    assert adapter.masks[second].tolist() == [i not in KEEP for i in range(8)]

    selected: dict[int, torch.Tensor] = {}
    ids = token_ids(length=16)
    with torch.no_grad(), adapter.capture_routing(lambda layer, e, g, lg: selected.update({layer: e})):
        expected = model(ids, use_cache=False).logits
    assert set(selected[first].unique().tolist()) <= {1, 4, 6}
    assert set(selected[second].unique().tolist()) <= set(KEEP)

    adapter.save(tmp_path)
    reloaded = load_model(tmp_path)
    assert {k: v.tolist() for k, v in adapt(reloaded).masks.items()} == {
        k: v.tolist() for k, v in adapter.masks.items()
    }
    torch.testing.assert_close(logits(reloaded, ids), expected, rtol=0, atol=0)


def test_a_config_with_fewer_experts_builds_the_same_shapes_as_a_pruned_model(tmp_path: Path) -> None:
    model = build("qwen3_moe")
    adapt(model).remove_experts({0: KEEP, 1: KEEP})
    fresh = build("qwen3_moe", num_experts=len(KEEP))
    assert {k: v.shape for k, v in fresh.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    assert tiny_config("qwen3_moe", num_experts=5).num_experts == 5


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        ({0: [0]}, "keep at least top_k=2"),
        ({0: [0, 0, 1]}, "distinct and in"),
        ({0: [0, 8]}, "distinct and in"),
        ({5: [0, 1]}, "not an MoE layer"),
    ],
)
def test_it_refuses_an_impossible_keep_list(keep: dict[int, list[int]], message: str) -> None:
    with pytest.raises(HFModelError, match=message):
        adapt(build("mixtral")).remove_experts(keep)
