"""The MoE layer, every router, the auxiliary losses, routing traces and per-expert statistics.

Networks that use these (video DiT, point transformer, LoRA mixtures) live in their own packages;
the expert computation itself is :func:`kernels.fused_moe`.
"""

from mlcore.moe.group import GroupRouter, group_partition
from mlcore.moe.layer import MoELayer, MoEObserver, moe_layers
from mlcore.moe.losses import group_balance_loss, router_z_loss, routing_contrastive_loss, switch_load_balance_loss
from mlcore.moe.prototype import ActivatedPrototypeRouter, PrototypeRouter
from mlcore.moe.routers import (
    ExpertChoiceRouter,
    ExpertRaceRouter,
    Router,
    Routing,
    TopKSigmoidRouter,
    TopKSoftmaxRouter,
)
from mlcore.moe.sparsemax import LambdaNet, SparsemaxRouter, ld_mole_weights, sparsemax, sparsity_bound, sparsity_loss
from mlcore.moe.stats import ExpertStatistics, collect_expert_statistics
from mlcore.moe.traces import RoutingRecorder, RoutingTrace, TraceError, TraceMetadata, record_routing

__all__ = [
    "ActivatedPrototypeRouter",
    "ExpertChoiceRouter",
    "ExpertRaceRouter",
    "ExpertStatistics",
    "GroupRouter",
    "LambdaNet",
    "MoELayer",
    "MoEObserver",
    "PrototypeRouter",
    "Router",
    "Routing",
    "RoutingRecorder",
    "RoutingTrace",
    "SparsemaxRouter",
    "TopKSigmoidRouter",
    "TopKSoftmaxRouter",
    "TraceError",
    "TraceMetadata",
    "collect_expert_statistics",
    "group_balance_loss",
    "group_partition",
    "ld_mole_weights",
    "moe_layers",
    "record_routing",
    "router_z_loss",
    "routing_contrastive_loss",
    "sparsemax",
    "sparsity_bound",
    "sparsity_loss",
    "switch_load_balance_loss",
]
