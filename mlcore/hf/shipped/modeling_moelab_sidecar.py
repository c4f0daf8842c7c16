"""MoE Lab novice experts for stock transformers: shipped inside a compressed checkpoint.

This file is copied next to config.json when MoE Lab saves a checkpoint whose experts were replaced
by constant "novices" (MoNE). The checkpoint's ``model_type`` is ``moelab-sidecar``, which no
library ships, so a plain load fails loudly instead of computing a different model; with
``trust_remote_code=True`` transformers imports this file, which loads the original architecture
(``BASE_MODEL_TYPE``) and applies the novices from ``moelab_experts.safetensors``:

    y = Σ_{e ∈ top-k(x)} g_e(x) · F_e(x),   F_e = E_e for kept experts, the constant c_e for novices.

The novices' weights are not in the checkpoint: in each layer listed in the config's
``moelab_stored_experts`` (decoder layer → K), the experts module stores only its K kept experts,
slot j holding expert ``kept[j]`` of the sidecar. The model is built with those K experts only
(nothing is allocated for the novices, so memory is the kept experts'); the router keeps its E
rows. At run time each top-k choice is sent to its expert's slot, and a novice's to slot 0 with
gate 0 (it adds nothing) while g_e · c_e is added. A layer without ``kept`` stores all E experts.

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
#: Attributes in which experts modules cache their expert count (views, one-hots, grouped matmuls).
COUNT_ATTRS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts", "n_experts")

_BaseConfig = CONFIG_MAPPING[BASE_MODEL_TYPE]
_BaseModel = MODEL_FOR_CAUSAL_LM_MAPPING[_BaseConfig]


class MoELabSidecarConfig(_BaseConfig):
    model_type = MODEL_TYPE


class MoELabSidecarForCausalLM(_BaseModel):
    config_class = MoELabSidecarConfig

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        allocate_stored_experts(self, config)

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


def allocate_stored_experts(model: Any, config: Any) -> None:
    """Shrink every stacked expert tensor [E, ...] of a compact layer to [K, ...] before the weights
    load (on the meta device inside ``from_pretrained``: nothing is allocated for the novices)."""
    modules = getattr(config, "moelab_experts_modules", None) or {}
    for layer, count in (getattr(config, "moelab_stored_experts", None) or {}).items():
        experts = model.get_submodule(modules[layer])
        total = next(experts.parameters(recurse=False)).shape[0]
        for name, param in list(experts.named_parameters(recurse=False)):
            if param.shape[0] == total:
                empty = torch.empty((int(count), *param.shape[1:]), dtype=param.dtype, device=param.device)
                setattr(experts, name, torch.nn.Parameter(empty, requires_grad=param.requires_grad))
        for attr in COUNT_ATTRS:
            if getattr(experts, attr, None) == total and not isinstance(getattr(experts, attr), bool):
                setattr(experts, attr, int(count))


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
            weight = next(experts.parameters(recurse=False))
            stored = weight.shape[0]
            if prefix + "kept" in names:
                kept = sidecar.get_tensor(prefix + "kept").to(torch.long)
                if kept.numel() != stored:
                    raise ValueError(f"{location}: layer {layer} stores {stored} experts, its sidecar {len(kept)}.")
                total = stored + ids.numel()
                slots = torch.zeros(total, dtype=torch.long)
                slots[kept] = torch.arange(stored)
            else:
                total = stored
                slots = torch.arange(total)
            mask = torch.zeros(total, dtype=torch.bool)
            table = torch.zeros(total, vectors.shape[-1], dtype=weight.dtype)
            mask[ids] = True
            table[ids] = vectors.to(table.dtype)
            experts.moelab_novice_slots = slots.to(weight.device)
            experts.moelab_novice_mask = mask.to(weight.device)
            experts.moelab_novice_vectors = table.to(weight.device)
            experts.forward = types.MethodType(_forward_with_novices, experts)


def _forward_with_novices(self: Any, *args: Any, **kwargs: Any) -> Any:
    hidden = _argument(args, kwargs, 0, ("hidden_states",))
    index = _argument(args, kwargs, 1, ("top_k_index", "router_indices"))
    weights = _argument(args, kwargs, 2, ("top_k_weights", "routing_weights"))
    novice = self.moelab_novice_mask.to(index.device)[index]
    slots = self.moelab_novice_slots.to(index.device)[index]
    vectors = self.moelab_novice_vectors.to(hidden.device)[index]
    routed = type(self).forward(self, hidden, slots, weights.masked_fill(novice, 0.0), *args[3:], **kwargs)
    constant = (weights.masked_fill(~novice, 0.0).unsqueeze(-1) * vectors).sum(dim=1)
    return routed + constant.to(routed.dtype)


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, names: tuple[str, ...]) -> Any:
    """An experts-module call's argument, positional or by any of its families' names (removed from
    ``kwargs``, as it is passed again positionally)."""
    if len(args) > position:
        return args[position]
    for name in names:
        if name in kwargs:
            return kwargs.pop(name)
    raise TypeError(f"experts module called without {names[0]}")
