import pytest
import torch

from mlcore.moe import MoELayer, PrototypeRouter, bench


@pytest.mark.parametrize(("activation", "gated", "shared"), [("silu", True, 0), ("relu", False, 1)])
def test_the_loop_baseline_computes_what_the_layer_computes(activation, gated, shared):
    torch.manual_seed(0)
    layer = MoELayer(8, 12, 5, 2, activation=activation, gated=gated, num_shared_experts=shared, dtype=torch.float64)
    x = torch.randn(30, 8, dtype=torch.float64)
    torch.testing.assert_close(bench.loop_forward(layer, x), layer(x))


def test_the_loop_baseline_refuses_expert_biases():
    with pytest.raises(ValueError, match="without bias"):
        bench.loop_forward(MoELayer(8, 8, 2, 1, bias=True), torch.randn(2, 8))


def test_layer_flops_counts_router_routed_and_shared_matmuls():
    layer = MoELayer(4, 6, 3, 2, num_shared_experts=1, shared_intermediate=5)
    forward = 2 * 10 * 4 * 3 + 2 * 20 * (12 + 6) * 4 + 2 * 10 * (10 + 5) * 4
    assert bench.layer_flops(layer, 10, 20) == 3 * forward
    ungated = MoELayer(4, 6, router=PrototypeRouter(4, 3, unconditional=False), gated=False)
    assert bench.layer_flops(ungated, 10, 10) == 3 * (2 * 10 * 4 * 3 + 2 * 10 * (6 + 6) * 4)


def test_the_table_compares_every_contender_at_a_tiny_config(monkeypatch):
    monkeypatch.setattr(bench, "CONFIG", {"tokens": 64, "hidden": 16, "intermediate": 24, "top_k": 2})
    monkeypatch.setattr(bench, "EXPERTS", (4,))
    monkeypatch.setattr(bench, "TIERS", {"quick": {"rounds": 1, "slow_rounds": 1}})
    markdown, data = bench.moe_layer_table("quick")
    (row,) = data["rows"]
    assert set(row["ms"]) == {"moe_layer", "loop", *(f"hf_{n}" for n in bench.hf_implementations())}
    assert row["speedup_vs_loop"] == pytest.approx(row["ms"]["loop"] / row["ms"]["moe_layer"])
    assert row["speedup_vs_best_hf"] == pytest.approx(row["ms"][row["best_hf"]] / row["ms"]["moe_layer"])
    assert row["fraction_of_peak"] > 0
    assert "| 4 |" in markdown and "no slower than transformers' best" in markdown
