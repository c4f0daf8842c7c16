"""``library:ID``: the library's answer to a job's reference (see ``webapp.jobs.references``).

Registered by :class:`webapp.library.apps.LibraryConfig` when Django starts: the submit form lists
the team's ready items a parameter accepts, submission checks the item and records its use, and
the worker fetches it by sha256 into its bounded cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.utils import timezone

from mlcore.errors import JobError
from mlcore.jobs.params import Key
from mlcore.jobs.registry import Kind
from webapp.accounts.models import Team
from webapp.jobs.models import Job
from webapp.jobs.references import Param, ReferenceSource, SecretWriter
from webapp.library.models import LibraryItem
from webapp.library.selectors import item_for_reference, like_named, picker_items
from webapp.library.services import record_uses
from webapp.library.storage import local_copy

PREFIX = "library:"


def _claims(param: Param, reference: str) -> bool:
    return not isinstance(param, Key) and reference.startswith(PREFIX)


def _check(param: Param, reference: str, team: Team | int | None) -> None:
    if team is None:
        raise JobError(f"{param.title}: library items need a team; submit through the platform.")
    assert not isinstance(param, Key)  # _claims takes no key parameter
    item_for_reference(team, param, reference)


def _fetch(param: Param, reference: str, team: Team | int | None, secret: SecretWriter) -> Path:
    assert team is not None and not isinstance(param, Key)  # _check refused both
    return local_copy(item_for_reference(team, param, reference))


def _options(param: Param, team: Team) -> list[tuple[str, str]]:
    if isinstance(param, Key):
        return []
    items = list(picker_items(team, param.accepts))
    alike = like_named(items)
    return [(i.reference, option_label(i, like_named=i.pk in alike)) for i in items]


def option_label(item: LibraryItem, *, like_named: bool) -> str:
    """``corpus (text, library:12)``; an item whose name another shares also says what tells them
    apart: the short hash, when it was added, the job that made it."""
    label = f"{item.name} ({item.kind}, {item.reference}"
    if like_named:
        label += f", {item.sha256[:8]}, added {timezone.localtime(item.created_at):%d %b %Y %H:%M}"
        if item.produced_by_id:
            label += f", made by job {str(item.produced_by_id)[:8]}"
    return label + ")"


def _submitted(job: Job, kind: Kind, params: Mapping[str, Any]) -> None:
    record_uses(job=job, kind=kind, params=params)


SOURCE = ReferenceSource(claims=_claims, check=_check, fetch=_fetch, options=_options, submitted=_submitted)
