"""Load MoE checkpoints from local directories, safely, with the adapter's edits re-applied.

Loading never executes code from a checkpoint: only ``model_type`` values that transformers
ships are accepted (and MoE Lab's own sidecar-marked ones, :mod:`mlcore.hf.checkpoint`), configs
asking for remote code (``auto_map``) are refused, and weights are read from safetensors only
(pickle ``.bin`` / ``.pt`` files are never opened). Before any weight is read,
:mod:`mlcore.hf.inputs` checks the config, the tensors' dtypes and the tokenizer. Models load in
the checkpoint's own dtype (bfloat16 stays bfloat16) unless asked otherwise. The edits a stock
config cannot hold come back from the sidecar (:mod:`mlcore.hf.checkpoint`).

A compact MoNE checkpoint (its novices' weights not stored) loads through the family's own class
with room for the stored experts only (``from_pretrained`` fills [K, ...] tensors through the
family's own checkpoint conversion), and each experts tensor is then widened back to E rows, zeros
for the novices: the model in memory is the one the platform evaluated, full size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mlcore.hf.adapter import adapt
from mlcore.hf.architectures import HFModelError, arch_spec
from mlcore.hf.checkpoint import (
    BASE_TYPE_FIELD,
    MODULES_FIELD,
    SIDECAR_MODEL_TYPE,
    STORED_FIELD,
    apply_sidecar,
    base_model_type,
    stored_layout,
    weight_files,
)
from mlcore.hf.families import EXPERT_COUNT_FIELDS, expert_count
from mlcore.hf.inputs import check_config, check_tokenizer, check_weight_dtypes, checkpoint_dtype
from mlcore.hf.novices import allocate_stored, expand_stored
from mlcore.uploads import PICKLE_SUFFIXES, safetensors_header


def checked_config(path: Path, *, need_tokenizer: bool = False) -> Any:
    """The config of a local checkpoint directory, after the safety checks in the module docstring
    (``need_tokenizer``: refuse a checkpoint without one; a present one must always fit)."""
    from transformers import AutoConfig

    path = Path(path)
    # Messages name the folder by its own name: the path is a worker's scratch or cache folder.
    if not path.is_dir() or not (path / "config.json").is_file():
        raise HFModelError(
            f"{path.name}: not a local model directory; pass a directory holding config.json and safetensors."
        )
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except ValueError:
        raise HFModelError("config.json is not valid JSON; re-save the model with save_pretrained.") from None
    # MoE Lab's own marked checkpoints ship code for stock tools; it is never run here.
    if "auto_map" in raw and raw.get("model_type") != SIDECAR_MODEL_TYPE:
        raise HFModelError(
            "config.json asks for remote code (auto_map), which MoE Lab never runs; "
            "use a checkpoint of a model type transformers ships (see docs/hf-support.md)."
        )
    model_type = base_model_type(raw)
    arch_spec(model_type)
    check_config(raw)
    sources = [raw, raw.get("ffn_config") or {}, raw.get("text_config") or {}]
    if not any(isinstance(s.get(f), int) and s[f] >= 2 for s in sources for f in EXPERT_COUNT_FIELDS):
        raise _dense(model_type)
    weights = weight_files(path)
    if not weights:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
        found = f" (found pickle files {', '.join(pickles)})" if pickles else ""
        raise HFModelError(
            f"The checkpoint has no safetensors weights{found}; convert it to safetensors, MoE Lab never unpickles."
        )
    # The small files first: a wrong tokenizer is refused before any weight header is read.
    vocab = raw.get("vocab_size") or (raw.get("text_config") or {}).get("vocab_size") or 0
    check_tokenizer(path, int(vocab), required=need_tokenizer)
    # The library's and the uploads' header check (mlcore.uploads): a corrupt file is refused
    # with one sentence here rather than failing inside transformers' loader.
    headers = {weight.name: safetensors_header(weight) for weight in weights}
    check_weight_dtypes(headers)
    if raw.get("model_type") == SIDECAR_MODEL_TYPE:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        marks = ("model_type", BASE_TYPE_FIELD, "moelab_note", "auto_map", MODULES_FIELD, STORED_FIELD, "architectures")
        unmarked = {k: _decoded(v) for k, v in raw.items() if k not in marks}
        config = CONFIG_MAPPING[model_type].from_dict(unmarked)
    else:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    if (expert_count(config) or 0) < 2:
        raise _dense(model_type)
    return config


def _decoded(value: Any) -> Any:
    """transformers writes non-finite floats into config.json as {"__float__": "Infinity"}."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def _dense(model_type: str) -> HFModelError:
    return HFModelError(
        f"The {model_type} config declares no routed experts; MoE Lab's MoE jobs need a mixture-of-experts "
        "model (see docs/hf-support.md for the families)."
    )


