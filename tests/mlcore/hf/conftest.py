"""Tiny seeded MoE models of every supported architecture, built from configs (no downloads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.hf import SUPPORTED, tiny_config

ARCHS = list(SUPPORTED)


def build(arch: str, seed: int = 0, **overrides: Any) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(arch, **overrides)).eval()


def token_ids(seed: int = 1, batch: int = 2, length: int = 9) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, 128, (batch, length), generator=generator)


def logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.fixture
def tiny() -> Callable[..., Any]:
    return build


def file_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's weight shards and sidecar, by name (sidecar names prefixed)."""
    from safetensors.torch import load_file

    from mlcore.hf.checkpoint import SIDECAR, weight_files

    tensors = {name: t for file in weight_files(folder) for name, t in load_file(file).items()}
    if (folder / SIDECAR).is_file():
        tensors.update({f"sidecar:{name}": t for name, t in load_file(folder / SIDECAR).items()})
    return tensors
