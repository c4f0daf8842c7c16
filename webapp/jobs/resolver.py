"""The platform's reference resolver: ``zoo:NAME`` items are built into the worker's cache;
``library:ID`` names an item of the submitting team's library."""

from __future__ import annotations

from pathlib import Path

from mlcore.catalog import materialize
from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.references import builtin_for
from mlcore.jobs.spec import JobError


def check_reference(param: Model | Dataset | Key, reference: str) -> None:
    """Refuse, at submission, a reference that no worker could resolve (without building anything)."""
    if isinstance(param, Key):
        raise JobError(f"{param.title}: watermark key {reference!r} was not found in your team.")
    if builtin_for(param, reference) is not None:
        return
    if reference.startswith("library:"):
        raise JobError(f"{param.title}: library item {reference.removeprefix('library:')!r} was not found.")
    raise JobError(f"{param.title}: {reference!r} is not a built-in item; pick one from the list.")


class PlatformResolver:
    def __init__(self, *, cache: Path | None = None) -> None:
        self.cache = cache

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        check_reference(param, reference)
        item = builtin_for(param, reference)
        assert item is not None  # check_reference refused everything else
        return materialize(item, self.cache)