def load_dtype(path: Path, dtype: torch.dtype | None = None) -> torch.dtype:
    """``dtype`` if given, else the dtype most of the checkpoint's weight bytes are stored in (from
    the safetensors headers): bfloat16 stays bfloat16, float32 stays float32. float16 is read as
    float32: it is a storage format here (the zoo's committed checkpoints), and float16 arithmetic on
    CPU workers is slow and overflows where bfloat16's range does not."""
    if dtype is not None:
        return dtype
    stored = stored_dtype(path)
    return torch.float32 if stored == torch.float16 else stored


def stored_dtype(path: Path) -> torch.dtype:
    """The floating dtype most of the checkpoint's weight bytes are stored in (safetensors headers)."""
    stored = checkpoint_dtype({file.name: safetensors_header(file) for file in weight_files(path)})
    return {"BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}.get(stored or "", torch.float32)


def load_model(
    path: Path,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    need_tokenizer: bool = False,
) -> Any:
    """Load a local MoE checkpoint (safetensors only, no remote code) in its own dtype (or ``dtype``)
    and re-apply its sidecar."""
    from transformers import AutoModelForCausalLM

    config = checked_config(path, need_tokenizer=need_tokenizer)
    dtype = load_dtype(path, dtype)
    layout = stored_layout(path)
    loader = _with_stored_experts(config, layout) if layout else AutoModelForCausalLM
    model, info = loader.from_pretrained(
        path,
        config=config,
        dtype=dtype,
        use_safetensors=True,
        trust_remote_code=False,
        local_files_only=True,
        output_loading_info=True,
    )
    # transformers fills a tensor the files lack with fresh random values and only warns: the model
    # would compute something no one trained.
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        raise HFModelError(
            f"The checkpoint lacks {len(missing)} tensor(s) its config.json needs ({', '.join(missing[:3])}); "
            "it is incomplete or belongs to another configuration. Re-save the whole model with save_pretrained."
        )
    if layout:
        model.__class__ = loader.__bases__[0]
        for name, (kept, count) in layout.items():
            expand_stored(model.get_submodule(name), kept, count)
    model.to(device).eval()
    apply_sidecar(adapt(model), path)
    return model


def _with_stored_experts(config: Any, layout: dict[str, tuple[torch.Tensor, int]]) -> Any:
    """The family's causal-LM class for ``config``, built with room for the stored experts only
    (``layout``: experts module → (stored ids, E)), so that ``from_pretrained`` loads a compact
    checkpoint through the family's own conversion. The subclass keeps the family's name and module:
    transformers applies a family's checkpoint conversion only to its own classes. ``load_model``
    gives the model back its own class once loaded."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    base = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]

    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, config, *args, **kwargs)
        for name, (kept, _) in layout.items():
            allocate_stored(self.get_submodule(name), kept.numel())

    namespace = {"__init__": __init__, "__module__": base.__module__, "__qualname__": base.__qualname__}
    return type(base.__name__, (base,), namespace)
