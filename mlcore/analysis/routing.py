"""Routing decisions as plain numpy arrays, the input of every analysis in this package.

A :class:`LayerRouting` is one MoE layer's top-k selections, token after token, with the
sequence boundaries; :func:`from_trace` turns a :class:`~mlcore.moe.traces.RoutingTrace` into one
per traced layer, :func:`concatenate` joins layers into one, :func:`synthetic` draws reference
traces with known answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlcore.moe.traces import RoutingTrace


@dataclass(frozen=True)
class LayerRouting:
    """``expert_ids[N, k]`` (int32, −1 marks an unused slot) and ``lengths[S]`` (tokens per sequence)."""

    expert_ids: np.ndarray
    lengths: np.ndarray
    num_experts: int

    def __post_init__(self) -> None:
        if self.expert_ids.ndim != 2:
            raise ValueError(f"expert_ids must be [tokens, k], got shape {self.expert_ids.shape}")
        if int(self.lengths.sum()) != len(self.expert_ids) or bool((self.lengths <= 0).any()):
            raise ValueError("sequence lengths must be positive and sum to the number of tokens")
        if self.expert_ids.size and int(self.expert_ids.max()) >= self.num_experts:
            raise ValueError(f"an expert id is ≥ num_experts={self.num_experts}")

    @property
    def top_k(self) -> int:
        return int(self.expert_ids.shape[1])

    @property
    def starts(self) -> np.ndarray:
        """[S + 1] int64: where each sequence starts, then the total."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    @property
    def events(self) -> int:
        """Routing events: (token, expert) selections."""
        return int((self.expert_ids >= 0).sum())

    def load(self) -> np.ndarray:
        """[E] how many tokens selected each expert."""
        ids = self.expert_ids[self.expert_ids >= 0]
        return np.bincount(ids, minlength=self.num_experts)


def from_trace(trace: RoutingTrace) -> list[LayerRouting]:
    """One :class:`LayerRouting` per traced layer."""
    lengths = trace.sequence_lengths.numpy().astype(np.int64)
    return [
        LayerRouting(ids.numpy().astype(np.int32), lengths, int(experts))
        for ids, experts in zip(trace.expert_ids, trace.metadata.num_experts)
    ]


def concatenate(routings: Sequence[LayerRouting]) -> LayerRouting:
    """Every layer as one (the method card's model level): expert e of layer l becomes E_0 + … +
    E_{l−1} + e, and a token selects the top-k sets of all its layers, in forward order, so one
    cache of m·Σ_l k_l experts serves the whole model."""
    lengths = routings[0].lengths
    if any(not np.array_equal(r.lengths, lengths) for r in routings):
        raise ValueError("every layer must route the same sequences to be concatenated")
    offsets = np.cumsum([0] + [r.num_experts for r in routings[:-1]])
    ids = [np.where(r.expert_ids >= 0, r.expert_ids + offset, -1) for r, offset in zip(routings, offsets)]
    return LayerRouting(np.concatenate(ids, axis=1).astype(np.int32), lengths, sum(r.num_experts for r in routings))


def every_nth_sequence(routing: LayerRouting, stride: int) -> LayerRouting:
    """Sequences 0, stride, 2·stride, … (the method card subsamples SCH traces this way)."""
    if stride <= 1:
        return routing
    starts = routing.starts
    keep = np.arange(0, len(routing.lengths), stride)
    rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in keep])
    return LayerRouting(routing.expert_ids[rows], routing.lengths[keep], routing.num_experts)


def synthetic(
    kind: str, *, tokens: int, num_experts: int, top_k: int, sequence_length: int, seed: int = 0, stay: float = 0.9
) -> LayerRouting:
    """A reference trace: ``constant`` (one top-k set throughout: SRP = 1), ``random`` (uniform
    top-k per token: the lower bound), or ``sticky`` (each slot keeps its expert with probability
    ``stay``, else redraws: a locally consistent router)."""
    rng = np.random.default_rng(seed)
    if kind == "constant":
        ids = np.tile(np.arange(top_k, dtype=np.int32), (tokens, 1))
    elif kind == "random":
        ids = np.argsort(rng.random((tokens, num_experts)), axis=1)[:, :top_k].astype(np.int32)
    elif kind == "sticky":
        ids = np.empty((tokens, top_k), dtype=np.int32)
        current = rng.permutation(num_experts)[:top_k]
        fresh = np.argsort(rng.random((tokens, num_experts)), axis=1)
        moves = rng.random((tokens, top_k)) >= stay
        for t in range(tokens):
            for j in np.flatnonzero(moves[t]):
                candidates = [e for e in fresh[t] if e not in current]
                current[j] = candidates[0]
            ids[t] = current
    else:
        raise ValueError(f"unknown synthetic trace kind {kind!r}; choose constant, random or sticky")
    full, rest = divmod(tokens, sequence_length)
    lengths = np.array([sequence_length] * full + ([rest] if rest else []), dtype=np.int64)
    return LayerRouting(ids, lengths, num_experts)
