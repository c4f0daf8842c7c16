"""What a compression run reports: sizes before and after, and the per-layer Vega-Lite charts."""

from __future__ import annotations

from typing import Any

from torch import nn

from mlcore import charts
from mlcore.compress.plan import CompressionPlan
from mlcore.hf.adapter import MoEAdapter


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
    """A layer × expert heatmap of ``field`` over ``rows`` ({"layer", "expert", field}); ``state``
    (an expert's fate, see ``pruned_map_rows``) is categorical and takes categorical colours."""
    nominal = field == "state"
    return charts.heatmap(
        title,
        rows,
        x="expert",
        y="layer",
        value=field,
        x_title="Expert",
        y_title="Layer",
        value_title=field,
        scheme=None if nominal else scheme,
        value_type="nominal" if nominal else "quantitative",
    )


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
    return charts.lines(
        title,
        rows,
        x="ratio",
        y=measure,
        x_title="Pruning ratio",
        y_title=title,
        color="method",
        color_title="Method",
        points=True,
    )
