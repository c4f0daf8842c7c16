import pytest
import torch
from torch import nn

from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
from mlcore.lora_moe.mixture import LoRAMixtureLinear, MixtureConfig, attach_lora_mixture, trainable_parameters
from mlcore.moe.sparsemax import LambdaNet


def _layer(routing: str, **kw) -> LoRAMixtureLinear:
    torch.manual_seed(0)
    net = LambdaNet([16], hidden=8) if routing.startswith("ld-mole") else None
    return LoRAMixtureLinear(nn.Linear(16, 12), MixtureConfig(routing=routing, experts=4, rank=2, **kw), net)


@pytest.mark.parametrize("routing", ["lora", "top1", "top2", "relu", "sparsemax", "ld-mole"])
def test_a_fresh_mixture_leaves_the_frozen_projection_unchanged(routing):
    layer = _layer(routing).eval()
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(layer(x), layer.base(x))
    assert not any(p.requires_grad for p in layer.base.parameters())


def test_the_single_lora_baseline_has_as_many_adapter_parameters_as_the_experts():
    lora, mixture = _layer("lora"), _layer("top2")
    assert lora.lora_A.numel() + lora.lora_B.numel() == mixture.lora_A.numel() + mixture.lora_B.numel()
    assert lora.rank == 8 and mixture.rank == 2


def test_top_k_routings_use_exactly_k_experts_per_token():
    x = torch.randn(50, 16)
    for routing, k in (("top1", 1), ("top2", 2)):
        layer = _layer(routing)
        layer(x)
        assert layer.active.eq(k).all()


def test_ld_mole_never_leaves_a_token_without_an_expert_even_with_huge_logits():
    layer = _layer("ld-mole")
    with torch.no_grad():
        layer.router.weight.mul_(1000)
    layer(torch.randn(200, 16))
    assert layer.active.min() >= 1
    assert layer.lam is not None and (layer.lam < 0.99).all()


def test_relu_routing_can_leave_a_token_without_any_expert():
    layer = _layer("relu")
    layer(torch.randn(200, 16))
    assert (layer.active == 0).any()


def test_the_ld_mole_sparsity_loss_reaches_the_shared_lambda_network_and_the_variant_without_it_does_not():
    for routing, expect in (("ld-mole", True), ("ld-mole-nosparsity", False)):
        layer = _layer(routing, balance_weight=0.0)
        layer(torch.randn(64, 16))
        layer.aux_loss.backward()
        grad = layer.router.lambda_net.out.weight.grad
        assert bool(grad is not None and grad.abs().sum() > 0) is expect


def test_attaching_shares_one_lambda_network_and_trains_only_adapters_routers_and_lambda():
    model = TinyEncoder(EncoderConfig(hidden=16, layers=2, heads=2, ffn=32))
    adapted = attach_lora_mixture(model, MixtureConfig(routing="ld-mole", experts=4, rank=2, lambda_hidden=8))
    assert [name for name, _ in adapted][:3] == ["0.q", "0.k", "0.v"] and len(adapted) == 12
    assert len({id(m.router.lambda_net) for _, m in adapted}) == 1
    trainable = {n.split(".")[-1] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable <= {"lora_A", "lora_B", "weight", "bias"}
    assert not model.embed.weight.requires_grad and not model.blocks[0].q.base.weight.requires_grad
    assert trainable_parameters(model) > 0


def test_a_bad_routing_name_or_too_few_experts_is_refused_with_its_name():
    with pytest.raises(ValueError, match="routing must be one of"):
        MixtureConfig(routing="top3")
    with pytest.raises(ValueError, match="top2 routing needs at least 2"):
        MixtureConfig(routing="top2", experts=1)
