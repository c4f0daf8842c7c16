"""Global and local load balance, the quantities SRP/SCH trade off against (Liang et al. 2026, §4.2).

Both are normalised entropies of an expert-load distribution, 1 for perfectly even loads:
global balance uses the loads over the whole trace, local balance averages over windows of L
tokens, where at most min(E, L·k) experts can be used, so that is the normaliser.
"""

from __future__ import annotations

import numpy as np

from mlcore.analysis.routing import LayerRouting
from mlcore.analysis.srp import window_counts


def _normalised_entropy(counts: np.ndarray, support: int) -> np.ndarray:
    """H(p)/log(support) along the last axis, p = counts / Σ counts."""
    totals = counts.sum(axis=-1, keepdims=True)
    p = counts / np.maximum(totals, 1)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=-1) / np.log(max(support, 2))


def global_balance(routing: LayerRouting) -> float:
    return float(_normalised_entropy(routing.load().astype(np.float64), routing.num_experts))


def local_balance(routing: LayerRouting, window: int) -> float:
    """Mean over windows of the normalised entropy of the window's expert loads."""
    support = min(routing.num_experts, window * routing.top_k)
    total, windows = 0.0, 0
    for _, counts in window_counts(routing, window):
        total += float(_normalised_entropy(counts.astype(np.float64), support).sum())
        windows += len(counts)
    return total / windows if windows else float("nan")
