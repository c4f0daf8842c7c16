"""Captured routing and per-expert outputs must be what the model really computes."""

from typing import Any

import pytest
import torch
from torch import Tensor

from mlcore.hf import adapt
from tests.mlcore.hf.conftest import ARCHS, build, token_ids


def shared_output(arch: str, block: Any, hidden: Tensor) -> Tensor:
    if arch == "qwen2_moe":
        return torch.sigmoid(block.shared_expert_gate(hidden)) * block.shared_expert(hidden)
    if arch in ("deepseek_v2", "deepseek_v3"):
        return block.shared_experts(hidden)
    return torch.zeros_like(hidden)


def block_io(model: Any, adapter: Any, ids: Tensor) -> dict[int, tuple[Tensor, Tensor]]:
    """Per MoE layer, the block's input and output tokens [T, H] from a plain forward."""
    seen: dict[int, tuple[Tensor, Tensor]] = {}
    handles = []
    for info in adapter.layers:
        block = model.get_submodule(info.name)

        def hook(module: Any, args: Any, output: Any, index: int = info.index) -> None:
            out = output[0] if isinstance(output, tuple) else output
            seen[index] = (args[0].reshape(-1, args[0].shape[-1]), out.reshape(-1, out.shape[-1]))

        handles.append(block.register_forward_hook(hook))
    with torch.no_grad():
        model(ids, use_cache=False)
    for handle in handles:
        handle.remove()
    return seen


def reconstruct(model: Any, arch: str, ids: Tensor) -> None:
    """Σ_e gate × captured E_e(x) (+ shared experts) must equal the MoE block's output."""
    adapter = adapt(model)
    sums: dict[int, Tensor] = {}
    routed: dict[int, tuple[Tensor, Tensor]] = {}

    def on_expert(layer: int, expert: int, outputs: Tensor, gates: Tensor, rows: Tensor) -> None:
        total = sums.setdefault(layer, torch.zeros(ids.numel(), outputs.shape[-1]))
        total.index_add_(0, rows, gates[:, None].to(outputs.dtype) * outputs)
        assert outputs.shape == (rows.shape[0], 32) and gates.shape == rows.shape

    def on_routing(layer: int, expert_ids: Tensor, gates: Tensor, logits: Tensor | None) -> None:
        routed[layer] = (expert_ids, gates)

    with adapter.capture_expert_outputs(on_expert), adapter.capture_routing(on_routing):
        seen = block_io(model, adapter, ids)
    assert sorted(sums) == sorted(seen) == [info.index for info in adapter.layers]
    for info in adapter.layers:
        hidden, expected = seen[info.index]
        with torch.no_grad():
            shared = shared_output(arch, model.get_submodule(info.name), hidden)
        torch.testing.assert_close(sums[info.index] + shared, expected, rtol=1e-5, atol=1e-6)
        expert_ids, gates = routed[info.index]
        assert expert_ids.shape == gates.shape == (ids.numel(), info.top_k)


@pytest.mark.parametrize("arch", ARCHS)
def test_gated_expert_outputs_add_up_to_the_block_output(arch: str) -> None:
    reconstruct(build(arch), arch, token_ids())


@pytest.mark.parametrize("implementation", ["eager", "batched_mm", "grouped_mm"])
def test_capture_works_with_every_experts_implementation(implementation: str) -> None:
    reconstruct(build("mixtral", experts_implementation=implementation), "mixtral", token_ids())


def test_group_limited_routing_is_captured_after_group_selection() -> None:
    reconstruct(build("deepseek_v3", n_group=4, topk_group=2), "deepseek_v3", token_ids())


def captured_routing(model: Any, ids: Tensor, *, logits: bool = True) -> dict[int, tuple[Tensor, ...]]:
    found: dict[int, tuple[Tensor, ...]] = {}

    def record(layer: int, expert_ids: Tensor, gates: Tensor, router_logits: Tensor | None) -> None:
        found[layer] = (expert_ids, gates, router_logits)

    with torch.no_grad(), adapt(model).capture_routing(record, logits=logits):
        model(ids, use_cache=False)
    return found


@pytest.mark.parametrize(
    ("arch", "total"),
    [("mixtral", 1.0), ("qwen3_moe", 1.0), ("deepseek_v3", 2.5), ("gpt_oss", 1.0)],
)
def test_captured_gates_are_the_applied_weights_after_normalisation_and_scaling(arch: str, total: float) -> None:
    for _, gates, _ in captured_routing(build(arch), token_ids()).values():
        torch.testing.assert_close(gates.sum(dim=-1), torch.full((gates.shape[0],), total))


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "olmoe", "deepseek_v2"])
def test_captured_ids_are_the_top_k_of_the_captured_logits(arch: str) -> None:
    for expert_ids, _, router_logits in captured_routing(build(arch), token_ids()).values():
        assert router_logits is not None and router_logits.shape == (expert_ids.shape[0], 8)
        top = router_logits.topk(expert_ids.shape[1], dim=-1).indices
        assert torch.equal(top.sort(dim=-1).values, expert_ids.sort(dim=-1).values)


def test_logits_are_left_out_unless_asked_for() -> None:
    assert all(entry[2] is None for entry in captured_routing(build("olmoe"), token_ids(), logits=False).values())


def test_hooks_are_removed_when_the_capture_ends() -> None:
    model = build("qwen3_moe")
    calls = []
    adapter = adapt(model)
    with (
        adapter.capture_routing(lambda *args: calls.append(1)),
        adapter.capture_expert_outputs(lambda *args: calls.append(2)),
    ):
        pass
    with torch.no_grad():
        model(token_ids(), use_cache=False)
    assert calls == []
