"""The small frozen base model that LoRA experts adapt: a pre-LN Transformer encoder.

Every projection the LD-MoLE paper adapts in a decoder (q, k, v, o, up, down; section 2) is a
plain :class:`torch.nn.Linear` here, so :func:`mlcore.lora_moe.mixture.attach_lora_mixture` can wrap
it. The model is saved as ``model.safetensors`` + ``config.json`` (no pickles).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from torch import Tensor, nn

from mlcore.encoder import EncoderTrunk
from mlcore.lora_moe.tasks import LENGTH, VOCAB_SIZE

#: The adaptable projections of each block, in the paper's naming.
PROJECTIONS: tuple[str, ...] = ("q", "k", "v", "o", "up", "down")


@dataclass(frozen=True)
class EncoderConfig:
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    vocab_size: int = VOCAB_SIZE
    max_length: int = LENGTH + 1
    #: Outputs of the per-position pre-training head (digits 0–9).
    pretrain_classes: int = 10


class Block(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.heads = c.heads
        self.norm1, self.norm2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
        self.q, self.k, self.v, self.o = (nn.Linear(c.hidden, c.hidden) for _ in range(4))
        self.up, self.down = nn.Linear(c.hidden, c.ffn), nn.Linear(c.ffn, c.hidden)

    def forward(self, x: Tensor) -> Tensor:
        b, n, h = x.shape
        z = self.norm1(x)

        def split(t: Tensor) -> Tensor:
            return t.view(b, n, self.heads, h // self.heads).transpose(1, 2)

        attn = nn.functional.scaled_dot_product_attention(split(self.q(z)), split(self.k(z)), split(self.v(z)))
        x = x + self.o(attn.transpose(1, 2).reshape(b, n, h))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class TinyEncoder(EncoderTrunk):
    """Token + position embeddings, ``layers`` pre-LN blocks, a final LayerNorm.

    ``forward`` returns hidden states [B, N, H]; ``pretrain_head`` maps the digit positions to
    per-position digit logits during pre-training. Fine-tuning adds its own classification head
    on the first (task) token.
    """

    def __init__(self, config: EncoderConfig) -> None:
        if config.hidden % config.heads:
            raise ValueError(f"heads ({config.heads}) must divide hidden ({config.hidden})")
        super().__init__(config, block=lambda: Block(config))
        self.config = config
        self.pretrain_head = nn.Linear(config.hidden, config.pretrain_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.hidden_states(tokens)

    @property
    def hidden_size(self) -> int:
        return self.config.hidden

    def pooled(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        """The first (task or level) token's final hidden state [B, H]: what a classification head reads."""
        return self(tokens)[:, 0]

    def lora_sites(self, projections: tuple[str, ...]) -> list[tuple[str, nn.Module, str]]:
        """(name, block, attribute) of each adaptable projection, e.g. ``("0.q", block, "q")``."""
        return [(f"{i}.{name}", block, name) for i, block in enumerate(self.blocks) for name in projections]

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({"architecture": "lora-tiny-encoder", **asdict(self.config)}))

    @classmethod
    def load(cls, folder: Path) -> TinyEncoder:
        """Load a saved encoder; a ValueError that names the file when it is missing or malformed."""
        from safetensors.torch import load_file

        config_path, weights = folder / "config.json", folder / "model.safetensors"
        for path in (config_path, weights):
            if not path.is_file():
                raise ValueError(f"{path.name} is missing from {folder}; expected a tiny-encoder checkpoint")
        try:
            raw = json.loads(config_path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"config.json is not valid JSON ({exc.msg})") from None
        if raw.pop("architecture", None) != "lora-tiny-encoder":
            raise ValueError("config.json does not describe a lora-tiny-encoder; pick the zoo's lora-base-tiny")
        try:
            model = cls(EncoderConfig(**raw))
            model.load_state_dict(load_file(str(weights)))
        except (TypeError, RuntimeError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ValueError(f"model.safetensors does not match config.json: {first[:200]}") from None
        return model
