"""HydraLoRA (one shared A, several B heads, a dense router) and MoLA (top-2 with more experts in
higher layers) as routings of the LoRA mixture, sized to LD-MoLE's parameter budget."""

import pytest
import torch
from torch import nn

from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
from mlcore.lora_moe.budget import adapter_sites, matched_mixtures, mixture_parameters, parameter_budget, shape
from mlcore.lora_moe.mixture import (
    LoRAMixtureLinear,
    MixtureConfig,
    attach_lora_mixture,
    mola_allocation,
    trainable_parameters,
)


def _hydra(experts: int = 4, rank: int = 3) -> LoRAMixtureLinear:
    torch.manual_seed(0)
    return LoRAMixtureLinear(nn.Linear(16, 12), MixtureConfig(routing="hydra", experts=experts, rank=rank, dropout=0.0))


def test_hydra_shares_one_a_matrix_across_its_b_heads():
    layer = _hydra()
    assert layer.lora_A.shape == (1, 3, 16)
    assert layer.lora_B.shape == (4, 12, 3)
    assert layer.gate is not None and layer.gate.shape == (4, 16)


def test_a_fresh_hydra_leaves_the_frozen_projection_unchanged_and_routes_densely():
    layer = _hydra().eval()
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(layer(x), layer.base(x))
    assert layer.active.eq(4).all()  # a dense softmax: every head contributes to every token


def test_hydra_computes_the_papers_asymmetric_mixture():
    layer = _hydra().eval()
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(7, 16)
    omega = torch.softmax(x @ layer.gate.T, dim=-1)
    a_x = x @ layer.lora_A[0].T
    expected = layer.base(x) + layer.scale * sum(
        omega[:, i : i + 1] * (a_x @ layer.lora_B[i].T) for i in range(layer.num_experts)
    )
    torch.testing.assert_close(layer(x), expected)


def test_mola_allocation_reproduces_the_papers_2468_layout_and_keeps_the_total():
    assert mola_allocation(4, 5) == (2, 4, 6, 8)  # MoLA(2468): 20 experts, as a uniform 5 per layer
    assert mola_allocation(2, 8) == (5, 11)
    for layers, experts in ((1, 6), (3, 4), (6, 8), (32, 5)):
        counts = mola_allocation(layers, experts)
        assert sum(counts) == layers * experts
        assert list(counts) == sorted(counts) and min(counts) >= 2


def test_mola_refuses_fewer_than_two_experts_a_layer():
    with pytest.raises(ValueError, match="at least 2"):
        MixtureConfig(routing="mola", experts=8, layer_experts=(1, 15))


def test_mola_gives_higher_layers_more_experts_and_routes_each_token_to_two():
    model = TinyEncoder(EncoderConfig())
    adapted = dict(attach_lora_mixture(model, MixtureConfig(routing="mola", experts=8, rank=4)))
    assert adapted["0.q"].num_experts == 5 and adapted["1.q"].num_experts == 11
    model.eval()
    model(torch.randint(10, 30, (3, 9)))
    assert all(module.active.eq(2).all() for module in adapted.values())


def test_mola_refuses_an_allocation_for_the_wrong_number_of_layers():
    with pytest.raises(ValueError, match="2 layers"):
        attach_lora_mixture(TinyEncoder(EncoderConfig()), MixtureConfig(routing="mola", layer_experts=(4, 4, 8)))


def test_hydra_and_mola_match_ld_moles_budget_and_the_counts_are_what_attaching_trains():
    base = TinyEncoder(EncoderConfig())
    mixtures = matched_mixtures(base, ("ld-mole", "hydra", "mola", "top2"), MixtureConfig(experts=8, rank=4))
    sites = adapter_sites(base, mixtures["hydra"].projections)
    budget = parameter_budget(sites, 8, 4)
    counts = {}
    for routing, mixture in mixtures.items():
        model = TinyEncoder(EncoderConfig())
        attach_lora_mixture(model, mixture)
        counts[routing] = trainable_parameters(model)
        assert counts[routing] == mixture_parameters(sites, mixture), routing
    assert counts["mola"] == counts["top2"] == budget  # the same experts, spread over the layers differently
    assert abs(counts["hydra"] - counts["ld-mole"]) <= 0.04 * counts["ld-mole"]
    assert abs(counts["hydra"] - budget) <= 0.02 * budget
    assert mixtures["hydra"].rank > 4  # the shared A frees parameters for wider heads
    assert shape(mixtures["hydra"]) == f"8×{mixtures['hydra'].rank}, shared A"
    assert shape(mixtures["mola"]) == "5+11×4"


@pytest.mark.parametrize("routing", ["hydra", "mola"])
def test_a_few_gradient_steps_reduce_the_loss(routing):
    torch.manual_seed(0)
    model = TinyEncoder(EncoderConfig())
    attach_lora_mixture(model, MixtureConfig(routing=routing, experts=4, rank=4, dropout=0.0))
    head = nn.Linear(64, 2)
    tokens, targets = torch.randint(10, 30, (32, 9)), torch.randint(0, 2, (32,))
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-2)

    def loss() -> torch.Tensor:
        return nn.functional.cross_entropy(head(model(tokens)[:, 0]), targets)

    first = loss().item()
    for _ in range(15):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert loss().item() < first - 0.05
    adapters = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert any(p.abs().sum() > 0 for p in adapters)  # the adapters themselves moved, not only the head
