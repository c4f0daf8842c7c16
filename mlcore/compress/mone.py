"""MoNE: Mixture of Novices and Experts (arXiv 2507.00390, ICLR 2026), section 3.

For one MoE layer with experts E_i, router probabilities g(x), top-k set T(x), calibration tokens
X and R_i = {x ∈ X : i ∈ T(x)}:

    φ_var,i  = ‖σ_i‖₂ = √(Σ_d σ²_{i,d})                       (eq. 3; σ² unbiased, per dimension)
    φ_freq,i = (1/|X|) Σ_{x∈X} g_i(x) · 1[i ∈ T(x)]            (eq. 4; renormalised top-k weights
                                                                  when the model renormalises)
    s_i      = φ_var,i · φ_freq,i                               (eq. 5)

The P highest-scoring experts of each layer stay; every other expert becomes a novice
N_i(x) = μ_i, its mean output over R_i, and the router is left untouched, so
y = Σ_{e∈T(x)} g_e(x)·F_e(x) with F_e = E_e (kept) or μ_e (novice) (eq. 6).

Deliberate differences from the reference code (method card): exact Chan/Welford moments over every
batch (``ExpertStatistics``), no "novice evolving", and ‖σ‖₂ rather than ‖σ²‖₂ by default
(``variance_norm="var"`` selects the other, recorded in the plan's method name).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mlcore.compress.calibrate import Calibration
from mlcore.compress.plan import CompressionPlan, select


def phi_var(calibration: Calibration, *, variance_norm: str = "std") -> Tensor:
    """[L, E] φ_var = ‖σ_i‖₂ (eq. 3), or ‖σ²_i‖₂ with ``variance_norm="var"``."""
    if variance_norm == "std":
        return calibration.statistics.std_norm()
    if variance_norm == "var":
        return torch.linalg.vector_norm(calibration.statistics.variance(), dim=-1)
    raise ValueError(f"variance_norm must be 'std' or 'var', not {variance_norm!r}")


def phi_freq(calibration: Calibration) -> Tensor:
    """[L, E] gate-weighted access frequency (eq. 4)."""
    return calibration.statistics.gate_weighted_frequency()


def mone_scores(calibration: Calibration, *, variance_norm: str = "std") -> Tensor:
    """[L, E] s_i = φ_var,i · φ_freq,i (eq. 5): low = rarely used and nearly constant."""
    return phi_var(calibration, variance_norm=variance_norm) * phi_freq(calibration)


def novice_vectors(
    calibration: Calibration, layer: int, experts: list[int], *, zero: bool = False
) -> dict[int, Tensor]:
    """μ_i for each pruned expert of MoE layer position ``layer`` (zeros for the MoNE-zero ablation)."""
    mu = calibration.statistics.mean[layer].float()
    return {e: torch.zeros_like(mu[e]) if zero else mu[e].clone() for e in experts}


def plan_mone(
    calibration: Calibration,
    keep: int,
    *,
    scope: str,
    zero_novices: bool = False,
    delete: bool = False,
    variance_norm: str = "std",
) -> CompressionPlan:
    """MoNE's plan: keep the top-P experts by s_i (eq. 5), the rest become novices μ_i (eq. 6).

    Ablations: ``zero_novices`` (MoNE-zero: N_i = 0) and ``delete`` (MoNE's ranking, experts and
    router rows deleted as the deletion baselines do).
    """
    scores = mone_scores(calibration, variance_norm=variance_norm)
    kept = select(scores, keep, scope=scope, top_k=calibration.top_k)
    name = "mone-delete" if delete else "mone-zero" if zero_novices else "mone"
    keep_map = dict(zip(calibration.layers, kept))
    plan = CompressionPlan(name, keep=keep_map, scores=scores)
    if not delete:
        for position, (layer, survivors) in enumerate(keep_map.items()):
            pruned = [e for e in range(calibration.num_experts) if e not in set(survivors)]
            plan.novices[layer] = novice_vectors(calibration, position, pruned, zero=zero_novices)
    return plan
