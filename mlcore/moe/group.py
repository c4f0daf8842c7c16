"""MoGA's token router: each token joins one of M groups, attention runs within groups.

MoGA, arXiv 2510.18692 (ICLR 2026), the token router: r = W_r·x ∈ ℝ^M, p = softmax(r), g(x) = argmax_i p_i
(top-1, one assignment per token shared by all heads); the attention output is scaled by the
routing probability, MoGA(x) = p_{g(x)}(x)·Attn(q, K_{g(x)}, V_{g(x)}), which is how the router
gets gradient (besides the group balance loss, :func:`mlcore.moe.losses.group_balance_loss`).
The attention module itself lives in ``mlcore/video``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mlcore.moe.routers import Routing, TopKSoftmaxRouter


class GroupRouter(TopKSoftmaxRouter):
    """Linear → softmax over M groups → top-1; the gate weight is p_{g(x)} (not renormalised)."""

    kind = "group"

    def __init__(self, hidden: int, num_groups: int, **factory: Any) -> None:
        super().__init__(hidden, num_groups, 1, renormalize=False, **factory)


def group_partition(routing: Routing) -> tuple[Tensor, Tensor]:
    """Tokens in group order, for attending each group as one contiguous block.

    Returns ``order`` ([T] int64: a stable argsort of the tokens by group, so x[order] lists group
    0's tokens first, in their original order) and ``sizes`` ([M] int64, empty groups included);
    ``cu_seqlens`` for variable-length attention is ``sizes.cumsum`` with a leading 0.
    """
    if routing.top_k != 1:
        raise ValueError(f"group_partition needs a top-1 routing (one group per token), got k={routing.top_k}")
    groups = routing.expert_ids[:, 0]
    order = torch.sort(groups, stable=True).indices
    return order, torch.bincount(groups, minlength=routing.num_experts)
