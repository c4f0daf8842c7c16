"""FastMix: a data mixture found while training one proxy (Tan et al., ICLR 2026, arXiv 2606.14971).

Bilevel problem (§3): min_z L_val(θ*(w)) with θ*(w) = argmin_θ Σ_k w_k·L_k(θ) and w = softmax(z).
Under uniform source sampling the mixture ratios are per-source loss weights, so w is differentiable:

1. each batch holds an equal share of every source; the inner step is AdamW on Σ_k w_k·L_k;
2. every T inner steps, the one-step hypergradient (Eq. 5) ∂L_val/∂w_k ≈ −η·⟨g_val, g_k⟩ with g over the
   output-head parameters (or all parameters, to measure what the head-only approximation loses);
3. chained through the softmax Jacobian: ∂L_val/∂z_j = Σ_k ∂L_val/∂w_k · w_k·(δ_kj − w_j);
4. an Adam step on z with learning rate lr_z (an entropy bonus on w is available, 0 by default).

The card warns that the reference's lr_z = 0.01 barely moves w in ~50 outer steps: lr_z and T are
parameters and every run records the w trajectory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mlcore.datamix.problem import MixtureProblem


@dataclass(frozen=True, kw_only=True)
class FastMixConfig:
    steps: int = 300
    batch_per_source: int = 16
    lr: float = 3e-3  # η, the inner learning rate
    #: The outer learning rate and T have no default: the reference's 0.01 and the data-mixture
    #: job's 0.1 differ by design, so every caller says which it means.
    lr_z: float
    interval: int  # T
    entropy: float = 0.0
    full_gradients: bool = False


@dataclass
class FastMixResult:
    weights: list[tuple[int, list[float]]] = field(default_factory=list)
    val_loss: list[tuple[int, float]] = field(default_factory=list)
    cost_examples: int = 0  # examples through a forward + backward pass, the unit every method is charged in

    @property
    def final(self) -> list[float]:
        return self.weights[-1][1]


def mixture_hypergradient(g_val: torch.Tensor, g_sources: torch.Tensor, w: torch.Tensor, lr: float) -> torch.Tensor:
    """∂L_val/∂z for flat gradients ``g_val [P]`` and ``g_sources [K, P]`` at mixture ``w [K]`` (Eqs. 5–6)."""
    d_w = -lr * (g_sources @ g_val)
    jacobian = torch.diag(w) - torch.outer(w, w)  # ∂w_k/∂z_j, symmetric
    return jacobian @ d_w


def _flat_grad(loss: torch.Tensor, params: list[torch.nn.Parameter], *, retain_graph: bool = False) -> torch.Tensor:
    grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params, strict=True)]
    )


def fastmix(
    problem: MixtureProblem,
    config: FastMixConfig,
    *,
    seed: int = 0,
    on_outer: Callable[[int, FastMixResult], None] | None = None,
) -> FastMixResult:
    """Run FastMix on ``problem``; the returned weights are sampling proportions for the real run."""
    generator = torch.Generator().manual_seed(seed)
    model = problem.proxy(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    z = torch.zeros(problem.k, requires_grad=True)
    z_optimizer = torch.optim.Adam([z], lr=config.lr_z)
    result = FastMixResult(weights=[(0, [1.0 / problem.k] * problem.k)])
    params = list(model.parameters()) if config.full_gradients else problem.head(model)
    for step in range(config.steps):
        batches = [problem.sample(k, config.batch_per_source, generator) for k in range(problem.k)]
        losses = problem.source_losses(model, batches)
        w = torch.softmax(z.detach(), 0).to(losses.device)
        optimizer.zero_grad(set_to_none=True)
        (w * losses).sum().backward()
        optimizer.step()
        result.cost_examples += problem.k * config.batch_per_source
        if (step + 1) % config.interval:
            continue
        # Outer step: fresh per-source batches, gradients restricted to the chosen parameters.
        g_val = _flat_grad(problem.loss(model, problem.validation), params)
        fresh = problem.source_losses(
            model, [problem.sample(k, config.batch_per_source, generator) for k in range(problem.k)]
        )
        g_sources = torch.stack([_flat_grad(loss, params, retain_graph=True) for loss in fresh])
        w = torch.softmax(z.detach(), 0)
        # z stays on the CPU; the K×K hypergradient comes back from the proxy's device.
        d_z = mixture_hypergradient(g_val, g_sources, w.to(g_val.device), config.lr).to(z.device)
        if config.entropy:
            # Maximising H(w): ∂(−H)/∂z = J·(log w + 1), added with the coefficient.
            d_z = d_z + config.entropy * (torch.diag(w) - torch.outer(w, w)) @ (torch.log(w) + 1)
        z_optimizer.zero_grad(set_to_none=True)
        z.grad = d_z
        z_optimizer.step()
        result.cost_examples += problem.k * config.batch_per_source + len(problem.validation[1])
        result.weights.append((step + 1, torch.softmax(z.detach(), 0).tolist()))
        result.val_loss.append((step + 1, problem.validation_loss(model)))
        if on_outer is not None:
            on_outer(step + 1, result)
    return result
