import dataclasses

import pytest

from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
from mlcore.lora_moe.budget import adapter_sites, matched_mixture, matched_mixtures, parameter_budget
from mlcore.lora_moe.mixture import ROUTINGS, MixtureConfig, attach_lora_mixture, trainable_parameters


def _attached_count(config: EncoderConfig, mixture: MixtureConfig) -> int:
    """What attaching the mixture to a fresh encoder really makes trainable."""
    model = TinyEncoder(config)
    attach_lora_mixture(model, mixture)
    return trainable_parameters(model)


CASES = [
    # (encoder, experts, rank, projections): the benchmark's base, narrower and wider bases, other shapes.
    (EncoderConfig(), 8, 4, ("q", "k", "v", "o", "up", "down")),
    (EncoderConfig(), 16, 2, ("q", "k", "v", "o")),
    (EncoderConfig(hidden=32, heads=2, ffn=96, layers=3), 4, 8, ("q", "v", "down")),
    (EncoderConfig(hidden=128, heads=4, ffn=256, layers=1), 6, 6, ("q", "k", "v", "o", "up", "down")),
]


@pytest.mark.parametrize(("encoder", "experts", "rank", "projections"), CASES)
def test_every_routing_gets_the_same_trainable_parameters_within_two_percent(encoder, experts, rank, projections):
    template = MixtureConfig(experts=experts, rank=rank, projections=projections)
    mixtures = matched_mixtures(TinyEncoder(encoder), ROUTINGS, template)
    counts = {routing: _attached_count(encoder, mixture) for routing, mixture in mixtures.items()}
    budget = parameter_budget(adapter_sites(TinyEncoder(encoder), projections), experts, rank)
    assert set(counts) == set(ROUTINGS)
    for routing, count in counts.items():
        assert abs(count - budget) <= 0.02 * budget, (routing, count, budget)
    assert (max(counts.values()) - min(counts.values())) / min(counts.values()) <= 0.04


def test_on_the_benchmark_base_lora_widens_and_ld_mole_trades_an_expert_for_its_lambda_network():
    mixtures = matched_mixtures(TinyEncoder(EncoderConfig()), ROUTINGS, MixtureConfig(experts=8, rank=4))
    assert (mixtures["lora"].experts, mixtures["lora"].rank) == (1, 36)  # 32 of experts + 4 of routers
    assert (mixtures["top2"].experts, mixtures["top2"].rank) == (8, 4)
    assert mixtures["ld-mole"].experts == 7 and mixtures["ld-mole"].rank == 4
    assert mixtures["ld-mole"].lambda_hidden > MixtureConfig().lambda_hidden  # it spends the freed expert


def test_ld_mole_keeps_its_configured_shape_where_the_lambda_network_is_already_negligible():
    deep = EncoderConfig(layers=12)
    mixture = matched_mixtures(TinyEncoder(deep), ["ld-mole"], MixtureConfig(experts=8, rank=4))["ld-mole"]
    assert (mixture.experts, mixture.lambda_hidden) == (8, MixtureConfig().lambda_hidden)


def test_a_budget_too_small_to_match_is_refused_with_the_routing_name():
    sites = adapter_sites(TinyEncoder(EncoderConfig(hidden=16, heads=2, ffn=32)), ("q",))
    with pytest.raises(ValueError, match="lora: the closest size"):
        matched_mixture(sites, MixtureConfig(routing="lora", experts=3, rank=1, projections=("q",)))
    with pytest.raises(ValueError, match=r"ld-mole: .* not more than sparsity_k"):
        matched_mixture(sites, MixtureConfig(routing="ld-mole", experts=2, rank=1, sparsity_k=1, projections=("q",)))


def test_matching_leaves_everything_but_the_sizes_as_configured():
    template = MixtureConfig(routing="ld-mole", experts=8, rank=4, alpha=8.0, sparsity_weight=0.3, dropout=0.0)
    matched = matched_mixture(adapter_sites(TinyEncoder(EncoderConfig()), template.projections), template)
    unchanged = {f.name for f in dataclasses.fields(MixtureConfig)} - {"experts", "rank", "lambda_hidden"}
    assert all(getattr(matched, name) == getattr(template, name) for name in unchanged)


def test_ld_mole_that_would_drop_to_its_sparsity_target_is_refused_by_the_matching_rule_not_the_config():
    sites = adapter_sites(TinyEncoder(EncoderConfig(hidden=16, heads=2, ffn=32)), ("q",))
    with pytest.raises(ValueError, match=r"ld-mole: .* leaves 1 experts, not more than sparsity_k = 2"):
        matched_mixture(sites, MixtureConfig(routing="ld-mole", experts=3, rank=1, sparsity_k=2, projections=("q",)))
