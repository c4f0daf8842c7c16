"""Procedural tasks for the LD-MoLE reproduction (method card, section 4).

Sequences of ``length`` digits 0–9, read by a small encoder.

- **Pre-training** (per-position targets, the task named by the first token): copy, reverse,
  prefix sum mod 10 and sort. They teach the base model to move and combine digits.
- **Fine-tuning** (sequence classification, graded difficulty d = 2…6, the level named by the
  first token), over the "high" digits (≥ 5) among the first d positions:
  ``majority`` (are more than half of them high?) or ``parity`` (is their count odd?, the card's
  task). Both grow harder with d; none of the pre-training tasks computes them. Parity stays at
  chance for every routing within the few hundred CPU steps a test or quick benchmark can afford,
  so ``majority`` is the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mlcore.lora_moe.labelled import LabelledData, LabelledDataError

PAD = 0
#: The first token names the pre-training task (2…5) or the fine-tuning level (10 + d).
PRETRAIN_TASKS: tuple[str, ...] = ("copy", "reverse", "prefix-sum", "sort")
TASK_TOKEN = {name: 2 + i for i, name in enumerate(PRETRAIN_TASKS)}
LEVEL_OFFSET = 10
LEVELS: tuple[int, ...] = (2, 3, 4, 5, 6)
DIGIT_OFFSET = 20
VOCAB_SIZE = DIGIT_OFFSET + 10
LENGTH = 8


@dataclass
class TaskBatch:
    tokens: Tensor  #: [B, 1 + length] int64: the task or level token, then the digits
    targets: Tensor  #: [B, length] (pre-training) or [B] (fine-tuning) int64
    levels: Tensor | None = None  #: [B] the difficulty d (or uploaded group index) of each fine-tuning example
    mask: Tensor | None = None  #: [B, N] 1 for real tokens, 0 for right padding (language-model bases)


def _digits(n: int, length: int, generator: torch.Generator) -> Tensor:
    return torch.randint(0, 10, (n, length), generator=generator)


def pretrain_batch(n: int, generator: torch.Generator, length: int = LENGTH) -> TaskBatch:
    """n examples drawn uniformly over the four pre-training tasks."""
    digits = _digits(n, length, generator)
    task = torch.randint(0, len(PRETRAIN_TASKS), (n,), generator=generator)
    outputs = torch.stack(
        [digits, digits.flip(-1), digits.cumsum(-1) % 10, digits.sort(dim=-1).values], dim=1
    )  # [n, tasks, length]
    targets = outputs[torch.arange(n), task]
    first = torch.tensor([TASK_TOKEN[t] for t in PRETRAIN_TASKS])[task]
    return TaskBatch(torch.cat([first[:, None], digits + DIGIT_OFFSET], dim=1), targets)


FINETUNE_TASKS: tuple[str, ...] = ("majority", "parity")


def level_labels(task: str, digits: Tensor, levels: Tensor) -> Tensor:
    """The label of each row from the count of digits ≥ 5 among its first d positions."""
    high = (digits >= 5).long()
    mask = torch.arange(digits.shape[1])[None, :] < levels[:, None]
    count = (high * mask).sum(-1)
    if task == "majority":
        return (2 * count > levels).long()
    if task == "parity":
        return count % 2
    raise ValueError(f"task must be one of {FINETUNE_TASKS}, got {task!r}")


def level_batch(
    task: str, n: int, generator: torch.Generator, levels: tuple[int, ...] = LEVELS, length: int = LENGTH
) -> TaskBatch:
    """n fine-tuning examples of ``task``, levels drawn uniformly from ``levels``."""
    if not levels or min(levels) < 1 or max(levels) > length:
        raise ValueError(f"levels must lie in 1…{length}, got {levels}")
    digits = _digits(n, length, generator)
    level = torch.tensor(levels)[torch.randint(0, len(levels), (n,), generator=generator)]
    tokens = torch.cat([(LEVEL_OFFSET + level)[:, None], digits + DIGIT_OFFSET], dim=1)
    return TaskBatch(tokens, level_labels(task, digits, level), level)


def digit_batches(data: LabelledData, length: int = LENGTH) -> tuple[TaskBatch, TaskBatch]:
    """Uploaded task data (:mod:`mlcore.lora_moe.labelled`) as (train, test) batches for the tiny
    encoder, which reads digits only: each text is up to ``length`` digits (spaces ignored), padded
    with PAD; the first token is the level d, the row's ``group`` (1…length) or else its digit count."""
    rows = {"train": data.rows("train"), "test": data.rows("test")}
    tokens = torch.full((len(data.texts), 1 + length), PAD, dtype=torch.int64)
    levels = torch.empty(len(data.texts), dtype=torch.int64)
    for i, text in enumerate(data.texts):
        digits = text.replace(" ", "")
        if not digits.isdigit() or not digits.isascii() or len(digits) > length:
            raise LabelledDataError(
                f"row {i + 1}: the tiny encoder reads up to {length} digits 0-9, got {text[:40]!r}; "
                "use a language-model base for free text"
            )
        level = len(digits)
        if data.groups is not None:
            group = data.groups[i]
            if not group.isdigit() or not 1 <= int(group) <= length:
                raise LabelledDataError(f"row {i + 1}: group must be a level between 1 and {length}, got {group!r}")
            level = int(group)
        levels[i] = level
        tokens[i, 0] = LEVEL_OFFSET + level
        tokens[i, 1 : 1 + len(digits)] = torch.tensor([DIGIT_OFFSET + int(c) for c in digits])
    labels = torch.tensor(data.labels, dtype=torch.int64)

    def batch(split: str) -> TaskBatch:
        index = torch.tensor(rows[split], dtype=torch.int64)
        return TaskBatch(tokens[index], labels[index], levels[index])

    return batch("train"), batch("test")
