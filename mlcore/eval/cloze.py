"""The built-in zero-shot suite: multiple-choice cloze tasks built from held-out text, no download.

Each item is a context cut from a held-out block, its true continuation, and distractor
continuations of about the same length taken from other held-out blocks of the same source (so
style alone does not give the answer away). Items are scored like lm-eval-harness scores
multiple-choice tasks: each choice's log-likelihood Σ log p(continuation tokens | context);
``acc`` picks the highest sum, ``acc_norm`` the highest sum per character of the choice.

Difficulty (``choices``, continuation length) is fixed so that the unpruned zoo model scores
between 40% and 90%: room to show pruning damage in both directions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CHOICES = 4
CONTEXT_CHARS = 240
CONTINUATION_CHARS = 40
ITEMS_PER_SOURCE = 200
SUITE_SEED = 20260


@dataclass(frozen=True)
class ClozeItem:
    context: str
    choices: tuple[str, ...]
    answer: int


def _word_starts(text: str) -> list[int]:
    """Offsets of whitespace that precedes a word: a continuation starts with its space, as BPE has it."""
    return [m.start() for m in re.finditer(r"\s(?=\S)", text)]


def _span(text: str, start: int, chars: int) -> str:
    """``text[start:]`` cut at the first word end at or after ``chars`` characters."""
    end = start + chars
    match = re.search(r"\s", text[end:])
    return text[start : end + (match.start() if match else len(text) - end)]


def build_items(
    blocks: list[str],
    *,
    n_items: int = ITEMS_PER_SOURCE,
    choices: int = CHOICES,
    context_chars: int = CONTEXT_CHARS,
    continuation_chars: int = CONTINUATION_CHARS,
    seed: int = SUITE_SEED,
) -> list[ClozeItem]:
    """``n_items`` items from ``blocks`` (a held-out split), the same ones for the same arguments."""
    rng = random.Random(seed)
    usable = [b for b in blocks if len(b) > context_chars + 3 * continuation_chars]
    if len(usable) < choices:
        raise ValueError(
            f"need at least {choices} held-out blocks of {context_chars * 2} characters to build cloze items"
        )
    items = []
    for _ in range(n_items):
        picks = rng.sample(range(len(usable)), choices)
        spans = []
        for block_index in picks:
            block = usable[block_index]
            starts = [s for s in _word_starts(block) if context_chars <= s < len(block) - 2 * continuation_chars]
            spans.append((block, rng.choice(starts) if starts else context_chars))
        block, start = spans[0]
        true = _span(block, start, continuation_chars)
        options = [true] + [_span(b, s, continuation_chars) for b, s in spans[1:]]
        order = list(range(choices))
        rng.shuffle(order)
        context = block[start - context_chars : start]
        items.append(ClozeItem(context, tuple(options[i] for i in order), order.index(0)))
    return items


def choice_loglikelihoods(
    model: Any,
    tokenizer: Any,
    items: list[ClozeItem],
    *,
    batch_size: int = 16,
    on_batch: Callable[[int, int], Any] | None = None,
) -> list[list[float]]:
    """Σ log p(choice tokens | context) for every choice of every item.

    The context is cut from the left so context + choice fits the model's window.
    ``on_batch(done, total)`` is called after each batch with the items whose every choice is
    scored so far (a job's "item 40 of 100"; the callback may raise to stop).
    """
    import torch

    window = int(getattr(model.config, "max_position_embeddings", 2048))

    def encode(text: str) -> list[int]:
        return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids

    requests: list[tuple[list[int], int]] = []
    for item in items:
        context = encode(item.context)
        for choice in item.choices:
            continuation = encode(choice)[: window - 1]
            ids = (context + continuation)[-window:]
            requests.append((ids, len(continuation)))
    per_item = len(items[0].choices) if items else 0
    device = next(model.parameters()).device
    scores: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(requests), batch_size):
            chunk = requests[start : start + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            # Right padding: a causal model's scores at real positions never see the pad tokens.
            batch = torch.full((len(chunk), width), int(tokenizer.pad_token_id or 0), dtype=torch.long)
            for row, (ids, _) in enumerate(chunk):
                batch[row, : len(ids)] = torch.tensor(ids)
            logprobs = torch.log_softmax(model(input_ids=batch.to(device)).logits.float(), dim=-1).cpu()
            for row, (ids, n) in enumerate(chunk):
                targets = torch.tensor(ids[len(ids) - n :])
                predicted = logprobs[row, len(ids) - n - 1 : len(ids) - 1]
                scores.append(predicted.gather(1, targets[:, None]).sum().item())
            if on_batch is not None:
                on_batch(len(scores) // per_item, len(items))
    return [scores[i * per_item : (i + 1) * per_item] for i in range(len(items))]


def score(items: list[ClozeItem], loglikelihoods: list[list[float]]) -> dict[str, float]:
    """``acc`` (argmax of Σ log p) and ``acc_norm`` (argmax of Σ log p / characters), as lm-eval-harness."""

    def argmax(values: list[float]) -> int:
        return max(range(len(values)), key=values.__getitem__)

    acc = sum(argmax(ll) == item.answer for item, ll in zip(items, loglikelihoods))
    acc_norm = sum(
        argmax([v / max(1, len(c)) for v, c in zip(ll, item.choices)]) == item.answer
        for item, ll in zip(items, loglikelihoods)
    )
    return {"acc": acc / len(items), "acc_norm": acc_norm / len(items)}
