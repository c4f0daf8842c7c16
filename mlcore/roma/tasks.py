"""A multi-task set whose task identity is only implicit (RoMA card, section 4).

Each example is ``length`` digits with one marker token inserted at a random position. The marker
is one of three synonyms per task, so the task must be read from the input, never from a fixed
slot. Tasks (answer 0–9): ``first`` digit, ``last`` digit, ``max``, and ``sum-ends``
((first + last) mod 10, the hard one that keeps the base model below perfect); ``min`` is there for
sets that pick their own tasks (the headroom setting of :mod:`mlcore.roma.specialist`). A set's
i-th task uses the i-th block of marker tokens, so any four tasks share one vocabulary. The shifted
split uses longer inputs (``length + 2`` digits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

TASKS: tuple[str, ...] = ("first", "last", "max", "sum-ends")
#: Every task a set can draw from, each answer a function of the digits [N, length].
ANSWERS: dict[str, Callable[[Tensor], Tensor]] = {
    "first": lambda d: d[:, 0],
    "last": lambda d: d[:, -1],
    "max": lambda d: d.max(-1).values,
    "sum-ends": lambda d: (d[:, 0] + d[:, -1]) % 10,
    "min": lambda d: d.min(-1).values,
}
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
    names: tuple[str, ...] = TASKS  #: the task each index names

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: Tensor) -> MultiTaskSet:
        return MultiTaskSet(self.tokens[index], self.labels[index], self.tasks[index], self.names)

    @property
    def synonyms(self) -> Tensor:
        """[N] which of its task's marker synonyms each example uses (for analysis only)."""
        markers = self.tokens[self.tokens >= MARKER_OFFSET]  # one per row, in row order
        return (markers - MARKER_OFFSET) % SYNONYMS

    def texts(self, *, thesaurus: bool = False) -> list[str]:
        """Each example as words (``d3 m7 …``), for the TF-IDF embedder. With ``thesaurus`` every
        synonym of a task reads as one word (``t1``), as a sentence encoder that knows "final"
        means "last" would read it."""
        out = []
        for row in self.tokens.tolist():
            words = []
            for t in row:
                if t < MARKER_OFFSET:
                    words.append(f"d{t - DIGIT_OFFSET}")
                else:
                    words.append(f"t{(t - MARKER_OFFSET) // SYNONYMS}" if thesaurus else f"m{t - MARKER_OFFSET}")
            out.append(" ".join(words))
        return out


def multitask_set(
    n: int,
    generator: torch.Generator,
    length: int = LENGTH,
    *,
    tasks: tuple[str, ...] = TASKS,
) -> MultiTaskSet:
    """``n`` examples of ``tasks`` (uniformly), each marked by one of the task's synonyms (uniformly)."""
    if not 1 <= len(tasks) <= len(TASKS) or any(t not in ANSWERS for t in tasks):
        raise ValueError(f"tasks must be up to {len(TASKS)} of {tuple(ANSWERS)}, got {tasks}")
    digits = torch.randint(0, 10, (n, length), generator=generator)
    task = torch.randint(0, len(tasks), (n,), generator=generator)
    answers = torch.stack([ANSWERS[name](digits) for name in tasks], dim=1)
    labels = answers[torch.arange(n), task]
    marker = MARKER_OFFSET + task * SYNONYMS + torch.randint(0, SYNONYMS, (n,), generator=generator)
    where = torch.randint(0, length + 1, (n,), generator=generator)
    tokens = torch.empty(n, length + 1, dtype=torch.int64)
    for i in range(n):  # n is at most a few thousand; a loop keeps the insertion obvious
        w = int(where[i])
        tokens[i] = torch.cat([digits[i, :w] + DIGIT_OFFSET, marker[i : i + 1], digits[i, w:] + DIGIT_OFFSET])
    return MultiTaskSet(tokens, labels, task, tuple(tasks))


#: The marker synonyms as words, for MoE language models that read the same tasks as text.
WORDS: dict[str, tuple[str, ...]] = {
    "first": ("first", "initial", "front"),
    "last": ("last", "final", "end"),
    "max": ("max", "largest", "top"),
    "sum-ends": ("sum", "plus", "add"),
    "min": ("min", "smallest", "least"),
}
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
            else WORDS[data.names[(t - MARKER_OFFSET) // SYNONYMS]][(t - MARKER_OFFSET) % SYNONYMS]
            for t in row
        ]
        prompts.append(" ".join(words) + " = ")
    return TextTaskSet(tuple(prompts), data.labels.clone(), DIGIT_CLASSES)
