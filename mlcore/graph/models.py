"""The mixture of subgraph experts (paper §3–4) and the baselines it is compared with (card §3).

All models read a torch-geometric batch (``x``, ``edge_index``, ``batch``, ``y``) and return a
:class:`GraphOutput`; ``loss(out, batch)`` gives the training objective and its parts.

- :class:`ERM`: one GIN, mean pooling, cross-entropy.
- :class:`GSATLite`: one stochastic edge-attention mask (Gumbel-sigmoid) feeding one GIN, with
  GSAT's KL(Bernoulli(p_e) ‖ Bernoulli(r)) regulariser.
- :class:`SubgraphMoE`: the method. A shared selector GIN embeds nodes; K edge-mask heads score
  each edge; hard masks come from a Gumbel-sigmoid with a straight-through threshold at 0.5 and a
  temperature τ annealed by the trainer; a node is kept if any incident edge is kept; expert k
  classifies its masked graph with its own GIN, z_k; a gate maps label-free features to weights w
  by α-entmax (sparse, α = 1.38) or softmax; ŷ = Σ_k w_k·z_k (eq. for the prediction). During the
  first epochs the trainer sets ``uniform_gate`` so every expert learns before routing starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.data import Batch
from torch_geometric.nn import global_mean_pool
from torch_geometric.utils import scatter

from mlcore.graph.layers import (
    GIN,
    GroupedGIN,
    GroupedLinear,
    edge_pair_features,
    logistic_noise,
    mlp,
    weighted_mean_pool,
)
from mlcore.graph.losses import bernoulli_kl, diversity_loss, edge_budget_loss, gate_oracle_kl, load_balance_loss
from mlcore.moe.entmax import entmax

MASK_INIT_LOGIT = 2.0


@dataclass
class GraphOutput:
    logits: Tensor  # [B, C]
    #: Per-edge score of being causal (for AUC), or None for ERM.
    edge_score: Tensor | None = None
    #: Gate weights [B, K] (mixtures only).
    gate: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)


class ERM(nn.Module):
    """One GIN, mean pooling, cross-entropy; ``dropout`` after every GIN layer (GOOD's ERM uses 0.5)."""

    def __init__(self, classes: int, hidden: int = 64, layers: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        self.encoder = GIN(1, hidden, layers, dropout)
        self.head = nn.Linear(hidden, classes)

    def forward(self, batch: Batch) -> GraphOutput:
        h = self.encoder(batch.x, batch.edge_index)
        return GraphOutput(self.head(global_mean_pool(h, batch.batch, size=batch.num_graphs)))

    def loss(self, out: GraphOutput, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        ce = F.cross_entropy(out.logits, batch.y)
        return ce, {"ce": ce.item()}


class GSATLite(nn.Module):
    """Miao et al., "Interpretable and Generalizable Graph Learning via Stochastic Attention" (ICML 2022), reduced."""

    def __init__(self, classes: int, hidden: int = 64, layers: int = 3, r: float = 0.7, beta: float = 1.0) -> None:
        super().__init__()
        self.selector = GIN(1, hidden, layers)
        self.scorer = mlp(2 * hidden, hidden, 1)
        self.classifier = GIN(1, hidden, layers)
        self.head = nn.Linear(hidden, classes)
        self.r, self.beta = r, beta

    def forward(self, batch: Batch) -> GraphOutput:
        h = self.selector(batch.x, batch.edge_index)
        s = self.scorer(edge_pair_features(h, batch.edge_index)).squeeze(-1)
        p = torch.sigmoid(s)
        # Stochastic attention while training (binary concrete at temperature 1), its mean at test.
        attention = torch.sigmoid(s + logistic_noise(s.shape, s)) if self.training else p
        g = self.classifier(batch.x, batch.edge_index, attention)
        logits = self.head(global_mean_pool(g, batch.batch, size=batch.num_graphs))
        return GraphOutput(logits, edge_score=p, extras={"p": p})

    def loss(self, out: GraphOutput, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        ce = F.cross_entropy(out.logits, batch.y)
        info = bernoulli_kl(out.extras["p"], self.r)
        return ce + self.beta * info, {"ce": ce.item(), "info": info.item()}


@dataclass(frozen=True)
class MoEConfig:
    experts: int = 4
    gate: str = "entmax"  # "entmax" or "softmax"
    alpha: float = 1.38
    diversity: float = 1.0
    diversity_margin: float = 0.1
    budget: float = 5.0
    keep_ratio: float = 0.55
    gate_weight: float = 0.1
    balance: float = 0.5
    oracle_temperature: float = 0.75


class SubgraphMoE(nn.Module):
    def __init__(self, classes: int, hidden: int = 64, layers: int = 3, config: MoEConfig | None = None) -> None:
        super().__init__()
        self.config = config or MoEConfig()
        k = self.config.experts
        if self.config.gate not in ("entmax", "softmax"):
            raise ValueError(f"gate must be 'entmax' or 'softmax', not {self.config.gate!r}")
        self.selector = GIN(1, hidden, layers)
        # K edge-mask heads, K expert GINs and K classifier heads, each computed for all experts at once.
        # The K first layers share their input, so they are one (2h → K·h) matmul.
        self.scorer_in = nn.Linear(2 * hidden, k * hidden)
        self.scorer_out = GroupedLinear(k, hidden, 1)
        # Masks start keeping most edges (P(keep) = σ(2) ≈ 0.88 under the logistic noise): with
        # coin-flip masks the motif rarely survives, the experts cannot learn, and the masks then
        # get no useful gradient. The edge budget pulls the kept share to the target from there.
        nn.init.constant_(self.scorer_out.bias, MASK_INIT_LOGIT)
        self.experts = GroupedGIN(k, 1, hidden, layers)
        self.heads = GroupedLinear(k, hidden, classes)
        # Gate input: the selector's graph embedding plus, per expert, its prediction entropy and
        # kept-edge fraction — label-free summaries of what each expert sees.
        self.gate = mlp(hidden + 2 * k, hidden, k)
        self.tau = 1.0
        self.uniform_gate = False

    def forward(self, batch: Batch) -> GraphOutput:
        cfg, b = self.config, batch.num_graphs
        edge_index = batch.edge_index
        h = self.selector(batch.x, edge_index)
        pair = edge_pair_features(h, edge_index)
        hidden = torch.relu(self.scorer_in(pair)).view(pair.shape[0], cfg.experts, -1)
        s = self.scorer_out(hidden).squeeze(-1)  # [E, K]
        q = torch.sigmoid(s)
        noisy = s + logistic_noise(s.shape, s) if self.training else s
        p = torch.sigmoid(noisy / self.tau)
        m = (p > 0.5).to(p.dtype) + p - p.detach()  # straight-through hard mask
        edge_graph = batch.batch[edge_index[0]]
        node_keep = scatter(m, edge_index[1], dim=0, dim_size=batch.num_nodes, reduce="max")  # [N, K]
        hk = self.experts(batch.x, edge_index, m)  # [N, K, hidden]
        logits = self.heads(weighted_mean_pool(hk, batch.batch, node_keep, b))  # [B, K, C]
        kept = scatter(m, edge_graph, dim=0, dim_size=b, reduce="mean")  # [B, K]
        probs = logits.detach().softmax(-1)
        entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
        features = torch.cat([global_mean_pool(h, batch.batch, size=b), entropy, kept.detach()], dim=-1)
        u = self.gate(features)
        if self.uniform_gate:
            w = torch.full_like(u, 1 / cfg.experts)
        elif cfg.gate == "entmax":
            w = entmax(u, cfg.alpha, dim=-1)
        else:
            w = torch.softmax(u, dim=-1)
        prediction = (w.unsqueeze(-1) * logits).sum(1)
        edge_score = (w.detach()[edge_graph] * q).sum(-1)
        return GraphOutput(
            prediction,
            edge_score=edge_score,
            gate=w,
            extras={"expert_logits": logits, "q": q, "kept": kept, "edge_graph": edge_graph},
        )

    def loss(self, out: GraphOutput, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        cfg, w = self.config, out.gate
        assert w is not None
        logits = out.extras["expert_logits"]
        b, k, c = logits.shape
        ce = F.cross_entropy(logits.reshape(b * k, c), batch.y.repeat_interleave(k), reduction="none").view(b, k)
        weighted_ce = (w * ce).sum(-1).mean()  # Σ_k w_k·CE(z_k, y)
        budget = edge_budget_loss(out.extras["kept"], cfg.keep_ratio)
        total = weighted_ce + cfg.budget * budget
        parts = {"ce": weighted_ce.item(), "budget": budget.item()}
        if cfg.diversity > 0:
            div = diversity_loss(out.extras["q"], out.extras["edge_graph"], b, cfg.diversity_margin)
            total = total + cfg.diversity * div
            parts["diversity"] = div.item()
        if not self.uniform_gate:
            kl = gate_oracle_kl(w, ce, cfg.oracle_temperature)
            balance = load_balance_loss(w)
            total = total + cfg.gate_weight * (kl + cfg.balance * balance)
            parts |= {"gate_kl": kl.item(), "balance": balance.item()}
        return total, parts
