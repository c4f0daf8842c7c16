"""Tiny seeded MoE models of every supported architecture, built from configs (no downloads)."""

from __future__ import annotations

from collections.abc import Callable
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
