"""The family's parameters, read from ``parameters.json`` beside this module, and the draws made from them.

Every number that shapes a scan (scan seeds, room and street sizes, object counts and dimensions,
noise levels, materials, lighting) is in that one file, which was fixed before the family's first
evaluation; a test pins its sha256, so any change shows up in review as a changed hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parent / "parameters.json"


@functools.cache
def parameters() -> dict[str, Any]:
    """The parsed parameter file (callers must not change it; :func:`section` hands out copies)."""
    return json.loads(PATH.read_text())


def section(*keys: str) -> Any:
    """A copy of one nested part of the parameters, e.g. ``section("furniture", "sofa")``."""
    value: Any = parameters()
    for key in keys:
        value = value[key]
    return json.loads(json.dumps(value))


def sha256() -> str:
    """The sha256 of ``parameters.json`` as committed (bytes, not the parsed values)."""
    return hashlib.sha256(PATH.read_bytes()).hexdigest()


def uniform(rng: np.random.Generator, bounds: list[float] | tuple[float, float]) -> float:
    """A uniform draw from ``[lo, hi]``."""
    lo, hi = bounds
    return float(rng.uniform(lo, hi))


def integer(rng: np.random.Generator, bounds: list[int] | tuple[int, int]) -> int:
    """A uniform whole number from ``lo`` to ``hi`` inclusive."""
    lo, hi = bounds
    return int(rng.integers(lo, hi + 1))


def pick(rng: np.random.Generator, palette: str) -> str:
    """A material name drawn from one of the parameter file's palettes."""
    names = parameters()["palettes"][palette]
    return str(names[int(rng.integers(len(names)))])


def how_many(rng: np.random.Generator, rate: float, amount: float, least: int = 0) -> int:
    """A Poisson count of ``rate`` per unit of ``amount`` (area or length), at least ``least``."""
    return max(least, int(rng.poisson(rate * amount)))
