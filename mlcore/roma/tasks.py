"""A multi-task set whose task identity is only implicit (RoMA card, section 4).

Each example is ``length`` digits with one marker token inserted at a random position. The marker
is one of three synonyms per task, so the task must be read from the input, never from a fixed
slot. Tasks (answer 0–9): ``first`` digit, ``last`` digit, ``max``, and ``sum-ends``
((first + last) mod 10, the hard one that keeps the base model below perfect). The shifted split
uses longer inputs (``length + 2`` digits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

TASKS: tuple[str, ...] = ("first", "last", "max", "sum-ends")
SYNONYMS = 3
DIGIT_OFFSET = 1
MARKER_OFFSET = DIGIT_OFFSET + 10
VOCAB_SIZE = MARKER_OFFSET + len(TASKS) * SYNONYMS
LENGTH = 8
CLASSES = 10


@dataclass
class MultiTaskSet:
    tokens: Tensor  #: [N, length + 1] int64
    labels: Tensor  #: [N] int64 in 0…9
    tasks: Tensor  #: [N] the hidden task index (for analysis only; never an input)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Tensor) -> MultiTaskSet:
        return MultiTaskSet(self.tokens[index], self.labels[index], self.tasks[index])

    def texts(self) -> list[str]:
        """Each example as words (``d3 m7 …``), for the TF-IDF embedder."""
        out = []
        for row in self.tokens.tolist():
            out.append(" ".join(f"d{t - DIGIT_OFFSET}" if t < MARKER_OFFSET else f"m{t - MARKER_OFFSET}" for t in row))
        return out


def multitask_set(n: int, generator: torch.Generator, length: int = LENGTH) -> MultiTaskSet:
    digits = torch.randint(0, 10, (n, length), generator=generator)
    task = torch.randint(0, len(TASKS), (n,), generator=generator)
    answers = torch.stack(
        [digits[:, 0], digits[:, -1], digits.max(-1).values, (digits[:, 0] + digits[:, -1]) % 10], dim=1
    )
    labels = answers[torch.arange(n), task]
    marker = MARKER_OFFSET + task * SYNONYMS + torch.randint(0, SYNONYMS, (n,), generator=generator)
    where = torch.randint(0, length + 1, (n,), generator=generator)
    tokens = torch.empty(n, length + 1, dtype=torch.int64)
    for i in range(n):  # n is at most a few thousand; a loop keeps the insertion obvious
        w = int(where[i])
        tokens[i] = torch.cat([digits[i, :w] + DIGIT_OFFSET, marker[i : i + 1], digits[i, w:] + DIGIT_OFFSET])
    return MultiTaskSet(tokens, labels, task)


#: The marker synonyms as words, for MoE language models that read the same tasks as text.
MARKER_WORDS: tuple[tuple[str, ...], ...] = (
    ("first", "initial", "front"),
    ("last", "final", "end"),
    ("max", "largest", "top"),
    ("sum", "plus", "add"),
)
DIGIT_CLASSES: tuple[str, ...] = tuple(str(d) for d in range(CLASSES))


@dataclass
class TextTaskSet:
    """A labelled task set as text (prompts, each answered by one of ``classes``), for language models."""

    prompts: tuple[str, ...]
    labels: Tensor  #: [N] int64 index into ``classes``
    classes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Tensor) -> TextTaskSet:
        return TextTaskSet(tuple(self.prompts[int(i)] for i in index), self.labels[index], self.classes)

    def texts(self) -> list[str]:
        return list(self.prompts)


def as_text(data: MultiTaskSet) -> TextTaskSet:
    """The same examples as prompts: ``3 8 final 4 … 9 = `` (the answer digit follows the space)."""
    prompts = []
    for row in data.tokens.tolist():
        words = [
            str(t - DIGIT_OFFSET)
            if t < MARKER_OFFSET
            else MARKER_WORDS[(t - MARKER_OFFSET) // SYNONYMS][(t - MARKER_OFFSET) % SYNONYMS]
            for t in row
        ]
        prompts.append(" ".join(words) + " = ")
    return TextTaskSet(tuple(prompts), data.labels.clone(), DIGIT_CLASSES)
