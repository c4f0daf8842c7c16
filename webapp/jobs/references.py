"""The references that other apps answer for: ``library:ID`` (the library), a watermark key and
``keyring:platform`` (the portal).

The jobs app owns submission, the submit form and the worker's resolver, but not what those
references name: the library and the portal do, and they sit above jobs (their rows point at jobs,
the portal submits jobs). So each registers a :class:`ReferenceSource` when Django starts (its
``AppConfig.ready``), and jobs asks the registered sources instead of importing those apps.
Built-in ``zoo:NAME`` items need no source: they are mlcore's (``mlcore.jobs.references``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.jobs.params import Dataset, Key, Model

if TYPE_CHECKING:
    from mlcore.jobs.registry import Kind
    from webapp.accounts.models import Team
    from webapp.jobs.models import Job

Param = Model | Dataset | Key
#: Writes secret bytes (an unsealed key) where only this worker process reads them; returns the path.
SecretWriter = Callable[[str, bytes], Path]


def _no_options(param: Param, team: Team) -> list[tuple[str, str]]:
    return []


def _nothing_to_record(job: Job, kind: Kind, params: Mapping[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class ReferenceSource:
    #: Whether this source answers for ``reference`` given to ``param``.
    claims: Callable[[Param, str], bool]
    #: At submission (and again on the worker): refuse with a ``JobError`` what no worker could resolve.
    check: Callable[[Param, str, Team | int | None], None]
    #: On the worker: a local path holding what ``reference`` names; secrets go through the writer.
    fetch: Callable[[Param, str, Team | int | None, SecretWriter], Path]
    #: The submit form's choices for ``param`` (value, label), listed before the built-in items.
    options: Callable[[Param, Team], list[tuple[str, str]]] = _no_options
    #: Once a job's row is saved (in the same transaction): record what it uses.
    submitted: Callable[[Job, Kind, Mapping[str, Any]], None] = _nothing_to_record


_SOURCES: dict[str, ReferenceSource] = {}


def register(name: str, source: ReferenceSource) -> None:
    """Add (or replace: ``ready`` may run again) the source an app provides under ``name``."""
    _SOURCES[name] = source


def sources() -> list[ReferenceSource]:
    return list(_SOURCES.values())


def source_for(param: Param, reference: str) -> ReferenceSource | None:
    return next((source for source in _SOURCES.values() if source.claims(param, reference)), None)


def options_for(param: Param, team: Team) -> list[tuple[str, str]]:
    return [option for source in _SOURCES.values() for option in source.options(param, team)]


def record_submitted(job: Job, kind: Kind, params: Mapping[str, Any]) -> None:
    for source in _SOURCES.values():
        source.submitted(job, kind, params)
