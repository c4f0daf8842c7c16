"""NAEE expert pruning by enumeration (Lu et al., "Not All Experts are Equal", ACL 2024, §3.1).

Per layer, among all C(E, P) subsets S of P experts, keep the one whose layer output is closest to
the unpruned layer's on calibration inputs X:

    S* = argmin_S ‖F(X) − F_S(X)‖_F,   F_S(x) = Σ_{e ∈ top-k_S(x)} g^S_e(x) · E_e(x)

where g^S is the router's softmax over the rows of S only (the other rows are deleted, as in the
pruned model) and, if the model renormalises its top-k weights, renormalised. Enumeration is only
practical for small expert counts; beyond :data:`MAX_SUBSETS` a clear error says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from mlcore.compress.calibrate import Calibration
from mlcore.compress.plan import CompressionPlan
from mlcore.errors import JobError
from mlcore.hf.adapter import MoEAdapter

MAX_SUBSETS = 20_000
SUBSET_BATCH = 64
#: Layer-input rows the enumeration scores every subset on: the cost grows with C(E, P) × rows.
CALIBRATION_ROWS = 1024


def expert_outputs(experts: Any, hidden: Tensor, num_experts: int) -> Tensor:
    """[E, T, H] every expert's un-gated output E_e(x) on every row of ``hidden``."""
    ones = torch.ones(len(hidden), 1, dtype=hidden.dtype)
    return torch.stack(
        [experts.forward(hidden, torch.full((len(hidden), 1), e, dtype=torch.long), ones) for e in range(num_experts)]
    )


def subset_errors(
    logits: Tensor, outputs: Tensor, subsets: Tensor, *, top_k: int, renormalize: bool, reference: Tensor
) -> Tensor:
    """‖F(X) − F_S(X)‖²_F for each subset row of ``subsets`` [B, P] (expert ids)."""
    batch, tokens = len(subsets), logits.shape[0]
    local = logits[:, subsets].permute(1, 0, 2)  # [B, T, P]
    probs = torch.softmax(local.float(), dim=-1)
    weights, slots = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    ids = torch.gather(subsets[:, None, :].expand(batch, tokens, -1), 2, slots)  # [B, T, k]
    per_token = outputs.permute(1, 0, 2)  # [T, E, H]
    rows = torch.arange(tokens)[None, :, None].expand_as(ids)
    out = (weights.unsqueeze(-1) * per_token[rows, ids]).sum(dim=2)  # [B, T, H]
    return (out - reference).square().sum(dim=(1, 2))


def check_enumerable(num_experts: int, keep: int) -> None:
    count = math.comb(num_experts, keep)
    if count > MAX_SUBSETS:
        raise JobError(
            f"NAEE enumerates C({num_experts}, {keep}) = {count} expert subsets per layer, more than {MAX_SUBSETS}; "
            "choose another method for this model."
        )


def plan_naee(
    adapter: MoEAdapter, calibration: Calibration, keep: int, *, on_layer: Callable[[int], Any] | None = None
) -> CompressionPlan:
    """NAEE's plan from the calibration's sampled layer inputs (``calibrate(keep_inputs=...)``)."""
    num_experts, top_k = calibration.num_experts, calibration.top_k
    check_enumerable(num_experts, keep)
    if adapter.spec.router_rule != "softmax_topk":
        raise JobError(f"NAEE here supports softmax top-k routers; {adapter.spec.title} routes differently.")
    if not calibration.layer_inputs:
        raise ValueError("NAEE needs the layers' inputs: calibrate with keep_inputs > 0")
    subsets = torch.tensor(list(itertools.combinations(range(num_experts), keep)), dtype=torch.long)
    kept = {}
    for position, layer in enumerate(calibration.layers):
        info = adapter.layer(layer)
        hidden = calibration.layer_inputs[layer].to(info.router.weight.dtype)
        renormalize = bool(getattr(info.router, "norm_topk_prob", True))
        with torch.inference_mode():
            logits = info.router(hidden)[0].float()
            outputs = expert_outputs(info.experts, hidden, num_experts).float()
            reference = _layer_output(logits, outputs, top_k=top_k, renormalize=renormalize)
            scores = torch.cat(
                [
                    subset_errors(logits, outputs, chunk, top_k=top_k, renormalize=renormalize, reference=reference)
                    for chunk in subsets.split(SUBSET_BATCH)
                ]
            )
        best = int(torch.argmin(scores))
        kept[layer] = subsets[best].tolist()
        if on_layer is not None:
            on_layer(position)
    return CompressionPlan("naee", keep=kept)


def _layer_output(logits: Tensor, outputs: Tensor, *, top_k: int, renormalize: bool) -> Tensor:
    """F(X), the unpruned layer's routed output, [1, T, H]."""
    probs = torch.softmax(logits, dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    rows = torch.arange(len(logits))[:, None].expand_as(ids)
    return (weights.unsqueeze(-1) * outputs.permute(1, 0, 2)[rows, ids]).sum(dim=1)[None]
