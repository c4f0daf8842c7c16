"""Plan an MoE configuration: parameters, the law's inputs (A, G, C), predicted Efficiency
Leverage, the loss-matched dense model, memory per device and expert-offloading traffic.

Parameter counts assume a decoder-only transformer with SwiGLU experts (3·d·d_expert weights
each), 4·d² attention weights per layer and a router of d·E weights, embeddings excluded (as in
the scaling-law papers); training compute C = 6 · active parameters · tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


def plan(
    arch: Architecture,
    constants: ELConstants,
    *,
    count_shared: bool = False,
    bytes_per_param: int = 2,
    devices: int = 1,
    cache_hit_rate: float = 0.0,
) -> dict[str, Any]:
    """Everything the planner reports for one configuration."""
    A, G, C = arch.activation(count_shared=count_shared), arch.granularity, arch.compute
    el = float(leverage(A, G, C, constants)[0])
    dense_compute = el * C
    expert_bytes = arch.expert_params * bytes_per_param
    routed_bytes = arch.layers * arch.experts * expert_bytes
    # Experts are sharded across devices (expert parallelism); everything else is replicated.
    other_bytes = (arch.total_params - arch.layers * arch.experts * arch.expert_params) * bytes_per_param
    misses_per_token = arch.layers * arch.top_k * (1.0 - cache_hit_rate)
    return {
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
        "expert_bytes_per_device": math.ceil(arch.experts / devices) * arch.layers * expert_bytes,
        "weights_bytes_per_device": other_bytes + math.ceil(arch.experts / devices) * arch.layers * expert_bytes,
        "total_weight_bytes": other_bytes + routed_bytes,
        "active_bytes_per_token": arch.active_params * bytes_per_param,
        "offload_misses_per_token": misses_per_token,
        "offload_bytes_per_token": misses_per_token * expert_bytes,
    }
