"""Bouncing digits: a procedural, labelled video set for the video DiT (MoGA and ProMoE cards, §4).

A scikit-learn ``load_digits`` glyph (8×8, 1797 of them, shipped with the package) moves across a
square canvas in one of four directions at 1–2 pixels per frame and bounces off the walls (never on
the first step, so the motion is visible between the first two frames). Each clip carries two
labels: the **digit** (0–9) and the **initial direction** (right, left, down, up). Clips are
single-channel, in [−1, 1] (background −1), shaped [frames, size, size].

The glyphs are split by index into a training part (the first 1500) and a held-out part (the
rest), so the judging classifier and the held-out losses never see a training glyph. Every clip
is a pure function of (split, seed, index), so two runs with the same seed see the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

DIRECTIONS: tuple[str, ...] = ("right", "left", "down", "up")
#: (dy, dx) unit step of each direction, in DIRECTIONS order.
_STEPS: tuple[tuple[int, int], ...] = ((0, 1), (0, -1), (1, 0), (-1, 0))
NUM_DIGITS = 10
GLYPH = 8
TRAIN_GLYPHS = 1500

Split = Literal["train", "test"]


class VideoDataError(ValueError):
    """A request the generator cannot satisfy (canvas too small, unknown split...)."""


@cache
def _glyphs() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)  # [1797, 8, 8] in [0, 1]
    return images, digits.target.astype(np.int64)


def glyphs(split: Split) -> tuple[np.ndarray, np.ndarray]:
    """The split's glyph images [n, 8, 8] in [0, 1] and their digit labels [n]."""
    images, labels = _glyphs()
    if split == "train":
        return images[:TRAIN_GLYPHS], labels[:TRAIN_GLYPHS]
    if split == "test":
        return images[TRAIN_GLYPHS:], labels[TRAIN_GLYPHS:]
    raise VideoDataError(f"split must be 'train' or 'test', got {split!r}")


def trajectory(start: tuple[int, int], step: tuple[int, int], frames: int, room: int) -> list[tuple[int, int]]:
    """Top-left corners of a glyph moving by ``step`` per frame inside [0, room]², reflecting at the walls."""
    (y, x), (dy, dx) = start, step
    corners = []
    for _ in range(frames):
        corners.append((y, x))
        y, dy = _bounce(y + dy, dy, room)
        x, dx = _bounce(x + dx, dx, room)
    return corners


def _bounce(position: int, velocity: int, room: int) -> tuple[int, int]:
    if position < 0:
        return -position, -velocity
    if position > room:
        return 2 * room - position, -velocity
    return position, velocity


@dataclass(frozen=True)
class ClipBatch:
    """Clips [n, frames, size, size] in [−1, 1] with their digit and direction labels [n]."""

    clips: np.ndarray
    digits: np.ndarray
    directions: np.ndarray


def bouncing_digits(
    n: int,
    *,
    frames: int = 8,
    size: int = 16,
    split: Split = "train",
    seed: int = 0,
    static: bool = False,
    digits: np.ndarray | None = None,
    directions: np.ndarray | None = None,
) -> ClipBatch:
    """``n`` clips of moving digits. ``static=True`` keeps each glyph still (the ProMoE image variant).

    ``digits`` / ``directions`` (length ``n``) request specific labels; otherwise they are drawn
    uniformly. Speed is 1 or 2 pixels per frame; the start is uniform over the free room.
    """
    if size < GLYPH:
        raise VideoDataError(f"size must be at least {GLYPH} pixels (the glyph size), got {size}")
    if frames < 1:
        raise VideoDataError(f"frames must be at least 1, got {frames}")
    images, labels = glyphs(split)
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    by_digit = [np.flatnonzero(labels == d) for d in range(NUM_DIGITS)]
    want_digits = rng.integers(0, NUM_DIGITS, n) if digits is None else np.asarray(digits, dtype=np.int64)
    want_dirs = rng.integers(0, len(DIRECTIONS), n) if directions is None else np.asarray(directions, dtype=np.int64)
    if want_digits.shape != (n,) or want_dirs.shape != (n,):
        raise VideoDataError(f"digits and directions must each have length n={n}")
    room = size - GLYPH
    clips = np.full((n, frames, size, size), -1.0, dtype=np.float32)
    for i in range(n):
        glyph = images[rng.choice(by_digit[int(want_digits[i])])]
        speed = 0 if static else min(room, int(rng.integers(1, 3)))  # a canvas the glyph fills cannot move it
        dy, dx = _STEPS[int(want_dirs[i])]
        # The first step never bounces, so the direction label is visible between frames 0 and 1.
        start = (_start(rng, dy * speed, room), _start(rng, dx * speed, room))
        for f, (y, x) in enumerate(trajectory(start, (dy * speed, dx * speed), frames, room)):
            clips[i, f, y : y + GLYPH, x : x + GLYPH] = glyph * 2.0 - 1.0
    return ClipBatch(clips, want_digits, want_dirs)


def _start(rng: np.random.Generator, velocity: int, room: int) -> int:
    low, high = max(0, -velocity), min(room, room - velocity)
    return int(rng.integers(low, high + 1))


def class_index(digit: int, direction: int) -> int:
    """One class id per (digit, direction) pair, for Fréchet statistics per class."""
    return digit * len(DIRECTIONS) + direction
