"""Matched trainable parameters: size every routing's mixture from one parameter budget.

LD-MoLE's card (section 3) compares routings "at matched trainable parameters". Giving every
mixture E experts of rank r is not enough on a small base: the routers (E·in per projection) and
LD-MoLE's shared λ network are a tenth of the adapter parameters there. The rule:

- **The budget** is the MixLoRA-style baseline at the configured shape: E experts of rank r on every
  adapted projection plus their linear routers (:func:`parameter_budget`). Top-1, top-2, ReLU and
  fixed sparsemax routing all have exactly this shape (their gates are the same size), so they
  spend the budget as configured.
- **LoRA** (one adapter) takes the rank whose adapter is closest to the budget: E·r plus the
  routers' worth of rank.
- **MoLA** spreads the same total of experts over the layers (more in higher ones), so it spends
  the budget exactly when every layer adapts the same projections.
- **HydraLoRA** (one shared A, E B heads and a router per site) takes the rank r whose count,
  r·in + E·r·out + E·in per site, is closest to the budget.
- **LD-MoLE** keeps the configured λ width when that already fits within the tolerance (on a large
  base the shared λ network is negligible). Otherwise it pays for its λ network inside the
  budget: it keeps the most experts (of rank r) that fit beside a λ network of the configured
  width, then the λ network is widened to the width that brings the count closest to the budget.

Counts are the parameters :func:`mlcore.lora_moe.mixture.attach_lora_mixture` makes trainable
(adapters, routers, λ network), computed from the adapted projections' shapes; the classification
head is the same for every contender and is left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from torch import nn

from mlcore.lora_moe.mixture import MixtureConfig, mola_allocation

#: Adapted projections as (in_features, out_features), one per site.
Sites = list[tuple[int, int]]

LD_MOLE = ("ld-mole", "ld-mole-nosparsity")


def adapter_sites(model: nn.Module, projections: tuple[str, ...]) -> Sites:
    """(in, out) of each projection ``attach_lora_mixture`` would adapt on ``model`` (not modified)."""
    sites = []
    for _, parent, attr in model.lora_sites(projections):
        linear = getattr(parent, attr)
        sites.append((int(linear.in_features), int(linear.out_features)))
    return sites


def lambda_parameters(sites: Sites, hidden: int) -> int:
    """LD-MoLE's shared λ network: one input head per distinct input width, then hidden → 1."""
    widths = {fan_in for fan_in, _ in sites}
    return sum(w * hidden + hidden for w in widths) + hidden + 1


def mixture_parameters(sites: Sites, config: MixtureConfig) -> int:
    """Trainable parameters of ``config``'s mixture on ``sites``: LoRA A and B of every expert, the
    linear gates (E·in per site, none for LoRA) and, for LD-MoLE, the shared λ network."""
    if config.routing == "lora":
        return _count(sites, 1, config.experts * config.rank, gates=False)
    if config.routing == "hydra":
        return _hydra_count(sites, config.experts, config.rank)
    if config.routing == "mola":
        counts = _mola_experts(sites, config)
        return sum(n * (config.rank * (i + o) + i) for (i, o), n in zip(sites, counts, strict=True))
    hidden = config.lambda_hidden if config.routing in LD_MOLE else None
    return _count(sites, config.experts, config.rank, lambda_hidden=hidden)


def _count(sites: Sites, experts: int, rank: int, *, gates: bool = True, lambda_hidden: int | None = None) -> int:
    adapters = sum(experts * rank * (fan_in + fan_out) for fan_in, fan_out in sites)
    routers = sum(experts * fan_in for fan_in, _ in sites) if gates else 0
    return adapters + routers + (0 if lambda_hidden is None else lambda_parameters(sites, lambda_hidden))


def _hydra_count(sites: Sites, experts: int, rank: int) -> int:
    """HydraLoRA per site: the shared A (r·in), E heads B_i (r·out each) and the router (E·in)."""
    return sum(rank * fan_in + experts * rank * fan_out + experts * fan_in for fan_in, fan_out in sites)


