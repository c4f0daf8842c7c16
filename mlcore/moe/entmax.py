"""α-entmax: sparse probability mappings between softmax (α → 1) and sparsemax (α = 2).

Peters, Niculae & Martins, "Sparse Sequence-to-Sequence Models" (ACL 2019), and Blondel et al.,
"Learning with Fenchel-Young losses" (JMLR 2020).

    α-entmax(z) = argmax_{p ∈ Δ} pᵀz + H_α(p),   H_α(p) = Σ_j (p_j − p_j^α) / (α(α − 1)),

whose solution (§3 of Peters et al.) is

    p_j = [(α − 1)·z_j − τ]_+^{1/(α−1)},  τ the unique threshold with Σ_j p_j = 1.   (eq. 9)

Entries below the threshold are *exactly* zero, which is what a sparse gate needs (DiSCO's gate
uses α = 1.38). Two solvers:

- :func:`entmax15`: α = 1.5 in closed form by sorting (Peters et al., Alg. 2).
- :func:`entmax_bisect`: any α > 1, τ found by bisection (Blondel et al., Alg. 1), then the
  result renormalised so it sums to one.

Both use the same backward (Peters et al., Prop. 1): with s_j = p_j^{2−α} on the support,
∂L/∂z = s ⊙ g − (sᵀg / Σ s)·s, so the gradient is exact at the solution and zero off the support.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mlcore.moe.sparsemax import sparsemax


def _entmax_backward(p: Tensor, grad: Tensor, alpha: float, dim: int) -> Tensor:
    """Prop. 1 of Peters et al.: J^T g = s ⊙ g − (sᵀg / 1ᵀs)·s with s = p^{2−α} on the support."""
    s = torch.where(p > 0, p.clamp_min(1e-30) ** (2 - alpha), torch.zeros_like(p))
    sg = s * grad
    return sg - sg.sum(dim=dim, keepdim=True) / s.sum(dim=dim, keepdim=True) * s


class _Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, dim: int) -> Tensor:
        # α = 1.5 writes eq. 9 as p = [z/2 − τ]_+²; shifting by the max changes only τ.
        x = z / 2
        x = x - x.amax(dim=dim, keepdim=True)
        x_sorted, _ = torch.sort(x, dim=dim, descending=True)
        shape = [1] * x.dim()
        shape[dim] = x.shape[dim]
        rho = torch.arange(1, x.shape[dim] + 1, device=x.device, dtype=x.dtype).view(shape)
        # With the k largest entries in the support, Σ_{j≤k} (x_j − τ)² = 1 is a quadratic in τ;
        # its root below the k-th entry is τ_k = mean_k − sqrt((1 − k·var_k) / k) (Alg. 2).
        mean = x_sorted.cumsum(dim) / rho
        mean_sq = (x_sorted**2).cumsum(dim) / rho
        delta = (1 - rho * (mean_sq - mean**2)) / rho
        tau = mean - delta.clamp_min(0).sqrt()
        support = (tau <= x_sorted).sum(dim=dim, keepdim=True)
        tau_star = tau.gather(dim, support - 1)
        p = (x - tau_star).clamp_min(0) ** 2
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (p,) = ctx.saved_tensors
        return _entmax_backward(p, grad, 1.5, ctx.dim), None


class _EntmaxBisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, z: Tensor, alpha: float, dim: int, n_iter: int) -> Tensor:
        x = (alpha - 1) * z
        x = x - x.amax(dim=dim, keepdim=True)
        d = x.shape[dim]
        # τ lies in [max − 1, max − (1/d)^{α−1}] (the max is 0 after the shift): at the left end
        # the largest entry alone already has mass 1, at the right end every entry has ≤ 1/d.
        lo = torch.full_like(x.narrow(dim, 0, 1), -1.0)
        hi = torch.full_like(lo, -((1 / d) ** (alpha - 1)))
        power = 1 / (alpha - 1)
        for _ in range(n_iter):
            tau = (lo + hi) / 2
            mass = ((x - tau).clamp_min(0) ** power).sum(dim=dim, keepdim=True)
            too_much = mass >= 1
            lo = torch.where(too_much, tau, lo)
            hi = torch.where(too_much, hi, tau)
        p = (x - lo).clamp_min(0) ** power
        # Renormalise: after n_iter halvings the mass is within rounding of 1; entries below τ
        # stay exactly zero.
        p = p / p.sum(dim=dim, keepdim=True)
        ctx.dim, ctx.alpha = dim, alpha
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (p,) = ctx.saved_tensors
        return _entmax_backward(p, grad, ctx.alpha, ctx.dim), None, None, None


def entmax15(z: Tensor, dim: int = -1) -> Tensor:
    """1.5-entmax by sorting (exact): p = [z/2 − τ]_+², Σ p = 1. Computed in float32 at least."""
    work = z if z.dtype in (torch.float32, torch.float64) else z.float()
    return _Entmax15.apply(work, dim)


def entmax_bisect(z: Tensor, alpha: float = 1.5, dim: int = -1, n_iter: int = 50) -> Tensor:
    """α-entmax for any α > 1 by bisection on τ (eq. 9), with exact zeros below τ."""
    if alpha <= 1:
        raise ValueError(f"entmax_bisect needs α > 1 (α = 1 is softmax), got {alpha}")
    work = z if z.dtype in (torch.float32, torch.float64) else z.float()
    return _EntmaxBisect.apply(work, float(alpha), dim, n_iter)


def entmax(z: Tensor, alpha: float = 1.5, dim: int = -1) -> Tensor:
    """α-entmax: softmax at α = 1, sparsemax at α = 2, the exact sort at α = 1.5, else bisection."""
    if alpha < 1:
        raise ValueError(f"entmax needs α ≥ 1, got {alpha}")
    if alpha == 1:
        return torch.softmax(z.float() if z.dtype not in (torch.float32, torch.float64) else z, dim=dim)
    if alpha == 2:
        return sparsemax(z, dim=dim)
    if alpha == 1.5:
        return entmax15(z, dim=dim)
    return entmax_bisect(z, alpha, dim=dim)
