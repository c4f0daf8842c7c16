"""ProMoE's two-step router for diffusion transformers: conditional, then prototypical routing.

ProMoE, arXiv 2510.24711 (ICLR 2026). Layout E14A1S1U1 = routed experts, top-1, one shared expert
(see :class:`~mlcore.moe.layer.MoELayer`'s ``num_shared_experts``), one unconditional expert.

1. **Conditional routing.** Tokens of samples whose condition was dropped for classifier-free
   guidance (``null_mask``) go to the reserved unconditional expert, index N_E (the last one),
   with gate weight 1. The paper leaves the scale of that expert's output implicit; we use 1, so
   a null token's output is shared(x) + E_U(x).
2. **Prototypical routing** for the other tokens: s_j(x) = α·cos(x, p_j), P ∈ ℝ^{N_E×d}
   initialised N(0, 0.02), α = 1; the activation is the identity; keep the top K (K = 1).
   Output y = shared(x) + Σ_{j∈top-K} s_j(x)·E_j(x).

The routing contrastive loss that trains the prototypes is
:func:`mlcore.moe.losses.routing_contrastive_loss`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.moe.routers import Router, Routing, at_least_float32


class PrototypeRouter(Router):
    """ProMoE routing over ``num_routed`` prototype experts plus, with ``unconditional=True``, one
    reserved unconditional expert (index ``num_routed``), so ``num_experts = num_routed + 1``.

    Recorded logits: the cosine scores α·cos(x, p_j) for the routed experts; the unconditional
    column holds +α for null tokens and −α for the others (the extremes of the cosine score).
    """

    kind = "prototype"

    def __init__(
        self,
        hidden: int,
        num_routed: int,
        top_k: int = 1,
        *,
        alpha: float = 1.0,
        unconditional: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= top_k <= num_routed:
            raise ValueError(f"top_k must be between 1 and num_routed={num_routed}, got {top_k}")
        self.num_routed, self.top_k, self.alpha = num_routed, top_k, alpha
        self.num_experts = num_routed + int(unconditional)
        self.unconditional_expert: int | None = num_routed if unconditional else None
        self.prototypes = nn.Parameter(torch.empty(num_routed, hidden, device=device, dtype=dtype))
        nn.init.normal_(self.prototypes, std=0.02)

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        x_unit = nn.functional.normalize(at_least_float32(x), dim=-1)
        p_unit = nn.functional.normalize(at_least_float32(self.prototypes), dim=-1)
        scores = self.alpha * (x_unit @ p_unit.T)  # s_j(x) = α·cos(x, p_j), identity activation
        weights, ids = torch.topk(scores, self.top_k, dim=-1)
        if self.unconditional_expert is None:
            if null_mask is not None:
                raise ValueError("null_mask needs an unconditional expert; build PrototypeRouter(unconditional=True)")
            return Routing(ids, weights, scores, scores, self.num_experts)

        null = torch.zeros(len(x), dtype=torch.bool, device=x.device) if null_mask is None else null_mask.bool()
        if null.shape != (len(x),):
            raise ValueError(f"null_mask must have shape ({len(x)},), one flag per token, got {tuple(null.shape)}")
        uncond_column = torch.where(null, self.alpha, -self.alpha).to(scores.dtype).unsqueeze(-1)
        logits = torch.cat([scores, uncond_column], dim=-1)
        # A null token's first slot goes to the unconditional expert with weight 1; its other
        # slots keep valid ids but are inactive, with weight 0.
        first = torch.zeros_like(ids[:, :1], dtype=torch.bool)
        slot0 = torch.cat([~first, first.expand(-1, self.top_k - 1)], dim=-1)
        to_uncond = null.unsqueeze(-1) & slot0
        ids = torch.where(to_uncond, self.unconditional_expert, ids)
        weights = torch.where(null.unsqueeze(-1), to_uncond.to(weights.dtype), weights)
        active = None if self.top_k == 1 else ~null.unsqueeze(-1) | slot0
        return Routing(ids, weights, logits, logits, self.num_experts, active=active)


class ActivatedPrototypeRouter(PrototypeRouter):
    """ProMoE's router with a non-identity activation on the cosine scores: the paper's activation
    ablation (identity 6.39, sigmoid 6.63, softmax 6.92 FID at CFG 1.5, B size).

    g_j(x) = σ(α·cos(x, p_j)) or softmax_j(α·cos(x, p_j)) over the N_E routed experts (the
    unconditional expert is hard-routed, so it takes no part in the softmax). Both are monotone
    within a token's row, so the top-K experts are the identity's; only the gate weights (and the
    recorded ``probs``) change: y = shared(x) + Σ_{j∈top-K} g_j(x)·E_j(x). Null tokens keep weight 1
    on the unconditional expert. The routing contrastive loss reads only the assignment and the
    prototypes, so it is unchanged.

    (A subclass, so the paper's router keeps its single, identity code path.)
    """

    def __init__(self, hidden: int, num_routed: int, top_k: int = 1, *, activation: str, **kwargs: Any) -> None:
        if activation not in ("sigmoid", "softmax"):
            raise ValueError(
                f"activation must be 'sigmoid' or 'softmax' (identity is PrototypeRouter), got {activation!r}"
            )
        super().__init__(hidden, num_routed, top_k, **kwargs)
        self.activation = activation

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        routing = super().forward(x, null_mask=null_mask)
        n = self.num_routed
        cosine = routing.logits[:, :n]  # α·cos(x, p_j), what the identity router gates with
        activated = torch.sigmoid(cosine) if self.activation == "sigmoid" else torch.softmax(cosine, dim=-1)
        # Routed, active slots take the activated score; unconditional and padded slots keep theirs (1 / 0).
        routed = routing.active_mask() & (routing.expert_ids < n)
        gathered = activated.gather(-1, routing.expert_ids.clamp(max=n - 1))
        weights = torch.where(routed, gathered, routing.gate_weights)
        probs = torch.cat([activated, routing.probs[:, n:]], dim=-1)
        return replace(routing, gate_weights=weights, probs=probs)

    def extra_repr(self) -> str:
        return f"routed={self.num_routed}, top_k={self.top_k}, activation={self.activation}"
