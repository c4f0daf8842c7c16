"""The training losses of the mixture (paper §4) and of the GSAT-lite baseline.

- Diversity (coverage): the mean off-diagonal |Pearson correlation| between the experts' edge
  masks within a graph, hinged at a margin: max(0, |ρ_kl| − 0.1), averaged over pairs and graphs.
- Edge budget: (kept fraction − r)² per expert and graph, so masks neither keep nor drop everything.
- Gate (selection): KL(w ‖ o) to a detached oracle o = softmax(−CE_k / T), T = 0.75, plus a load
  balance term. The KL is taken with w first: entmax gives exact zeros in w, and 0·log 0 = 0,
  whereas KL(o ‖ w) would be infinite wherever w_k = 0.
- GSAT's information loss: KL(Bernoulli(p_e) ‖ Bernoulli(r)) averaged over edges.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def mask_correlation(q: Tensor, edge_graph: Tensor, graphs: int) -> Tensor:
    """Per-graph Pearson correlation between experts' edge masks: q [E, K] → ρ [B, K, K]."""
    mean = scatter(q, edge_graph, dim=0, dim_size=graphs, reduce="mean")
    centred = q - mean[edge_graph]
    cov = scatter(centred.unsqueeze(-1) * centred.unsqueeze(-2), edge_graph, dim=0, dim_size=graphs, reduce="mean")
    std = cov.diagonal(dim1=-2, dim2=-1).clamp_min(1e-8).sqrt()
    return cov / (std.unsqueeze(-1) * std.unsqueeze(-2))


def diversity_loss(q: Tensor, edge_graph: Tensor, graphs: int, margin: float = 0.1) -> Tensor:
    """mean_{graphs, k≠l} max(0, |ρ_kl| − margin): pushes experts toward different subgraphs."""
    k = q.shape[-1]
    if k < 2:
        return q.new_zeros(())
    rho = mask_correlation(q, edge_graph, graphs).abs()
    off = ~torch.eye(k, dtype=torch.bool, device=q.device)
    return torch.relu(rho[:, off] - margin).mean()


def edge_budget_loss(kept: Tensor, ratio: float) -> Tensor:
    """mean_{graphs, experts} (kept_bk − r)², kept_bk the fraction of graph b's edges expert k keeps."""
    return ((kept - ratio) ** 2).mean()


def gate_oracle_kl(w: Tensor, ce: Tensor, temperature: float = 0.75) -> Tensor:
    """KL(w ‖ o), o = softmax(−CE/T) detached: the gate learns which expert fits each graph best."""
    log_o = torch.log_softmax(-ce.detach() / temperature, dim=-1)
    terms = torch.where(w > 0, w * (torch.log(w.clamp_min(1e-12)) - log_o), torch.zeros_like(w))
    return terms.sum(dim=-1).mean()


def load_balance_loss(w: Tensor) -> Tensor:
    """K·Σ_k (mean_b w_bk)² − 1 ≥ 0, zero when the batch uses every expert equally."""
    k = w.shape[-1]
    return k * (w.mean(dim=0) ** 2).sum() - 1


def bernoulli_kl(p: Tensor, r: float) -> Tensor:
    """mean_e KL(Bernoulli(p_e) ‖ Bernoulli(r)) (GSAT's information regulariser)."""
    p = p.clamp(1e-6, 1 - 1e-6)
    return (p * torch.log(p / r) + (1 - p) * torch.log((1 - p) / (1 - r))).mean()
