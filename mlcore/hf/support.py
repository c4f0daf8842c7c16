"""The support matrix (architecture × operation) that docs/hf-support.md publishes.

``support_for(config)`` is what ``MoEAdapter.support()`` answers; ``support_markdown()`` renders the
table for every architecture and routing variant, and a test checks that the page holds exactly
that table, so the page cannot drift from the code.
"""

from __future__ import annotations

from typing import Any

from mlcore.hf.architectures import ARCHITECTURES, group_limited, tiny_config

OPERATIONS: tuple[str, ...] = (
    "enumerate_layers",
    "capture_routing",
    "capture_expert_outputs",
    "remove_experts",
    "replace_with_novices",
    "save_and_reload",
    "layer_by_layer_load",
)

#: (row label, architecture, config overrides): each architecture as shipped by ``tiny_config``,
#: plus the group-limited routing variants where removal falls back to masks.
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *((spec.title, name, {}) for name, spec in ARCHITECTURES.items()),
    (
        "DeepSeek-V2, group_limited_greedy",
        "deepseek_v2",
        {"topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 1},
    ),
    ("DeepSeek-V3, n_group > 1", "deepseek_v3", {"n_group": 2, "topk_group": 1}),
)


def support_for(config: Any) -> dict[str, str]:
    """Operation → "yes" | "masked" | "no" for a model with this config."""
    result = dict.fromkeys(OPERATIONS, "yes")
    if group_limited(config):
        result["remove_experts"] = "masked"
    return result


def support_markdown() -> str:
    """The matrix and the per-architecture persistence table, as Markdown."""
    header = "| architecture | " + " | ".join(f"`{op}`" for op in OPERATIONS) + " |"
    rows = [header, "|" + "---|" * (len(OPERATIONS) + 1)]
    for label, arch, overrides in VARIANTS:
        support = support_for(tiny_config(arch, **overrides))
        rows.append(f"| {label} | " + " | ".join(support[op] for op in OPERATIONS) + " |")
    rows += ["", "| architecture | `model_type` | router masks persist in | novices persist in | shared experts |"]
    rows.append("|---|---|---|---|---|")
    for name, spec in ARCHITECTURES.items():
        masks = f"stock checkpoint (`{spec.selection_bias}` = -inf)" if spec.selection_bias else "sidecar"
        novices = "stock checkpoint (`down_proj_bias`)" if spec.expert_biases else "sidecar"
        shared = ", ".join(f"`{attr}`" for attr in spec.shared_attrs) or "none"
        rows.append(f"| {spec.title} | `{name}` | {masks} | {novices} | {shared} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(support_markdown(), end="")
