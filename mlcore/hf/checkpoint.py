"""Load MoE checkpoints from local directories, safely, and keep the adapter's edits with them.

Loading never executes code from a checkpoint: only ``model_type`` values that transformers
ships (and this adapter supports) are accepted, configs asking for remote code (``auto_map``) are
refused, and weights are read from safetensors only (pickle ``.bin`` / ``.pt`` files are never
opened). Edits that a stock config cannot hold (router masks of the softmax routers, novices of
bias-free experts) are stored in the sidecar ``moelab_experts.safetensors``:

    layers.{i}.masked          bool[E]     experts taken out of routing in decoder layer i
    layers.{i}.novice_ids      int64[n]    experts replaced by constants
    layers.{i}.novice_vectors  float[n, H] their constant outputs c_e

Masks and novices that the stock checkpoint already carries (GPT-OSS, DeepSeek-V3 biases) are
recorded there too, so the sidecar always lists every edit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mlcore.hf.architectures import SUPPORTED, HFModelError, arch_spec

if TYPE_CHECKING:
    from mlcore.hf.adapter import MoEAdapter

SIDECAR = "moelab_experts.safetensors"
_SIDECAR_FORMAT = "moelab-hf-experts"
_PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"}


def checked_config(path: Path) -> Any:
    """The config of a local checkpoint directory, after the safety checks in the module docstring."""
    from transformers import AutoConfig

    path = Path(path)
    if not path.is_dir() or not (path / "config.json").is_file():
        raise HFModelError(
            f"{path}: not a local model directory; pass a directory holding config.json and safetensors."
        )
    raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if "auto_map" in raw:
        raise HFModelError(
            f"{path}: config.json asks for remote code (auto_map), which MoE Lab never runs; "
            f"use a checkpoint of a model type transformers ships ({', '.join(SUPPORTED)})."
        )
    arch_spec(str(raw.get("model_type")))
    if not weight_files(path):
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        found = f" (found pickle files {', '.join(pickles)})" if pickles else ""
        raise HFModelError(
            f"{path}: no safetensors weights{found}; convert the checkpoint to safetensors, MoE Lab never unpickles."
        )
    return AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)


def weight_files(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).glob("*.safetensors") if p.name != SIDECAR)


def load_model(path: Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Any:
    """Load a local MoE checkpoint (safetensors only, no remote code) and re-apply its sidecar."""
    from transformers import AutoModelForCausalLM

    from mlcore.hf.adapter import adapt

    config = checked_config(path)
    model = AutoModelForCausalLM.from_pretrained(
        path,
        config=config,
        dtype=dtype,
        use_safetensors=True,
        trust_remote_code=False,
        local_files_only=True,
    )
    model.to(device).eval()
    apply_sidecar(adapt(model), path)
    return model


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
            raise HFModelError(f"{target}: not a MoE Lab expert sidecar for a {adapter.arch} model; remove it.")
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
