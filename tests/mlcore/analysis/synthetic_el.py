"""Synthetic training runs that follow a known EL law, for the fitter's and the planner's tests."""

from __future__ import annotations

import numpy as np

from mlcore.analysis.el import ELConstants, leverage
from mlcore.analysis.runs import Run

TRUE = ELConstants(a=0.6, d=0.02, beta=0.3, gamma=-0.08, x_max=1024)
ACTIVATIONS = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32]
GRANULARITIES = [1, 2, 4, 8, 16]
BUDGETS = [1e15, 1e16, 1e17, 1e18]


def synthetic_grid(noise: float, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    A, G, C = (np.array(v, dtype=float).ravel() for v in np.meshgrid(ACTIVATIONS, GRANULARITIES, BUDGETS))
    el = leverage(A, G, C, TRUE) * np.exp(rng.normal(scale=noise, size=A.shape))
    return A, G, C, el


def synthetic_runs(noise: float = 0.0) -> list[Run]:
    """Dense runs on L(C) = 20·C^-0.05 and MoE runs whose loss a dense model reaches with EL× compute."""
    runs = [Run(f"dense-{c:g}", "dense", 1e6, 1e6, 1, 1, 0, 1, c / 6e6, c, 20 * c**-0.05) for c in BUDGETS]
    A, G, C, el = synthetic_grid(noise)
    for a, g, c, e in zip(A, G, C, el):
        experts = round(8 / a)
        runs.append(Run(f"moe-{a:g}-{g:g}-{c:g}", "moe", 8e6, 1e6, experts, 8, 0, g, c / 6e6, c, 20 * (e * c) ** -0.05))
    return runs
