"""Reads for the library. ``item_for_user`` is the one place that decides who may see an item:
outsiders get 404, a viewer asking to write gets 403, and only owners may delete."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from mlcore.catalog import BuiltinItem
from mlcore.items.registry import DATASET_KINDS, MODEL_KINDS
from mlcore.jobs.params import Dataset, Model
from mlcore.jobs.references import builtin_items
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Membership, Team
from webapp.library.models import ChunkedUpload, LibraryItem, LibraryUse

CATEGORY_KINDS = {"models": MODEL_KINDS, "datasets": DATASET_KINDS}


def items_for_team(team: Team, *, category: str | None = None) -> QuerySet[LibraryItem]:
    items = LibraryItem.objects.filter(team=team).select_related("added_by", "produced_by")
    if category:
        items = items.filter(kind__in=CATEGORY_KINDS[category])
    return items.order_by("-created_at", "-id")


def name_key(name: str) -> str:
    """What a reader takes a name for: case, spaces and punctuation aside ("Corpus v1", "corpus-v1")."""
    return re.sub(r"[\W_]+", "", name.casefold()) or name


def like_named(items: Iterable[LibraryItem]) -> set[int]:
    """The ids of the items whose name another of ``items`` shares, as :func:`name_key` compares
    names: the pages show those with what tells them apart (id, short hash, date, the job that made them)."""
    items = list(items)
    counts = Counter(name_key(item.name) for item in items)
    return {item.pk for item in items if counts[name_key(item.name)] > 1}


def builtins(category: str | None = None) -> list[BuiltinItem]:
    """The zoo's models and ``mlcore.data``'s datasets: in every team's library, read-only."""
    kinds = CATEGORY_KINDS[category] if category else (*MODEL_KINDS, *DATASET_KINDS)
    return sorted((i for i in builtin_items().values() if i.kind in kinds), key=lambda i: i.title)


def _parse_id(item_id: int | str) -> int:
    try:
        return int(item_id)
    except (TypeError, ValueError):
        raise Http404("No such library item.") from None


def item_for_user(
    user: AbstractBaseUser | AnonymousUser, item_id: int | str, *, write: bool = False, owner: bool = False
) -> LibraryItem:
    if not user.is_authenticated:
        raise Http404("No such library item.")
    item = LibraryItem.objects.select_related("team", "added_by", "produced_by").filter(pk=_parse_id(item_id)).first()
    membership = None if item is None else Membership.objects.filter(team=item.team, user=user).first()
    if item is None or membership is None:
        raise Http404("No such library item.")
    if owner and not membership.is_owner:
        raise PermissionDenied("Only the team's owners can delete library items.")
    if write and not membership.can_write:
        raise PermissionDenied("Viewers cannot change the library.")
    return item


def upload_for_user(user: AbstractBaseUser | AnonymousUser, upload_id: uuid.UUID | str) -> ChunkedUpload:
    """An upload is its uploader's alone: anyone else gets 404."""
    try:
        pk = upload_id if isinstance(upload_id, uuid.UUID) else uuid.UUID(str(upload_id))
    except ValueError:
        raise Http404("No such upload.") from None
    upload = ChunkedUpload.objects.select_related("team").filter(pk=pk).first()
    if upload is None or not user.is_authenticated or upload.user_id != user.pk:
        raise Http404("No such upload.")
    return upload


def item_for_reference(team: Team | int, param: Model | Dataset, reference: str) -> LibraryItem:
    """The ready item of ``team`` that ``library:ID`` names, checked against what ``param`` accepts."""
    raw = reference.removeprefix("library:")
    # ASCII digits that fit a bigint: "²" is a digit to str.isdigit, and a longer number overflows the column.
    valid = raw.isascii() and raw.isdigit() and len(raw) <= 18
    item = LibraryItem.objects.filter(team=team, pk=int(raw)).first() if valid else None
    if item is None:
        raise JobError(f"{param.title}: library item {raw!r} was not found in your team's library.")
    if item.status != LibraryItem.Status.READY:
        raise JobError(f"{param.title}: library item {item.name!r} is {item.get_status_display().lower()}, not ready.")
    if param.accepts and item.kind not in param.accepts:
        raise JobError(f"{param.title}: {item.name!r} is a {item.kind}; this job accepts {', '.join(param.accepts)}.")
    return item


def picker_items(team: Team, accepts: tuple[str, ...]) -> QuerySet[LibraryItem]:
    items = LibraryItem.objects.filter(team=team, status=LibraryItem.Status.READY)
    return (items.filter(kind__in=accepts) if accepts else items).order_by("name", "id")


def users_of(item: LibraryItem) -> QuerySet[LibraryUse]:
    return LibraryUse.objects.filter(item=item).select_related("job").order_by("-created_at")


def made_by(job: Any) -> list[LibraryItem]:
    """The items a job added to the library (registered outputs and files added from its page)."""
    return list(LibraryItem.objects.filter(produced_by=job).order_by("created_at", "id"))


def lineage_of_job(job: Any) -> dict[str, list[Any]]:
    """What a job used from the library and what it added to it."""
    return {"used": list(LibraryUse.objects.filter(job=job).select_related("item")), "made": made_by(job)}
