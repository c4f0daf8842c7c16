"""Router masks: take experts out of selection without changing tensor shapes.

A masked expert is one whose selection score is ``-inf`` before top-k, so that it is never
chosen and, for softmax routers, receives no probability mass. For a router that is not
group-limited this is exactly equivalent to slicing the expert out (softmax over the kept experts,
then top-k), which a test checks.

Where the router has a per-expert additive selection term (GPT-OSS's router ``bias``,
DeepSeek-V3's ``e_score_correction_bias``, V3 §2.1.2 eq. 16) the mask is written there as
``-inf``, so the stock checkpoint carries it. Other routers (Mixtral, Qwen2/3-MoE, OLMoE,
DeepSeek-V2) compute logits with a bias-free linear layer, so the mask is applied by a forward
hook that recomputes the router's decision from its logits with the rule below, which mirrors the
transformers 5.x router code, and is saved in the adapter's sidecar file.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from mlcore.hf.architectures import ArchSpec, HFModelError

MASK_ATTR = "moelab_mask"
_HOOK_ATTR = "moelab_mask_hook"


def softmax_topk(router: nn.Module, logits: Tensor, masked: Tensor) -> tuple[Tensor, Tensor]:
    """Mixtral / Qwen2-MoE / Qwen3-MoE / OLMoE: p = softmax(logits), top-k of p, renormalised
    when ``norm_topk_prob`` (Mixtral always renormalises)."""
    probs = torch.softmax(logits.float().masked_fill(masked, float("-inf")), dim=-1)
    weights, indices = torch.topk(probs, router.top_k, dim=-1)
    if getattr(router, "norm_topk_prob", True):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, indices


def deepseek_v2(router: nn.Module, logits: Tensor, masked: Tensor) -> tuple[Tensor, Tensor]:
    """DeepSeek-V2 (§2.1.2): s = softmax(logits); greedy top-k, or device-limited: keep the
    ``topk_group`` groups with the highest max score, top-k inside them; then × routed_scaling_factor."""
    scores = logits.float().masked_fill(masked, float("-inf")).softmax(dim=-1, dtype=torch.float32)
    if router.topk_method == "group_limited_greedy":
        tokens, experts = scores.shape
        group_scores = scores.view(tokens, router.num_group, -1).max(dim=-1).values
        group_idx = torch.topk(group_scores, k=router.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, -1, experts // router.num_group).reshape(tokens, experts)
        scores = scores.masked_fill(~score_mask.bool(), 0.0)
    weights, indices = torch.topk(scores, k=router.top_k, dim=-1, sorted=False)
    return weights * router.routed_scaling_factor, indices


#: The routers' top-k selection re-implemented from logits, by ``ArchSpec.router_rule``. Routers with
#: a selection bias (DeepSeek-V3, GPT-OSS) are masked through that bias instead (``apply_mask``).
SELECTION_RULES = {"softmax_topk": softmax_topk, "deepseek_v2": deepseek_v2}


def router_mask(router: nn.Module) -> Tensor | None:
    return getattr(router, MASK_ATTR, None)


def check_capacity(spec: ArchSpec, router: nn.Module, masked: Tensor, *, layer: int, group_limited: bool) -> None:
    """Refuse a mask that would leave top-k (or the group-limited selection) without enough live
    experts: the router would then pick masked experts."""
    live = int((~masked).sum())
    if live < router.top_k:
        raise HFModelError(f"Layer {layer}: keep at least top_k={router.top_k} experts, not {live}.")
    if not group_limited:
        return
    per_group = (~masked).view(router.num_group, -1).sum(dim=-1)
    # V3 scores a group by the sum of its two best experts, so a group with fewer than two live
    # experts scores -inf; V2 scores by the best one.
    needed = 2 if spec.router_rule == "deepseek_v3" else 1
    usable = sorted(int(c) for c in per_group if c >= needed)
    if len(usable) < router.topk_group or sum(usable[: router.topk_group]) < router.top_k:
        raise HFModelError(
            f"Layer {layer}: with group-limited routing every choice of topk_group={router.topk_group} groups must "
            f"hold top_k={router.top_k} live experts (live per group: {per_group.tolist()}); keep more per group."
        )


def apply_mask(spec: ArchSpec, router: nn.Module, masked: Tensor, *, bias: Tensor | None = None) -> None:
    """Take the experts where ``masked`` is true out of the router's selection (see module docstring);
    ``bias``: the per-expert selection term discovery found, for families without a hand-checked spec."""
    setattr(router, MASK_ATTR, masked.clone())
    if bias is None and spec.selection_bias is not None:
        bias = getattr(router, spec.selection_bias)
    if bias is not None:
        with torch.no_grad():
            bias.masked_fill_(masked.to(bias.device), float("-inf"))
        return
    if getattr(router, _HOOK_ATTR, None) is None:
        rule = SELECTION_RULES[spec.router_rule]
        # Prepended so that capture hooks registered earlier still see the masked decision.
        handle = router.register_forward_hook(_masked_decision(rule), prepend=True)
        setattr(router, _HOOK_ATTR, handle)


def _masked_decision(rule: Any) -> Any:
    def hook(router: nn.Module, args: tuple[Any, ...], output: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, ...]:
        logits, stock_weights, _ = output
        masked = getattr(router, MASK_ATTR).to(logits.device)
        weights, indices = rule(router, logits, masked)
        return logits.masked_fill(masked, float("-inf")), weights.to(stock_weights.dtype), indices

    return hook


def slice_mask(router: nn.Module, keep: Tensor) -> None:
    """Carry a router's mask along when its experts are sliced to ``keep``."""
    masked = router_mask(router)
    if masked is not None:
        setattr(router, MASK_ATTR, masked[keep.to(masked.device)].clone())
