"""LD-MoLE's learnable dynamic router: sparsemax of u/(1−λ) with λ predicted per token.

Zhuang et al., "LD-MoLE: Learnable Dynamic Routing for Mixture of LoRA Experts" (ICLR 2026),
the routing weights and the analytical sparsity control; sparsemax from Martins & Astudillo 2016, Alg. 1.

- Router logits u = W_g·x (one gate per layer).
- λ(x) = 0.99 + log σ(f(x)) < 0.99, with f one MLP shared by every layer (one input head per
  input width, output bias initialised to −2.5): :class:`LambdaNet`.
- p = argmin_{p ∈ Δ} ‖p − u‖² − λ‖p‖² = sparsemax(u / (1 − λ)): :func:`ld_mole_weights`.
  The number of active experts varies per token and layer and is never zero.
- At most k experts are active iff λ ≥ b_k = 1 − (U_k − k·u_(k+1)), U_k the sum of the k largest
  logits (:func:`sparsity_bound`); the sparsity loss is mean ReLU(b_k − λ), k = 2, logits
  detached (:func:`sparsity_loss`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from mlcore.moe.routers import Router, Routing, at_least_float32, gate_weight


def sparsemax(z: Tensor, dim: int = -1) -> Tensor:
    """The Euclidean projection of z onto the probability simplex (Martins & Astudillo, Alg. 1).

    With z sorted in descending order, k* = max{k : 1 + k·z_(k) > Σ_{j≤k} z_(j)},
    τ = (Σ_{j≤k*} z_(j) − 1)/k* and p = max(z − τ, 0). Computed in float32 at least: the sort and
    the threshold are fragile in bf16. The largest entry is always in the support, so p ≠ 0.
    """
    work = at_least_float32(z).transpose(dim, -1)
    z_sorted, _ = torch.sort(work, dim=-1, descending=True)
    cumsum = z_sorted.cumsum(dim=-1)
    k = torch.arange(1, work.shape[-1] + 1, device=work.device, dtype=work.dtype)
    support = 1 + k * z_sorted > cumsum  # a prefix of the sorted order
    k_star = support.sum(dim=-1, keepdim=True)
    tau = (cumsum.gather(-1, k_star - 1) - 1) / k_star.to(work.dtype)
    # Mask by the k*-th largest value rather than by sign: rounding can leave tiny positive
    # values just outside the support, and this keeps tied entries together.
    kth = z_sorted.gather(-1, k_star - 1)
    p = torch.where(work >= kth, (work - tau).clamp_min(0), torch.zeros_like(work))
    return p.transpose(dim, -1)


def ld_mole_weights(u: Tensor, lam: Tensor) -> Tensor:
    """p = sparsemax(u / (1 − λ)), the closed form of argmin_{p∈Δ} ‖p − u‖² − λ‖p‖² (λ < 1).

    u: [T, E] router logits; lam: [T] per-token λ. λ → −∞ gives the uniform p, λ → 1⁻ one-hot.
    """
    if lam.shape != u.shape[:-1]:
        raise ValueError(f"lam must have shape {tuple(u.shape[:-1])} (one λ per token), got {tuple(lam.shape)}")
    return sparsemax(u / (1 - lam).unsqueeze(-1))


def sparsity_bound(u: Tensor, k: int) -> Tensor:
    """b_k = 1 − (U_k − k·u_(k+1)): sparsemax(u/(1−λ)) has at most k active experts iff λ ≥ b_k."""
    if not 1 <= k < u.shape[-1]:
        raise ValueError(f"k must be between 1 and num_experts - 1 = {u.shape[-1] - 1}, got {k}")
    top, _ = torch.topk(u, k + 1, dim=-1)
    return 1 - (top[..., :k].sum(dim=-1) - k * top[..., k])


def sparsity_loss(u: Tensor, lam: Tensor, k: int = 2) -> Tensor:
    """LD-MoLE's analytical sparsity loss: mean ReLU(b_k − λ), logits detached, so only λ learns to
    keep each token at k experts or fewer."""
    return torch.relu(sparsity_bound(at_least_float32(u.detach()), k) - lam).mean()


class LambdaNet(nn.Module):
    """f in λ(x) = 0.99 + log σ(f(x)): one MLP shared by every layer and projection, with one input
    head per input width (LD-MoLE's λ predictor). Hidden size 256 by default; the output bias starts at
    −2.5 as the card says, so λ starts near 0.99 + log σ(−2.5) ≈ −1.59: sparsemax sees u / 2.59, and
    routing starts dense (several experts per token) until the sparsity loss pushes λ up."""

    def __init__(
        self,
        widths: Iterable[int],
        hidden: int = 256,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        widths = sorted(set(widths))
        if not widths:
            raise ValueError("LambdaNet needs at least one input width (the hidden sizes of the routed layers)")
        self.heads = nn.ModuleDict({str(w): nn.Linear(w, hidden, device=device, dtype=dtype) for w in widths})
        self.act = nn.GELU()
        self.out = nn.Linear(hidden, 1, device=device, dtype=dtype)
        nn.init.constant_(self.out.bias, -2.5)

    def forward(self, x: Tensor) -> Tensor:
        """x: [T, width] → λ: [T] (float32), always below 0.99."""
        if str(x.shape[-1]) not in self.heads:
            raise ValueError(f"LambdaNet has no head for width {x.shape[-1]}; build it with widths={x.shape[-1]}")
        f = self.out(self.act(self.heads[str(x.shape[-1])](x))).squeeze(-1)
        return 0.99 + nn.functional.logsigmoid(at_least_float32(f))


class SparsemaxRouter(Router):
    """LD-MoLE's router for one layer: u = W_g·x, λ = LambdaNet(x), p = sparsemax(u/(1−λ)).

    Pass the same :class:`LambdaNet` to every layer's router (it is shared across layers). The
    routing has as many slots as the batch's most-spread token needs; other tokens' spare slots
    are inactive with weight 0. ``top_k`` is the most slots a token can use (E).
    """

    kind = "sparsemax"

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        lambda_net: LambdaNet,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_experts = self.top_k = num_experts
        self.weight = gate_weight(num_experts, hidden, device=device, dtype=dtype)
        self.lambda_net = lambda_net

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        self._refuse_null_mask(null_mask)
        logits = nn.functional.linear(x, self.weight)
        lam = self.lambda_net(x)
        p = ld_mole_weights(at_least_float32(logits), lam)
        slots = int((p > 0).sum(dim=-1).max()) if len(p) else 1
        weights, ids = torch.topk(p, slots, dim=-1)
        return Routing(ids, weights, logits, p, self.num_experts, active=weights > 0, lam=lam)
