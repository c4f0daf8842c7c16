"""A tiny MoE classifier whose routers expose their live routing weights (RoMA card, section 4).

Each block is pre-LN attention and an :class:`mlcore.moe.MoELayer` (8 experts, top-2 by default)
routed by :class:`AlignableRouter`, a top-k softmax router that keeps the probabilities it just
computed (with their gradient) and can take replacement probabilities for each sequence's last
token, which is how C3PO-lite and the oracle set the routing. The class is read from the last token,
whose routing RoMA aligns.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from mlcore.encoder import EncoderTrunk
from mlcore.moe.layer import MoELayer
from mlcore.moe.routers import Routing, TopKSoftmaxRouter, at_least_float32
from mlcore.roma.tasks import CLASSES, LENGTH, VOCAB_SIZE, MultiTaskSet


@dataclass(frozen=True)
class MoEClassifierConfig:
    hidden: int = 48
    layers: int = 4
    heads: int = 4
    experts: int = 8
    top_k: int = 2
    expert_ffn: int = 48
    vocab_size: int = VOCAB_SIZE
    max_length: int = LENGTH + 3
    classes: int = CLASSES


class AlignableRouter(TopKSoftmaxRouter):
    """Top-k softmax routing that records ``probs`` [T, E] (live) and honours ``override``:
    (rows, probabilities) that replace the router's own distribution for those token rows."""

    kind = "topk-softmax-alignable"

    def __init__(self, hidden: int, num_experts: int, top_k: int) -> None:
        super().__init__(hidden, num_experts, top_k, renormalize=True)
        self.probs: Tensor | None = None
        self.override: tuple[Tensor, Tensor] | None = None

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        self._refuse_null_mask(null_mask)
        logits = nn.functional.linear(x, self.weight)
        probs = torch.softmax(at_least_float32(logits), dim=-1)
        if self.override is not None:
            rows, replacement = self.override
            probs = probs.index_put((rows,), replacement.to(probs.dtype))
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        self.probs = probs
        return Routing(ids, weights, logits, probs, self.num_experts)


class Block(nn.Module):
    def __init__(self, c: MoEClassifierConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
        self.attention = nn.MultiheadAttention(c.hidden, c.heads, batch_first=True)
        self.moe = MoELayer(c.hidden, c.expert_ffn, router=AlignableRouter(c.hidden, c.experts, c.top_k))

    @property
    def router(self) -> AlignableRouter:
        router = self.moe.router
        assert isinstance(router, AlignableRouter)
        return router

    def forward(self, x: Tensor) -> Tensor:
        z = self.norm1(x)
        x = x + self.attention(z, z, z, need_weights=False)[0]
        return x + self.moe(self.norm2(x))


class MoEClassifier(EncoderTrunk):
    def __init__(self, config: MoEClassifierConfig) -> None:
        super().__init__(config, block=lambda: Block(config))
        self.config = config
        self.head = nn.Linear(config.hidden, config.classes)

    def forward(self, tokens: Tensor, override: dict[int, Tensor] | None = None) -> Tensor:
        """Class logits [B, C]. ``override`` maps a layer index to last-token routing
        probabilities [B, E] that replace that layer's router output."""
        b, n = tokens.shape
        rows = torch.arange(b) * n + n - 1
        for index, block in enumerate(self.blocks):
            block.router.override = (rows, override[index]) if override and index in override else None
        try:
            return self.head(self.hidden_states(tokens)[:, -1])
        finally:
            for block in self.blocks:
                block.router.override = None

    # -- the RoMA subject interface (mlcore.roma.roma.Subject) --------------------------------
    @property
    def num_moe_layers(self) -> int:
        return len(self.blocks)

    def num_experts(self, layer: int) -> int:
        return self.config.experts

    def classify(self, data: MultiTaskSet, override: dict[int, Tensor] | None = None) -> Tensor:
        return self(data.tokens, override)

    def hidden_mean(self, data: MultiTaskSet) -> Tensor:
        return self.hidden_states(data.tokens).mean(1)

    def router_parameters(self, layers: list[int]) -> list[nn.Parameter]:
        """Freeze everything, then unfreeze only the router weights of ``layers``."""
        self.requires_grad_(False)
        params = [self.blocks[i].router.weight for i in layers]
        for p in params:
            p.requires_grad_(True)
        return params

    def router_probs(self) -> list[tuple[Tensor, int]]:
        """(probabilities [T, E] of the last forward, top-k) per MoE layer, live, for balance losses."""
        out = []
        for block in self.blocks:
            assert block.router.probs is not None, "run a forward pass first"
            out.append((block.router.probs, self.config.top_k))
        return out

    def last_token_probs(self, layers: list[int], batch: int) -> Tensor:
        """The live routing vector r: last-token router probabilities of ``layers``, concatenated
        ([B, len(layers)·E]); read right after a forward."""
        parts = []
        for index in layers:
            probs = self.blocks[index].router.probs
            assert probs is not None, "run a forward pass first"
            parts.append(probs.view(batch, -1, probs.shape[-1])[:, -1])
        return torch.cat(parts, dim=-1)

    def clone(self) -> MoEClassifier:
        """A deep copy (the routers' last probabilities, graph tensors, are dropped first)."""
        for block in self.blocks:
            block.router.probs = None
        return copy.deepcopy(self)

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({"architecture": "moe-task-classifier", **asdict(self.config)}))

    @classmethod
    def load(cls, folder: Path) -> MoEClassifier:
        from safetensors.torch import load_file

        raw = json.loads((folder / "config.json").read_text())
        if raw.pop("architecture", None) != "moe-task-classifier":
            raise ValueError("config.json does not describe a moe-task-classifier")
        model = cls(MoEClassifierConfig(**raw))
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        return model
