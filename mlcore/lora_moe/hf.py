"""A Hugging Face MoE causal LM (loaded by :func:`mlcore.hf.load_model`) as the frozen base that
LoRA experts adapt, as in the LD-MoLE paper (section 2: every q, k, v, o, gate, up, down map of a
decoder; a sequence-classification head on the last token).

transformers 5.x MoE experts are fused 3-D tensors, not linear maps, so ``up`` / ``down`` exist
only where a decoder layer has a dense MLP (e.g. DeepSeek's leading dense layers); the attention
projections exist everywhere except multi-head latent attention (DeepSeek-V2/V3), whose
projections have other names. ``lora_sites`` lists the projections that do exist and refuses a
choice that matches none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.lora_moe.labelled import LabelledData, LabelledDataError
from mlcore.lora_moe.tasks import DIGIT_OFFSET, LEVEL_OFFSET, TaskBatch

#: Paper name → (submodule, attribute) inside a transformers decoder layer.
HF_PROJECTIONS: dict[str, tuple[str, str]] = {
    "q": ("self_attn", "q_proj"),
    "k": ("self_attn", "k_proj"),
    "v": ("self_attn", "v_proj"),
    "o": ("self_attn", "o_proj"),
    "up": ("mlp", "up_proj"),
    "down": ("mlp", "down_proj"),
}


class HFLoRABase(nn.Module):
    """The decoder of a causal LM, pooled at each sequence's last real token (right padding)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.decoder = lm.get_decoder()
        self.config = lm.config

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def max_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 2048)

    def pooled(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = torch.ones_like(tokens) if mask is None else mask
        hidden = self.decoder(input_ids=tokens, attention_mask=mask).last_hidden_state
        last = mask.sum(1) - 1
        return hidden[torch.arange(len(tokens), device=hidden.device), last.to(hidden.device)]

    def lora_sites(self, projections: tuple[str, ...]) -> list[tuple[str, nn.Module, str]]:
        sites = []
        for index, layer in enumerate(self.decoder.layers):
            for name in projections:
                parent_name, attr = HF_PROJECTIONS[name]
                parent = getattr(layer, parent_name, None)
                if isinstance(getattr(parent, attr, None), nn.Linear):
                    sites.append((f"{index}.{name}", parent, attr))
        if not sites:
            raise ValueError(
                f"the base has none of the projections {', '.join(projections)} as linear layers (MoE experts are "
                "fused tensors); pick q, k, v or o"
            )
        return sites


def encode_texts(texts: list[str], tokenizer: Any, max_length: int) -> tuple[Tensor, Tensor]:
    """Right-padded token ids and attention mask; a :class:`LabelledDataError` naming the row of an
    empty or over-long text."""
    encoded = []
    for row, text in enumerate(texts, start=1):
        ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            raise LabelledDataError(f"row {row}: the text encodes to no token")
        if len(ids) > max_length:
            raise LabelledDataError(f"row {row}: {len(ids)} tokens, more than the base model's {max_length}")
        encoded.append(ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = torch.full((len(encoded), max(len(e) for e in encoded)), pad, dtype=torch.int64)
    mask = torch.zeros_like(tokens)
    for i, ids in enumerate(encoded):
        tokens[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
    return tokens, mask


def text_batches(
    data: LabelledData, tokenizer: Any, max_length: int
) -> tuple[TaskBatch, TaskBatch, tuple[str, ...] | None]:
    """Uploaded task data as (train, test) batches for a language-model base, and the group names
    (``levels`` then index them) when the data has groups."""
    tokens, mask = encode_texts(list(data.texts), tokenizer, max_length)
    labels = torch.tensor(data.labels, dtype=torch.int64)
    names = tuple(sorted(set(data.groups))) if data.groups is not None else None
    groups = torch.tensor([names.index(g) for g in data.groups]) if names and data.groups else None

    def batch(split: str) -> TaskBatch:
        index = torch.tensor(data.rows(split), dtype=torch.int64)
        return TaskBatch(tokens[index], labels[index], None if groups is None else groups[index], mask[index])

    return batch("train"), batch("test"), names


def as_text(batch: TaskBatch, tokenizer: Any, max_length: int) -> TaskBatch:
    """A built-in fine-tuning batch as prompts (``level 3: 1 5 9 2 6 5 3 5``) for a language-model base."""
    texts = [
        f"level {row[0] - LEVEL_OFFSET}: " + " ".join(str(t - DIGIT_OFFSET) for t in row[1:])
        for row in batch.tokens.tolist()
    ]
    tokens, mask = encode_texts(texts, tokenizer, max_length)
    return TaskBatch(tokens, batch.targets, batch.levels, mask)


def load_hf_lm(folder: Path, device: Any, *, batch_tokens: int = 4096) -> tuple[Any, Any]:
    """(model, tokenizer) of a local Hugging Face MoE checkpoint for a job that trains through the
    whole model (refused up front when it cannot fit the worker); every refusal is a one-line
    :class:`~mlcore.jobs.spec.JobError` that starts with ``Model:``."""
    from mlcore.errors import JobError
    from mlcore.hf import load_model
    from mlcore.hf.architectures import HFModelError
    from mlcore.hf.memory import check_whole_fits

    if not (folder / "config.json").is_file():
        raise JobError("Model: no config.json; pick a Hugging Face MoE checkpoint directory.")
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise JobError("Model: the checkpoint has no tokenizer; include tokenizer.json next to config.json.")
    try:
        from transformers import AutoTokenizer

        check_whole_fits(folder, device=device, what="Training through the model", batch_tokens=batch_tokens)
        model = load_model(folder, device=device)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except HFModelError as exc:
        raise JobError(f"Model: {exc}") from None
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"Model: could not load the checkpoint ({first[:300]}).") from None
    return model, tokenizer
