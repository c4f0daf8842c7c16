"""The video study's tiers, configurations and cache names."""

from __future__ import annotations

from typing import Any

from bench.common import bench_device


def training_device(device: str | None = None) -> str:
    """The device of the quality and ProMoE runs: ``device``, else ``$MOELAB_BENCH_DEVICE``, else cpu."""
    return str(bench_device(device))


TIERS: dict[str, dict[str, Any]] = {
    "quick": {
        "tokens": (4096, 8192, 16384),
        "quality_steps": 150,
        "quality_seeds": (0, 1, 2),
        "eval_clips": 40,
        "sample_steps": 12,
        "promoe_steps": 150,
        "promoe_seeds": (0, 1, 2),
        "judge_steps": 300,
    },
    "full": {
        "tokens": (4096, 8192, 16384, 32768, 65536),
        "quality_steps": 1500,
        "quality_seeds": (0, 1, 2),
        "eval_clips": 200,
        "sample_steps": 20,
        "promoe_steps": 1500,
        "promoe_seeds": (0, 1, 2),
        "judge_steps": 1500,
    },
}

PROMOE_CONFIGS: dict[str, dict[str, Any]] = {
    "dense": {"ffn": "dense"},
    "DiT-MoE (top-2 + shared, Switch balance)": {"ffn": "moe"},
    "EC-DiT (expert choice, capacity 2T/E + shared)": {"ffn": "ec"},
    "ProMoE": {"ffn": "promoe"},
    "ProMoE − conditional routing": {"ffn": "promoe", "promoe_conditional": False},
    "ProMoE − contrastive loss": {"ffn": "promoe", "contrastive_weight": 0.0},
    "Race-DiT (global top-k + shared)": {"ffn": "race"},
    "ProMoE − identity → sigmoid": {"ffn": "promoe", "promoe_activation": "sigmoid"},
    "ProMoE − identity → softmax": {"ffn": "promoe", "promoe_activation": "softmax"},
}
#: The quality study's attention patterns: the paper's three, then the card's baselines.
QUALITY_MODES: tuple[str, ...] = ("full", "moga", "local", "random", "blocktopk", "sta")
SMALL = {"dim": 64, "depth": 4, "heads": 4, "ffn_width": 256, "num_groups": 4, "window": (4, 2, 2)}


#: Cache-name suffixes of the ablations, found by a word of the label (the first match wins).
_ABLATION_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("conditional", "-nocond"),
    ("contrastive", "-norcl"),
    ("sigmoid", "-sigmoid"),
    ("softmax", "-softmax"),
)


def _promoe_slug(label: str) -> str:
    """The cache name of a configuration: its label's first word, plus the ablation's suffix
    (``ProMoE − contrastive loss`` → ``promoe-norcl``). Cached results depend on these names."""
    suffix = next((s for word, s in _ABLATION_SUFFIXES if word in label), "")
    return label.split(" ")[0].lower() + suffix


# ------------------------------------------------------------------------- longer budget (opt-in)

#: The opt-in longer study: 4× the quick tier's steps, the quick tier's evaluation. Run by
#: ``python -m bench.video extend`` (cached like the rest); the report shows whatever is cached.
EXTENDED_STEPS = 600
EXTENDED_SEEDS = (0, 1, 2)
