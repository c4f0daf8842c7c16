"""What a compression run reports: sizes before and after, and the per-layer Vega-Lite charts."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from mlcore import charts
from mlcore.compress.plan import CompressionPlan
from mlcore.hf.adapter import MoEAdapter


def sizes(model: nn.Module, adapter: MoEAdapter, *, stored_as: torch.dtype | None = None) -> dict[str, int]:
    """Parameters and bytes the checkpoint stores, and what serving needs ("effective": a novice
    costs its vector of H numbers instead of its expert's weights).

    "Stored" is what a save writes (:mod:`mlcore.hf.checkpoint`): the weights, where a layer in the
    compact layout holds only its kept experts, plus the sidecar's novice vectors; the bytes also
    count the sidecar's int64 ids (novice ids, kept ids) and bool masks, so they are every tensor
    byte the files hold (persistent buffers aside). A MoNE checkpoint then stores non-expert +
    kept-expert + novice bytes, issue #21's size goal. Bytes come from each tensor's own dtype (a
    bfloat16 checkpoint with float32 routers counts 2 and 4 bytes respectively); ``stored_as`` is
    the dtype float32 tensors are written in (a float16 checkpoint computed in float32 is stored
    back in float16, so its files, not its memory, are what is counted)."""
    from mlcore.hf.novices import stored_experts

    def element(tensor: torch.Tensor) -> int:
        if stored_as is not None and tensor.dtype == torch.float32:
            return stored_as.itemsize
        return tensor.element_size()

    total = sum(p.numel() for p in model.parameters())
    total_bytes = sum(p.numel() * element(p) for p in model.parameters())
    stored, stored_bytes = total, total_bytes
    saved = saved_bytes = 0
    for info in adapter.layers:
        tensors = [p for p in info.experts.parameters(recurse=False)]
        per_expert = sum(p[0].numel() for p in tensors) if info.num_experts else 0
        per_expert_bytes = sum(p[0].numel() * element(p) for p in tensors) if info.num_experts else 0
        element_bytes = element(tensors[0]) if tensors else 0
        novices = len(adapter.novices.get(info.index, {}))
        saved += novices * (per_expert - info.hidden)
        saved_bytes += novices * (per_expert_bytes - info.hidden * element_bytes)
        # The sidecar: a vector and an id per novice.
        stored += novices * info.hidden
        stored_bytes += novices * (info.hidden * element_bytes + 8)
        kept = stored_experts(info.experts)
        if kept is not None:
            dropped = info.num_experts - kept.numel()
            stored -= dropped * per_expert
            stored_bytes -= dropped * per_expert_bytes - 8 * kept.numel()
    stored_bytes += sum(mask.numel() for mask in adapter.masks.values())
    return {
        "parameters_stored": stored,
        "parameters_effective": total - saved,
        "bytes_stored": stored_bytes,
        "bytes_effective": total_bytes - saved_bytes,
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
        # Fates keep one colour in every map, whichever of them this plan produced.
        value_colors=charts.EXPERT_FATES if nominal else None,
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


#: Above this share of a source's top-k gate mass on novices, the job warns: calibrated on one
#: domain, MoNE's compressed zoo models send 5-18% in-domain and 25-64% on other sources
#: (bench/results/compress-traffic.md).
HIGH_NOVICE_MASS = 0.25


class NoviceTraffic:
    """Σ gate weight landing on novices / Σ gate weight, per evaluation source, over every MoE
    layer's top-k slots: the share of the layers' routed output that no longer depends on the
    token. Fed by ``MoEAdapter.capture_routing``; ``HeldOut.evaluate(before_source=...)`` says
    which source is running."""

    def __init__(self, novices: dict[int, list[int]]) -> None:
        self.novices = {layer: torch.tensor(sorted(ids), dtype=torch.long) for layer, ids in novices.items()}
        self.source: str | None = None
        self.sums: dict[str, list[float]] = {}

    def start(self, source: str | None) -> None:
        self.source = source

    def on_routing(self, layer: int, ids: Tensor, gates: Tensor, _logits: Any) -> None:
        if self.source is None or layer not in self.novices:
            return
        on_novice = torch.isin(ids, self.novices[layer].to(ids.device))
        total = self.sums.setdefault(self.source, [0.0, 0.0])
        total[0] += float(gates.float()[on_novice].sum())
        total[1] += float(gates.float().sum())

    def shares(self) -> dict[str, float]:
        return {source: mass / total for source, (mass, total) in self.sums.items() if total > 0}


def novice_traffic_chart(shares: dict[str, float], calibration: str, label: str) -> dict[str, Any]:
    rows = [
        {"source": source, "share": share, "calibrated on it": "yes" if source == calibration else "no"}
        for source, share in shares.items()
    ]
    return charts.bar_chart(
        f"Gate mass on novices per evaluation source ({label})",
        rows,
        x="source",
        y="share",
        x_title="Evaluation source",
        y_title="Share of top-k gate mass on novices",
        color="calibrated on it",
        color_title="Calibrated on it",
    )
