"""One adapter over Hugging Face MoE causal LMs (transformers 5.x), every family whose experts are
stacked tensors beside a router (found by structure, :mod:`mlcore.hf.discovery`). See
docs/hf-support.md for what works on which family.

Importing this package does not import torch or transformers until a function needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlcore.hf.architectures import ARCHITECTURES, SUPPORTED, HFModelError, tiny_config

if TYPE_CHECKING:
    from mlcore.hf.adapter import MoEAdapter, MoELayerInfo, adapt
    from mlcore.hf.layerwise import layer_by_layer
    from mlcore.hf.loading import load_model

__all__ = [
    "ARCHITECTURES",
    "SUPPORTED",
    "HFModelError",
    "MoEAdapter",
    "MoELayerInfo",
    "adapt",
    "layer_by_layer",
    "load_model",
    "tiny_config",
]

_LAZY = {
    "MoEAdapter": "mlcore.hf.adapter",
    "MoELayerInfo": "mlcore.hf.adapter",
    "adapt": "mlcore.hf.adapter",
    "load_model": "mlcore.hf.loading",
    "layer_by_layer": "mlcore.hf.layerwise",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mlcore.hf' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
