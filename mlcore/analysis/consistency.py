"""The whole local-routing-consistency analysis of one trace: SRP over window lengths, SCH and the
baseline cache policies over capacities, load balance, bootstrap CIs and an offloading
recommendation (Liang et al., ICLR 2026, §3 and §5).

Model-level figures: SRP sums the layers' window histograms (θ shared across layers); hit rates
sum hits and accesses over layers, each layer with its own cache of m·k_l experts (the issue's
per-layer cache, scope ``model``). Scope ``model (one cache)`` is the method card's model level: the
layers concatenated (:func:`~mlcore.analysis.routing.concatenate`) and replayed through one cache of
m·Σ_l k_l experts, so layers share the capacity; its simulation costs grow with that capacity, so
beyond ``ONE_CACHE_BUDGET`` every n-th sequence is replayed, as the card subsamples SCH traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlcore.analysis.balance import global_balance, local_balance
from mlcore.analysis.cache import POLICIES, capacity_for, simulate
from mlcore.analysis.routing import LayerRouting, concatenate, every_nth_sequence
from mlcore.analysis.srp import SRPResult, bootstrap_srp, window_histograms

WINDOWS: tuple[int, ...] = (4, 16, 64, 256)
MULTIPLES: tuple[float, ...] = (1, 1.5, 2, 3, 4)
ONE_CACHE = "model (one cache)"
#: Accesses × the largest shared capacity that one simulation of the one-cache model level may scan (~1 s).
ONE_CACHE_BUDGET = 1 << 30


def middle_window(windows: Sequence[int]) -> int:
    """The window length that local balance and the per-layer SCH heatmap use: the median, the lower
    of the two middle ones for an even count (L = 16 of the defaults, and of 4, 16, 64)."""
    ordered = sorted(windows)
    return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class HitRate:
    policy: str
    window: int  # the look-ahead L for SCH; 0 for the others
    multiple: float
    capacity: int  # at the model level: experts cached per layer for the first layer
    rate: float
    ci_low: float
    ci_high: float


@dataclass
class ConsistencyReport:
    layers: list[int]
    num_experts: list[int]
    top_k: list[int]
    tokens: int
    sequences: int
    srp: dict[str, list[SRPResult]] = field(default_factory=dict)  # "model" or "layer N" → per window
    hit_rates: dict[str, list[HitRate]] = field(default_factory=dict)
    local_balance: dict[str, float] = field(default_factory=dict)  # "layer N" → over local_balance_window tokens
    local_balance_window: int = 0
    global_balance: dict[str, float] = field(default_factory=dict)
    misses_per_token: dict[float, list[float]] = field(default_factory=dict)  # LRU, m → per layer
    one_cache_stride: int = 0  # the one-cache model level replayed every n-th sequence; 0: not computed

    def to_json(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "num_experts": self.num_experts,
            "top_k": self.top_k,
            "tokens": self.tokens,
            "sequences": self.sequences,
            "srp": {k: [vars(r) for r in v] for k, v in self.srp.items()},
            "hit_rates": {k: [vars(r) for r in v] for k, v in self.hit_rates.items()},
            "local_balance": self.local_balance,
            "local_balance_window": self.local_balance_window,
            "one_cache_stride": self.one_cache_stride,
            "global_balance": self.global_balance,
        }


def _basic_ci(point: float, samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    alpha = (1 - level) / 2
    low, high = np.nanquantile(samples, [alpha, 1 - alpha])
    return float(2 * point - high), float(2 * point - low)


def _draws(rng: np.random.Generator, sequences: int, resamples: int) -> np.ndarray:
    """[B, S] how often each sequence is drawn in each bootstrap resample (none for a single sequence)."""
    if sequences < 2 or not resamples:
        return np.zeros((0, sequences))
    picks = rng.integers(0, sequences, (resamples, sequences))
    return np.stack([np.bincount(d, minlength=sequences) for d in picks])


def _ratio_ci(hits: np.ndarray, accesses: np.ndarray, draws: np.ndarray) -> tuple[float, float, float]:
    """Hit rate and its basic-bootstrap CI, resampling sequences (``draws`` [B, S] multiplicities)."""
    rate = float(hits.sum() / max(1, accesses.sum()))
    if len(draws) == 0:
        return rate, rate, rate
    samples = (draws @ hits) / np.maximum(draws @ accesses, 1)
    return (rate, *_basic_ci(rate, samples))


def analyse(
    routings: Sequence[LayerRouting],
    layers: Sequence[int],
    *,
    windows: Sequence[int] = WINDOWS,
    multiples: Sequence[float] = MULTIPLES,
    resamples: int = 1000,
    seed: int = 0,
    on_step: Callable[[float, str], None] | None = None,
) -> ConsistencyReport:
    """SRP(L) for every L in ``windows``; SCH(L, m) for every L and m; LRU, LFU and Belady for every m."""
    sequences = len(routings[0].lengths)
    report = ConsistencyReport(
        layers=list(layers),
        num_experts=[r.num_experts for r in routings],
        top_k=[r.top_k for r in routings],
        tokens=len(routings[0].expert_ids),
        sequences=sequences,
    )
    rng = np.random.default_rng(seed)
    draws = _draws(rng, sequences, resamples)
    shared, shared_draws = None, draws
    if len(routings) > 1:  # with one layer the one-cache model level is that layer
        scan = sum(r.events for r in routings) * capacity_for(max(multiples), sum(r.top_k for r in routings))
        report.one_cache_stride = max(1, -(-scan // ONE_CACHE_BUDGET))
        # Subsample before joining, so a long trace of a deep model is never copied whole.
        shared = concatenate([every_nth_sequence(r, report.one_cache_stride) for r in routings])
        shared_draws = draws if report.one_cache_stride == 1 else _draws(rng, len(shared.lengths), resamples)
    steps = len(windows) + len(windows) + 3
    done = 0

    def step(stage: str) -> None:
        nonlocal done
        done += 1
        if on_step:
            on_step(done / steps, stage)

    names = [f"layer {layer}" for layer in layers]
    for window in windows:
        per_layer = [window_histograms(r, window) for r in routings]
        for name, hist in zip(names, per_layer):
            report.srp.setdefault(name, []).append(bootstrap_srp(hist, window, resamples=resamples, seed=seed))
        report.srp.setdefault("model", []).append(
            bootstrap_srp(np.sum(per_layer, axis=0), window, resamples=resamples, seed=seed)
        )
        step(f"SRP at L = {window}")
    report.local_balance_window = middle_window(windows)
    for name, r in zip(names, routings):
        report.local_balance[name] = local_balance(r, report.local_balance_window)
        report.global_balance[name] = global_balance(r)

    def add_policy(policy: str, window: int) -> None:
        results = [simulate(r, policy, list(multiples), lookahead=max(window, 1)) for r in routings]
        for i, m in enumerate(multiples):
            for name, per_layer in zip(names, results):
                res = per_layer[i]
                rate, low, high = _ratio_ci(res.hits, res.accesses, draws)
                report.hit_rates.setdefault(name, []).append(HitRate(policy, window, m, res.capacity, rate, low, high))
            hits = np.sum([per_layer[i].hits for per_layer in results], axis=0)
            accesses = np.sum([per_layer[i].accesses for per_layer in results], axis=0)
            rate, low, high = _ratio_ci(hits, accesses, draws)
            report.hit_rates.setdefault("model", []).append(
                HitRate(policy, window, m, results[0][i].capacity, rate, low, high)
            )
            if policy == "lru":
                report.misses_per_token[m] = [
                    float((p[i].accesses.sum() - p[i].hits.sum()) / report.tokens) for p in results
                ]
        if shared is not None:
            for res in simulate(shared, policy, list(multiples), lookahead=max(window, 1)):
                rate, low, high = _ratio_ci(res.hits, res.accesses, shared_draws)
                report.hit_rates.setdefault(ONE_CACHE, []).append(
                    HitRate(policy, window, res.multiple, res.capacity, rate, low, high)
                )

    for policy in POLICIES:
        if policy == "sch":
            for window in windows:
                add_policy("sch", window)
                step(f"SCH at L = {window}")
        else:
            add_policy(policy, 0)
            step(f"{policy.upper()} cache")
    return report


@dataclass(frozen=True)
class Recommendation:
    multiple: float
    experts_per_layer: list[int]
    hit_rate: float
    sch_bound: float
    transfer_bytes_per_token: float | None

    def sentence(self) -> str:
        per_layer = sorted(set(self.experts_per_layer))
        experts = str(per_layer[0]) if len(per_layer) == 1 else "/".join(map(str, self.experts_per_layer))
        transfer = (
            f"transfer {self.transfer_bytes_per_token / 2**20:.3g} MiB of expert weights per token"
            if self.transfer_bytes_per_token is not None
            else "transfer bytes unknown (no expert sizes)"
        )
        return (
            f"Cache {experts} experts per layer ({self.multiple:g}× the active experts): expected LRU hit rate "
            f"{self.hit_rate:.1%} (look-ahead bound SCH {self.sch_bound:.1%}), {transfer}."
        )


def recommend(report: ConsistencyReport, expert_bytes: Sequence[int] | None) -> Recommendation:
    """The knee of the model-level LRU hit-rate curve: the tested capacity farthest above the straight
    line from the smallest to the largest capacity, both axes scaled to [0, 1] (Kneedle; Satopää et
    al. 2011). A flat curve recommends the smallest capacity."""
    lru = sorted((h for h in report.hit_rates["model"] if h.policy == "lru"), key=lambda h: h.multiple)
    m = np.array([h.multiple for h in lru])
    rate = np.array([h.rate for h in lru])
    span_m, span_rate = m[-1] - m[0], rate.max() - rate.min()
    if len(lru) < 3 or span_rate <= 1e-12 or span_m <= 0:
        chosen = lru[0] if span_rate <= 1e-12 else lru[int(np.argmax(rate))]
    else:
        above = (rate - rate[0]) / span_rate - (m - m[0]) / span_m
        chosen = lru[int(np.argmax(above))]
    sch = [h for h in report.hit_rates["model"] if h.policy == "sch" and h.multiple == chosen.multiple]
    bound = max(h.rate for h in sch) if sch else float("nan")
    experts = [capacity_for(chosen.multiple, k) for k in report.top_k]
    transfer = None
    if expert_bytes is not None:
        transfer = float(sum(n * b for n, b in zip(report.misses_per_token[chosen.multiple], expert_bytes)))
    return Recommendation(chosen.multiple, experts, chosen.rate, bound, transfer)
