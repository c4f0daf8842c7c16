"""The support matrix page and the family walk, generated from the adapter on tiny random models.

``support_markdown()`` builds a tiny random model of every family in
``mlcore.hf.families.MOE_FAMILIES``, adapts it and renders one row per family (refused families get
their structural reason). tests/mlcore/hf/test_families.py checks each row against the adapter on
that family. Regenerate docs/hf-support.md's table with ``python -m mlcore.hf.matrix`` (about a
minute); re-walk transformers with ``discover_moe_families()`` when it is upgraded.
"""

from __future__ import annotations

from typing import Any

from mlcore.hf.adapter import MoEAdapter, adapt
from mlcore.hf.architectures import group_limited
from mlcore.hf.discovery import find_moe_blocks
from mlcore.hf.families import MOE_FAMILIES, expert_count, tiny_family_config
from mlcore.hf.support import MASK_ROUTES, REFUSED, family_row, header


def describe(adapter: MoEAdapter) -> dict[str, str]:
    """The routing, mask and shared-expert columns of an adapted model's row."""
    config = adapter.model.config
    first = adapter.layers[0]
    parts = [f"top-{first.top_k} of {first.num_experts}"]
    if adapter.spec.router_rule in ("deepseek_v3", "selection_bias"):
        parts.append("per-expert selection bias")
    elif adapter.spec.router_rule in ("softmax_topk", "gpt_oss", "deepseek_v2"):
        parts.append("softmax")
    else:
        parts.append("own rule")
    if group_limited(config):
        parts.append("group-limited")
    dense = sorted(set(range(int(getattr(config, "num_hidden_layers", 0) or 0))) - {i.index for i in adapter.layers})
    if dense:
        parts.append(f"dense layers {dense}")
    shared = ", ".join(f"`{name}`" for name in first.block.shared) if first.num_shared_experts else "none"
    return {"routing": ", ".join(parts), "masks": MASK_ROUTES[adapter.spec.router_rule], "shared": shared}


def support_markdown() -> str:
    """The matrix for every family, and the refused families with their reasons, as Markdown."""
    import torch
    from transformers import AutoModelForCausalLM

    rows = header()
    for model_type in sorted(MOE_FAMILIES):
        if model_type in REFUSED:
            continue
        torch.manual_seed(0)
        adapter = adapt(AutoModelForCausalLM.from_config(tiny_family_config(model_type)))
        rows.append(family_row(model_type, MOE_FAMILIES[model_type], adapter.support(), describe(adapter)))
    rows += ["", "| refused family | `model_type` | structural reason | blocks |", "|---|---|---|---|"]
    for model_type in sorted(REFUSED):
        reason, blocks = REFUSED[model_type]
        rows.append(f"| {MOE_FAMILIES[model_type]} | `{model_type}` | {reason} | {blocks} |")
    return "\n".join(rows) + "\n"


def discover_moe_families(*, seed: int = 0) -> dict[str, int]:
    """model_type → experts that received tokens, for every causal-LM type of the installed
    transformers whose tiny random instance routes tokens to two or more experts (slow: builds
    every candidate; ``MOE_FAMILIES`` is its committed result)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = {}
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        try:
            config = tiny_family_config(model_type)
        except Exception:
            continue
        if (expert_count(config) or 0) < 2:
            continue
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
        used: set[int] = set()
        handles = [
            block.experts.register_forward_pre_hook(
                lambda m, args, kw, seen=used: seen.update(_ids(args, kw)), with_kwargs=True
            )
            for block in find_moe_blocks(model, strict=False)
        ]
        with torch.no_grad():
            model(torch.randint(3, 128, (2, 16)), use_cache=False)
        for handle in handles:
            handle.remove()
        if len(used) >= 2:
            found[model_type] = len(used)
    return found


def _ids(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
    index = args[1] if len(args) > 1 else kwargs.get("top_k_index")
    return [] if index is None else index.flatten().tolist()


if __name__ == "__main__":
    print(support_markdown(), end="")
