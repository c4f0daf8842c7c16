"""The card fields that several item kinds share: parameters and MoE layout of loaded modules."""

from __future__ import annotations

from typing import Any


def one_or_all(values: list[Any]) -> Any:
    """The one value every layer shares, or the sorted distinct values when they differ."""
    distinct = sorted(set(values), key=str)
    return distinct[0] if len(distinct) == 1 else distinct


def torch_model_card(architecture: str, *models: Any) -> dict[str, Any]:
    """Parameters of the loaded modules and, for those built from ``MoELayer``, their MoE layout."""
    from mlcore.moe.layer import moe_layers

    layers = [layer for model in models for layer in moe_layers(model)]
    card: dict[str, Any] = {
        "architecture": architecture,
        "parameters": sum(p.numel() for model in models for p in model.parameters()),
    }
    if layers:
        card["moe_layers"] = len(layers)
        card["experts_per_layer"] = one_or_all([layer.num_experts for layer in layers])
        card["top_k"] = one_or_all([getattr(layer.router, "top_k", None) for layer in layers])
    return card
