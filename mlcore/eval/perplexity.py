"""Held-out perplexity, PPL = exp(mean next-token negative log-likelihood), and expert usage.

Windows are non-overlapping ``[N, L]`` token blocks (:func:`mlcore.data.packing.pack_windows`); each
window is scored on its own, so every token after a window's first is predicted once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlcore.data.packing import pack_windows

if TYPE_CHECKING:
    import torch

#: The method card asks for at least 512 held-out sequences per evaluation.
EVAL_WINDOWS = 512


def heldout_windows(tokenizer: Any, texts: list[str], *, length: int, max_windows: int = EVAL_WINDOWS) -> torch.Tensor:
    """``[N, length]`` windows of ``texts`` (a split's blocks) tokenized with ``tokenizer``."""

    def encode(text: str) -> list[int]:
        return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids

    return pack_windows(texts, encode, eos_id=tokenizer.eos_token_id, length=length, max_windows=max_windows)


def mean_nll(
    model: Any, windows: torch.Tensor, *, batch_size: int = 16, on_batch: Callable[[int, int], Any] | None = None
) -> float:
    """Mean next-token negative log-likelihood in nats over all predicted tokens of ``windows``.

    ``on_batch(done, total)`` is called after each batch with the windows scored so far, so a job
    can say where a long evaluation is (and stop between batches: the callback may raise).
    """
    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            batch = windows[start : start + batch_size].to(device)
            logits = model(input_ids=batch).logits.float()
            nll = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
            )
            total += nll.item()
            count += batch[:, 1:].numel()
            if on_batch is not None:
                on_batch(min(start + batch_size, len(windows)), len(windows))
    return total / count


def perplexity(model: Any, windows: torch.Tensor, *, batch_size: int = 16) -> float:
    return math.exp(mean_nll(model, windows, batch_size=batch_size))


def expert_counts(model: Any, windows: torch.Tensor, *, batch_size: int = 16) -> list[list[int]]:
    """How often each expert of each MoE layer is in a token's top-k: ``[layer][expert]`` counts.

    Reads the router logits that transformers' MoE models return with ``output_router_logits``.
    """
    import torch

    top_k = int(model.config.num_experts_per_tok)
    device = next(model.parameters()).device
    counts: list[torch.Tensor] = []
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            out = model(input_ids=windows[start : start + batch_size].to(device), output_router_logits=True)
            for layer, logits in enumerate(out.router_logits):
                chosen = torch.topk(logits.float(), top_k, dim=-1).indices.reshape(-1).cpu()
                layer_counts = torch.bincount(chosen, minlength=logits.shape[-1])
                if layer == len(counts):
                    counts.append(layer_counts)
                else:
                    counts[layer] += layer_counts
    return [c.tolist() for c in counts]


def usage_entropy(counts: list[int]) -> float:
    """Entropy of one layer's expert usage, normalised by log E: 1 = perfectly even, 0 = one expert."""
    total = sum(counts)
    if total == 0 or len(counts) < 2:
        return 0.0
    h = -sum(c / total * math.log(c / total) for c in counts if c)
    return h / math.log(len(counts))
