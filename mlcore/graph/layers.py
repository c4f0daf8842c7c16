"""Building blocks on torch-geometric: a GIN layer that takes edge weights, pooling, Gumbel-sigmoid.

GIN (Xu et al., ICLR 2019, eq. 4.1): h_v' = MLP((1 + ε)·h_v + Σ_{u∈N(v)} h_u). Here each message is
scaled by an edge weight m_uv ∈ [0, 1], so a learned edge mask removes edges from the graph the
classifier sees while gradients still reach the mask.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import scatter


class WeightedGINConv(MessagePassing):
    """h_v' = MLP((1 + ε)·h_v + Σ_u m_uv·h_u); ``edge_weight=None`` is plain GIN."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__(aggr="add")
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, out_dim), nn.BatchNorm1d(out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim)
        )
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        aggregated = self.propagate(edge_index, x=x, edge_weight=edge_weight)
        return self.mlp((1 + self.eps) * x + aggregated)

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else edge_weight.unsqueeze(-1) * x_j


class GIN(nn.Module):
    """A stack of :class:`WeightedGINConv` with batch norm and ReLU between layers; returns node embeddings."""

    def __init__(self, in_dim: int, hidden: int, layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.convs = nn.ModuleList(WeightedGINConv(in_dim if i == 0 else hidden, hidden) for i in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = norm(conv(x, edge_index, edge_weight))
            if i < len(self.convs) - 1:
                x = torch.relu(x)
            x = nn.functional.dropout(x, self.dropout, self.training)
        return x


class GroupedLinear(nn.Module):
    """K independent linear maps applied at once: x [N, K, in] → [N, K, out] (one per expert)."""

    def __init__(self, groups: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(in_dim)  # nn.Linear's default initialisation, per group
        self.weight = nn.Parameter(torch.empty(groups, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(groups, out_dim).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        return torch.einsum("nki,kio->nko", x, self.weight) + self.bias


class GroupedBatchNorm(nn.Module):
    """Batch norm over [N, K, d], with separate statistics for each of the K groups."""

    def __init__(self, groups: int, dim: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(groups * dim)

    def forward(self, x: Tensor) -> Tensor:
        n, k, d = x.shape
        return self.norm(x.reshape(n, k * d)).view(n, k, d)


class GroupedGINConv(MessagePassing):
    """K GIN layers over K edge weightings of one graph: h_v^k' = MLP_k((1 + ε_k)·h_v^k + Σ_u m_uv^k·h_u^k).

    The same computation as K :class:`WeightedGINConv` layers, done in one pass so the mixture's
    experts cost one message-passing call instead of K.
    """

    def __init__(self, groups: int, in_dim: int, out_dim: int) -> None:
        super().__init__(aggr="add", node_dim=0)
        self.lin1, self.norm, self.lin2 = (
            GroupedLinear(groups, in_dim, out_dim),
            GroupedBatchNorm(groups, out_dim),
            GroupedLinear(groups, out_dim, out_dim),
        )
        self.eps = nn.Parameter(torch.zeros(groups, 1))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        """x [N, K, d], edge_weight [E, K] → [N, K, out]."""
        aggregated = self.propagate(edge_index, x=x, edge_weight=edge_weight)
        return self.lin2(torch.relu(self.norm(self.lin1((1 + self.eps) * x + aggregated))))

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.unsqueeze(-1) * x_j


class GroupedGIN(nn.Module):
    """K GINs (one per expert) run side by side on K masked copies of a batch; returns [N, K, hidden]."""

    def __init__(self, groups: int, in_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.groups = groups
        self.convs = nn.ModuleList(GroupedGINConv(groups, in_dim if i == 0 else hidden, hidden) for i in range(layers))
        self.norms = nn.ModuleList(GroupedBatchNorm(groups, hidden) for _ in range(layers))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        h = x.unsqueeze(1).expand(-1, self.groups, -1)
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            h = norm(conv(h, edge_index, edge_weight))
            if i < len(self.convs) - 1:
                h = torch.relu(h)
        return h


def weighted_mean_pool(h: Tensor, batch: Tensor, weight: Tensor, size: int) -> Tensor:
    """Σ_v w_v·h_v / Σ_v w_v per graph: the mean over the nodes a mask keeps (0 if it keeps none).

    h [N, d] with weight [N], or h [N, K, d] with weight [N, K] (one mask per expert).
    """
    total = scatter(weight.unsqueeze(-1) * h, batch, dim=0, dim_size=size, reduce="sum")
    count = scatter(weight, batch, dim=0, dim_size=size, reduce="sum").clamp_min(1e-6)
    return total / count.unsqueeze(-1)


def logistic_noise(shape: torch.Size, like: Tensor) -> Tensor:
    """log u − log(1 − u), u ~ U(0, 1): the difference of two Gumbels, for a Gumbel-sigmoid (binary concrete)."""
    u = torch.rand(shape, device=like.device, dtype=like.dtype).clamp(1e-6, 1 - 1e-6)
    return torch.log(u) - torch.log1p(-u)


def edge_pair_features(h: Tensor, edge_index: Tensor) -> Tensor:
    """[h_u + h_v, h_u ⊙ h_v]: symmetric in u and v, so both directions of an edge get one score."""
    hu, hv = h[edge_index[0]], h[edge_index[1]]
    return torch.cat([hu + hv, hu * hv], dim=-1)


def mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
