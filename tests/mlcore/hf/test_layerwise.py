"""Layer-by-layer loading: one decoder layer in memory at a time, same routing as a full pass."""

from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.hf import adapt, layer_by_layer, load_model
from mlcore.hf.loading import weight_files
from tests.mlcore.hf.conftest import ARCHS, build, token_ids


def routing_of(model: Any, ids: torch.Tensor) -> tuple[dict[int, tuple[torch.Tensor, ...]], torch.Tensor]:
    found: dict[int, tuple[torch.Tensor, ...]] = {}

    def record(layer: int, expert_ids: torch.Tensor, gates: torch.Tensor, router_logits: Any) -> None:
        found[layer] = (expert_ids, gates, router_logits)

    with torch.no_grad(), adapt(model).capture_routing(record, logits=True):
        out = model(ids, use_cache=False).logits
    return found, out


def edited_checkpoint(arch: str, path: Path, **save: Any) -> Path:
    """A checkpoint with every kind of edit: novices, and masks from uneven per-layer removal."""
    model = build(arch)
    adapter = adapt(model)
    first, second = (info.index for info in adapter.layers)
    adapter.replace_with_novices({second: {3: torch.linspace(-1, 1, 32)}})
    adapter.remove_experts({first: [0, 1, 3, 4, 6, 7], second: [0, 2, 3, 5]})
    model.save_pretrained(path, **save)
    from mlcore.hf.checkpoint import write_sidecar

    write_sidecar(adapter, path)
    return path


@pytest.mark.parametrize("arch", ARCHS)
def test_layer_by_layer_routing_matches_a_full_model_pass(arch: str, tmp_path: Path) -> None:
    path = edited_checkpoint(arch, tmp_path)
    ids = token_ids(length=12)
    full_routing, full_logits = routing_of(load_model(path), ids)
    with layer_by_layer(path) as model:
        routing, out = routing_of(model, ids)
    assert sorted(routing) == sorted(full_routing)
    for layer, (expert_ids, gates, router_logits) in full_routing.items():
        assert torch.equal(routing[layer][0], expert_ids)
        torch.testing.assert_close(routing[layer][1], gates, rtol=0, atol=0)
        torch.testing.assert_close(routing[layer][2], router_logits, rtol=0, atol=0)
    torch.testing.assert_close(out, full_logits, rtol=0, atol=0)


def test_only_one_decoder_layer_is_in_memory_at_a_time(tmp_path: Path) -> None:
    path = edited_checkpoint("deepseek_v3", tmp_path, max_shard_size="40KB")
    assert len(weight_files(path)) > 1
    resident: list[int] = []
    with layer_by_layer(path) as model:
        layers = model.model.layers
        assert all(p.is_meta for p in layers.parameters())
        assert not any(p.is_meta for n, p in model.named_parameters() if not n.startswith("model.layers."))

        def count(layer: Any, args: Any) -> None:
            resident.append(sum(not next(m.parameters()).is_meta for m in layers))

        handles = [layer.register_forward_pre_hook(count) for layer in layers]
        with torch.no_grad():
            model(token_ids(), use_cache=False)
        for handle in handles:
            handle.remove()
        assert all(p.is_meta for p in layers.parameters())
    assert resident == [1] * len(layers)


def test_a_sharded_checkpoint_loads_layer_by_layer_like_a_single_file(tmp_path: Path) -> None:
    single = edited_checkpoint("mixtral", tmp_path / "single")
    sharded = edited_checkpoint("mixtral", tmp_path / "sharded", max_shard_size="40KB")
    assert len(weight_files(sharded)) > 1
    ids = token_ids()
    with layer_by_layer(single) as one, layer_by_layer(sharded) as many, torch.no_grad():
        torch.testing.assert_close(many(ids, use_cache=False).logits, one(ids, use_cache=False).logits, rtol=0, atol=0)


def test_layer_by_layer_keeps_fp32_routers_in_a_bf16_load(tmp_path: Path) -> None:
    path = edited_checkpoint("deepseek_v3", tmp_path)
    ids = token_ids()
    full = load_model(path, dtype=torch.bfloat16)
    with torch.no_grad():
        expected = full(ids, use_cache=False).logits
    with layer_by_layer(path, dtype=torch.bfloat16) as model, torch.no_grad():
        routers: list[torch.dtype] = []
        handle = model.model.layers[1].mlp.gate.register_forward_hook(
            lambda module, args, output: routers.append(module.weight.dtype)
        )
        out = model(ids, use_cache=False).logits
        handle.remove()
    assert routers == [torch.float32] and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_tied_embeddings_are_tied_when_loading_layer_by_layer(tmp_path: Path) -> None:
    model = build("qwen3_moe", tie_word_embeddings=True)
    model.save_pretrained(tmp_path)
    ids = token_ids()
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
    with layer_by_layer(tmp_path) as lazy, torch.no_grad():
        assert lazy.lm_head.weight is lazy.model.embed_tokens.weight
        torch.testing.assert_close(lazy(ids, use_cache=False).logits, expected, rtol=0, atol=0)
