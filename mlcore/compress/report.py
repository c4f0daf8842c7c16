"""What a compression run reports: sizes before and after, and the per-layer Vega-Lite charts."""

from __future__ import annotations

from typing import Any

from torch import nn

from mlcore.compress.plan import CompressionPlan
from mlcore.hf.adapter import MoEAdapter

VEGA_LITE = "https://vega.github.io/schema/vega-lite/v6.json"


def sizes(model: nn.Module, adapter: MoEAdapter) -> dict[str, int]:
    """Parameters and bytes the checkpoint stores, and what serving needs ("effective"): a novice
    costs its vector of H numbers instead of its expert's weights."""
    stored = sum(p.numel() for p in model.parameters())
    element = next(model.parameters()).element_size()
    saved = 0
    for info in adapter.layers:
        per_expert = (
            (info.experts.gate_up_proj[0].numel() + info.experts.down_proj[0].numel()) if info.num_experts else 0
        )
        for _ in adapter.novices.get(info.index, {}):
            saved += per_expert - info.hidden
    effective = stored - saved
    return {
        "parameters_stored": stored,
        "parameters_effective": effective,
        "bytes_stored": stored * element,
        "bytes_effective": effective * element,
    }


def heatmap(title: str, rows: list[dict[str, Any]], field: str, *, scheme: str = "viridis") -> dict[str, Any]:
    """A layer × expert heatmap of ``field`` over ``rows`` ({"layer", "expert", field})."""
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": "rect",
        "encoding": {
            "x": {"field": "expert", "type": "ordinal", "title": "Expert"},
            "y": {"field": "layer", "type": "ordinal", "title": "Layer"},
            "color": {
                "field": field,
                "type": "quantitative" if field != "state" else "nominal",
                "scale": {"scheme": scheme} if field != "state" else {},
            },
            "tooltip": [{"field": k} for k in ("layer", "expert", field)],
        },
    }


def expert_rows(layers: list[int], table: Any, field: str) -> list[dict[str, Any]]:
    return [
        {"layer": layer, "expert": expert, field: float(table[position][expert])}
        for position, layer in enumerate(layers)
        for expert in range(len(table[position]))
    ]


def pruned_map_rows(plan: CompressionPlan, num_experts: int) -> list[dict[str, Any]]:
    """Each expert's fate under ``plan``: kept, novice, merged or deleted."""
    rows = []
    for layer, kept in plan.keep.items():
        merged = {m for group in plan.clusters.get(layer, {}).values() for m in group if len(group) > 1}
        for expert in range(num_experts):
            if expert in kept:
                state = "kept (merged)" if expert in merged else "kept"
            elif expert in plan.novices.get(layer, {}):
                state = "novice"
            else:
                state = "merged away" if expert in merged else "deleted"
            rows.append({"layer": layer, "expert": expert, "state": state})
    return rows


def quality_vs_ratio(rows: list[dict[str, Any]], measure: str, title: str) -> dict[str, Any]:
    """Lines of ``measure`` against the pruning ratio, one per method."""
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": {"field": "ratio", "type": "quantitative", "title": "Pruning ratio"},
            "y": {"field": measure, "type": "quantitative", "title": title},
            "color": {"field": "method", "type": "nominal", "title": "Method"},
        },
    }
