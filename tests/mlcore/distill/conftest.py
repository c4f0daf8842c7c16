"""The tiny teacher and token windows the distillation tests share (a module may define its own)."""

import pytest
import torch


@pytest.fixture(scope="module")
def teacher():
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config

    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", vocab_size=64, max_position_embeddings=32, eos_token_id=0, pad_token_id=0)
    return AutoModelForCausalLM.from_config(config).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def windows():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 64, (12, 16), generator=g), torch.randint(0, 64, (4, 16), generator=g)
