"""The support matrix (family × operation) that docs/hf-support.md publishes.

``support_for(config, router_rule)`` is what ``MoEAdapter.support()`` answers; ``REFUSED`` lists the
families discovery refuses, with their structural reason and what it blocks. The page's table is
rendered by :mod:`mlcore.hf.matrix` (``python -m mlcore.hf.matrix``).
"""

from __future__ import annotations

from typing import Any

from mlcore.hf.architectures import group_limited

OPERATIONS: tuple[str, ...] = (
    "enumerate_layers",
    "capture_routing",
    "capture_expert_outputs",
    "remove_experts",
    "replace_with_novices",
    "save_and_reload",
    "layer_by_layer_load",
)

#: model_type → (structural reason, as ``StructuralRefusal.reason``; what it blocks). Discovery
#: raises these; the family test checks that each refusal is exactly this one.
REFUSED: dict[str, tuple[str, str]] = {
    "dbrx": ("experts in another layout", "every operation (experts stored as flattened [E·I, H] matrices)"),
    "doge": ("experts in another layout", "every operation (product-key experts: embedding rows, not MLPs)"),
    "inkling_text": (
        "router rows do not match the experts",
        "every operation (one router matrix scores the routed and the shared experts: a shared-expert sink)",
    ),
    "zaya": (
        "router rows do not match the experts",
        "every operation (an MLP router with an extra no-expert output)",
    ),
    "jetmoe": (
        "experts without an (ids, gates) call",
        "every operation (experts inside attention and parallel experts dispatched by the block)",
    ),
    "llama4_text": (
        "experts without an (ids, gates) call",
        "every operation (the router scales each expert's inputs; the experts see no ids or gates)",
    ),
    "longcat_flash": ("zero-compute experts", "every operation (identity experts stacked beside the routed ones)"),
}

#: model_type → operation → why it does not work yet. Not structural: open work. The family test
#: expects exactly these operations to fail (strict xfail), so a fix shows up as a failure to update.
GAPS: dict[str, dict[str, str]] = {}

#: How each detected routing rule takes experts out of routing (``remove_experts`` with uneven counts
#: or group-limited routing), for the matrix's "masks" column.
MASK_ROUTES = {
    "softmax_topk": "router hook (sidecar)",
    "deepseek_v2": "router hook (sidecar)",
    "deepseek_v3": "selection bias = -inf (stock checkpoint)",
    "gpt_oss": "router bias = -inf (stock checkpoint)",
    "selection_bias": "selection bias = -inf (stock checkpoint)",
    "opaque": "none: every layer must keep the same count",
}


def support_for(config: Any, router_rule: str = "softmax_topk") -> dict[str, str]:
    """Operation → "yes" | "masked" | "uniform" | "no" for a model with this config and routing rule.

    "masked": removal keeps the shapes and masks (group-limited routing); "uniform": removal slices,
    and only the same kept count in every layer is possible (no way to mask this router); "gap":
    does not work yet (``GAPS`` says why)."""
    result = dict.fromkeys(OPERATIONS, "yes")
    for operation in GAPS.get(getattr(config, "model_type", ""), {}):
        result[operation] = "gap"
    if result["remove_experts"] == "gap":
        pass
    elif group_limited(config):
        result["remove_experts"] = "no" if router_rule == "opaque" else "masked"
    elif router_rule == "opaque":
        result["remove_experts"] = "uniform"
    return result


def family_row(model_type: str, title: str, support: dict[str, str], info: dict[str, str]) -> str:
    cells = [title, f"`{model_type}`", *(support[op] for op in OPERATIONS)]
    cells += [info["routing"], info["masks"], info["shared"]]
    return "| " + " | ".join(cells) + " |"


def header() -> list[str]:
    columns = ["family", "`model_type`", *(f"`{op}`" for op in OPERATIONS), "routing", "masks", "shared experts"]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
