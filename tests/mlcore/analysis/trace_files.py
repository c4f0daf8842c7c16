"""Routing-trace files built from :class:`LayerRouting` arrays, for the job tests' uploads."""

from __future__ import annotations

from pathlib import Path

import torch

from mlcore.analysis.routing import LayerRouting
from mlcore.moe.traces import RoutingTrace, TraceMetadata


def write_trace(path: Path, routings: list[LayerRouting], model: str = "synthetic") -> Path:
    """Save one layer per routing (they must share sequence lengths) as a MoE Lab routing trace."""
    layers = len(routings)
    trace = RoutingTrace(
        TraceMetadata(
            model=model,
            layers=tuple(range(layers)),
            num_experts=tuple(r.num_experts for r in routings),
            top_k=tuple(r.top_k for r in routings),
            shared_experts=(0,) * layers,
        ),
        expert_ids=[torch.from_numpy(r.expert_ids.astype("int32")) for r in routings],
        gate_weights=[torch.full(r.expert_ids.shape, 1.0 / r.top_k) for r in routings],
        sequence_lengths=torch.from_numpy(routings[0].lengths.astype("int64")),
    )
    trace.save(path)
    return path
