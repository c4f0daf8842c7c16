"""MoE Lab novice experts for stock transformers: shipped inside a compressed checkpoint.

This file is copied next to config.json when MoE Lab saves a checkpoint whose experts were replaced
by constant "novices" (MoNE). The checkpoint's ``model_type`` is ``moelab-sidecar``, which no
library ships, so a plain load fails loudly instead of computing a different model; with
``trust_remote_code=True`` transformers imports this file, which loads the original architecture
(``BASE_MODEL_TYPE``) and applies the novices from ``moelab_experts.safetensors``:

    y = Σ_{e ∈ top-k(x)} g_e(x) · F_e(x),   F_e = E_e for kept experts, the constant c_e for novices.

It imports only torch, safetensors and transformers (never MoE Lab).
"""

from __future__ import annotations

import os
import types
from typing import Any

import torch
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

BASE_MODEL_TYPE = "mixtral"
MODEL_TYPE = "moelab-sidecar"
SIDECAR = "moelab_experts.safetensors"

_BaseConfig = CONFIG_MAPPING[BASE_MODEL_TYPE]
_BaseModel = MODEL_FOR_CAUSAL_LM_MAPPING[_BaseConfig]


class MoELabSidecarConfig(_BaseConfig):
    model_type = MODEL_TYPE


class MoELabSidecarForCausalLM(_BaseModel):
    config_class = MoELabSidecarConfig

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        apply_novices(model, str(pretrained_model_name_or_path))
        return model


# The checkpoint's tensors are stored as the base architecture stores them (per-expert keys that
# transformers fuses on load): reuse its conversions for this model type, and only for it. The
# inner base model shares this config; a mapping also found through this class's name would be
# applied once more there, and a renaming that is not idempotent (Laguna's ``mlp.shared_expert.``
# → ``mlp.shared_experts.``, a regex) would then load the shared experts under wrong keys.
_mapping = get_checkpoint_conversion_mapping(BASE_MODEL_TYPE)
if _mapping is not None:
    register_checkpoint_conversion_mapping(MODEL_TYPE, _mapping, overwrite=True)


def apply_novices(model: Any, location: str) -> None:
    from safetensors import safe_open

    path = os.path.join(location, SIDECAR)
    if not os.path.isfile(path):
        from transformers.utils import cached_file

        path = cached_file(location, SIDECAR)
    modules = model.config.moelab_experts_modules
    with safe_open(path, framework="pt") as sidecar:
        names = set(sidecar.keys())
        for layer, module_name in modules.items():
            prefix = f"layers.{layer}."
            if prefix + "masked" in names and bool(sidecar.get_tensor(prefix + "masked").any()):
                raise ValueError(f"{location}: layer {layer} masks experts, which this file cannot apply.")
            if prefix + "novice_ids" not in names:
                continue
            experts = model.get_submodule(module_name)
            ids = sidecar.get_tensor(prefix + "novice_ids")
            vectors = sidecar.get_tensor(prefix + "novice_vectors")
            weight = experts.down_proj
            mask = torch.zeros(weight.shape[0], dtype=torch.bool, device=weight.device)
            table = torch.zeros(weight.shape[0], vectors.shape[-1], dtype=weight.dtype, device=weight.device)
            mask[ids] = True
            table[ids] = vectors.to(table.device, table.dtype)
            experts.moelab_novice_mask, experts.moelab_novice_vectors = mask, table
            experts.forward = types.MethodType(_forward_with_novices, experts)


def _forward_with_novices(self: Any, hidden: Any, top_k_index: Any, top_k_weights: Any, *args: Any) -> Any:
    novice = self.moelab_novice_mask.to(top_k_index.device)[top_k_index]
    vectors = self.moelab_novice_vectors.to(hidden.device)[top_k_index]
    routed = type(self).forward(self, hidden, top_k_index, top_k_weights.masked_fill(novice, 0.0), *args)
    constant = (top_k_weights.masked_fill(~novice, 0.0).unsqueeze(-1) * vectors).sum(dim=1)
    return routed + constant.to(routed.dtype)
