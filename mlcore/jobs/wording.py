"""Counted nouns in what jobs tell people: "1 image", "4 images", never "1 images"."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one (``plural`` for irregular nouns; default: noun + s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
