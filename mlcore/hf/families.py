"""The MoE causal-LM families of the installed transformers, and a tiny random config of each.

``MOE_FAMILIES`` names every ``model_type`` in transformers' causal-LM auto-mapping whose tiny
random instance (``tiny_family_config``) routes tokens to two or more experts; it was produced by
``mlcore.hf.matrix.discover_moe_families()`` and is committed so that the support matrix and the family tests do not
depend on a slow walk. ``tests/mlcore/hf/test_families.py`` fails when the installed transformers
ships an MoE type missing here. The adapter itself never consults this list: it finds MoE blocks
by structure (:mod:`mlcore.hf.discovery`).
"""

from __future__ import annotations

from typing import Any

#: transformers version the list below was generated against.
GENERATED_WITH = "5.24.0"

#: model_type → display name, every MoE causal-LM type of that transformers.
MOE_FAMILIES: dict[str, str] = {
    "afmoe": "AFMoE",
    "aria_text": "Aria (text)",
    "axk1": "A.X K1",
    "axk2": "A.X K2",
    "bailing_hybrid": "Bailing hybrid",
    "beam": "Beam",
    "cohere2_moe": "Cohere2-MoE",
    "dbrx": "DBRX",
    "deepseek_v2": "DeepSeek-V2",
    "deepseek_v3": "DeepSeek-V3",
    "deepseek_v32": "DeepSeek-V3.2",
    "deepseek_v4": "DeepSeek-V4",
    "doge": "Doge (MoE)",
    "dots1": "dots.llm1",
    "dots3_note_text": "dots3 note (text)",
    "ernie4_5_moe": "ERNIE-4.5-MoE",
    "exaone_moe": "EXAONE-MoE",
    "flex_olmo": "FlexOlmo",
    "flint": "Flint",
    "gemma4_text": "Gemma 4 (text, MoE block)",
    "glm4_moe": "GLM-4-MoE",
    "glm4_moe_lite": "GLM-4-MoE-Lite",
    "glm_moe_dsa": "GLM-MoE-DSA",
    "gpt_oss": "GPT-OSS",
    "granitemoe": "GraniteMoE",
    "granitemoe_swa": "GraniteMoE-SWA",
    "granitemoehybrid": "GraniteMoE-Hybrid",
    "granitemoeshared": "GraniteMoE-Shared",
    "hunyuan_v1_moe": "HunYuan-V1-MoE",
    "hy_v3": "HY-V3",
    "hy_v4": "HY-V4",
    "inkling2_loop_text": "Inkling2 loop (text)",
    "inkling2_text": "Inkling2 (text)",
    "inkling_text": "Inkling (text)",
    "jamba": "Jamba",
    "jetmoe": "JetMoE",
    "kimi_linear": "Kimi Linear",
    "kolibri1": "Kolibri1",
    "laguna": "Laguna",
    "lara_mini": "Lara mini",
    "lfm2_moe": "LFM2-MoE",
    "llama4_text": "Llama 4 (text)",
    "longcat_flash": "LongCat-Flash",
    "mellum": "Mellum",
    "mimo_v2_flash": "MiMo-V2-Flash",
    "minimax": "MiniMax",
    "minimax_m2": "MiniMax-M2",
    "minimax_m3_vl_text": "MiniMax-M3-VL (text)",
    "mixtral": "Mixtral",
    "nemotron_h": "Nemotron-H",
    "olmoe": "OLMoE",
    "phimoe": "PhiMoE",
    "qwen2_moe": "Qwen2-MoE",
    "qwen3_5_moe_text": "Qwen3.5-MoE (text)",
    "qwen3_moe": "Qwen3-MoE",
    "qwen3_next": "Qwen3-Next",
    "qwen4_exp_text": "Qwen4-exp (text)",
    "sarvam_mla": "Sarvam MLA",
    "sarvam_moe": "Sarvam-MoE",
    "solar_open": "Solar Open",
    "zaya": "ZAYA",
}

#: Config fields that hold the routed-expert count, by family convention.
EXPERT_COUNT_FIELDS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
)
#: Config fields that hold top-k.
TOP_K_FIELDS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k", "top_k_experts", "moe_top_k")

