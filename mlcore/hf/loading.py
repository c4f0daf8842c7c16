"""Load MoE checkpoints from local directories, safely, with the adapter's edits re-applied.

Loading never executes code from a checkpoint: only ``model_type`` values that transformers
ships (and this adapter supports) are accepted, configs asking for remote code (``auto_map``) are
refused, and weights are read from safetensors only (pickle ``.bin`` / ``.pt`` files are never
opened). The edits a stock config cannot hold come back from the sidecar (:mod:`mlcore.hf.checkpoint`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from mlcore.hf.adapter import adapt
from mlcore.hf.architectures import SUPPORTED, HFModelError, arch_spec
from mlcore.hf.checkpoint import SIDECAR, apply_sidecar
from mlcore.uploads import PICKLE_SUFFIXES, safetensors_header


def checked_config(path: Path) -> Any:
    """The config of a local checkpoint directory, after the safety checks in the module docstring."""
    from transformers import AutoConfig

    path = Path(path)
    # Messages name the folder by its own name: the path is a worker's scratch or cache folder.
    if not path.is_dir() or not (path / "config.json").is_file():
        raise HFModelError(
            f"{path.name}: not a local model directory; pass a directory holding config.json and safetensors."
        )
    raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if "auto_map" in raw:
        raise HFModelError(
            "config.json asks for remote code (auto_map), which MoE Lab never runs; "
            f"use a checkpoint of a model type transformers ships ({', '.join(SUPPORTED)})."
        )
    arch_spec(str(raw.get("model_type")))
    weights = weight_files(path)
    if not weights:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
        found = f" (found pickle files {', '.join(pickles)})" if pickles else ""
        raise HFModelError(
            f"The checkpoint has no safetensors weights{found}; convert it to safetensors, MoE Lab never unpickles."
        )
    # The library's and the uploads' header check (mlcore.uploads): a corrupt file is refused
    # with one sentence here rather than failing inside transformers' loader.
    for weight in weights:
        safetensors_header(weight)
    return AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)


def weight_files(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).glob("*.safetensors") if p.name != SIDECAR)


def load_model(path: Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Any:
    """Load a local MoE checkpoint (safetensors only, no remote code) and re-apply its sidecar."""
    from transformers import AutoModelForCausalLM

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
