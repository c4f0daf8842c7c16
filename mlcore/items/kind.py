"""What an item kind declares: the contract every model and dataset kind of the team library follows.

A kind is one :class:`ItemKind` value in :mod:`mlcore.items.models` or :mod:`mlcore.items.datasets`,
listed in :mod:`mlcore.items.registry`. Its ``name`` is the vocabulary of a ``Model`` / ``Dataset``
parameter's ``accepts``, of a built-in item's ``kind`` and of a library item's ``kind``; its
``check`` is what a worker runs before an item of the kind becomes usable. Declaring a kind imports
nothing heavy: ``check`` imports its loader (and torch) when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Category = Literal["model", "dataset"]
#: A check: validate the unpacked item at ``root`` (a folder, or a folder holding the one file that
#: was uploaded) with the loader the kind's jobs use, and return the card's kind-specific fields.
#: It raises :class:`mlcore.errors.JobError` with what to fix.
Check = Callable[[Path], dict[str, Any]]


@dataclass(frozen=True)
class PlatformReference:
    """A reference the web platform builds for a job instead of naming a library item.

    The watermark keyring is the one today: ``keyring:platform`` is every registered watermark key,
    which no team's library holds. Pickers offer it first to a parameter that accepts its kind.
    """

    reference: str
    label: str

    @property
    def prefix(self) -> str:
        """``keyring:`` for ``keyring:platform``: the scheme every reference of this sort starts with."""
        return self.reference.partition(":")[0] + ":"


@dataclass(frozen=True)
class ItemKind:
    #: Stable, kebab-case: stored in library rows and named by jobs' ``accepts``.
    name: str
    category: Category
    title: str
    summary: str
    #: What an upload of the kind may be, as :func:`mlcore.sniff.sniff` names formats (``zip`` and
    #: ``tar`` for a folder). Published to clients (``GET /api/v1/library/kinds``); the gate is ``check``.
    formats: tuple[str, ...]
    #: The loader check; ``None`` for a kind no team library holds (built-in or platform-made only).
    check: Check | None = None
    #: References the platform builds for this kind (see :class:`PlatformReference`).
    platform_references: tuple[PlatformReference, ...] = ()

    @property
    def in_library(self) -> bool:
        """Whether teams keep items of this kind: only a kind with a check can be validated."""
        return self.check is not None

    def describe(self) -> dict[str, Any]:
        """The kind as the API lists it (no callables)."""
        return {
            "name": self.name,
            "category": self.category,
            "title": self.title,
            "summary": self.summary,
            "formats": list(self.formats),
        }
