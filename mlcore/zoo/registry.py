"""The zoo's models, by name. Later issues add their trained models here."""

from __future__ import annotations

from mlcore.catalog import BuiltinItem

MODELS: tuple[BuiltinItem, ...] = (
    BuiltinItem(
        name="moe-lm-tiny",
        kind="hf-moe-lm",
        title="Tiny Qwen3-MoE language model",
        description=(
            "Qwen3MoeForCausalLM, d=128, 4 layers, 16 experts top-2, expert FFN 256, context 128, byte-level BPE "
            "(2048); trained on Shakespeare, Python docs and Python source (python -m mlcore.zoo train moe-lm-tiny)."
        ),
        builder="mlcore.zoo.committed:build_moe_lm_tiny",
        card={"architecture": "qwen3_moe", "experts": 16, "top_k": 2, "recipe": "moe-lm-tiny"},
        stamp="mlcore/zoo/checkpoints/moe-lm-tiny/manifest.json",
    ),
    BuiltinItem(
        name="moe-lm-olmoe",
        kind="hf-moe-lm",
        title="Tiny OLMoE language model",
        description=(
            "OlmoeForCausalLM, d=96, 4 layers, 32 experts top-4, expert FFN 128, context 128, byte-level BPE "
            "(2048); same corpora (python -m mlcore.zoo train moe-lm-olmoe)."
        ),
        builder="mlcore.zoo.committed:build_moe_lm_olmoe",
        card={"architecture": "olmoe", "experts": 32, "top_k": 4, "recipe": "moe-lm-olmoe"},
        stamp="mlcore/zoo/checkpoints/moe-lm-olmoe/manifest.json",
    ),
)
