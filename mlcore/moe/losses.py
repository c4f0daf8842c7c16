"""Auxiliary router losses. Each takes a :class:`~mlcore.moe.routers.Routing` (or logits) and
returns an unweighted scalar; the caller multiplies by its coefficient.

- :func:`switch_load_balance_loss` — Fedus et al. 2021 (Switch Transformer), eq. 4:
  L = E·Σ_i f_i·P_i, f_i the fraction of routed (token, slot) pairs sent to expert i and P_i the
  mean router probability of expert i. Equals 1 when routing is uniform.
- :func:`router_z_loss` — Zoph et al. 2022 (ST-MoE), eq. 5: L_z = mean_x (log Σ_j e^{u_j(x)})².
- :func:`routing_contrastive_loss` — ProMoE's routing contrastive loss (RCL).
- :func:`group_balance_loss` — MoGA's group balance loss, L = α·M·Σ_i F_i·P_i, in both readings of P_i.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from mlcore.moe.routers import Routing, at_least_float32


def _slot_fraction(routing: Routing) -> Tensor:
    """f_i: the fraction of active (token, slot) pairs routed to expert i (no gradient)."""
    counts = routing.expert_counts().to(routing.probs.dtype)
    return counts / counts.sum().clamp_min(1)


def switch_load_balance_loss(routing: Routing) -> Tensor:
    """Switch eq. 4: E·Σ_i f_i·P_i; gradients reach the router through P_i only."""
    mean_prob = routing.probs.mean(dim=0)  # P_i
    return routing.num_experts * (_slot_fraction(routing) * mean_prob).sum()


def router_z_loss(logits: Tensor) -> Tensor:
    """ST-MoE eq. 5: mean over tokens of logsumexp(u)², which keeps router logits small."""
    return torch.logsumexp(at_least_float32(logits), dim=-1).square().mean()


def routing_contrastive_loss(x: Tensor, routing: Routing, prototypes: Tensor, tau: float = 0.07) -> Tensor:
    """ProMoE's RCL: −mean_i log[exp(cos(p_i, m_i)/τ) / Σ_j exp(cos(p_i, m_j)/τ)], τ = 0.07.

    m_i is the batch mean of the tokens assigned to routed expert i (every active slot counts;
    null tokens sent to the unconditional expert are left out). Experts that received no token
    have no m_i: they are skipped both as anchors i and as negatives j. Gradients flow into the
    prototypes and the tokens. With fewer than two populated experts the loss is 0.
    """
    num_routed = prototypes.shape[0]
    mask = routing.active_mask() & (routing.expert_ids < num_routed)
    tokens = torch.arange(len(x), device=x.device).unsqueeze(-1).expand_as(routing.expert_ids)[mask]
    experts = routing.expert_ids[mask]
    tokens_x = at_least_float32(x[tokens])
    sums = torch.zeros(num_routed, x.shape[-1], device=x.device, dtype=tokens_x.dtype).index_add(0, experts, tokens_x)
    counts = torch.bincount(experts, minlength=num_routed)
    present = counts > 0
    if int(present.sum()) < 2:
        # Zero, but still connected to both inputs so backward() works on every step.
        return at_least_float32(prototypes.sum() * 0 + x.sum() * 0)
    means = sums[present] / counts[present].unsqueeze(-1)
    p_unit = nn.functional.normalize(at_least_float32(prototypes[present]), dim=-1)
    m_unit = nn.functional.normalize(means, dim=-1)
    similarity = p_unit @ m_unit.T / tau  # row i: prototype i against every populated mean m_j
    return nn.functional.cross_entropy(similarity, torch.arange(len(similarity), device=x.device))


def group_balance_loss(
    routing: Routing, alpha: float = 0.1, *, variant: Literal["switch", "paper"] = "switch"
) -> Tensor:
    """MoGA's group balance loss L = α·M·Σ_i F_i·P_i, F_i the fraction of tokens in group i.

    ``variant="switch"``: P_i = mean of p_i over all tokens (Switch's form).
    ``variant="paper"``: P_i = (1/N)·Σ_{x in group i} p_i(x), as the MoGA paper writes it.
    """
    if routing.top_k != 1:
        raise ValueError(f"group_balance_loss needs a top-1 routing, got k={routing.top_k}")
    if variant == "switch":
        return alpha * switch_load_balance_loss(routing)
    if variant != "paper":
        raise ValueError(f"variant must be 'switch' or 'paper', got {variant!r}")
    gate = routing.probs.gather(-1, routing.expert_ids)[:, 0]
    assigned_mass = torch.zeros_like(routing.probs[0]).index_add(0, routing.expert_ids[:, 0], gate)
    return alpha * routing.num_experts * (_slot_fraction(routing) * assigned_mass / routing.num_tokens).sum()
