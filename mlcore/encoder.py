"""The token-encoder trunk two small models share: token and learned position embeddings, a stack
of pre-LN blocks, a final LayerNorm.

LD-MoLE's frozen base (:class:`mlcore.lora_moe.base.TinyEncoder`, dense blocks whose projections
LoRA experts adapt) and RoMA's subject (:class:`mlcore.roma.model.MoEClassifier`, MoE blocks whose
routers are aligned) differ only in their blocks and heads; the trunk is written once here. Its
parameter names (``embed``, ``position``, ``blocks.N``, ``norm``) are those of the committed
checkpoints, and it creates them in that order, so a seed draws the same initial weights as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor, nn


class TrunkShape(Protocol):
    """The fields of a model config that size the trunk."""

    vocab_size: int
    hidden: int
    max_length: int
    layers: int


class EncoderTrunk(nn.Module):
    """``hidden_states(tokens)``: [B, N] token ids → [B, N, hidden] after every block and the final norm."""

    def __init__(self, shape: TrunkShape, block: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.max_length = shape.max_length
        self.embed = nn.Embedding(shape.vocab_size, shape.hidden)
        self.position = nn.Parameter(torch.randn(shape.max_length, shape.hidden) * 0.02)
        self.blocks = nn.ModuleList(block() for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.hidden)

    def hidden_states(self, tokens: Tensor) -> Tensor:
        if tokens.shape[1] > self.max_length:
            raise ValueError(f"sequences of {tokens.shape[1]} tokens exceed the model's {self.max_length}")
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.norm(x)
