"""What the adapter knows about each supported Hugging Face MoE architecture (transformers 5.x).

Every architecture here stores its routed experts as one fused module (``gate_up_proj[E, 2I, H]``,
``down_proj[E, H, I]``; GPT-OSS transposed, interleaved and with biases) called as
``experts(hidden[T, H], top_k_index[T, k], top_k_weights[T, k])``, next to a router module that
returns ``(logits[T, E], weights[T, k], indices[T, k])``. What differs is naming, the config field
that holds the expert count, the router's scoring rule, and whether the router has a per-expert
additive term (a bias) that can hold a mask in the stock checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mlcore.errors import JobError

#: How a router turns logits into (weights, indices); see ``mlcore.hf.routing``.
RouterRule = Literal["softmax_topk", "deepseek_v2", "deepseek_v3", "gpt_oss", "selection_bias", "detected", "opaque"]


class HFModelError(JobError):
    """A model or checkpoint the adapter cannot handle; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class ArchSpec:
    #: The ``model_type`` in config.json, also our architecture id.
    name: str
    title: str
    #: Config field holding the routed-expert count (aliases resolve through ``attribute_map``).
    experts_field: str
    #: Config field holding the routed experts' intermediate size.
    intermediate_field: str
    #: Attribute of the MoE block holding the router.
    router_attr: str = "gate"
    #: Attributes of the MoE block holding always-on shared experts (never pruned).
    shared_attrs: tuple[str, ...] = ()
    router_rule: RouterRule = "softmax_topk"
    #: Router parameter/buffer that is added to every expert's selection score, so that ``-inf``
    #: there removes an expert from selection inside the stock checkpoint.
    selection_bias: str | None = None
    #: Expert biases exist (GPT-OSS), so a constant "novice" output fits the stock weights.
    expert_biases: bool = False


ARCHITECTURES: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        ArchSpec(
            name="mixtral", title="Mixtral", experts_field="num_local_experts", intermediate_field="intermediate_size"
        ),
        ArchSpec(
            name="qwen2_moe",
            title="Qwen2-MoE",
            experts_field="num_experts",
            intermediate_field="moe_intermediate_size",
            shared_attrs=("shared_expert", "shared_expert_gate"),
        ),
        ArchSpec(
            name="qwen3_moe", title="Qwen3-MoE", experts_field="num_experts", intermediate_field="moe_intermediate_size"
        ),
        ArchSpec(name="olmoe", title="OLMoE", experts_field="num_experts", intermediate_field="intermediate_size"),
        ArchSpec(
            name="deepseek_v2",
            title="DeepSeek-V2",
            experts_field="n_routed_experts",
            intermediate_field="moe_intermediate_size",
            shared_attrs=("shared_experts",),
            router_rule="deepseek_v2",
        ),
        ArchSpec(
            name="deepseek_v3",
            title="DeepSeek-V3",
            experts_field="n_routed_experts",
            intermediate_field="moe_intermediate_size",
            shared_attrs=("shared_experts",),
            router_rule="deepseek_v3",
            selection_bias="e_score_correction_bias",
        ),
        ArchSpec(
            name="gpt_oss",
            title="GPT-OSS",
            experts_field="num_local_experts",
            intermediate_field="intermediate_size",
            router_attr="router",
            router_rule="gpt_oss",
            selection_bias="bias",
            expert_biases=True,
        ),
    )
}

SUPPORTED: tuple[str, ...] = tuple(ARCHITECTURES)


def arch_spec(model_type: str) -> ArchSpec:
    """The spec of a model type: the hand-checked one for the architectures above, otherwise a
    generic one (any MoE type transformers ships; the adapter then finds blocks by structure and
    detects the routing rule, see ``mlcore.hf.discovery``)."""
    spec = ARCHITECTURES.get(model_type)
    if spec is not None:
        return spec
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from mlcore.hf.families import EXPERT_COUNT_FIELDS, MOE_FAMILIES

    if model_type not in CONFIG_MAPPING:
        raise HFModelError(
            f"Model type {model_type!r} is not one transformers ships; MoE Lab never runs a checkpoint's own code. "
            "Use a checkpoint of a model type transformers ships (see docs/hf-support.md)."
        )
    if model_type not in MOE_FAMILIES:
        # A dense type with expert fields pasted into its config would load in stock code with the
        # experts' weights silently unused: the families are those whose model routes to experts.
        raise HFModelError(
            f"{model_type!r} is not a supported MoE architecture: the {model_type} config declares no routed experts "
            f"(transformers' {model_type} model is dense, so expert fields in its config would be ignored). Upload a "
            "mixture-of-experts checkpoint (see docs/hf-support.md for the families)."
        )
    fields = getattr(CONFIG_MAPPING[model_type], "__dataclass_fields__", {})
    experts_field = next((name for name in EXPERT_COUNT_FIELDS if name in fields), "num_experts")
    return ArchSpec(
        name=model_type,
        title=MOE_FAMILIES.get(model_type, model_type),
        experts_field=experts_field,
        intermediate_field="moe_intermediate_size",
        router_rule="detected",
    )


def group_limited(config: Any) -> bool:
    """Whether the router first picks expert groups (DeepSeek's node-limited routing, V2 §2.1.2 /
    V3 §2.1.2, and the families that copy it): experts are grouped by contiguous index blocks, so
    removing one breaks the groups."""
    n_group = getattr(config, "n_group", None) or getattr(config, "num_expert_group", None) or 1
    if config.model_type == "deepseek_v2":
        return getattr(config, "topk_method", "greedy") == "group_limited_greedy" and n_group > 1
    return n_group > 1


_COMMON: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
_DEEPSEEK: dict[str, Any] = {
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "num_key_value_heads": 4,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "kv_lora_rank": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
}
_TINY: dict[str, dict[str, Any]] = {
    "mixtral": {"intermediate_size": 24, "num_local_experts": 8, "num_experts_per_tok": 2},
    # Layer 0 is dense (``mlp_only_layers``), so enumeration must skip it.
    "qwen2_moe": {
        "num_hidden_layers": 3,
        "mlp_only_layers": [0],
        "intermediate_size": 48,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 24,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": False,
    },
    "qwen3_moe": {
        "intermediate_size": 48,
        "moe_intermediate_size": 16,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "head_dim": 8,
    },
    "olmoe": {"intermediate_size": 24, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": False},
    "deepseek_v2": {**_DEEPSEEK, "topk_method": "greedy", "routed_scaling_factor": 1.5},
    "deepseek_v3": {**_DEEPSEEK, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True},
    "gpt_oss": {
        "intermediate_size": 16,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "head_dim": 8,
        "sliding_window": 4,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 8.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 32,
        },
    },
}


def tiny_config(arch: str, **overrides: Any) -> Any:
    """A tiny random-initialisable config of ``arch`` (hidden 32, 8 experts, top-2; DeepSeek and
    Qwen2-MoE with a leading dense layer) for tests and the zoo; ``overrides`` win."""
    from transformers import AutoConfig

    arch_spec(arch)
    return AutoConfig.for_model(arch, **{**_COMMON, **_TINY[arch], **overrides})
