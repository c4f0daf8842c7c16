"""Training helpers shared by every method package: the ground floor, importing nothing of mlcore.

Learning-rate schedule: a linear warm-up over ``warmup_steps`` steps, then a half cosine from the
peak down to ``floor`` × the peak at the last step (the shape of OneCycle and of most LM recipes).
"""

from __future__ import annotations

import math
from typing import Any


def warmup_cosine(step: int, *, steps: int, warmup_steps: int, floor: float = 0.0) -> float:
    """The learning-rate factor at ``step`` (0-based) of ``steps``.

    ``(step + 1) / warmup_steps`` during the warm-up, then
    ``floor + (1 − floor) · ½ (1 + cos(π · progress))`` with ``progress`` running from 0 after the
    warm-up to 1 at ``steps`` (clamped, so a resumed run past ``steps`` stays at the floor).
    ``warmup_steps = 0`` starts the cosine at step 0.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def warmup_cosine_scheduler(optimizer: Any, *, steps: int, warmup_steps: int, floor: float = 0.0) -> Any:
    """:func:`warmup_cosine` as a ``torch.optim.lr_scheduler.LambdaLR`` on ``optimizer``."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, steps=steps, warmup_steps=warmup_steps, floor=floor)
    )
