"""Plan an MoE configuration: parameters, the law's inputs (A, G, C), predicted Efficiency
Leverage, the loss-matched dense model, memory per device, and serving with experts offloaded.

Parameter counts assume a decoder-only transformer with SwiGLU experts (3·d·d_expert weights
each), 4·d² attention weights per layer and a router of d·E weights, embeddings excluded (as in
the scaling-law papers); training compute C = 6 · active parameters · tokens.

Offloading (Liang et al., ICLR 2026, §5): routed experts live in host memory and each layer keeps
a cache of C = m·k of them in device memory, everything else stays resident. Each token makes
``layers × k`` expert accesses; a miss moves one expert over the host link. The hit rate comes
from a ``routing-analysis`` report (LRU: what an online cache gets; SCH: the bound with a look-ahead
of L tokens) or is given. Decode speed is for batch 1, where reading the weights dominates: every
active weight is read once per token from device memory, and a missed expert is transferred first
(the router picks it only when its layer runs, so the copy cannot start earlier).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlcore.analysis.cache import POLICIES, capacity_for
from mlcore.analysis.consistency import middle_window
from mlcore.analysis.el import ELConstants, dense_params_for, leverage


@dataclass(frozen=True)
class Architecture:
    d_model: int
    layers: int
    experts: int
    top_k: int
    shared_experts: int
    d_expert: int
    tokens: float

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"need 1 ≤ top_k ≤ experts, got top_k={self.top_k}, experts={self.experts}")

    @property
    def expert_params(self) -> int:
        return 3 * self.d_model * self.d_expert

    @property
    def total_params(self) -> int:
        per_layer = 4 * self.d_model**2 + (self.experts + self.shared_experts) * self.expert_params
        return self.layers * (per_layer + self.d_model * self.experts)

    @property
    def active_params(self) -> int:
        per_layer = 4 * self.d_model**2 + (self.top_k + self.shared_experts) * self.expert_params
        return self.layers * (per_layer + self.d_model * self.experts)

    def activation(self, *, count_shared: bool = False) -> float:
        s = self.shared_experts if count_shared else 0
        return (self.top_k + s) / (self.experts + s)

    @property
    def granularity(self) -> float:
        """G = 2·d_model / d_expert (Tian et al., §2)."""
        return 2 * self.d_model / self.d_expert

    @property
    def compute(self) -> float:
        return 6.0 * self.active_params * self.tokens

    def misses_per_token(self, hit_rate: float) -> float:
        """Expert loads per token when offloading: ``layers × k`` accesses, a miss loads one expert."""
        return self.layers * self.top_k * (1.0 - hit_rate)


@dataclass(frozen=True, kw_only=True)
class Serving:
    """How the model is served: weight precision, expert parallelism, and the offloading set-up.

    No field has a default: the moe-planner job's spec holds them (PCIe 4.0 x16 ≈ 25 GB/s, 1 TB/s
    device memory, m = 2), so a default here could only drift from the form's.
    """

    bytes_per_param: int
    devices: int
    cache_multiple: float  # m: experts cached per layer = m·k
    hit_rate: float  # expected expert-cache hit rate (LRU from a routing-analysis report, or given)
    sch_hit_rate: float | None  # the look-ahead bound SCH(L, m), when a report gives it
    link_bytes_per_s: float  # host → device
    memory_bytes_per_s: float  # device memory

    def __post_init__(self) -> None:
        if self.cache_multiple < 1:
            raise ValueError("the expert cache must hold at least the active experts: cache_multiple ≥ 1")
        for name in ("hit_rate", "sch_hit_rate"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")


def plan(arch: Architecture, constants: ELConstants, serving: Serving, *, count_shared: bool = False) -> dict[str, Any]:
    """Everything the planner reports for one configuration."""
    A, G, C = arch.activation(count_shared=count_shared), arch.granularity, arch.compute
    el = float(leverage(A, G, C, constants)[0])
    dense_compute = el * C
    expert_bytes = arch.expert_params * serving.bytes_per_param
    routed_bytes = arch.layers * arch.experts * expert_bytes
    # Experts are sharded across devices (expert parallelism); everything else is replicated.
    other_bytes = (arch.total_params - arch.layers * arch.experts * arch.expert_params) * serving.bytes_per_param
    experts_per_device = math.ceil(arch.experts / serving.devices) * arch.layers * expert_bytes
    cached = min(arch.experts, capacity_for(serving.cache_multiple, arch.top_k))
    active_bytes = arch.active_params * serving.bytes_per_param
    read_seconds = active_bytes / serving.memory_bytes_per_s
    result: dict[str, Any] = {
        "total_params": arch.total_params,
        "active_params": arch.active_params,
        "activation_ratio": A,
        "sparsity": 1 / A,
        "granularity": G,
        "training_flops": C,
        "efficiency_leverage": el,
        "dense_equivalent_flops": dense_compute,
        "dense_equivalent_params": dense_params_for(dense_compute),
        "compute_saving": 1 - 1 / el,
        "best_granularity": constants.best_granularity,
        "constants_source": constants.source,
        "bytes_per_expert": expert_bytes,
        "expert_bytes_per_device": experts_per_device,
        "weights_bytes_per_device": other_bytes + experts_per_device,
        "total_weight_bytes": other_bytes + routed_bytes,
        "active_bytes_per_token": active_bytes,
        "flops_per_token": 2.0 * arch.active_params,
        "decode_tokens_per_s_resident": 1.0 / read_seconds,
        "cached_experts_per_layer": cached,
        "offload_device_bytes": other_bytes + arch.layers * cached * expert_bytes,
        "offload_hit_rate": serving.hit_rate,
    }
    g_star = constants.best_granularity
    if g_star is not None:
        # The law's choice at the same A and C (G* depends on neither): the expert width that reaches G*.
        result["best_granularity_d_expert"] = 2 * arch.d_model / g_star
        result["efficiency_leverage_at_best_granularity"] = float(leverage(A, g_star, C, constants)[0])
    rates = {"": serving.hit_rate}
    if serving.sch_hit_rate is not None:
        rates["_sch"] = serving.sch_hit_rate
    for suffix, rate in rates.items():
        misses = arch.misses_per_token(rate)
        transfer = misses * expert_bytes / serving.link_bytes_per_s
        result[f"offload_misses_per_token{suffix}"] = misses
        result[f"offload_bytes_per_token{suffix}"] = misses * expert_bytes
        result[f"offload_transfer_s_per_token{suffix}"] = transfer
        result[f"decode_tokens_per_s_offloaded{suffix}"] = 1.0 / (read_seconds + transfer)
    return result


class ReportError(ValueError):
    """A routing-analysis report that cannot be used; the message says what is wrong."""


def report_hit_rates(report: Mapping[str, Any]) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """The model-level hit-rate curves of a ``routing-analysis`` ``report.json``: policy → [(m, rate)]
    sorted by m, with SCH at the report's middle look-ahead (L = 16 for the defaults); and that L."""
    rows = report.get("hit_rates", {}).get("model") if isinstance(report, Mapping) else None
    if not isinstance(rows, list) or not rows:
        raise ReportError("it is not a routing-analysis report.json (no model-level hit rates)")
    try:
        parsed = [(str(h["policy"]), int(h["window"]), float(h["multiple"]), float(h["rate"])) for h in rows]
    except (KeyError, TypeError, ValueError):
        raise ReportError("its hit rates lack policy, window, multiple or rate") from None
    windows = sorted({w for p, w, _, _ in parsed if p == "sch"})
    if not windows:
        raise ReportError("it holds no SCH hit rates")
    look = middle_window(windows)
    curves: dict[str, list[tuple[float, float]]] = {}
    for policy, window, m, rate in parsed:
        if policy in POLICIES and (policy != "sch" or window == look):
            curves.setdefault(policy, []).append((m, rate))
    if "lru" not in curves:
        raise ReportError("it holds no LRU hit rates")
    return {p: sorted(v) for p, v in curves.items()}, look


def rate_at(curve: list[tuple[float, float]], multiple: float) -> float:
    """The hit rate at ``multiple``, interpolated linearly between the capacities a report measured."""
    m = np.array([x for x, _ in curve])
    if not m[0] - 1e-9 <= multiple <= m[-1] + 1e-9:
        measured = ", ".join(f"{x:g}" for x in m)
        raise ReportError(f"it measured cache capacities m = {measured}; pick a cache multiple within that range")
    return float(np.interp(multiple, m, [r for _, r in curve]))