def _mola_experts(sites: Sites, config: MixtureConfig) -> list[int]:
    """Each site's MoLA expert count; the sites come layer by layer, ``len(config.projections)`` each."""
    per_layer = len(config.projections)
    if len(sites) % per_layer:
        raise ValueError(f"mola: {len(sites)} sites do not split into layers of {per_layer} projections")
    counts = config.layer_experts or mola_allocation(len(sites) // per_layer, config.experts)
    return [counts[index // per_layer] for index in range(len(sites))]


def parameter_budget(sites: Sites, experts: int, rank: int) -> int:
    """The shared budget: ``experts`` experts of rank ``rank`` plus a linear router on every site."""
    return _count(sites, experts, rank)


def matched_mixture(sites: Sites, template: MixtureConfig, *, tolerance: float = 0.02) -> MixtureConfig:
    """``template`` resized so its trainable parameters match :func:`parameter_budget` of the
    template's experts × rank within ``tolerance`` (a share of the budget), by the module's rule.

    A ValueError names the routing when no size gets within the tolerance (e.g. a LoRA rank step
    larger than the tolerance on a very small budget, or LD-MoLE left with no more experts than
    its sparsity target)."""
    budget = parameter_budget(sites, template.experts, template.rank)
    if template.routing == "lora":
        per_rank = sum(fan_in + fan_out for fan_in, fan_out in sites)
        rank = max(1, round(budget / per_rank))
        config = dataclasses.replace(template, experts=1, rank=rank)
    elif template.routing == "hydra":
        config = _hydra_size(sites, template, budget, tolerance)
    elif template.routing == "mola":
        # Fix the allocation in the config, so it names its per-layer counts.
        per_layer = len(template.projections)
        counts = template.layer_experts or mola_allocation(max(1, len(sites) // per_layer), template.experts)
        config = dataclasses.replace(template, layer_experts=tuple(counts))
    elif template.routing in LD_MOLE:
        config = _ld_mole_size(sites, template, budget, tolerance)
    else:
        config = template
    return _checked(sites, config, budget, tolerance)


def _hydra_size(sites: Sites, template: MixtureConfig, budget: int, tolerance: float) -> MixtureConfig:
    """HydraLoRA's rank closest to the budget with E heads; where one rank step is coarser than the
    tolerance, the head count nearest E whose closest rank fits."""
    heads = sorted(range(2, 2 * template.experts + 1), key=lambda h: (abs(h - template.experts), h))
    ranks = range(1, 8 * template.experts * template.rank + 1)
    candidates = []
    for h in heads:
        rank = min(ranks, key=lambda r: abs(_hydra_count(sites, h, r) - budget))
        candidates.append(dataclasses.replace(template, experts=h, rank=rank))
        if abs(mixture_parameters(sites, candidates[-1]) - budget) <= tolerance * budget:
            return candidates[-1]
    return min(candidates, key=lambda c: abs(mixture_parameters(sites, c) - budget))


def _ld_mole_size(sites: Sites, template: MixtureConfig, budget: int, tolerance: float) -> MixtureConfig:
    if abs(mixture_parameters(sites, template) - budget) <= tolerance * budget:
        return template
    # Give up experts until the rest fits beside a λ network of the configured width ...
    experts, rank = template.experts, template.rank
    while experts > 1 and _count(sites, experts, rank, lambda_hidden=template.lambda_hidden) > budget:
        experts -= 1
    if template.routing == "ld-mole" and experts <= template.sparsity_k:
        raise ValueError(
            f"ld-mole: matching the budget of {budget:,} parameters leaves {experts} experts, not more than "
            f"sparsity_k = {template.sparsity_k}; use more experts or a larger rank"
        )
    # ... then widen the λ network to spend what is left.
    per_unit = lambda_parameters(sites, 2) - lambda_parameters(sites, 1)
    near = max(1, (budget - _count(sites, experts, rank, lambda_hidden=0)) // per_unit)
    candidates = (dataclasses.replace(template, experts=experts, lambda_hidden=h) for h in (near, near + 1))
    return min(candidates, key=lambda c: abs(mixture_parameters(sites, c) - budget))


def _checked(sites: Sites, config: MixtureConfig, budget: int, tolerance: float) -> MixtureConfig:
    count = mixture_parameters(sites, config)
    if abs(count - budget) > tolerance * budget:
        raise ValueError(
            f"{config.routing}: the closest size has {count:,} trainable parameters, "
            f"{(count - budget) / budget:+.1%} from the budget of {budget:,}; use more experts or a larger rank"
        )
    return config


def matched_mixtures(
    model: nn.Module, routings: Iterable[str], template: MixtureConfig, *, tolerance: float = 0.02
) -> dict[str, MixtureConfig]:
    """One matched :class:`MixtureConfig` per routing, for the projections ``template`` adapts on ``model``."""
    sites = adapter_sites(model, template.projections)
    return {
        routing: matched_mixture(sites, dataclasses.replace(template, routing=routing), tolerance=tolerance)
        for routing in routings
    }


def shape(config: MixtureConfig) -> str:
    """``8×4``, ``1×36`` (LoRA), ``7×4, λ 42`` (and LD-MoLE's λ width), ``8×7, shared A`` (HydraLoRA's
    B heads) or ``5+11×4`` (MoLA's experts per layer): experts × rank."""
    if config.routing == "hydra":
        return f"{config.experts}×{config.rank}, shared A"
    if config.routing == "mola":
        if not config.layer_experts:
            return f"{config.experts}×{config.rank} per layer on average, ▽"
        return "+".join(map(str, config.layer_experts)) + f"×{config.rank}"
    experts, rank = (1, config.experts * config.rank) if config.routing == "lora" else (config.experts, config.rank)
    out = f"{experts}×{rank}"
    return f"{out}, λ {config.lambda_hidden}" if config.routing in LD_MOLE else out
