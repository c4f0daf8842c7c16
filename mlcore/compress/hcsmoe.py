"""HC-SMoE: retraining-free merging of sparse MoE experts by hierarchical clustering
(Chen et al., ICML 2025), the merging baseline.

Per layer: (1) describe expert i by its mean output μ_i on the calibration tokens (the paper's
"expert output" similarity); (2) average-linkage agglomerative clustering on Euclidean distances
until P clusters remain; (3) merge each cluster into one expert by frequency-weighted averaging of
its weights, W_c = Σ_{i∈c} |R_i|·W_i / Σ_{i∈c} |R_i|. The merged expert takes the router row of
the cluster's most used member (M-SMoE's dominant-expert convention); the other members' rows are
deleted, so the checkpoint really holds P experts.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mlcore.compress.calibrate import Calibration
from mlcore.compress.plan import CompressionPlan
from mlcore.hf.adapter import MoEAdapter


def average_linkage(points: Tensor, clusters: int) -> list[list[int]]:
    """Agglomerative clustering with average linkage into ``clusters`` groups (deterministic ties)."""
    distance = torch.cdist(points.double(), points.double())
    groups = [[i] for i in range(len(points))]
    while len(groups) > clusters:
        best, pair = float("inf"), (0, 1)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                d = distance[groups[a]][:, groups[b]].mean().item()
                if d < best:
                    best, pair = d, (a, b)
        a, b = pair
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
    return groups


def plan_hcsmoe(adapter: MoEAdapter, calibration: Calibration, keep: int) -> CompressionPlan:
    plan = CompressionPlan("hc-smoe", keep={})
    for position, layer in enumerate(calibration.layers):
        experts = adapter.layer(layer).experts
        counts = calibration.statistics.count[position].double()
        groups = average_linkage(calibration.statistics.mean[position], keep)
        plan.keep[layer], plan.clusters[layer], plan.merged_weights[layer] = [], {}, {}
        for group in groups:
            members = torch.tensor(group)
            dominant = group[int(torch.argmax(counts[members]))]
            weights = counts[members] / counts[members].sum() if counts[members].sum() > 0 else None
            plan.keep[layer].append(dominant)
            plan.clusters[layer][dominant] = group
            if len(group) > 1:
                plan.merged_weights[layer][dominant] = (
                    _weighted(experts.gate_up_proj.data[members], weights),
                    _weighted(experts.down_proj.data[members], weights),
                )
        plan.keep[layer].sort()
    return plan


def _weighted(stack: Tensor, weights: Tensor | None) -> Tensor:
    if weights is None:
        return stack.mean(dim=0)
    return (stack.double() * weights.view(-1, *([1] * (stack.dim() - 1)))).sum(dim=0).to(stack.dtype)
