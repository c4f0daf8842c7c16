"""What a compression method decides, and how it is carried out on a model through the adapter.

A :class:`CompressionPlan` names, per MoE layer, the experts that stay; every other expert is
either deleted together with its router row (top-k then re-selects among the survivors), or —
when the plan gives it a vector — kept in the router as a *novice* that outputs that constant.
Merging methods also give new weights for the experts that absorb a cluster.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

from mlcore.errors import JobError
from mlcore.hf.adapter import MoEAdapter


@dataclass
class CompressionPlan:
    method: str
    #: Decoder-layer index → ids of the experts that stay real experts.
    keep: dict[int, list[int]]
    #: Decoder-layer index → pruned expert → its constant output (novice methods only).
    novices: dict[int, dict[int, Tensor]] = field(default_factory=dict)
    #: Decoder-layer index → surviving expert → (gate_up_proj [2I, H], down_proj [H, I]) merged weights.
    merged_weights: dict[int, dict[int, tuple[Tensor, Tensor]]] = field(default_factory=dict)
    #: Decoder-layer index → surviving expert → the experts merged into it (itself included).
    clusters: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    #: [L, E] the ranking score the method used (for the per-layer charts); ``None`` if it has none.
    scores: Tensor | None = None
    #: Renormalise the survivors' top-k weights after deletion (REAP).
    renormalize: bool = False

    def pruned(self, num_experts: int) -> dict[int, list[int]]:
        return {layer: [e for e in range(num_experts) if e not in set(kept)] for layer, kept in self.keep.items()}


def rounded(plan: CompressionPlan, dtype: torch.dtype) -> CompressionPlan:
    """``plan`` with its new values (novice vectors, merged weights) made exact in ``dtype``: a
    float16 checkpoint is computed in float32 and stored back in float16, and the model a job
    evaluates must be the one the file holds."""
    if dtype == torch.float32:
        return plan

    def exact(tensor: Tensor) -> Tensor:
        return tensor.to(dtype).to(tensor.dtype)

    return dataclasses.replace(
        plan,
        novices={layer: {e: exact(v) for e, v in vectors.items()} for layer, vectors in plan.novices.items()},
        merged_weights={
            layer: {e: (exact(gate_up), exact(down)) for e, (gate_up, down) in weights.items()}
            for layer, weights in plan.merged_weights.items()
        },
    )


def experts_to_keep(num_experts: int, top_k: int, *, ratio: float | None = None, keep: int | None = None) -> int:
    """P, the experts kept per layer, from a pruning ratio or an explicit count; a clear error when
    nothing sensible would remain (every expert pruned, or fewer than top-k left)."""
    if keep is None:
        if ratio is None or not 0 <= ratio < 1:
            raise JobError(f"Pruning ratio must be in [0, 1); {ratio} would prune every expert.")
        keep = num_experts - round(ratio * num_experts)
    if keep < 1:
        raise JobError(f"Keeping {keep} experts per layer would prune every expert; keep at least {top_k}.")
    if keep < top_k:
        raise JobError(f"Keep at least top_k = {top_k} experts per layer, not {keep}: the router picks {top_k}.")
    if keep > num_experts:
        raise JobError(f"The model has {num_experts} experts per layer; cannot keep {keep}.")
    return keep


def select(scores: Tensor, keep: int, *, scope: str, top_k: int) -> list[list[int]]:
    """The ``keep`` highest-scoring experts of each layer (``scope="layer"``), or the
    ``keep × L`` highest model-wide (``scope="global"``) with at least ``top_k`` in every layer."""
    num_layers, num_experts = scores.shape
    if scope == "layer":
        return [sorted(torch.topk(scores[layer], keep).indices.tolist()) for layer in range(num_layers)]
    if scope != "global":
        raise ValueError(f"scope must be 'layer' or 'global', not {scope!r}")
    kept = [set(torch.topk(scores[layer], top_k).indices.tolist()) for layer in range(num_layers)]
    budget = keep * num_layers - top_k * num_layers
    order = torch.argsort(scores.flatten(), descending=True, stable=True).tolist()
    for flat in order:
        if budget <= 0:
            break
        layer, expert = divmod(flat, num_experts)
        if expert not in kept[layer]:
            kept[layer].add(expert)
            budget -= 1
    return [sorted(k) for k in kept]


def apply_plan(adapter: MoEAdapter, plan: CompressionPlan) -> None:
    """Carry out ``plan`` on the adapter's model, in place: every layer's part, then the config's."""
    how = removal_of(adapter, plan)
    counts = {info.num_experts for info in adapter.layers}
    with torch.no_grad():
        for info in list(adapter.layers):
            apply_to_layer(adapter, plan, info.index, how)
    finish_plan(adapter, plan, how, counts)
    if how == "slice":
        adapter.refresh()


def removal_of(adapter: MoEAdapter, plan: CompressionPlan) -> str | None:
    """How the plan's deletions are carried out in every layer (``MoEAdapter.removal``), or ``None``
    for a novice plan, which deletes nothing."""
    return None if plan.novices else adapter.removal(plan.keep)


def apply_to_layer(adapter: MoEAdapter, plan: CompressionPlan, index: int, how: str | None) -> None:
    """Decoder layer ``index``'s part of ``plan``: its novices, or its merged weights, REAP's
    renormalisation and its deletions. A model streamed layer by layer
    (:mod:`mlcore.compress.streamed`) calls it while the layer is in memory."""
    if plan.novices:
        if index in plan.novices:
            adapter.replace_with_novices({index: plan.novices[index]})
        return
    experts = adapter.layer(index).experts
    for expert, (gate_up, down) in plan.merged_weights.get(index, {}).items():
        experts.gate_up_proj[expert] = gate_up.to(experts.gate_up_proj.dtype)
        experts.down_proj[expert] = down.to(experts.down_proj.dtype)
    router = adapter.layer(index).router
    if plan.renormalize and hasattr(router, "norm_topk_prob"):
        router.norm_topk_prob = True
    if index in plan.keep and how is not None:
        adapter.remove_in_layer(index, plan.keep[index], how)


def finish_plan(adapter: MoEAdapter, plan: CompressionPlan, how: str | None, counts: set[int]) -> None:
    """What the config holds of a plan once every layer has its part: the expert count after
    slicing (``counts``: the counts before), ``norm_topk_prob`` after REAP."""
    if how == "slice" and plan.keep:
        adapter.set_expert_count(len(next(iter(plan.keep.values()))), counts)
    if plan.renormalize and hasattr(adapter.model.config, "norm_topk_prob"):
        adapter.model.config.norm_topk_prob = True
