"""Deletion baselines for MoNE's comparison (method card, section 3), all from one calibration.

Each ranks the experts of every layer, keeps the top P, and deletes the rest with their router
rows, so top-k re-selects among the survivors:

- random: a seeded random subset (no calibration needed);
- frequency: the number of top-k selections |R_i|;
- routing score, RS: φ_freq (gate-weighted frequency) with one model-wide threshold;
- EAN (expert activation norm): Σ_{x∈R_i} ‖E_i(x)‖₂;
- REAP (router-weighted expert activation pruning, Lasby et al. 2025): the mean over R_i of
  g_i(x)·‖E_i(x)‖₂, with the survivors' top-k weights renormalised.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mlcore.compress.calibrate import Calibration
from mlcore.compress.plan import CompressionPlan, select


def _deletion(
    name: str, calibration: Calibration, scores: Tensor, keep: int, scope: str, **extra: bool
) -> CompressionPlan:
    kept = select(scores, keep, scope=scope, top_k=calibration.top_k)
    return CompressionPlan(name, keep=dict(zip(calibration.layers, kept)), scores=scores, **extra)


def random_scores(num_layers: int, num_experts: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(num_layers, num_experts, generator=generator, dtype=torch.float64)


def plan_random(calibration: Calibration, keep: int, *, scope: str, seed: int = 0) -> CompressionPlan:
    scores = random_scores(len(calibration.layers), calibration.num_experts, seed)
    return _deletion("random", calibration, scores, keep, scope)


def plan_frequency(calibration: Calibration, keep: int, *, scope: str) -> CompressionPlan:
    return _deletion("frequency", calibration, calibration.statistics.count.double(), keep, scope)


def plan_routing_score(calibration: Calibration, keep: int) -> CompressionPlan:
    """RS ranks by φ_freq against one threshold for the whole model, whatever the chosen scope."""
    return _deletion("rs", calibration, calibration.statistics.gate_weighted_frequency(), keep, "global")


def plan_ean(calibration: Calibration, keep: int, *, scope: str) -> CompressionPlan:
    return _deletion("ean", calibration, calibration.statistics.norm_sum.clone(), keep, scope)


def reap_saliency(calibration: Calibration) -> Tensor:
    """[L, E] (1/|R_i|) Σ_{x∈R_i} g_i(x)·‖E_i(x)‖₂; 0 for an expert no token reached."""
    return calibration.gated_norm_sum / calibration.statistics.count.clamp_min(1).double()


def plan_reap(calibration: Calibration, keep: int, *, scope: str) -> CompressionPlan:
    return _deletion("reap", calibration, reap_saliency(calibration), keep, scope, renormalize=True)
