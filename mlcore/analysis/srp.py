"""Segment Routing best Performance, SRP(L) (Liang et al., "Not All Models Suit Expert Offloading:
On Local Routing Consistency of Mixture-of-Expert Models", ICLR 2026, §3.1).

For every sliding window W of L tokens inside a sequence, c_e(W) = Σ_{t∈W} m_{t,e} counts how
many of its tokens activated expert e. A threshold θ picks the segment's fixed expert set
S_θ(W) = {e : c_e(W) ≥ θ}, which serves all L tokens:

    TP(θ)   = Σ_W Σ_{e∈S_θ(W)} c_e(W)          activations the set covers
    Pred(θ) = L · Σ_W |S_θ(W)|                  activations the set predicts
    Act     = Σ_W Σ_e c_e(W)  (= L·k·#windows)  activations that happened
    F1(θ)   = 2·TP / (Pred + Act),   SRP(L) = max_θ F1(θ).

Everything follows from the histogram h[v] = #{(W, e) : c_e(W) = v}, v = 0..L (built by sliding
each window one token at a time, numba-compiled): TP(θ) and Pred(θ) are reverse cumulative sums of
v·h[v] and h[v]. A model-level SRP sums the histograms of its
layers, so θ is shared across layers. Confidence intervals resample whole sequences (95% basic
bootstrap: 2·SRP − the percentile bounds).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mlcore.analysis.routing import LayerRouting

#: Windows processed at once: bounds the [windows, experts] count matrix to a few tens of MB.
_CHUNK = 1 << 16


def window_counts(routing: LayerRouting, window: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Chunks of (sequence index [W], c_e(W) [W, E]) over every window that fits inside its sequence."""
    ids, starts = routing.expert_ids, routing.starts
    n, experts = len(ids), routing.num_experts
    onehot = np.zeros((n + 1, experts), dtype=np.int32)
    rows = np.repeat(np.arange(1, n + 1), ids.shape[1])
    flat = ids.reshape(-1)
    keep = flat >= 0
    np.add.at(onehot, (rows[keep], flat[keep]), 1)
    cumulative = np.cumsum(onehot, axis=0, dtype=np.int32)
    counts = np.maximum(routing.lengths - window + 1, 0)
    sequence_of = np.repeat(np.arange(len(routing.lengths)), counts)
    offsets = np.arange(len(sequence_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    window_starts = np.repeat(starts[:-1], counts) + offsets
    for begin in range(0, len(window_starts), _CHUNK):
        s = window_starts[begin : begin + _CHUNK]
        yield sequence_of[begin : begin + _CHUNK], cumulative[s + window] - cumulative[s]


_kernel = None


def _sliding_histograms(ids: np.ndarray, starts: np.ndarray, num_experts: int, window: int) -> np.ndarray:
    """The numba kernel behind :func:`window_histograms`: slide each window by one token, moving the
    counts of the experts of the token that leaves and of the one that enters, and keep the histogram
    of counts up to date, so each step costs O(k + L) instead of O(E) plus a pass over the window."""
    out = np.zeros((len(starts) - 1, window + 1), dtype=np.int64)
    counts = np.zeros(num_experts, dtype=np.int64)
    level = np.zeros(window + 1, dtype=np.int64)
    k = ids.shape[1]
    for s in range(len(starts) - 1):
        begin, end = starts[s], starts[s + 1]
        if end - begin < window:
            continue
        counts[:] = 0
        for t in range(begin, begin + window):
            for j in range(k):
                if ids[t, j] >= 0:
                    counts[ids[t, j]] += 1
        level[:] = 0
        for e in range(num_experts):
            level[counts[e]] += 1
        out[s] += level
        for first in range(begin + 1, end - window + 1):
            for j in range(k):
                e = ids[first - 1, j]  # leaves the window
                if e >= 0:
                    level[counts[e]] -= 1
                    counts[e] -= 1
                    level[counts[e]] += 1
            for j in range(k):
                e = ids[first + window - 1, j]  # enters it
                if e >= 0:
                    level[counts[e]] -= 1
                    counts[e] += 1
                    level[counts[e]] += 1
            out[s] += level
    return out


def window_histograms(routing: LayerRouting, window: int) -> np.ndarray:
    """[S, L + 1] int64: per sequence, h[v] = #(window, expert) pairs whose count c_e(W) is v.

    Sequences shorter than the window contribute no windows.
    """
    global _kernel
    if _kernel is None:  # compiled on first use (cached on disk by numba), so importing stays cheap
        import numba

        _kernel = numba.njit(cache=True, nogil=True)(_sliding_histograms)
    ids = np.ascontiguousarray(routing.expert_ids, dtype=np.int64)
    return _kernel(ids, routing.starts, routing.num_experts, window)


def f1_curve(hist: np.ndarray, window: int) -> np.ndarray:
    """[L] F1(θ) for θ = 1..L from a (summed) count histogram h[v]."""
    v = np.arange(window + 1)
    tp = np.cumsum((v * hist)[::-1])[::-1][1:]  # Σ_{v≥θ} v·h[v], θ = 1..L
    pred = window * np.cumsum(hist[::-1])[::-1][1:]  # L·Σ_{v≥θ} h[v]
    act = float((v * hist).sum())
    if act == 0:
        return np.full(window, np.nan)
    return 2 * tp / (pred + act)


def srp_from_histogram(hist: np.ndarray, window: int) -> tuple[float, int]:
    """(SRP(L), the best θ) for a summed histogram."""
    curve = f1_curve(hist, window)
    if np.isnan(curve).all():
        return float("nan"), 0
    best = int(np.nanargmax(curve))
    return float(curve[best]), best + 1


@dataclass(frozen=True)
class SRPResult:
    window: int
    srp: float
    theta: int
    ci_low: float
    ci_high: float


def bootstrap_srp(
    per_sequence: np.ndarray, window: int, *, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> SRPResult:
    """SRP with a basic-bootstrap CI over sequences, from per-sequence histograms [S, L + 1]."""
    value, theta = srp_from_histogram(per_sequence.sum(axis=0), window)
    useful = per_sequence[per_sequence.sum(axis=1) > 0]
    if len(useful) < 2 or resamples == 0:
        return SRPResult(window, value, theta, value, value)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(useful), size=(resamples, len(useful)))
    weights = np.stack([np.bincount(d, minlength=len(useful)) for d in draws])
    resampled = weights @ useful  # [B, L + 1]
    stats = np.array([srp_from_histogram(h, window)[0] for h in resampled])
    alpha = (1 - level) / 2
    low_q, high_q = np.nanquantile(stats, [alpha, 1 - alpha])
    return SRPResult(window, value, theta, float(2 * value - high_q), float(2 * value - low_q))
