"""Offline mixture problems whose right answer is knowable (card §4).

- :func:`classification_problem` (Tier A): six classification sources sharing one concept — label noise
  0/10/30/50% on four, the other two covariate-shifted — and a clean target validation set; the proxy is
  a small MLP whose head is its last layer. (The card suggests scikit-learn's ``make_classification``;
  a fixed random network labelling Gaussian inputs gives the same structure without the dependency.)
- :func:`text_problem`: next-byte prediction over text sources (a byte-level MLP over a fixed context),
  the proxy the ``data-mixture`` job uses; a target text gives the validation windows.
"""

from __future__ import annotations

import torch
from torch import nn

from mlcore.datamix.problem import MixtureProblem

LABEL_NOISE = {"clean": 0.0, "noise-10": 0.1, "noise-30": 0.3, "noise-50": 0.5}
SHIFTS = {"shift-a": 2.0, "shift-b": -3.0}


def _pool_sampler(pools: list[tuple[torch.Tensor, torch.Tensor]]):  # type: ignore[no-untyped-def]
    def sample(k: int, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = pools[k]
        index = torch.randint(0, len(y), (n,), generator=generator)
        return x[index], y[index]

    return sample


def _concept(seed: int, features: int, classes: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by one fixed random two-layer network: the concept every source shares."""
    g = torch.Generator().manual_seed(seed)
    w1, w2 = torch.randn(features, 32, generator=g), torch.randn(32, classes, generator=g)
    x = torch.randn(count, features, generator=g)
    return x, (torch.tanh(x @ w1) @ w2).argmax(-1)


def classification_problem(
    *, seed: int = 0, per_source: int = 2000, classes: int = 4, hidden: int = 32
) -> MixtureProblem:
    k = len(LABEL_NOISE) + len(SHIFTS)
    x_t, y_t = _concept(seed, 20, classes, per_source * k + 1000)
    rng = torch.Generator().manual_seed(seed)
    pools = []
    for i, noise in enumerate(LABEL_NOISE.values()):
        xs, ys = x_t[i * per_source : (i + 1) * per_source], y_t[i * per_source : (i + 1) * per_source].clone()
        flip = torch.rand(per_source, generator=rng) < noise
        ys[flip] = torch.randint(0, classes, (int(flip.sum()),), generator=rng)
        pools.append((xs, ys))
    for j, shift in enumerate(SHIFTS.values()):
        start = (len(LABEL_NOISE) + j) * per_source
        xs, ys = x_t[start : start + per_source], y_t[start : start + per_source]
        # The same concept seen through a different lens: shifted and rescaled features, so what the
        # proxy learns there transfers poorly to the target.
        pools.append((xs * 1.5 + shift, ys))
    validation = (x_t[per_source * k :], y_t[per_source * k :])

    def build(model_seed: int) -> nn.Module:
        torch.manual_seed(model_seed)
        return nn.Sequential(
            nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    return MixtureProblem(
        sources=[*LABEL_NOISE, *SHIFTS],
        build=build,
        head=lambda model: list(model[-1].parameters()),
        sample=_pool_sampler(pools),
        validation=validation,
    )


class ByteMLP(nn.Module):
    """Next-byte prediction from the previous ``context`` bytes: embed, flatten, one hidden layer, head."""

    def __init__(self, *, context: int, width: int, embedding: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, embedding)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(context * embedding, width), nn.GELU())
        self.head = nn.Linear(width, 256)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(ids)))


def random_windows(data: torch.Tensor, length: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``[count, length]``: ``count`` runs of ``length`` consecutive items of ``data`` at random starts."""
    starts = torch.randint(0, len(data) - length, (count,), generator=generator)
    return data[starts[:, None] + torch.arange(length)]


def _windows(
    data: torch.Tensor, context: int, count: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = random_windows(data, context + 1, count, generator)
    return rows[:, :-1], rows[:, -1]


def text_problem(
    sources: dict[str, str],
    target: str,
    *,
    context: int = 16,
    width: int = 128,
    validation_windows: int = 1024,
    seed: int = 0,
) -> MixtureProblem:
    """``sources`` name → text, ``target`` the validation text (UTF-8 bytes; each needs > context + 1 bytes)."""

    def encode(name: str, text: str) -> torch.Tensor:
        data = torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()
        if len(data) <= context + 1:
            raise ValueError(f"{name} has {len(data)} bytes; it needs more than {context + 1}")
        return data

    streams = [encode(name, text) for name, text in sources.items()]
    validation = _windows(
        encode("the target", target), context, validation_windows, torch.Generator().manual_seed(seed)
    )

    def sample(k: int, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return _windows(streams[k], context, n, generator)

    def build(model_seed: int) -> nn.Module:
        torch.manual_seed(model_seed)
        return ByteMLP(context=context, width=width)

    return MixtureProblem(
        sources=list(sources),
        build=build,
        head=lambda model: list(model.head.parameters()),
        sample=sample,
        validation=validation,
    )
