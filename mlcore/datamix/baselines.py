"""Reference mixtures for FastMix (card §3), each charged in examples trained on (``cost_examples``).

- uniform: w_k = 1/K;
- RegMix-lite (Liu et al. 2025, scaled down): n Dirichlet mixtures, a short proxy on each, a
  quadratic ridge regression from w to target-validation loss, the predicted minimiser among many w;
- DoReMi-lite (Xie et al. 2023): a reference proxy on uniform data, then a proxy trained on the
  w-weighted loss while w follows exponentiated gradient on the clipped per-source excess loss;
  the mixture is w averaged over training;
- grid oracle: a proxy at every point of a coarse simplex grid, the best kept (an upper reference).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from mlcore.datamix.problem import MixtureProblem, train_on_mixture


@dataclass
class Found:
    weights: list[float]
    cost_examples: int


def uniform(problem: MixtureProblem) -> Found:
    return Found([1.0 / problem.k] * problem.k, 0)


def _features(w: np.ndarray) -> np.ndarray:
    return np.concatenate([np.ones((len(w), 1)), w, w**2], axis=1)


def regmix_lite(
    problem: MixtureProblem, *, proxies: int = 24, steps: int = 100, batch_size: int = 64, seed: int = 0
) -> Found:
    rng = np.random.default_rng(seed)
    mixtures = rng.dirichlet(np.ones(problem.k), size=proxies)
    losses = [
        train_on_mixture(problem, list(w), steps=steps, batch_size=batch_size, seed=seed + i)[1]["val_loss"]
        for i, w in enumerate(mixtures)
    ]
    x, y = _features(mixtures), np.asarray(losses)
    ridge = 1e-3 * np.eye(x.shape[1])
    coef = np.linalg.solve(x.T @ x + ridge, x.T @ y)
    candidates = rng.dirichlet(np.ones(problem.k), size=20_000)
    best = candidates[int(np.argmin(_features(candidates) @ coef))]
    return Found(best.tolist(), proxies * steps * batch_size)


def doremi_lite(
    problem: MixtureProblem,
    *,
    steps: int = 300,
    batch_per_source: int = 16,
    lr: float = 3e-3,
    eta: float = 1.0,
    smoothing: float = 1e-3,
    seed: int = 0,
) -> Found:
    uniform_w = torch.full((problem.k,), 1.0 / problem.k)
    reference, _ = train_on_mixture(problem, uniform_w, steps=steps, batch_size=batch_per_source * problem.k, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    proxy = problem.proxy(seed + 1)
    optimizer = torch.optim.AdamW(proxy.parameters(), lr=lr)
    uniform_w = uniform_w.to(problem.device)
    log_w = torch.log(uniform_w)
    total = torch.zeros(problem.k, device=problem.device)
    for _ in range(steps):
        batches = [problem.sample(k, batch_per_source, generator) for k in range(problem.k)]
        losses = problem.source_losses(proxy, batches)
        with torch.no_grad():
            excess = (losses - problem.source_losses(reference, batches)).clamp(min=0)
            log_w = torch.log_softmax(log_w + eta * excess, 0)
            w = (1 - smoothing) * log_w.exp() + smoothing * uniform_w
            total += w
        optimizer.zero_grad(set_to_none=True)
        (w * losses).sum().backward()
        optimizer.step()
    cost = 2 * steps * batch_per_source * problem.k  # the reference run and the proxy run
    return Found((total / steps).tolist(), cost)


def simplex_grid(k: int, resolution: int) -> list[list[float]]:
    """Every w with entries in {0, 1/resolution, ..., 1} summing to 1."""
    points = []
    for cuts in itertools.combinations(range(resolution + k - 1), k - 1):
        parts = np.diff([-1, *cuts, resolution + k - 1]) - 1
        points.append((parts / resolution).tolist())
    return points


def grid_oracle(
    problem: MixtureProblem, *, resolution: int = 2, steps: int = 300, batch_size: int = 64, seed: int = 0
) -> Found:
    grid = simplex_grid(problem.k, resolution)
    scores = [train_on_mixture(problem, w, steps=steps, batch_size=batch_size, seed=seed)[1]["val_loss"] for w in grid]
    return Found(grid[int(np.argmin(scores))], len(grid) * steps * batch_size)
