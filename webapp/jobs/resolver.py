"""The platform's reference resolver: ``zoo:NAME`` items are built into the worker's cache;
``library:ID`` names a ready item of the submitting team's library, fetched by sha256 into the
worker's bounded cache (``webapp.library.storage.local_copy``)."""

from __future__ import annotations

from pathlib import Path

from mlcore.catalog import materialize
from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.references import builtin_for
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Team


def check_reference(param: Model | Dataset | Key, reference: str, *, team: Team | int | None = None) -> None:
    """Refuse, at submission, a reference that no worker could resolve (without building anything)."""
    if isinstance(param, Key):
        raise JobError(f"{param.title}: watermark key {reference!r} was not found in your team.")
    if builtin_for(param, reference) is not None:
        return
    if reference.startswith("library:"):
        if team is None:
            raise JobError(f"{param.title}: library items need a team; submit through the platform.")
        from webapp.library.selectors import item_for_reference

        item_for_reference(team, param, reference)
        return
    raise JobError(f"{param.title}: {reference!r} is not a built-in item; pick one from the list.")


class PlatformResolver:
    def __init__(self, *, cache: Path | None = None, team: Team | int | None = None) -> None:
        self.cache = cache
        self.team = team

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        check_reference(param, reference, team=self.team)
        if reference.startswith("library:") and not isinstance(param, Key):
            from webapp.library.selectors import item_for_reference
            from webapp.library.storage import local_copy

            assert self.team is not None  # check_reference refused a library item without a team
            return local_copy(item_for_reference(self.team, param, reference))
        item = builtin_for(param, reference)
        assert item is not None  # check_reference refused everything else
        return materialize(item, self.cache)
