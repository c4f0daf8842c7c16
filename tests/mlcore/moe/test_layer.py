import pytest
import torch

from mlcore.moe import LambdaNet, MoELayer, PrototypeRouter, SparsemaxRouter, moe_layers
from tests.mlcore.moe.reference import expert_output, moe_reference

f64 = torch.float64


@pytest.mark.parametrize(
    ("activation", "gated", "bias"),
    [("silu", True, False), ("gelu", True, True), ("relu", True, False), ("gelu", False, True), ("relu", False, False)],
)
def test_the_layer_matches_a_float64_per_token_reference(activation, gated, bias):
    torch.manual_seed(0)
    layer = MoELayer(12, 20, 6, 2, activation=activation, gated=gated, bias=bias, dtype=f64)
    if bias:
        with torch.no_grad():
            layer.gate_up_proj_bias.normal_()
            layer.down_proj_bias.normal_()
    x = torch.randn(15, 12, dtype=f64)
    y, routing = layer(x, return_routing=True)
    torch.testing.assert_close(y, moe_reference(layer, x, routing.expert_ids, routing.gate_weights))


def test_shared_experts_see_every_token_with_weight_one():
    torch.manual_seed(1)
    layer = MoELayer(12, 16, 4, 1, num_shared_experts=2, shared_intermediate=8, dtype=f64)
    assert layer.shared_gate_up_proj.shape == (1, 2 * 16, 12) and layer.shared_down_proj.shape == (1, 12, 16)
    x = torch.randn(9, 12, dtype=f64)
    y, routing = layer(x, return_routing=True)
    torch.testing.assert_close(y, moe_reference(layer, x, routing.expert_ids, routing.gate_weights))
    routed_only = y - layer.shared_output(x)
    assert not torch.allclose(routed_only, y)


def test_routing_is_dropless_even_when_every_token_prefers_the_same_experts():
    torch.manual_seed(2)
    layer = MoELayer(8, 16, 8, 2, dtype=f64)
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[5] = 100.0
        layer.router.weight[2] = 50.0
    x = torch.rand(64, 8, dtype=f64) + 0.1
    y, routing = layer(x, return_routing=True)
    assert bool((routing.expert_ids.sort(-1).values == torch.tensor([2, 5])).all())
    assert routing.expert_counts().tolist() == [0, 0, 64, 0, 0, 64, 0, 0]
    torch.testing.assert_close(y, moe_reference(layer, x, routing.expert_ids, routing.gate_weights))
    assert bool((y.abs().sum(-1) > 0).all())


def test_gradients_match_the_reference():
    torch.manual_seed(3)
    layer = MoELayer(6, 10, 4, 2, num_shared_experts=1, dtype=f64)
    x = torch.randn(7, 6, dtype=f64, requires_grad=True)
    probe = torch.randn(7, 6, dtype=f64)
    y, routing = layer(x, return_routing=True)
    (y * probe).sum().backward()
    got = [x.grad, layer.gate_up_proj.grad, layer.down_proj.grad, layer.router.weight.grad, layer.shared_down_proj.grad]
    layer.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    ids = routing.expert_ids
    weights = layer.router(x2).gate_weights
    (moe_reference(layer, x2, ids, weights) * probe).sum().backward()
    want = [
        x2.grad,
        layer.gate_up_proj.grad,
        layer.down_proj.grad,
        layer.router.weight.grad,
        layer.shared_down_proj.grad,
    ]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_the_layer_keeps_leading_dimensions_and_broadcasts_a_per_sample_null_mask():
    torch.manual_seed(4)
    router = PrototypeRouter(8, 3, dtype=f64)
    layer = MoELayer(8, 12, router=router, num_shared_experts=1, dtype=f64)
    x = torch.randn(2, 5, 8, dtype=f64)
    y, routing = layer(x, null_mask=torch.tensor([True, False]), return_routing=True)
    assert y.shape == (2, 5, 8)
    assert routing.expert_ids[:5, 0].tolist() == [3] * 5
    assert bool((routing.expert_ids[5:, 0] < 3).all())
    torch.testing.assert_close(
        y.reshape(10, 8), moe_reference(layer, x.reshape(10, 8), routing.expert_ids, routing.gate_weights)
    )


def test_a_sparsemax_routed_layer_ignores_its_inactive_slots():
    torch.manual_seed(5)
    router = SparsemaxRouter(8, 6, LambdaNet([8], dtype=f64), dtype=f64)
    with torch.no_grad():
        router.lambda_net.out.bias.fill_(-1.0)
    layer = MoELayer(8, 12, router=router, dtype=f64)
    x = torch.randn(20, 8, dtype=f64)
    y, routing = layer(x, return_routing=True)
    assert routing.active is not None and not bool(routing.active.all())
    torch.testing.assert_close(y, moe_reference(layer, x, routing.expert_ids, routing.gate_weights))


def test_expert_outputs_are_each_experts_ungated_output():
    torch.manual_seed(6)
    layer = MoELayer(8, 12, 5, 2, dtype=f64)
    x = torch.randn(4, 8, dtype=f64)
    ids = torch.tensor([4, 0, 0, 2])
    want = torch.stack([expert_output(layer, int(e), x_t) for e, x_t in zip(ids, x)])
    torch.testing.assert_close(layer.expert_outputs(x, ids), want)


def test_the_layer_refuses_inputs_of_the_wrong_width_and_inconsistent_expert_counts():
    layer = MoELayer(8, 12, 4)
    with pytest.raises(ValueError, match="inputs of width 8"):
        layer(torch.randn(3, 7))
    with pytest.raises(ValueError, match="disagrees with the router's 4"):
        MoELayer(8, 12, 5, router=PrototypeRouter(8, 3))
    with pytest.raises(ValueError, match="activation must be one of"):
        MoELayer(8, 12, 4, activation="tanh")


def test_moe_layers_lists_layers_in_module_order():
    model = torch.nn.Sequential(MoELayer(8, 8, 2, 1), torch.nn.Linear(8, 8), MoELayer(8, 8, 3, 1))
    assert [layer.num_experts for layer in moe_layers(model)] == [2, 3]


def test_the_expert_weights_use_the_transformers_fused_layout():
    layer = MoELayer(8, 12, 4, 2)
    assert layer.gate_up_proj.shape == (4, 24, 8)
    assert layer.down_proj.shape == (4, 8, 12)
    assert layer.router.weight.shape == (4, 8)
    assert MoELayer(8, 12, 4, 2, gated=False).gate_up_proj.shape == (4, 12, 8)