#: The sizes every tiny config gets where the config has the field (hidden 32, 8 experts, top-2,
#: 3 layers so that families with a leading dense layer still have two MoE layers).
_SIZES: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "ffn_hidden_size": 48,
    "moe_intermediate_size": 16,
    "expert_ffn_hidden_size": 16,
    "shared_expert_intermediate_size": 24,
    "moe_shared_expert_intermediate_size": 24,
    "shared_experts_intermediate_size": 24,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 128,
    # Inkling2's head has this many rows and its checkpoints pad them to vocab_size on save; left at
    # the default (200058) the tiny head is larger than the padded one and cannot be saved.
    "unpadded_vocab_size": 120,
    "num_hidden_layers": 3,
    "num_layers": 3,
    "max_position_embeddings": 256,
    "num_experts": 8,
    "num_local_experts": 8,
    "n_routed_experts": 8,
    "moe_num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "moe_k": 2,
    "num_experts_per_token": 2,
    "top_k_experts": 2,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
    "n_group": 1,
    "num_expert_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "moe_layer_start_index": 1,
    "sliding_window": 16,
    "router_hidden_size": 16,
    "zero_expert_num": 2,
}
#: Per-layer lists are rebuilt by the config from ``num_hidden_layers`` when left out.
_PER_LAYER = ("layer_types", "mlp_only_layers", "moe_layers", "layers_block_type", "mlp_layer_types")
#: What a family's tiny config needs beyond ``_SIZES`` (its own validators and quirks).
_FAMILY: dict[str, dict[str, Any]] = {
    "beam": {"mlp_layer_types": ["dense", "sparse", "sparse"]},
    "dbrx": {
        "d_model": 32,
        "n_heads": 4,
        "n_layers": 2,
        "max_seq_len": 256,
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0},
        "ffn_config": {"ffn_hidden_size": 16, "moe_num_experts": 8, "moe_top_k": 2},
    },
    # One hash-routed layer (fixed token → expert table) before two learned top-k routers.
    "deepseek_v4": {"mlp_layer_types": ["hash_moe", "moe", "moe"]},
    "doge": {"is_moe": True, "num_experts": 16, "num_experts_per_tok": 2},
    "dots1": {"n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "num_key_value_heads": 2},
    "gemma4_text": {
        "enable_moe_block": True,
        "moe_intermediate_size": 16,
        "vocab_size_per_layer_input": 128,
        "hidden_size_per_layer_input": 8,
    },
    # DSA indexers that select fewer keys than the test's 12 tokens, and a layer that reuses the
    # previous layer's top-k: the sequential pass must carry that top-k for the logits to match.
    "glm_moe_dsa": {"index_topk": 4, "indexer_types": ["full", "full", "shared"]},
    "granitemoehybrid": {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_expand": 2},
    "hy_v4": {"index_topk": 4, "indexer_types": ["full", "full", "shared"]},
    "lfm2_moe": {"num_dense_layers": 1, "layer_types": ["full_attention", "conv", "full_attention"]},
    "qwen2_moe": {"mlp_only_layers": [0], "norm_topk_prob": False},
    "zaya": {"num_experts_per_tok": 1},
}


def tiny_family_config(model_type: str, **overrides: Any) -> Any:
    """A tiny random-initialisable config of any family in ``MOE_FAMILIES`` (hidden 32, 8 experts,
    top-2 where the family allows it); ``overrides`` win."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    defaults = cls().to_dict()
    values = {name: value for name, value in _SIZES.items() if name in defaults}
    values.update({name: None for name in _PER_LAYER if isinstance(defaults.get(name), list)})
    if "kv_lora_rank" in defaults:
        # Multi-head latent attention has one key/value head per query head.
        values["num_key_value_heads"] = values["num_attention_heads"]
    values.update(tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    values.update(_FAMILY.get(model_type, {}))
    values.update(overrides)
    return cls(**values)


def expert_count(config: Any) -> int | None:
    """The routed-expert count a config declares (``None`` when it declares none)."""
    for source in (config, getattr(config, "ffn_config", None)):
        for name in EXPERT_COUNT_FIELDS:
            value = getattr(source, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None
