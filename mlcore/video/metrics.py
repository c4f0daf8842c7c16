"""Fréchet distance between two sets of features (Heusel et al. 2017, eq. 6).

    d² = ‖μ₁ − μ₂‖² + Tr(Σ₁ + Σ₂ − 2·(Σ₁Σ₂)^{1/2})

On features of this project's own judge (:class:`mlcore.video.classifier.ClipClassifier`) it is a
"Fréchet classifier distance" (FCD): comparable between runs that share the judge, and *not* FVD
(which uses an I3D network trained on Kinetics).
"""

from __future__ import annotations

import numpy as np


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """d² between Gaussians fitted to feature rows ``a`` [n, d] and ``b`` [m, d] (n, m ≥ 2)."""
    from scipy import linalg

    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"feature sets must be [n, d] with the same d, got {a.shape} and {b.shape}")
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each feature set needs at least 2 rows for a covariance")
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = linalg.sqrtm(cov_a @ cov_b)
    if not np.isfinite(root).all():
        # A singular product (few samples): regularise both covariances slightly, as Heusel et al.'s code does.
        eps = 1e-6 * np.eye(len(cov_a))
        root = linalg.sqrtm((cov_a + eps) @ (cov_b + eps))
    root = np.real(root)
    return float(np.sum((mu_a - mu_b) ** 2) + np.trace(cov_a + cov_b - 2 * root))
