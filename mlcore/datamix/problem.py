"""A mixture problem: K data sources, a target validation set and a proxy model, plus training on a mixture.

Every method (FastMix and the baselines) sees only this interface, so they spend comparable compute:
``cost`` counts proxy training steps (one step = one batch forward + backward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class MixtureProblem:
    sources: list[str]
    build: Callable[[int], torch.nn.Module]  # seed → a fresh proxy
    head: Callable[[torch.nn.Module], list[torch.nn.Parameter]]  # the output-head parameters
    sample: Callable[[int, int, torch.Generator], Batch]  # (source k, batch size, generator) → (inputs, targets)
    validation: Batch
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.nn.functional.cross_entropy
    #: Where proxies train. Sources sample on the CPU (seeded generators) and batches move here.
    device: torch.device | str = "cpu"

    @property
    def k(self) -> int:
        return len(self.sources)

    def proxy(self, seed: int) -> torch.nn.Module:
        """A fresh proxy on the problem's device."""
        return self.build(seed).to(self.device)

    def on_device(self, batch: Batch) -> Batch:
        inputs, targets = batch
        return inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        inputs, targets = self.on_device(batch)
        return self.loss_fn(model(inputs), targets)

    def source_losses(self, model: torch.nn.Module, batches: list[Batch]) -> torch.Tensor:
        """``[K]`` per-source losses from one forward pass over the concatenated batches: the same values as
        one pass per source, at a fraction of the cost for small models."""
        inputs, targets = self.on_device((torch.cat([i for i, _ in batches]), torch.cat([t for _, t in batches])))
        parts = zip(model(inputs).split([len(t) for _, t in batches]), targets.split([len(t) for _, t in batches]))
        return torch.stack([self.loss_fn(logits, part_targets) for logits, part_targets in parts])

    def validation_loss(self, model: torch.nn.Module) -> float:
        model.eval()
        with torch.no_grad():
            value = float(self.loss(model, self.validation))
        model.train()
        return value

    def validation_accuracy(self, model: torch.nn.Module) -> float:
        model.eval()
        inputs, targets = self.on_device(self.validation)
        with torch.no_grad():
            value = float((model(inputs).argmax(-1) == targets).float().mean())
        model.train()
        return value


def mixed_batch(problem: MixtureProblem, weights: torch.Tensor, size: int, generator: torch.Generator) -> Batch:
    """A batch whose source counts are drawn from Multinomial(size, weights): the mixture as sampling proportions."""
    counts = torch.bincount(
        torch.multinomial(weights, size, replacement=True, generator=generator), minlength=problem.k
    )
    parts = [problem.sample(k, int(n), generator) for k, n in enumerate(counts.tolist()) if n > 0]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def train_on_mixture(
    problem: MixtureProblem,
    weights: torch.Tensor | list[float],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    on_step: Callable[[int, torch.nn.Module], None] | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train a fresh proxy on batches sampled in proportion to ``weights``; its target-validation scores."""
    weights = torch.as_tensor(weights, dtype=torch.float32)
    if weights.shape != (problem.k,) or (weights < 0).any() or weights.sum() <= 0:
        raise ValueError(
            f"weights must be {problem.k} non-negative numbers with a positive sum, got {weights.tolist()}"
        )
    generator = torch.Generator().manual_seed(seed)
    model = problem.proxy(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(steps):
        loss = problem.loss(model, mixed_batch(problem, weights / weights.sum(), batch_size, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if on_step is not None:
            on_step(step, model)
    return model, {"val_loss": problem.validation_loss(model), "val_accuracy": problem.validation_accuracy(model)}
