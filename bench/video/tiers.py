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
        "long_steps": 20,
        "long_seeds": (0, 1, 2),
        "long_modes": ("full", "moga", "local"),
        "long_heldout_clips": 32,
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
        "long_steps": 360,
        "long_seeds": (0, 1, 2),
        "long_modes": ("full", "moga", "local", "random", "blocktopk", "sta"),
        "long_heldout_clips": 64,
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


# --------------------------------------------------------------------- long context (§2d, ≥ 1,000 tokens)

#: The quality study at 1,024 tokens per clip: 16 frames of the card's 32×32 canvas, patch (1, 4, 4) →
#: a (16, 8, 8) token grid. A tiny model (width 32, 2 blocks, 2 heads of 16) at batch 8, so that 3 seeds
#: of every pattern train in about an hour on a third of a CPU core (one step: 0.1–0.26 CPU s, measured).
#: The sparse baselines are sized near MoGA + local's budget at this grid (about a third of the scores):
#: block top-k 5 of 16 blocks (one frame each), STA tiles of 2³ tokens with a window of 5 × 3 × 3 of
#: the 8 × 4 × 4 tiles (45 of 128). The local window (4, 2, 2) and the per-frame branch are §2b's.
LONG_CONTEXT: dict[str, Any] = {
    "frames": 16,
    "size": 32,
    "patch_size": (1, 4, 4),
    "model": {"dim": 32, "depth": 2, "heads": 2, "ffn_width": 128, "num_groups": 4, "window": (4, 2, 2)},
    "batch_size": 8,
    "lr": 1e-3,
    "block_count": 16,
    "block_topk": 5,
    "sta_tile": (2, 2, 2),
    "sta_window": (5, 3, 3),
}
#: Run first, seed-major, so an interrupted study has the comparison the card cares most about; the
#: other patterns of a tier's ``long_modes`` follow, seed-major too.
LONG_CORE_MODES: tuple[str, ...] = ("full", "moga", "local")


def long_context_tokens() -> int:
    """Tokens per clip of the long-context study: frames × (size / patch)²."""
    pt, ph, pw = LONG_CONTEXT["patch_size"]
    return (LONG_CONTEXT["frames"] // pt) * (LONG_CONTEXT["size"] // ph) * (LONG_CONTEXT["size"] // pw)


def long_context_stamp() -> str:
    """Six hex digits of :data:`LONG_CONTEXT`, part of every §2d cache name: a changed model, clip or
    baseline budget trains anew instead of reporting runs of another setup under its name."""
    import hashlib
    import json

    return hashlib.sha1(json.dumps(LONG_CONTEXT, sort_keys=True).encode()).hexdigest()[:6]
