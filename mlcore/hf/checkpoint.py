"""The sidecar: the adapter's edits that a stock config cannot hold, kept next to a checkpoint.

Router masks of the softmax routers and novices of bias-free experts are stored in
``moelab_experts.safetensors`` (loading, which re-applies it, is in :mod:`mlcore.hf.loading`):

    layers.{i}.masked          bool[E]     experts taken out of routing in decoder layer i
    layers.{i}.novice_ids      int64[n]    experts replaced by constants
    layers.{i}.novice_vectors  float[n, H] their constant outputs c_e

Masks and novices that the stock checkpoint already carries (GPT-OSS, DeepSeek-V3 biases) are
recorded there too, so the sidecar always lists every edit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mlcore.hf.architectures import HFModelError

if TYPE_CHECKING:
    from mlcore.hf.adapter import MoEAdapter

SIDECAR = "moelab_experts.safetensors"
_SIDECAR_FORMAT = "moelab-hf-experts"


def write_sidecar(adapter: MoEAdapter, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for index, masked in adapter.masks.items():
        tensors[f"layers.{index}.masked"] = masked.cpu()
    for index, vectors in adapter.novices.items():
        ids = sorted(vectors)
        tensors[f"layers.{index}.novice_ids"] = torch.tensor(ids, dtype=torch.int64)
        tensors[f"layers.{index}.novice_vectors"] = torch.stack([vectors[e].cpu() for e in ids])
    target = Path(path) / SIDECAR
    if not tensors:
        target.unlink(missing_ok=True)
        return
    metadata = {"format": _SIDECAR_FORMAT, "version": "1", "model_type": adapter.arch}
    save_file({name: t.contiguous() for name, t in tensors.items()}, target, metadata=metadata)


def apply_sidecar(adapter: MoEAdapter, path: Path) -> None:
    """Re-apply the masks and novices recorded next to a checkpoint (nothing if there is none)."""
    from safetensors import safe_open

    target = Path(path) / SIDECAR
    if not target.is_file():
        return
    with safe_open(target, framework="pt") as sidecar:
        metadata = sidecar.metadata() or {}
        if metadata.get("format") != _SIDECAR_FORMAT or metadata.get("model_type") != adapter.arch:
            raise HFModelError(f"{target.name}: not a MoE Lab expert sidecar for a {adapter.arch} model; remove it.")
        names = set(sidecar.keys())
        for info in adapter.layers:
            prefix = f"layers.{info.index}."
            if prefix + "masked" in names:
                masked = sidecar.get_tensor(prefix + "masked")
                adapter.mask_experts({info.index: (~masked).nonzero().flatten().tolist()})
            if prefix + "novice_ids" in names:
                ids = sidecar.get_tensor(prefix + "novice_ids").tolist()
                vectors = sidecar.get_tensor(prefix + "novice_vectors")
                adapter.replace_with_novices({info.index: dict(zip(ids, vectors))})
