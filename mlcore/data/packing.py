"""Token windows for causal language models: encode text blocks, join them, cut fixed windows.

Blocks are joined with an end-of-text token so a window that spans two blocks still reads as
two texts; windows do not overlap, so every held-out token is scored once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def token_stream(texts: Iterable[str], encode: Callable[[str], list[int]], eos_id: int) -> Iterator[int]:
    for text in texts:
        yield from encode(text)
        yield eos_id


def pack_windows(
    texts: Iterable[str],
    encode: Callable[[str], list[int]],
    *,
    eos_id: int,
    length: int,
    max_windows: int | None = None,
) -> torch.Tensor:
    """``[N, length]`` int64 windows cut from the joined token stream, at most ``max_windows``.

    Streams block by block, so asking for a few windows of a large corpus encodes only what it needs.
    """
    import torch

    if length < 2:
        raise ValueError(f"window length must be at least 2 tokens, got {length}")
    windows: list[list[int]] = []
    current: list[int] = []
    for token in token_stream(texts, encode, eos_id):
        current.append(token)
        if len(current) == length:
            windows.append(current)
            current = []
            if max_windows is not None and len(windows) >= max_windows:
                break
    if not windows:
        raise ValueError(f"the text holds fewer than {length} tokens: too little for one window")
    return torch.tensor(windows, dtype=torch.long)
